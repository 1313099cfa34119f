"""Scenario 5: 3 sweepers and 4 consumers, all processes, on 20,000 jobs in 4 topics and 4 partitions.

The sweepers race for the partitions' locks, and the consumers' takes move due jobs themselves, so
moves and takes race all the time; each is one Lua call, so no job is moved or leased twice. None
lost, none delivered twice, none early (by Redis' clock).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from faults_support import Enqueued, Fleet, check, loop_env, make_queue, read_records, report, topics_json, wait_until
from servers import RedisServer

JOBS = 20_000
TOPICS = ("load-a", "load-b", "load-c", "load-d")
PARTITIONS = 4
SPREAD_S = 4.0  # due over the next few seconds


@pytest.mark.fault
@pytest.mark.timeout(150)
def test_3_sweepers_4_consumers_20000_jobs(tmp_path: Path) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    rng = random.Random(5)
    with RedisServer() as server:
        topics = topics_json(**{topic: {"timeout": 30, "concurrency": 16, "batch": 100} for topic in TOPICS})
        env = loop_env(server.url, "faults", topics, deliveries, partitions=PARTITIONS)
        queue = make_queue(env)
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            for i in range(3):
                fleet.sweeper(f"sweeper-{i + 1}")
            for i in range(4):
                fleet.consumer(f"consumer-{i + 1}")
            time.sleep(1.0)  # all seven up
            began = time.monotonic()
            results = queue.enqueue_many(
                {"topic": TOPICS[i % len(TOPICS)], "id": f"job-{i:05d}", "delay": round(rng.uniform(0, SPREAD_S), 3)}
                for i in range(JOBS)
            )
            enqueue_s = time.monotonic() - began
            jobs = Enqueued.from_results(results)

            def done() -> bool:
                # Cheap first: nothing left in Redis, then every delivery's end is in the file.
                left = sum(queue.stats(topic).delayed + queue.stats(topic).ready + queue.stats(topic).reserved
                           for topic in TOPICS)  # fmt: skip
                return left == 0 and sum(1 for r in read_records(deliveries) if r["ev"] == "end") >= JOBS

            assert wait_until(done, 90, interval=0.5), "not every job was delivered in 90 s"
            drained_s = time.monotonic() - began
            summaries = fleet.stop_all()

        records = read_records(deliveries)
        starts = [r["redis_ms"] for r in records if r["ev"] == "start"]
        ends = [r["redis_ms"] for r in records if r["ev"] == "end"]
        first_due = min(job.run_at_ms for job in jobs)
        last_due = max(job.run_at_ms for job in jobs)
        totals = check(
            "5 3 sweepers + 4 consumers, 20,000 jobs",
            jobs,
            records,
            duration_s=drained_s,
            enqueue_per_s=round(JOBS / enqueue_s),
            deliveries_per_s=round(JOBS / ((max(ends) - min(starts)) / 1000)),
            last_end_after_last_due_ms=round(max(ends) - last_due),
            due_window_s=round((last_due - first_due) / 1000, 2),
            consumers_pids=len({r["pid"] for r in records}),
        )
        taken = {name: s["taken"] for name, s in summaries.items() if "taken" in s}
        moved = {name: s["moved"] for name, s in summaries.items() if "moved" in s}
        report(f"[faults]   taken per consumer: {taken}; moved per sweeper: {moved}")
        totals.assert_clean()
        assert sum(taken.values()) == JOBS, taken  # every job leased exactly once
        assert sum(s["acked"] for s in summaries.values() if "acked" in s) == JOBS
        assert all(s["redis_errors"] == 0 for s in summaries.values()), summaries
        queue.redis.close()
