"""A consume process killed with SIGKILL while its topic is paused, some of its jobs mid-flight.

The pause holds the topic's ready jobs where they are; the jobs the dead consumer held come back when
their leases expire (the sweeper retries them, paused or not), and wait, ready, with the rest. After the
resume the other consumer delivers everything: nothing lost, nothing early, and only what the dead
consumer held may be delivered twice.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from support.faults import Enqueued, Fleet, check, loop_env, make_queue, read_records, topics_json, wait_until
from support.invariants import check_redis, unsettled
from support.servers import RedisServer

JOBS = 200
CONCURRENCY = 8
TOPIC = "held"


@pytest.mark.fault
@pytest.mark.timeout(120)
def test_kill_9_consumer_while_paused(tmp_path: Path) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer() as server:
        topics = topics_json(**{TOPIC: {"timeout": 2, "concurrency": CONCURRENCY, "retries": 3, "backoff": [0.1]}})
        env = loop_env(server.url, "faults", topics, deliveries, partitions=2)
        queue = make_queue(env)
        client = server.client()
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            began = time.monotonic()
            first = fleet.consumer("consumer-a")
            fleet.sweeper("sweeper")
            jobs = Enqueued.from_results(
                queue.enqueue_many(
                    [{"topic": TOPIC, "id": f"slow-{i}", "body": {"sleep": 1}} for i in range(CONCURRENCY)]
                )
            )

            def a_is_busy() -> bool:
                return sum(r["ev"] == "start" for r in read_records(deliveries)) >= CONCURRENCY // 2

            assert wait_until(a_is_busy, 20), "consumer A never got going"
            queue.pause(TOPIC)
            jobs += Enqueued.from_results(
                queue.enqueue_many([{"topic": TOPIC, "id": f"job-{i:03d}", "delay": i % 3} for i in range(JOBS)])
            )
            first.kill()  # mid-flight: its slow jobs' leases are left to expire
            fleet.consumer("consumer-b")
            starts_at_kill = sum(r["ev"] == "start" for r in read_records(deliveries))

            def leases_back() -> bool:
                stats = queue.stats(TOPIC)
                return stats.reserved == 0 and stats.delayed == 0

            assert wait_until(leases_back, 30), queue.stats(TOPIC)  # the sweeper took them back, while paused
            time.sleep(0.5)
            assert sum(r["ev"] == "start" for r in read_records(deliveries)) == starts_at_kill, "started while paused"
            assert queue.stats(TOPIC).ready >= JOBS

            queue.resume(TOPIC)

            def all_delivered() -> bool:
                return len({r["id"] for r in read_records(deliveries) if r["ev"] == "end"}) == len(jobs)

            assert wait_until(all_delivered, 60), queue.stats(TOPIC)
            summaries = fleet.stop_all()
            assert unsettled(check_redis(client, "faults", 2)) == {}

        records = read_records(deliveries)
        assert all(summary["redis_errors"] == 0 for summary in summaries.values()), summaries
        check("kill -9 consumer while paused", jobs, records, duration_s=time.monotonic() - began).assert_clean(
            duplicated_at_most=CONCURRENCY
        )
