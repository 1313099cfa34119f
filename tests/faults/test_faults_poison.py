"""Scenario 7: a poison job (its handler always fails) among 200 good ones in the same topic.

The poison is retried after its backoff until its retries are spent (retries 2: 3 attempts), then
it is dead, with its last error; it holds no worker while it waits, so the good jobs of its topic
flow past it, each delivered once and on time.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from support.faults import (
    Enqueued,
    Fleet,
    by_job,
    check,
    loop_env,
    make_queue,
    read_records,
    report,
    topics_json,
    wait_until,
)
from support.servers import RedisServer

GOOD = 200
BACKOFF_S = 0.2
RETRIES = 2
SPREAD_S = 2.0


@pytest.mark.fault
@pytest.mark.timeout(60)
def test_poison_job_goes_dead_while_its_topic_flows(tmp_path: Path) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer() as server:
        topics = topics_json(mixed={"timeout": 5, "retries": RETRIES, "backoff": [BACKOFF_S]})
        env = loop_env(server.url, "faults", topics, deliveries)
        queue = make_queue(env)
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            fleet.sweeper("sweeper")
            fleet.consumer("consumer")
            time.sleep(1.0)
            began = time.monotonic()
            poison = queue.enqueue("mixed", {"fail": True}, id="poison")
            results = queue.enqueue_many(
                {"topic": "mixed", "id": f"good-{i:03d}", "delay": SPREAD_S * i / GOOD, "body": {"n": i}}
                for i in range(GOOD)
            )
            jobs = [Enqueued("mixed", "poison", poison.run_at_ms), *Enqueued.from_results(results)]

            def settled() -> bool:
                good_done = len({r["id"] for r in read_records(deliveries) if r["ev"] == "end"}) == GOOD
                return good_done and queue.get("mixed", "poison").state == "dead"

            assert wait_until(settled, 20), "the poison did not go dead, or good jobs were not delivered"
            summaries = fleet.stop_all()
            duration = time.monotonic() - began

        info = queue.get("mixed", "poison")
        assert info.state == "dead"
        assert info.attempts == RETRIES + 1
        assert info.last_error is not None
        assert "planned failure of attempt 3 (poison)" in info.last_error, info.last_error
        dead = queue.dead("mixed")
        assert [job.id for job in dead] == ["poison"]
        assert dead[0].last_error == info.last_error
        stats = queue.stats("mixed")
        assert (stats.delayed, stats.ready, stats.reserved, stats.dead) == (0, 0, 0, 1), stats

        records = read_records(deliveries)
        attempts = by_job(records)[("mixed", "poison")]
        starts = [r for r in attempts if r["ev"] == "start"]
        fails = [r for r in attempts if r["ev"] == "fail"]
        assert [r["attempt"] for r in starts] == [1, 2, 3], attempts
        waits = [later["redis_ms"] - fail["redis_ms"] for fail, later in zip(fails, starts[1:], strict=False)]
        assert all(w >= BACKOFF_S * 1000 - 5 for w in waits), waits  # each retry after its backoff
        totals = check(
            "7 poison job among 200",
            jobs,
            records,
            never_succeed=["poison"],
            duration_s=duration,
            poison_attempts=info.attempts,
            poison_retry_waits_ms=[round(w) for w in waits],
            poison_last_error=repr(info.last_error),
        )
        report(f"[faults]   summaries: {summaries}")
        totals.assert_clean()
        good_lateness = [r["redis_ms"] - r["run_at_ms"] for r in records if r["ev"] == "start" and r["id"] != "poison"]
        assert max(good_lateness) < 1000, max(good_lateness)  # the topic flowed past the poison
        assert summaries["consumer"]["dead"] == 1
        assert summaries["consumer"]["acked"] == GOOD
        queue.close()
