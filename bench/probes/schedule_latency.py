"""Recurring schedules: how late their occurrences are handed over, next to ordinary jobs, and what a
schedule costs Redis per occurrence.

    .venv/bin/python bench/probes/schedule_latency.py [--schedules 50] [--occurrences 1000] [--partitions 1]

On a private redis-server (``shared.servers.PrivateRedis``), one sweeper and one consumer (threads, as in
the local stack) with a handler that only notes when it started, three runs in fresh namespaces:

1. schedules: ``--schedules`` schedules ``every: 1`` until ``--occurrences`` occurrences were handed
   over; lateness = handler start - the occurrence's time (ms);
2. jobs: the same number of ordinary jobs, created one call each (as the sweep creates an
   occurrence) about a second before they fall due, spread as the occurrences were; lateness =
   handler start - run_at;
3. idle: 0, ``--schedules`` and 100 times as many schedules at ``every: 3600``, 10 s each: what the
   sweep's look at them costs when nothing is due (the same, whatever their number).

For 1 and 2, Redis' side from INFO around the run (``shared.servers.delta``): commands per job (those
run inside scripts included), script calls per job, CPU per job; the difference is what a schedule
adds per occurrence. The machine's clock is Redis' clock here: lateness is meaningful to the ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.servers import PrivateRedis, delta

from delayq import Job, Queue, Settings, Topics
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper

_starts: dict[str, list[float]] = {}
_lock = threading.Lock()
SCRIPT_CALLS = ("evalsha", "eval")


def record(job: Job) -> None:
    """The benchmark's handler: notes how late it started (by the occurrence's time, or run_at)."""
    now_ms = time.time() * 1000
    with _lock:
        _starts.setdefault(job.id, []).append(now_ms - job.run_at_ms)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def delivered() -> int:
    with _lock:
        return len(_starts)


def run(server: PrivateRedis, partitions: int, work: Callable[[Queue], None], until: Callable[[], bool]) -> Any:
    """The loops around ``work(queue)`` in a fresh namespace, until ``until()``; Redis' INFO after the
    work's set-up and at the end."""
    _starts.clear()
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    topics = {"tick": {"target": "python:__main__:record", "concurrency": 8}}
    settings = Settings(
        redis_url=server.url, namespace=namespace, partitions=partitions, topics=Topics.parse(topics), tick=1.0
    )
    queue = Queue(settings)
    stop = threading.Event()
    loops = [
        threading.Thread(target=Sweeper(queue, stop=stop).run, args=(Budget.forever(),)),
        threading.Thread(target=Consumer(queue, stop=stop).run, args=(Budget.forever(),)),
    ]
    queue.ping()
    for thread in loops:
        thread.start()
    try:
        work(queue)
        before = server.snapshot()  # after the set-up: the PUTs of the schedules are not the loops' work
        deadline = time.monotonic() + 300
        while not until() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in loops:
            thread.join(10)
    after = server.snapshot()
    server.flush()
    return before, after


def lateness(count: int) -> dict[str, Any]:
    with _lock:
        firsts = sorted(starts[0] for starts in _starts.values())[:count]
        duplicated = sum(len(starts) - 1 for starts in _starts.values())
        early = sum(1 for starts in _starts.values() for late in starts if late < 0)
    return {
        "n": len(firsts),
        "p50_ms": statistics.median(firsts),
        "p99_ms": percentile(firsts, 99),
        "max_ms": max(firsts),
        "duplicated": duplicated,
        "early": early,
    }


def schedules_run(server: PrivateRedis, schedules: int, occurrences: int, partitions: int) -> dict[str, Any]:
    def work(queue: Queue) -> None:
        for i in range(schedules):
            queue.schedule("tick", f"s{i}", every=1)
            time.sleep(1 / schedules)  # spread over the second, as ordinary jobs are below
        # (the firsts, made by the PUTs, fall outside the measured window: counted as the sweep's own)

    before, after = run(server, partitions, work, lambda: delivered() >= occurrences)
    return lateness(occurrences) | {"redis": delta(before, after, occurrences)}


def jobs_run(server: PrivateRedis, schedules: int, occurrences: int, partitions: int) -> dict[str, Any]:
    def work(queue: Queue) -> None:
        def produce() -> None:  # each job created about a second before it falls due, one call each
            start = time.time() + 1
            for k in range(occurrences):
                due = start + k // schedules + (k % schedules) / schedules
                time.sleep(max(0.0, due - 1 - time.time()))
                queue.enqueue("tick", None, id=f"j{k}", run_at=due)

        threading.Thread(target=produce, daemon=True).start()

    before, after = run(server, partitions, work, lambda: delivered() >= occurrences)
    return lateness(occurrences) | {"redis": delta(before, after, occurrences)}


def idle_run(server: PrivateRedis, schedules: int, partitions: int, seconds: float = 10.0) -> dict[str, Any]:
    began: list[float] = []

    def work(queue: Queue) -> None:
        for i in range(schedules):
            queue.schedule("tick", f"s{i}", every=3600)
        began.append(time.monotonic())

    before, after = run(server, partitions, work, lambda: bool(began) and time.monotonic() - began[0] > seconds)
    span = after["_at"] - before["_at"]
    cost = delta(before, after, 1)
    return {"commands_per_s": cost["commands_per_job"] / span, "cpu_ms_per_s": cost["redis_cpu_s"] * 1e3 / span}


def script_calls(redis: dict[str, Any], per: int) -> float:
    return sum(redis["commandstats"].get(name, 0) for name in SCRIPT_CALLS) / per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=50)
    parser.add_argument("--occurrences", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()
    server = PrivateRedis()
    try:
        ran = {
            "schedules": schedules_run(server, args.schedules, args.occurrences, args.partitions),
            "jobs": jobs_run(server, args.schedules, args.occurrences, args.partitions),
        }
        idle = {n: idle_run(server, n, args.partitions) for n in (0, args.schedules, 100 * args.schedules)}
    finally:
        server.stop()
    n = args.occurrences
    print(f"{n} occurrences of {args.schedules} schedules every: 1, against {n} ordinary jobs spread alike")
    print(f"(Redis {server.version}, {args.partitions} partition(s); lateness = handler start - due time, ms)")
    print("| run | p50 ms | p99 ms | max ms | duplicated | early | commands/job | script calls/job | Redis µs/job |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in ran.items():
        redis = r["redis"]
        print(
            f"| {name} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.1f} | {r['duplicated']} | {r['early']} "
            f"| {redis['commands_per_job']:.1f} | {script_calls(redis, n):.2f} | {redis['redis_cpu_us_per_job']:.0f} |"
        )
    added = ran["schedules"]["redis"]["commands_per_job"] - ran["jobs"]["redis"]["commands_per_job"]
    added_calls = script_calls(ran["schedules"]["redis"], n) - script_calls(ran["jobs"]["redis"], n)
    print(f"\nwhat a schedule adds per occurrence: {added:+.1f} commands, {added_calls:+.2f} script calls")
    print("commands per occurrence (schedules run):", _per(ran["schedules"]["redis"]["commandstats"], n))
    print("commands per job (jobs run):            ", _per(ran["jobs"]["redis"]["commandstats"], n))
    print("\nidle (nothing due), the loops and every command they send while idle:")
    print("| schedules | Redis commands/s | Redis CPU ms/s |")
    print("|---:|---:|---:|")
    for count, cost in idle.items():
        print(f"| {count} | {cost['commands_per_s']:.1f} | {cost['cpu_ms_per_s']:.2f} |")


def _per(stats: dict[str, int], n: int) -> str:
    return ", ".join(f"{name} {calls / n:.2f}" for name, calls in stats.items() if calls / n >= 0.01)


if __name__ == "__main__":
    main()
