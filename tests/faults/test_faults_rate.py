"""A consume process killed with SIGKILL while its topic is held back by its rate, some of its jobs
mid-flight and most of them waiting for a start.

The rate's bucket lives in Redis, so the death changes nothing for it: the other consumer goes on at
the same rate (the takes of both, by Redis' clock, never exceed it in any window), the jobs held back
stay ready where they were, and the jobs the dead consumer held come back when their leases expire.
Nothing lost, nothing early, only what the dead consumer held delivered twice.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from delayq.loops.consumer import LEASE_GRACE_MS
from delayq.loops.settlement import ACK_RIDE_S

from support.faults import (
    Enqueued,
    Fleet,
    busiest_window,
    check,
    loop_env,
    make_queue,
    read_records,
    topics_json,
    wait_until,
)
from support.invariants import check_redis, unsettled
from support.servers import RedisServer

JOBS = 120
CONCURRENCY = 8
RATE = 20
TIMEOUT_S = 2
TOPIC = "metered"


@pytest.mark.fault
@pytest.mark.timeout(120)
def test_kill_9_consumer_while_rate_limited(tmp_path: Path) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer() as server:
        config = {"rate": RATE, "timeout": TIMEOUT_S, "concurrency": CONCURRENCY, "retries": 3, "backoff": [0.1]}
        env = loop_env(server.url, "faults", topics_json(**{TOPIC: config}), deliveries, partitions=2)
        queue = make_queue(env)
        client = server.client()
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            began = time.monotonic()
            first = fleet.consumer("consumer-a")
            fleet.sweeper("sweeper")
            jobs = Enqueued.from_results(
                queue.enqueue_many(
                    [{"topic": TOPIC, "id": f"job-{i:03d}", "body": {"sleep": 0.5, "lease": True}} for i in range(JOBS)]
                )
            )

            def a_is_metered() -> bool:  # past its burst, some jobs running, most held back
                return sum(r["ev"] == "start" for r in read_records(deliveries)) >= RATE + CONCURRENCY // 2

            assert wait_until(a_is_metered, 30), "consumer A never got going"
            first.kill()
            seconds, micros = client.time()
            killed_ms = seconds * 1000 + micros / 1000
            held_back = queue.stats(TOPIC)
            assert held_back.ready > JOBS // 2, held_back  # most wait, ready, for a start
            fleet.consumer("consumer-b")

            def all_delivered() -> bool:
                return len({r["id"] for r in read_records(deliveries) if r["ev"] == "end"}) == len(jobs)

            assert wait_until(all_delivered, 60), queue.stats(TOPIC)
            summaries = fleet.stop_all()
            assert unsettled(check_redis(client, "faults", 2)) == {}

        records = read_records(deliveries)
        assert all(summary["redis_errors"] == 0 for summary in summaries.values()), summaries
        starts = [r for r in records if r["ev"] == "start"]
        # Only what A held when it died was attempted again: the jobs it was running, and those done
        # whose acks were waiting to ride with its next take (ACK_RIDE_S, and a pass's time for it to go).
        # The held-back jobs never were.
        again = {r["id"] for r in starts if r["attempt"] > 1}
        assert again <= {r["id"] for r in starts if r["pid"] == first.pid}
        acks_waiting = sum(
            r["ev"] == "end" and r["pid"] == first.pid and r["redis_ms"] > killed_ms - ACK_RIDE_S * 1000 - 100
            for r in records
        )
        assert len(again) <= CONCURRENCY + acks_waiting, (again, acks_waiting)
        taken = [r["lease_ms"] - TIMEOUT_S * 1000 - LEASE_GRACE_MS for r in starts]
        assert busiest_window(taken) <= 2 * RATE, busiest_window(taken)  # burst (= rate) + rate
        check("kill -9 consumer while rate-limited", jobs, records, duration_s=time.monotonic() - began).assert_clean(
            duplicated_at_most=CONCURRENCY + acks_waiting
        )
