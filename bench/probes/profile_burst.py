"""Where one consume process spends a burst's drain: the profile behind the burst figure.

    .venv/bin/python bench/probes/profile_burst.py [--jobs 20000] [--concurrency 100] [--batch 500] [--runs 3]

For each run, in a fresh namespace on a private redis-server (or the Redis ``--redis-url`` names): enqueue
N jobs due 1 s ahead, then run one consumer (as ``python -m delayq consume`` runs it, no sweeper: its
take moves due jobs itself) with a no-op handler until all have started, and split the drain, from
the due time to the last ack, into:

- Redis: the server's own time running the consumer's take and ack scripts (``INFO commandstats``
  before and after), and within it the commands those scripts call;
- client: the rest of each round trip (packing the calls, the socket, parsing the replies);
- replies to jobs: turning each take's reply into jobs (``calls._taken``) handed to the workers;
- waiting: the loop asleep until the handlers of a batch are done;
- the rest of the loop.

The consumer's methods are timed by wrapping them (a few hundred calls per run: the timers cost
nothing next to what they measure). A Redis of yours must serve no other work meanwhile: the statistics
are the server's. The run with the median drain is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.servers import redis_url

from delayq import Job, Queue, Settings, Topics
from delayq.core.loop import Budget
from delayq.loops import consumer
from delayq.loops.consumer import Consumer
from delayq.store import calls


class Starts:
    """The jobs started so far, and when all ``expected`` have."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset(0)

    def reset(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.all = threading.Event()

    def add(self) -> None:
        with self.lock:
            self.count += 1
            if self.count >= self.expected:
                self.all.set()


STARTS = Starts()


def record(job: Job) -> None:
    """The no-op handler: counts the start, nothing else."""
    STARTS.add()


@contextmanager
def timing(spent: dict[str, float]) -> Iterator[None]:
    """Wraps the consumer's round trip, reply handling and sleep with timers, for the ``with`` block.
    A take's reply is decoded inside the round trip (``calls._taken``): timed apart, and counted with
    the replies to jobs, not the round trip."""
    wrapped = [
        (consumer, "run_many", "round trips"),
        (calls, "_taken", "decoding takes"),
        (Consumer, "_taken", "replies to jobs"),
        (Consumer, "_sleep", "waiting"),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in wrapped]

    def timed(function: Callable[..., Any], label: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - started

        return call

    for (owner, name, label), (_, _, function) in zip(wrapped, originals, strict=True):
        setattr(owner, name, timed(function, label))
    try:
        yield
    finally:
        for owner, name, function in originals:
            setattr(owner, name, function)


def script_stats(queue: Queue) -> dict[str, tuple[int, int]]:
    """calls and µs per command, from the server's command statistics."""
    info: dict[str, dict[str, Any]] = queue.redis.info("commandstats")
    return {name[len("cmdstat_") :]: (int(v["calls"]), int(v["usec"])) for name, v in info.items()}


def run_once(jobs: int, concurrency: int, batch: int, url: str) -> dict[str, Any]:
    STARTS.reset(jobs)
    namespace = f"profile-{uuid.uuid4().hex[:8]}"
    topics = {"burst": {"target": "python:__main__:record", "concurrency": concurrency, "batch": batch}}
    queue = Queue(Settings(redis_url=url, namespace=namespace, topics=Topics.parse(topics)))
    try:
        due = time.time() + 1
        results = queue.enqueue_many({"topic": "burst", "body": {"pad": "x" * 90}, "run_at": due} for _ in range(jobs))
        assert all(r.status == 201 for r in results), results[:3]
        worker = Consumer(queue)
        starts = STARTS

        def stop_when_all_started() -> None:
            starts.all.wait()
            worker.request_stop()

        threading.Thread(target=stop_when_all_started, daemon=True).start()
        while time.time() < due:
            time.sleep(0.0005)
        spent: dict[str, float] = defaultdict(float)
        before = script_stats(queue)
        with timing(spent):
            started = time.perf_counter()
            worker.run(Budget.forever())
            drain = time.perf_counter() - started  # to the last ack
        after = script_stats(queue)
        assert worker.counts["taken"] == jobs, worker.summary()
        used = {name: after[name][1] - before.get(name, (0, 0))[1] for name in after}
        used.pop("info", None)
        return {"drain": drain, "spent": spent, "redis_us": used}
    finally:
        keys = list(queue.redis.scan_iter(f"{namespace}*"))
        if keys:
            queue.redis.delete(*keys)
        queue.close()


def report(run: dict[str, Any], jobs: int) -> None:
    drain, spent, redis_us = run["drain"], run["spent"], run["redis_us"]
    scripts_s = redis_us.pop("evalsha", 0) / 1e6
    rows = [
        ("Redis running take and ack", scripts_s),
        ("client side of the round trips", spent["round trips"] - spent["decoding takes"] - scripts_s),
        ("replies to jobs", spent["decoding takes"] + spent["replies to jobs"]),
        ("waiting for handlers", spent["waiting"]),
    ]
    rows.append(("the rest of the loop", drain - sum(seconds for _, seconds in rows)))
    print(f"drain {drain * 1000:.0f} ms for {jobs:,} jobs ({drain * 1e6 / jobs:.1f} µs per job)")
    print(f"{'':34} {'ms':>7} {'µs/job':>7} {'share':>6}")
    for label, seconds in rows:
        print(f"{label:34} {seconds * 1000:7.1f} {seconds * 1e6 / jobs:7.2f} {seconds / drain:6.0%}")
    print("inside the scripts, the commands they call (the rest of their time is Lua itself):")
    for name, us in sorted(redis_us.items(), key=lambda kv: -kv[1]):
        if us > 0:
            print(f"  {name:32} {us / 1000:7.1f} {us / jobs:7.2f} {us / 1e6 / drain:6.0%}")
    lua_s = scripts_s - sum(redis_us.values()) / 1e6
    print(f"  {'Lua itself':32} {lua_s * 1000:7.1f} {lua_s * 1e6 / jobs:7.2f} {lua_s / drain:6.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100, help="the topic's (100: as the peers in make bench)")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3, help="the run with the median drain is printed")
    parser.add_argument("--redis-url", help="a Redis of yours, serving nothing else (default: a private redis-server)")
    args = parser.parse_args()
    with redis_url(args.redis_url) as url:
        runs = [run_once(args.jobs, args.concurrency, args.batch, url) for _ in range(args.runs)]
    runs.sort(key=lambda run: float(run["drain"]))
    drains = ", ".join(f"{run['drain'] * 1000:.0f}" for run in runs)
    print(f"drains: {drains} ms; the median run:")
    report(runs[len(runs) // 2], args.jobs)
    print(f"mean drain {statistics.fmean(r['drain'] for r in runs) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
