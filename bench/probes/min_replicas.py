"""What ``DELAYQ_MIN_REPLICAS`` costs a create on loopback: a private primary and its replica, the same
calls with the setting and without it, in alternated rounds, in one run.

    .venv/bin/python bench/probes/min_replicas.py                  # 6 rounds of each: 2,000 creates, 100,000 jobs
    .venv/bin/python bench/probes/min_replicas.py --rounds 2 --creates 500 --jobs 20000

Each round, for each side: ``--creates`` single creates one after the other (``Queue.enqueue``, a
delayed job with a 100-byte body), each timed; then ``--jobs`` jobs in one ``Queue.enqueue_many`` call
(250 a Lua call, a ``WAIT`` after each with the setting). The sides take turns going first. Prints the
medians over rounds of each side's create p50 and p99 (ms) and enqueue_many jobs/s, and the ratios, as
JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.paths import REPO
from shared.servers import PrivateRedis

sys.path.insert(0, str(REPO / "functions"))  # this checkout's delayq
from delayq import Queue, Settings, Topics

TOPIC = "bench"
BODY = {"pad": "x" * 88}  # 100 bytes as JSON
SIDES = {"without": 0, "min_replicas=1": 1}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def one_round(url: str, wanted: int, creates: int, jobs: int) -> dict[str, float]:
    """One side's round on a namespace of its own: create latencies and the bulk rate."""
    settings = Settings(
        redis_url=url,
        namespace=f"mr-{uuid.uuid4().hex[:8]}",
        topics=Topics.parse({TOPIC: {"target": "python:os:getcwd"}}),
        min_replicas=wanted,
    )
    queue = Queue(settings)
    queue.enqueue(TOPIC, BODY, delay=3600)  # connected, scripts cached, layout checked
    took = []
    for _ in range(creates):
        began = time.perf_counter()
        queue.enqueue(TOPIC, BODY, delay=3600)
        took.append((time.perf_counter() - began) * 1000)
    batch = [{"topic": TOPIC, "body": BODY, "delay": 3600} for _ in range(jobs)]
    began = time.perf_counter()
    results = queue.enqueue_many(batch)
    rate = jobs / (time.perf_counter() - began)
    assert all(result.status == 201 for result in results)
    queue.close()
    return {"p50_ms": percentile(took, 50), "p99_ms": percentile(took, 99), "bulk_jobs_s": rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--creates", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    rounds: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    options = ("--repl-diskless-sync-delay", "0")
    with PrivateRedis(*options) as primary, PrivateRedis(*options, replica_of=primary):
        for n in range(args.rounds):
            order = list(SIDES) if n % 2 == 0 else list(reversed(SIDES))
            for side in order:
                rounds[side].append(one_round(primary.url, SIDES[side], args.creates, args.jobs))
                primary.client.flushall()
    medians = {
        side: {key: round(statistics.median(r[key] for r in results), 3) for key in results[0]}
        for side, results in rounds.items()
    }
    without, with_ = medians["without"], medians["min_replicas=1"]
    print(
        json.dumps(
            {
                "args": vars(args),
                "medians": medians,
                "create_p99_more_ms": round(with_["p99_ms"] - without["p99_ms"], 3),
                "create_p50_more_ms": round(with_["p50_ms"] - without["p50_ms"], 3),
                "bulk_ratio": round(with_["bulk_jobs_s"] / without["bulk_jobs_s"], 3),
                "rounds": rounds,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
