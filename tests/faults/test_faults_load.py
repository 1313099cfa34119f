"""Scenario 5: 3 sweepers and 4 consumers, all processes, on 20,000 jobs in 4 topics and 4 partitions.

The sweepers race for the partitions' locks, and the consumers' takes move due jobs themselves, so
moves and takes race all the time; each is one Lua call, so no job is moved or leased twice. None
lost, none delivered twice, none early (by Redis' clock). Every consumer delivers its share.

The first sweeper to pass takes every free lock and keeps it, so midway a sweeper holding locks is
stopped (SIGTERM: it releases them) and the others take every lock over, under load. The namespace
keeps its invariant (``support.invariants``, read at one instant) midway, around the handover and at the end.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from support.faults import Enqueued, Fleet, check, loop_env, make_queue, read_records, report, topics_json, wait_until
from support.invariants import check_redis, unsettled
from support.servers import RedisServer

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
        # Flow keys' limits in two topics: a concurrency per key (its leases counted through kill-free
        # handovers and four consumers' acks) and a rate per key.
        limits = {"load-a": {"key_concurrency": 2}, "load-c": {"key_rate": 20}}
        topics = topics_json(
            **{topic: {"timeout": 30, "concurrency": 16, "batch": 100, **limits.get(topic, {})} for topic in TOPICS}
        )
        env = loop_env(server.url, "faults", topics, deliveries, partitions=PARTITIONS)
        queue = make_queue(env)
        client = server.client()
        locks = [p.lock for p in queue.keys.partitions]
        tokens: set[str] = set()  # the lock tokens seen: one per sweeper that held a lock

        def holders() -> set[str]:
            held = {token for token in client.mget(locks) if token is not None}
            tokens.update(held)
            return held

        fleet = Fleet(env, tmp_path)
        with fleet.running():
            sweepers = [fleet.sweeper(f"sweeper-{i + 1}") for i in range(3)]
            consumers = [fleet.consumer(f"consumer-{i + 1}") for i in range(4)]
            time.sleep(1.0)  # all seven up
            began = time.monotonic()
            # Every other job has a flow key (50 tenants): the fair set, raced by four consumers, and in
            # load-a and load-c held to their keys' limits (parked, and back).
            results = queue.enqueue_many(
                {
                    "topic": TOPICS[i % len(TOPICS)],
                    "id": f"job-{i:05d}",
                    "delay": round(rng.uniform(0, SPREAD_S), 3),
                    **({"key": f"tenant-{i % 50}"} if i % 2 == 0 else {}),
                }
                for i in range(JOBS)
            )
            enqueue_s = time.monotonic() - began
            jobs = Enqueued.from_results(results)
            checked = [len(check_redis(client, "faults", PARTITIONS))]  # the namespace mid-run, at one instant

            # A sweeper holding locks (found by its token, which it logs) stops; the others take over.
            token = min(holders())
            holder = next((p for p in sweepers if f"sweeper {token[:8]} holds partition" in p.err.read_text()), None)
            assert holder is not None, f"no sweeper says it holds the locks of token {token[:8]}"
            stopped = {holder.name: holder.stop()}
            assert stopped[holder.name]["locks_taken"] > 0, stopped

            def taken_over() -> bool:
                values = client.mget(locks)
                tokens.update(value for value in values if value is not None)
                return None not in values and token not in values

            assert wait_until(taken_over, 5, interval=0.02), "the other sweepers did not take the locks over"
            checked.append(len(check_redis(client, "faults", PARTITIONS)))

            def done() -> bool:
                # Cheap first: nothing left in Redis, then every delivery's end is in the file.
                holders()
                left = sum(queue.stats(topic).delayed + queue.stats(topic).ready + queue.stats(topic).reserved
                           for topic in TOPICS)  # fmt: skip
                return left == 0 and sum(1 for r in read_records(deliveries) if r["ev"] == "end") >= JOBS

            assert wait_until(done, 90, interval=0.5), "not every job was delivered in 90 s"
            drained_s = time.monotonic() - began
            summaries = {**stopped, **fleet.stop_all()}
            assert unsettled(check_redis(client, "faults", PARTITIONS)) == {}, "jobs left behind"

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
            jobs_checked_midway=checked,
            lock_holders=len(tokens),
        )
        taken = {name: s["taken"] for name, s in summaries.items() if "taken" in s}
        moved = {name: s["moved"] for name, s in summaries.items() if "moved" in s}
        locks = {name: s["locks_taken"] for name, s in summaries.items() if "moved" in s}
        report(f"[faults]   taken per consumer: {taken}; moved per sweeper: {moved}; locks taken: {locks}")
        totals.assert_clean()
        assert sum(taken.values()) == JOBS, taken  # every job leased exactly once
        assert sum(s["acked"] for s in summaries.values() if "acked" in s) == JOBS
        assert all(s["redis_errors"] == 0 for s in summaries.values()), summaries
        # Every consumer delivered (its handlers ran, in its own process) and acked its share.
        assert {r["pid"] for r in records} == {c.pid for c in consumers}, "a consumer delivered nothing"
        assert all(summaries[c.name]["acked"] > 0 for c in consumers), taken
        # Two sweepers at least held locks: the one stopped midway, and one that took over from it.
        assert len(tokens) >= 2, tokens
        assert sum(1 for n in locks.values() if n > 0) >= 2, locks
        queue.close()
