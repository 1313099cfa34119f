"""What a callback costs Redis: per job of a topic with ``on_done``, the commands and CPU of its ack
(which leaves an outbox record), of making its callback job (the sweeper's drain) and the job itself,
against the same jobs in a topic without callbacks.

    .venv/bin/python bench/probes/callback_cost.py [--jobs 20000] [--ack-batch 10]

On a private redis-server (``shared.servers``: nothing else runs on it, so its ``INFO`` is ours
alone). Each case creates ``--jobs`` jobs due now (a body of about 100 bytes), takes them 100 at a
time and acknowledges them ``--ack-batch`` per call, as a consumer does (``calls.take``,
``calls.ack``); with callbacks, then drains the outbox as the sweeper does (``callbacks.drain``).
Per job: Redis commands (those inside Lua too) and CPU, and the memory the outbox held at its
fullest (every record waiting).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.servers import PrivateRedis, spent

from delayq import Queue, Settings, Topics
from delayq.loops.callbacks import drain
from delayq.store import calls
from delayq.store.calls import Ack

TAKE = 100  # jobs per take
TOPICS = {
    "plain": {"target": "-", "keep_done_max": 10_000_000},
    "called": {"target": "-", "keep_done_max": 10_000_000, "on_done": "audit"},
    "audit": {"target": "-", "keep_done_max": 10_000_000},
}


def case(server: PrivateRedis, topic: str, jobs: int, ack_batch: int) -> dict[str, float]:
    """Per job of ``topic``: its ack's commands and CPU, then the drain's; the outbox's memory."""
    queue = Queue(Settings(redis_url=server.url, namespace="c", topics=Topics.parse(TOPICS)))
    partition = queue.keys.partitions[0]
    config = queue.topic_config(topic)
    try:
        queue.enqueue_many({"topic": topic, "body": {"pad": "x" * 90}, "delay": 0} for _ in range(jobs))
        taken = []
        while len(taken) < jobs:
            reply = calls.take(partition, topic, count=TAKE, timeout_ms=600_000, grace_ms=0).run(queue.redis)
            taken += [Ack(job.id, token, reply.now_ms) for job, token, _ in reply.leases]
        before = server.info()
        for start in range(0, len(taken), ack_batch):
            calls.ack(partition, topic, config, taken[start : start + ack_batch]).run(queue.redis)
        acked = server.info()
        outbox_bytes = float(queue.redis.memory_usage(partition.outbox) or 0)
        while drain(queue, partition):
            pass
        drained = server.info()
    finally:
        queue.close()
        server.flush()
    ack, made = spent(before, acked), spent(acked, drained)
    return {
        "ack_commands": ack["commands"] / jobs,
        "ack_cpu_us": ack["cpu_s"] * 1e6 / jobs,
        "drain_commands": made["commands"] / jobs,
        "drain_cpu_us": made["cpu_s"] * 1e6 / jobs,
        "outbox_bytes": outbox_bytes / jobs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per case (20000)")
    parser.add_argument("--ack-batch", type=int, default=10, help="acks per call (10)")
    args = parser.parse_args()
    server = PrivateRedis()
    try:
        cases = {topic: case(server, topic, args.jobs, args.ack_batch) for topic in ("plain", "called")}
        print(f"Redis {server.version}, {args.jobs:,} jobs a case, {args.ack_batch} acks a call:")
        for topic, figures in cases.items():
            print(
                f"  {topic:<7} ack {figures['ack_commands']:5.2f} commands {figures['ack_cpu_us']:6.1f} µs a job; "
                f"making callback jobs {figures['drain_commands']:5.2f} commands {figures['drain_cpu_us']:6.1f} µs "
                f"a job; the outbox at its fullest {figures['outbox_bytes']:5.0f} B a job"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
