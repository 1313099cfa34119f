"""What paging through a topic's jobs costs, against the topic's size: the time to walk
``--walk`` (100,000) jobs ``--limit`` (1,000) at a time with ``Queue.jobs``, in topics of each
``--sizes`` (10,000 and 1,000,000 jobs), and Redis' CPU per page.

    .venv/bin/python bench/probes/page_listing.py                       # delayed: 10k and 1M jobs
    .venv/bin/python bench/probes/page_listing.py --states delayed,ready,dead --sizes 10000,1000000 --partitions 1

For each state and size, on a private redis-server (a free port, no persistence, stopped by pid):
fill one topic with that many jobs in that state (delayed: due in a day, a tenth of them at one instant,
so pages cross long runs of ties; ready: due now, never consumed; dead: leased and failed, retries 0),
then walk from the first page, and walk again from a cursor deep in the topic (a page at 90% of it, or
of the walk, whichever is nearer), and report seconds per walk and per page (p50 / p99 / max, the
client's round trip included) and Redis CPU per page from ``INFO`` around the walk. A walk that cost
O(n) per page, not O(log n + page), would be about 100 times slower per page at 1M than at 10k.
"""

from __future__ import annotations

import argparse
import json
import platform
import secrets
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.paths import REPO
from shared.servers import PrivateRedis

sys.path.insert(0, str(REPO / "functions"))  # this checkout's delayq

from delayq import Queue, Settings, Topics
from delayq.core.settings import TopicConfig
from delayq.store import calls
from delayq.store.calls import Failure

TOPIC = "pages"
FILL_CHUNK = 10_000
DAY_S = 86_400


def fill(queue: Queue, state: str, size: int) -> None:
    """``size`` jobs of TOPIC in ``state``, 10,000 to an enqueue call."""
    tie = time.time() + DAY_S
    for start in range(0, size, FILL_CHUNK):
        jobs = []
        for i in range(start, min(size, start + FILL_CHUNK)):
            job: dict[str, Any] = {"topic": TOPIC, "id": f"j{i:08d}-{secrets.token_hex(2)}", "body": {"n": i}}
            if state == "delayed":
                job["run_at"] = tie if i % 10 == 0 else tie + (i % 3600)
            else:
                job["delay"] = 0
                job["retries"] = 0
            jobs.append(job)
        queue.enqueue_many(jobs)
        if state == "dead":
            kill_ready(queue)


def kill_ready(queue: Queue) -> None:
    """Every ready job of TOPIC leased and failed with no retry left."""
    rules = TopicConfig(target="-", retries=0)
    for partition in queue.keys.partitions:
        while taken := calls.take(partition, TOPIC, count=1000, timeout_ms=60_000, grace_ms=0).run(queue.redis).leases:
            failures = [Failure(job.id, token, "bench") for job, token, _ in taken]
            calls.fail(partition, TOPIC, rules, failures).run(queue.redis)


def cpu_s(server: PrivateRedis) -> float:
    info = server.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def walk(
    server: PrivateRedis, queue: Queue, state: str, *, limit: int, jobs: int, cursor: str | None
) -> dict[str, Any]:
    """``jobs`` jobs of TOPIC in ``state``, ``limit`` a page, from ``cursor``: times and Redis CPU."""
    pages: list[float] = []
    seen = 0
    cpu_before, began = cpu_s(server), time.perf_counter()
    while seen < jobs:
        t0 = time.perf_counter()
        page = queue.jobs(TOPIC, state, limit=limit, cursor=cursor)
        pages.append(time.perf_counter() - t0)
        seen += len(page.jobs)
        cursor = page.next
        if cursor is None:
            break
    elapsed, cpu = time.perf_counter() - began, cpu_s(server) - cpu_before
    ordered = sorted(pages)
    return {
        "jobs": seen,
        "pages": len(pages),
        "seconds": round(elapsed, 3),
        "page_ms_p50": round(ordered[len(ordered) // 2] * 1000, 2),
        "page_ms_p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 2),
        "page_ms_max": round(ordered[-1] * 1000, 2),
        "redis_cpu_ms_per_page": round(cpu * 1000 / len(pages), 3),
    }


def deep_cursor(queue: Queue, state: str, size: int, limit: int, walk_jobs: int) -> str | None:
    """The cursor of a page about 90% into what can be walked (pages of ``limit`` up to there)."""
    depth = int(min(size, walk_jobs) * 0.9)
    cursor = None
    step = 1000 if limit <= 1000 else limit
    for _ in range(depth // step):
        cursor = queue.jobs(TOPIC, state, limit=step, cursor=cursor).next
    return cursor


def point(state: str, size: int, args: argparse.Namespace) -> dict[str, Any]:
    server = PrivateRedis()
    try:
        settings = Settings(
            redis_url=server.url,
            namespace="bench",
            partitions=args.partitions,
            topics=Topics.parse({TOPIC: {"target": "python:bench:none"}}),
        )
        queue = Queue(settings)
        began = time.perf_counter()
        fill(queue, state, size)
        filled_s = time.perf_counter() - began
        stats = queue.stats(TOPIC)
        assert getattr(stats, state) == size, stats
        first = walk(server, queue, state, limit=args.limit, jobs=args.walk, cursor=None)
        deep_at = deep_cursor(queue, state, size, args.limit, args.walk)
        deep = walk(server, queue, state, limit=args.limit, jobs=args.limit * 10, cursor=deep_at)
        return {"state": state, "size": size, "fill_s": round(filled_s, 1), "from_the_start": first, "deep": deep}
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,1000000", help="jobs in the topic, comma-separated")
    parser.add_argument("--states", default="delayed", help="delayed, ready, dead (comma-separated)")
    parser.add_argument("--walk", type=int, default=100_000, help="jobs walked from the first page")
    parser.add_argument("--limit", type=int, default=1000, help="jobs per page")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = []
    print(f"{platform.node()}: walking {args.walk:,} jobs {args.limit:,} a page, {args.partitions} partition(s)")
    print(
        "| state | jobs in topic | walked | walk s | page ms p50 / p99 / max | Redis CPU ms/page | deep page ms", end=""
    )
    print(" p50 / p99 |")
    print("|---|---:|---:|---:|---|---:|---|")
    for state in args.states.split(","):
        for size in (int(n) for n in args.sizes.split(",")):
            r = point(state, size, args)
            results.append(r)
            a, d = r["from_the_start"], r["deep"]
            print(
                f"| {state} | {size:,} | {a['jobs']:,} | {a['seconds']:.2f} | {a['page_ms_p50']} / {a['page_ms_p99']}"
                f" / {a['page_ms_max']} | {a['redis_cpu_ms_per_page']} | {d['page_ms_p50']} / {d['page_ms_p99']} |",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
