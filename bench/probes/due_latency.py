"""Due-to-delivery latency: N jobs due at the same instant, with the sweep and consume loops running.

    .venv/bin/python bench/probes/due_latency.py [--jobs 1000] [--concurrency 8 32] [--partitions 1] [--topics 1]

For each concurrency, in a fresh namespace on a private redis-server (or the Redis ``--redis-url`` names):
enqueue N jobs with the same run_at 2 s ahead, run one sweeper and one consumer (threads, as in the
local stack) with a no-op handler, and report, per job, handler start minus run_at (ms): p50, p99,
max (the max is the drain time: run_at to the last handler start), and lost / duplicated / early.
With ``--topics N`` the jobs are spread over N topics (``burst0`` ...), all under a ``*`` entry: a
burst over many topics, as when one schedule per tenant fires at the same minute.
The machine's clock and Redis' clock are the same clock here, so lateness is meaningful to the ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.servers import redis_url

from delayq import Job, Queue, Settings, Topics
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper

_starts: dict[str, list[float]] = {}
_lock = threading.Lock()


def record(job: Job) -> None:
    """The benchmark's handler: notes when it started, nothing else."""
    now_ms = time.time() * 1000
    with _lock:
        _starts.setdefault(job.id, []).append(now_ms - job.run_at_ms)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(
    jobs: int, concurrency: int, partitions: int, url: str, *, spread: int = 1, wait_s: float = 60
) -> dict[str, Any]:
    _starts.clear()
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    config = {"target": "python:__main__:record", "concurrency": concurrency, "batch": 100}
    topics = {"burst" if spread == 1 else "*": config}
    settings = Settings(redis_url=url, namespace=namespace, partitions=partitions, topics=Topics.parse(topics))
    queue = Queue(settings)
    stop = threading.Event()
    loops = [
        threading.Thread(target=Sweeper(queue, stop=stop).run, args=(Budget.forever(),)),
        threading.Thread(target=Consumer(queue, stop=stop).run, args=(Budget.forever(),)),
    ]
    try:
        run_at = time.time() + 2
        topic = (lambda i: "burst") if spread == 1 else (lambda i: f"burst{i % spread}")
        results = queue.enqueue_many({"topic": topic(i), "id": f"j{i}", "run_at": run_at} for i in range(jobs))
        assert all(r.status == 201 for r in results), results[:3]
        for thread in loops:
            thread.start()
        deadline = time.time() + wait_s
        while time.time() < deadline:
            with _lock:
                if len(_starts) >= jobs:
                    break
            time.sleep(0.05)
        time.sleep(0.3)  # a duplicate would show up here
    finally:
        stop.set()
        for thread in loops:
            thread.join(10)
        keys = list(queue.redis.scan_iter(match=f"{namespace}:*", count=1000))
        if keys:
            queue.redis.delete(*keys)
    firsts = [starts[0] for starts in _starts.values()]
    return {
        "jobs": jobs,
        "concurrency": concurrency,
        "partitions": partitions,
        "min_ms": min(firsts),
        "p50_ms": statistics.median(firsts),
        "p99_ms": percentile(firsts, 99),
        "max_ms": max(firsts),
        "lost": jobs - len(_starts),
        "duplicated": sum(len(starts) - 1 for starts in _starts.values()),
        "early": sum(1 for starts in _starts.values() for late in starts if late < 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--topics", type=int, default=1, help="spread the jobs over this many topics, under '*'")
    parser.add_argument("--wait", type=float, default=60, help="s to wait for the last start (then: lost)")
    parser.add_argument("--redis-url", help="a Redis of yours (default: a private redis-server)")
    args = parser.parse_args()
    spread = f" in {args.topics} topics" if args.topics > 1 else ""
    print(f"{args.jobs} jobs due at the same instant{spread}; lateness = handler start - run_at (ms)")
    print("| concurrency | min ms | p50 ms | p99 ms | max ms | lost | duplicated | early |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with redis_url(args.redis_url) as url:
        for concurrency in args.concurrency:
            r = run(args.jobs, concurrency, args.partitions, url, spread=args.topics, wait_s=args.wait)
            print(
                f"| {r['concurrency']} | {r['min_ms']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} "
                f"| {r['lost']} | {r['duplicated']} | {r['early']} |"
            )


if __name__ == "__main__":
    main()
