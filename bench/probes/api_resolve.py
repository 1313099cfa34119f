"""What the HTTP API layer costs on the enqueue path: ``create_app(queue).resolve`` over N events of
``POST /jobs`` and N of ``POST /jobs/batch``, as the Lambda receives them.

    .venv/bin/python bench/probes/api_resolve.py [--events 10000] [--batch 10] [--runs 5] [--stub-redis]

For each run, in a fresh namespace on a private redis-server (or the Redis ``--redis-url`` names),
removed afterwards: resolve the ``POST /jobs`` events (a job each, its own id, due in 10 minutes), then the
``POST /jobs/batch`` events (``--batch`` jobs each), and split each route's time into:

- Redis: the round trips of the enqueue scripts (``run_many`` and ``stream`` as ``delayq.store.queue``
  calls them, wrapped with a timer; the time ``stream`` spends waiting for the batches it is fed,
  which the caller validates meanwhile, left out);
- the API layer: the rest (the event read, routing, validation, the core's preparation of the
  writes, the answer built and serialised).

The events are built before the clock starts, from ``events/api/post_jobs.json``. The run with the
median total is printed, with the spread of every run's API-layer time.

With ``--stub-redis`` the enqueue calls are answered without Redis (each job created, due now) and the clock
is the process's CPU time: the API layer alone, free of the noise of a Redis and a machine shared with
other work, to compare two versions of the code.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.servers import redis_url

from delayq import Queue, Settings, Topics
from delayq.store import queue as store_queue
from delayq.surfaces.api import create_app

SAMPLE = Path(__file__).resolve().parents[2] / "events" / "api" / "post_jobs.json"


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


def stub_answer(call: Any) -> Any:
    """What Redis would answer ``call`` (an enqueue of one job, or of a chunk): every job created, due now."""
    jobs = len(call.args) - 1 if call.args and call.args[0] in ("c", "r") else 1  # a chunk: its mode, then a line a job
    return call.decode([1, int(time.time() * 1000)] * jobs)


def stub_run_many(client: Any, calls: Any, **options: Any) -> list[Any]:
    return [stub_answer(call) for call in calls]


def stub_stream(connect: Any, batches: Any, **options: Any) -> Iterator[list[Any]]:
    for batch in batches:
        yield [stub_answer(call) for call in batch]


@contextmanager
def timed_writes(spent: list[float], stub: bool) -> Iterator[None]:
    """The enqueue path's round trips (``run_many`` for one job, ``stream`` for a batch, as
    ``delayq.store.queue`` calls them), or their stubs, timed into ``spent``."""
    run_many, stream = store_queue.run_many, store_queue.stream
    inner_run, inner_stream = (stub_run_many, stub_stream) if stub else (run_many, stream)

    def timed_run(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner_run(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    def timed_stream(connect: Any, batches: Any, **kwargs: Any) -> Iterator[list[Any]]:
        building = [0.0]  # the time the caller took to build the batches, inside the stream's turns
        replies = inner_stream(connect, _timed(iter(batches), building), **kwargs)
        while True:
            started, built = time.perf_counter(), building[0]
            try:
                reply = next(replies)
            except StopIteration:
                return
            finally:
                spent.append(time.perf_counter() - started - (building[0] - built))
            yield reply

    store_queue.run_many, store_queue.stream = timed_run, timed_stream  # type: ignore[assignment]
    try:
        yield
    finally:
        store_queue.run_many, store_queue.stream = run_many, stream


def _timed(items: Iterator[Any], total: list[float]) -> Iterator[Any]:
    """``items``, with the time each took to come added to ``total[0]``."""
    while True:
        started = time.perf_counter()
        try:
            item = next(items)
        except StopIteration:
            return
        finally:
            total[0] += time.perf_counter() - started
        yield item


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
    parser.add_argument("--redis-url", help="a Redis of yours, serving nothing else (default: a private redis-server)")
    args = parser.parse_args()
    with redis_url(args.redis_url) as url:
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
