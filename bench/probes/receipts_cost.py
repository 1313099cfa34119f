"""What receipts cost Redis: CPU per job with receipts on (the default) against off (``keep_done: 0``),
and memory per receipt.

    .venv/bin/python bench/probes/receipts_cost.py [--jobs 200000] [--group 2000] [--receipts 100000]

On a private redis-server (``shared.servers``: nothing else runs on it, so its ``INFO`` is
ours alone):

- CPU: two topics in one namespace, one with receipts (the defaults: an hour, at most 10,000), one
  without (``keep_done: 0``), each first filled to its steady state unmeasured (receipts at their
  cap, so that the acks forget as many as they add). Then the steady load of a consumer, sent as the
  consumer sends it (``calls.enqueue``, ``calls.take``, ``calls.ack``) from one client, the same calls
  of the same sizes for both topics: per cycle, 50 jobs enqueued due now in one call, taken in one,
  acknowledged in five calls of 10 (with when each handler started). The topics take turns by
  groups of ``--group`` jobs, and Redis CPU (``used_cpu_user + used_cpu_sys``) is read around each
  group, so that the machine's other work weighs on both alike; per topic, the CPU of its groups
  over their jobs. No consumer threads: what is measured is Redis running delayq's scripts.
- Memory: ``--receipts`` jobs (ids generated, 24 characters) created, taken and acknowledged with
  receipts kept (``keep_done_max`` raised to hold them all), through the product's scripts;
  ``used_memory`` before the jobs and after the acks, per receipt.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.servers import PrivateRedis

from delayq import Queue, Settings, Topics
from delayq.core.job import new_ids
from delayq.store import calls
from delayq.store.calls import JobWrite

CYCLE, ACKS = 50, 5  # jobs per enqueue and take; acks per take (10 jobs each)
BODY = '{"pad":"' + "x" * 90 + '"}'
TOPICS = {"on": {"target": "-"}, "off": {"target": "-", "keep_done": 0}}


def cycle(queue: Queue, topic: str) -> None:
    """One cycle of the steady load: ``CYCLE`` jobs created due now, taken, acknowledged."""
    partition = queue.keys.partitions[0]
    writes = [JobWrite(topic, job_id, BODY, "d0", "||") for job_id in new_ids(CYCLE)]
    calls.enqueue(partition, writes).run(queue.redis)
    taken = calls.take(partition, topic, count=CYCLE, timeout_ms=60_000, grace_ms=2000).run(queue.redis)
    assert len(taken.jobs) == CYCLE, taken
    leases = [(job.id, token, taken.now_ms + 1) for job, token, _ in taken.leases]
    config = queue.topic_config(topic)
    per = CYCLE // ACKS
    for start in range(0, CYCLE, per):
        assert calls.ack(partition, topic, config, leases[start : start + per]).run(queue.redis) == per


def cpu_s(server: PrivateRedis) -> float:
    info = server.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def cpu(server: PrivateRedis, jobs: int, group: int) -> dict[str, Any]:
    queue = Queue(Settings(redis_url=server.url, namespace="cpu", topics=Topics.parse(TOPICS)))
    try:
        for topic in TOPICS:  # the steady state: receipts at their cap, and cut back in chunks since
            for _ in range(11_000 // CYCLE):
                cycle(queue, topic)
        assert queue.stats("on").done >= 10_000 - 64
        spent: dict[str, list[float]] = {topic: [] for topic in TOPICS}
        for n in range(jobs // group):
            for topic in TOPICS if n % 2 == 0 else reversed(TOPICS):
                before = cpu_s(server)
                for _ in range(group // CYCLE):
                    cycle(queue, topic)
                spent[topic].append((cpu_s(server) - before) * 1e6 / group)
        done = queue.stats("on").done, queue.stats("off").done
    finally:
        queue.close()
        server.flush()
    assert 10_000 - 64 <= done[0] <= 10_000, done
    assert done[1] == 0, done
    return spent


def memory(server: PrivateRedis, receipts: int) -> dict[str, Any]:
    topics = {"t": {"target": "-", "keep_done_max": receipts}}
    queue = Queue(Settings(redis_url=server.url, namespace="m", topics=Topics.parse(topics)))
    partition = queue.keys.partitions[0]
    config = queue.topic_config("t")
    try:
        queue.stats("t")  # the namespace's layout recorded, the scripts cached
        before = int(server.client.info("memory")["used_memory"])
        queue.enqueue_many({"topic": "t", "body": {"pad": "x" * 90}, "delay": 0} for _ in range(receipts))
        while True:
            taken = calls.take(partition, "t", count=1000, timeout_ms=600_000, grace_ms=0).run(queue.redis)
            if not taken.jobs:
                break
            leases = [(job.id, token, taken.now_ms) for job, token, _ in taken.leases]
            assert calls.ack(partition, "t", config, leases).run(queue.redis) == len(leases)
        assert queue.stats("t").done == receipts
        after = int(server.client.info("memory")["used_memory"])
        meta = queue.redis.hrandfield(partition.metas, 1, withvalues=True)
    finally:
        queue.close()
        server.flush()
    return {"bytes_per_receipt": (after - before) / receipts, "receipts": receipts, "example_meta": meta}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000, help="measured jobs per topic (0: no CPU figure)")
    parser.add_argument("--group", type=int, default=2000, help="jobs of one topic between two CPU readings")
    parser.add_argument("--receipts", type=int, default=100_000, help="receipts for the memory figure (0: none)")
    args = parser.parse_args()
    server = PrivateRedis()
    try:
        if args.jobs:
            spent = cpu(server, args.jobs, args.group)
            off, on = statistics.fmean(spent["off"]), statistics.fmean(spent["on"])
            paired = [a - b for a, b in zip(spent["on"], spent["off"], strict=True)]
            print(f"Redis {server.version}, {args.jobs:,} jobs per topic in groups of {args.group:,}:")
            print(f"  Redis CPU per job: receipts off {off:.2f} µs, on {on:.2f} µs ({(on / off - 1) * 100:+.1f} %)")
            print(
                f"  on minus off, group by group: median {statistics.median(paired):+.2f} µs, "
                f"quartiles {statistics.quantiles(paired, n=4)[0]:+.2f} .. {statistics.quantiles(paired, n=4)[2]:+.2f}"
            )
        if args.receipts:
            found = memory(server, args.receipts)
            print(
                f"memory: {found['bytes_per_receipt']:.0f} bytes per receipt ({found['receipts']:,} receipts, "
                f"ids of 24 characters; a receipt's meta: {found['example_meta']})"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
