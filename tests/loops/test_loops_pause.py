"""Pause and resume with real loop processes: two consume processes and a sweeper, paused and resumed
through the client. No consumer starts a job of a paused topic; jobs keep falling due and the sweep
keeps moving them; creates are accepted; a job already started finishes; other topics go on; nothing
is counted as a failed attempt, and after the resume every job is delivered once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from support.faults import Enqueued, Fleet, check, loop_env, make_queue, read_records, topics_json, wait_until
from support.invariants import check_redis

PAUSED, OTHER = "paused", "other"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_consumer_processes_respect_a_pause(
    tmp_path: Path, redis_url: str, namespace: str, redis_client: redis.Redis
) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    topics = topics_json(**{PAUSED: {"timeout": 10, "concurrency": 4}, OTHER: {"concurrency": 4}})
    env = loop_env(redis_url, namespace, topics, deliveries, partitions=2)
    queue = make_queue(env)
    fleet = Fleet(env, tmp_path)
    with fleet.running():
        for name in ("consumer-a", "consumer-b"):
            fleet.consumer(name)
        fleet.sweeper("sweeper")
        # A job that is running when the pause comes: it finishes.
        jobs = Enqueued.from_results(queue.enqueue_many([{"topic": PAUSED, "id": "started", "body": {"sleep": 1.5}}]))

        def started() -> bool:
            return any(r["ev"] == "start" and r["id"] == "started" for r in read_records(deliveries))

        assert wait_until(started, 30), "the consumers never got going"
        queue.pause(PAUSED)
        paused_at = time.monotonic()
        jobs += Enqueued.from_results(
            queue.enqueue_many(
                [{"topic": PAUSED, "id": f"now-{i:02d}", "body": {"sleep": 0.05}} for i in range(30)]
                + [{"topic": PAUSED, "id": f"soon-{i:02d}", "body": {"sleep": 0.05}, "delay": 0.5} for i in range(30)]
                + [{"topic": OTHER, "id": f"other-{i:02d}", "body": {}} for i in range(20)]
            )
        )

        def others_done_and_due_moved() -> bool:
            done = {r["id"] for r in read_records(deliveries) if r["ev"] == "end"}
            stats = queue.stats(PAUSED)
            return {f"other-{i:02d}" for i in range(20)} <= done and "started" in done and stats.delayed == 0

        assert wait_until(others_done_and_due_moved, 30), queue.stats(PAUSED)
        time.sleep(max(0.0, 2.0 - (time.monotonic() - paused_at)))  # two seconds, many ticks, of pause
        stats = queue.stats(PAUSED)
        assert (stats.paused, stats.ready, stats.delayed, stats.reserved) == (True, 60, 0, 0), stats
        assert stats.oldest_ready_ms > 0
        starts = [r for r in read_records(deliveries) if r["ev"] == "start" and r["topic"] == PAUSED]
        assert [r["id"] for r in starts] == ["started"], "a job of the paused topic was started"

        queue.resume(PAUSED)

        def all_done() -> bool:
            return len({r["id"] for r in read_records(deliveries) if r["ev"] == "end"}) == len(jobs)

        assert wait_until(all_done, 30), queue.stats(PAUSED)
        summaries = fleet.stop_all()
        stored = check_redis(redis_client, namespace, 2)
        assert (len(stored), {job.state for job in stored.values()}) == (len(jobs), {"d"})  # receipts only

    records = read_records(deliveries)
    assert all(r["attempt"] == 1 for r in records if r["ev"] == "start"), "a pause counted as a failed attempt"
    assert sum(s.get("failed", 0) + s.get("timed_out", 0) for s in summaries.values()) == 0, summaries
    consumed_by = {r["pid"] for r in records if r["ev"] == "start" and r["topic"] == PAUSED}
    assert len(consumed_by) == 2, "both consumers took jobs after the resume"
    check("pause with two consumer processes", jobs, records).assert_clean()
