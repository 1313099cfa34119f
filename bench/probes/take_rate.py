"""What a topic's rate limit adds to a take: Redis CPU per take.lua call and per job taken,
without a rate and with one, on a private redis-server.

    .venv/bin/python bench/probes/take_rate.py                     # 20,000 takes of 10 jobs, then of 1 job
    .venv/bin/python bench/probes/take_rate.py --takes 5000 --count 100

Each case fills one topic with ``takes * count`` ready jobs, then takes them ``count`` at a time, one
call per round trip, and reads Redis' CPU and ``take``'s share of it from ``INFO`` around the run. The
rate case's limit is far above what the run reaches (``--rate``), so both take the same jobs: the
difference is the bucket's cost (a TIME, an HGET and an HSET of the control hash per call). Run in
alternation, ``--rounds`` times, and the medians reported, so that load from elsewhere hits both alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
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

TOPIC = "metered"
FILL_CHUNK = 10_000


def cpu_us(server: PrivateRedis) -> tuple[float, float, int]:
    """Redis' CPU (µs, user + sys), the scripts' CPU (µs, ``evalsha`` in commandstats), and its calls."""
    info = server.client.info("everything")
    cpu = (float(info["used_cpu_user"]) + float(info["used_cpu_sys"])) * 1e6
    stats = info.get("cmdstat_evalsha", {"usec": 0, "calls": 0})
    return cpu, float(stats["usec"]), int(stats["calls"])


def one_case(server: PrivateRedis, *, rate: float | None, takes: int, count: int) -> dict[str, Any]:
    server.flush()
    config = {"target": "python:bench:none"} | ({"rate": rate} if rate else {})
    settings = Settings(redis_url=server.url, namespace="bench", topics=Topics.parse({TOPIC: config}))
    queue = Queue(settings)
    jobs = takes * count
    for start in range(0, jobs, FILL_CHUNK):
        queue.enqueue_many(
            [{"topic": TOPIC, "delay": 0, "body": {"n": i}} for i in range(start, min(jobs, start + FILL_CHUNK))]
        )
    share = TopicConfig.model_validate(config).rate_share(1)
    partition = queue.keys.partitions[0]
    call = calls.take(partition, TOPIC, count=count, timeout_ms=60_000, grace_ms=0, take_id="t0", rate=share)
    call.run(queue.redis)  # the script cached, the connection made
    cpu0, script0, calls0 = cpu_us(server)
    began = time.perf_counter()
    taken = 0
    for n in range(takes - 1):
        taken += len(
            calls.take(partition, TOPIC, count=count, timeout_ms=60_000, grace_ms=0, take_id=f"t{n + 1}", rate=share)
            .run(queue.redis)
            .ids
        )
    wall = time.perf_counter() - began
    cpu1, script1, calls1 = cpu_us(server)
    queue.close()
    made = calls1 - calls0
    return {
        "rate": rate,
        "taken": taken,
        "wall_us_per_take": wall * 1e6 / made,
        "redis_cpu_us_per_take": (cpu1 - cpu0) / made,
        "script_us_per_take": (script1 - script0) / made,
        "script_us_per_job": (script1 - script0) / max(1, taken),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--takes", type=int, default=20_000, help="take calls per case")
    parser.add_argument("--count", default="10,1", help="jobs per take, comma-separated cases")
    parser.add_argument("--rate", type=float, default=100_000, help="the rate case's limit (never reached)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server = PrivateRedis()
    try:
        for count in (int(c) for c in args.count.split(",")):
            runs: dict[str, list[dict[str, Any]]] = {"none": [], "rate": []}
            for _ in range(args.rounds):
                runs["none"].append(one_case(server, rate=None, takes=args.takes, count=count))
                runs["rate"].append(one_case(server, rate=args.rate, takes=args.takes, count=count))
            for case, results in runs.items():
                assert all(r["taken"] == (args.takes - 1) * count for r in results), results
                medians = {
                    key: round(statistics.median(r[key] for r in results), 2)
                    for key in results[0]
                    if key.endswith(("take", "job"))
                }
                print(json.dumps({"count": count, "case": case, "takes": args.takes} | medians))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
