"""What the HTTP API layer costs on the enqueue path: ``create_app(queue).resolve`` over N events of
``POST /jobs`` and N of ``POST /jobs/batch``, as the Lambda receives them.

    .venv/bin/python bench/api_resolve.py [--events 10000] [--batch 10] [--runs 5] [--stub-redis]

For each run, in a fresh namespace on the Redis at DELAYQ_REDIS_URL (default 127.0.0.1:6379), removed
afterwards: resolve the ``POST /jobs`` events (a job each, its own id, due in 10 minutes), then the
``POST /jobs/batch`` events (``--batch`` jobs each), and split each route's time into:

- Redis: the round trips of the enqueue script (``Queue._write``, wrapped with a timer);
- the API layer: the rest (the event read, routing, validation, the core's preparation of the
  writes, the answer built and serialised).

The events are built before the clock starts, from ``events/api/post_jobs.json``. The run with the
median total is printed, with the spread of every run's API-layer time.

With ``--stub-redis`` the writes are answered without Redis (each job created, due now) and the clock
is the process's CPU time: the API layer alone, free of the noise of a Redis and a machine shared with
other work, to compare two versions of the code.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from delayq import Queue, Settings, Topics
from delayq.store.calls import Enqueued
from delayq.surfaces.api import create_app

SAMPLE = Path(__file__).resolve().parent.parent / "events" / "api" / "post_jobs.json"


def events(route: str, count: int, batch: int) -> list[dict[str, Any]]:
    """``count`` events of ``route``: one new job each, or ``batch`` new jobs each."""
    sample = json.loads(SAMPLE.read_text())
    out = []
    for n in range(count):
        event = copy.deepcopy(sample)
        event["path"] = event["resource"] = event["requestContext"]["resourcePath"] = route
        if route == "/jobs":
            body: dict[str, Any] = {"topic": "orders", "id": f"j{n}", "delay": 600, "body": {"order": n}}
        else:
            jobs = [{"topic": "orders", "id": f"b{n}-{i}", "delay": 600, "body": {"order": i}} for i in range(batch)]
            body = {"jobs": jobs}
        event["body"] = json.dumps(body)
        out.append(event)
    return out


def stub_write(self: Queue, writes: list[Any], *, replace: bool = False) -> Enqueued:
    """``Queue._write`` without Redis: every job created, due now."""
    now_ms = int(time.time() * 1000)
    return Enqueued([1] * len(writes), [now_ms] * len(writes))


@contextmanager
def timed_writes(spent: list[float], stub: bool) -> Iterator[None]:
    """``Queue._write`` (the Redis round trips of a create, or ``stub_write``) timed into ``spent``."""
    original = Queue._write
    inner = stub_write if stub else original

    def write(self: Queue, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    Queue._write = write  # type: ignore[method-assign]
    try:
        yield
    finally:
        Queue._write = original  # type: ignore[method-assign]


def resolve_all(queue: Queue, batch: list[dict[str, Any]], expected: int, stub: bool) -> tuple[float, float]:
    """Total and Redis seconds to resolve ``batch`` with a new app over ``queue``."""
    resolve = create_app(queue).resolve
    resolve(copy.deepcopy(batch[0]) | {"path": "/health", "httpMethod": "GET", "body": None}, None)  # warm
    spent: list[float] = []
    clock = time.process_time if stub else time.perf_counter
    with timed_writes(spent, stub):
        started = clock()
        for event in batch:
            response = resolve(event, None)
            assert response["statusCode"] == expected, response
        total = clock() - started
    return total, 0.0 if stub else sum(spent)


def run_once(url: str, count: int, batch: int, stub: bool) -> dict[str, tuple[float, float]]:
    namespace = f"bench-api-{uuid.uuid4().hex[:8]}"
    topics = Topics.parse({"orders": {"target": "python:delayq.local:log_delivery"}})
    queue = Queue(Settings(redis_url=url, namespace=namespace, topics=topics))
    singles, batches = events("/jobs", count, batch), events("/jobs/batch", count, batch)
    try:
        return {
            "POST /jobs": resolve_all(queue, singles, 201, stub),
            "POST /jobs/batch": resolve_all(queue, batches, 200, stub),
        }
    finally:
        keys = list(queue.redis.scan_iter(f"{namespace}*"))
        for start in range(0, len(keys), 1000):
            queue.redis.delete(*keys[start : start + 1000])
        queue.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000, help="events of each route")
    parser.add_argument("--batch", type=int, default=10, help="jobs per POST /jobs/batch event")
    parser.add_argument("--runs", type=int, default=5, help="the run with the median total is printed")
    parser.add_argument("--stub-redis", action="store_true", help="writes answered without Redis: the API layer alone")
    args = parser.parse_args()
    url = os.environ.get("DELAYQ_REDIS_URL", "redis://127.0.0.1:6379/0")
    runs = [run_once(url, args.events, args.batch, args.stub_redis) for _ in range(args.runs)]
    redis = "a stub of Redis" if args.stub_redis else url
    print(f"{args.events:,} events per route, {args.batch} jobs per batch, {args.runs} runs, on {redis}")
    print(f"{'route':18} {'µs/event':>9} {'Redis':>7} {'API layer':>10}   API layer, every run (µs/event)")
    for route in runs[0]:
        ordered = sorted(runs, key=lambda run: run[route][0])
        total, redis_s = ordered[len(ordered) // 2][route]
        layers = sorted((run[route][0] - run[route][1]) * 1e6 / args.events for run in runs)
        spread = ", ".join(f"{layer:.1f}" for layer in layers)
        per = 1e6 / args.events
        print(f"{route:18} {total * per:9.1f} {redis_s * per:7.1f} {(total - redis_s) * per:10.1f}   {spread}")
        print(f"{'':18} median API layer of the runs: {statistics.median(layers):.1f} µs/event")


if __name__ == "__main__":
    main()
