"""Scenario 1: a consume process killed with SIGKILL in the middle of a batch.

delayq is at-least-once: a job leased to a consumer that dies is neither lost nor handed to anyone
else while its lease runs (timeout + grace, by Redis' clock); once the lease expires the sweeper
takes it back as a failed attempt and it is delivered again. A job whose handler had finished but
whose ack had not reached Redis when the process died is delivered twice: that is the price of
at-least-once, and it is bounded by what the dead consumer held, at most its concurrency.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from delayq.loops.consumer import LEASE_GRACE_MS

from support.faults import (
    Enqueued,
    Fleet,
    by_job,
    check,
    loop_env,
    make_queue,
    read_records,
    redis_ms,
    report,
    summary_stats,
    topics_json,
    wait_until,
)
from support.invariants import check_redis, unsettled
from support.scripts import leases as leases_of
from support.servers import RedisServer

JOBS = 40
SLEEP_S = 0.6  # each handler runs this long, so a batch is mid-flight most of the time
TIMEOUT_S = 2
CONCURRENCY = 8
TAKE_TO_START_SLACK_MS = 100  # the lease runs from the take; the handler starts a few ms later


@pytest.mark.fault
@pytest.mark.timeout(90)
def test_kill_9_consumer_mid_batch(tmp_path: Path) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer() as server:
        topics = topics_json(slow={"timeout": TIMEOUT_S, "concurrency": CONCURRENCY, "retries": 3, "backoff": [0.1]})
        env = loop_env(server.url, "faults", topics, deliveries)
        queue = make_queue(env)
        client = server.client()
        partition = queue.keys.partitions[0]
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            began = time.monotonic()
            results = queue.enqueue_many(
                [{"topic": "slow", "id": f"job-{i:03d}", "body": {"sleep": SLEEP_S}} for i in range(JOBS)]
            )
            jobs = Enqueued.from_results(results)
            first = fleet.consumer("consumer-a")

            def mid_batch() -> bool:
                """A has started more than a batch, and some of its handlers are running now."""
                mine = [r for r in read_records(deliveries) if r["pid"] == first.pid]
                started = {r["id"] for r in mine if r["ev"] == "start"}
                return len(started) >= CONCURRENCY + 4 and bool(started - {r["id"] for r in mine if r["ev"] == "end"})

            assert wait_until(mid_batch, 20, interval=0.02), "consumer A never got going"
            first.kill()  # handlers run 0.6 s: the ones running a few ms ago still are
            killed_at_ms = redis_ms(client)
            # Nothing else consumes: what is leased now is exactly what A held, unacked, when it died.
            leases = leases_of(client, partition, "slow")
            assert 0 < len(leases) <= CONCURRENCY, leases
            records_at_kill = read_records(deliveries)

            fleet.consumer("consumer-b")
            fleet.sweeper("sweeper")

            def all_delivered() -> bool:
                done = {r["id"] for r in read_records(deliveries) if r["ev"] == "end"}
                return len(done) == JOBS and leases_of(client, partition, "slow") == {}

            assert wait_until(all_delivered, 30), "not every job was delivered after the kill"
            summaries = fleet.stop_all()
            duration = time.monotonic() - began
            assert unsettled(check_redis(client, "faults")) == {}, "a job was left behind"  # and the namespace is whole

        records = read_records(deliveries)
        in_flight = [r["id"] for r in records_at_kill if r["ev"] == "start" and r["pid"] == first.pid]
        in_flight = sorted(set(in_flight) - {r["id"] for r in records_at_kill if r["ev"] == "end"})
        starts = by_job(records, "start")
        redelivered = sorted(job_id for (_, job_id), group in starts.items() if len(group) > 1)
        gaps: list[float] = []
        for job_id, lease_deadline in leases.items():
            group = starts[("slow", job_id)]
            later = [r for r in group if r["pid"] != first.pid]
            assert later, f"{job_id}, leased by the killed consumer, was never delivered again"
            again = later[0]
            assert again["attempt"] >= 2, again  # the expired lease counted as a failed attempt
            # Not before its lease expired, by Redis' clock ...
            assert again["redis_ms"] >= lease_deadline, (job_id, again, lease_deadline)
            earlier = [r for r in group if r["pid"] == first.pid]
            if earlier:  # ... that is, not before its first start + timeout + grace
                gap = again["redis_ms"] - earlier[0]["redis_ms"]
                gaps.append(gap)
                assert gap >= TIMEOUT_S * 1000 + LEASE_GRACE_MS - TAKE_TO_START_SLACK_MS, (job_id, gap)
        # The kill did land mid-batch: handlers were cut short (else what follows proves little).
        assert len(in_flight) > 0, records_at_kill
        # Only what the dead consumer held was delivered again; every handler cut short was among it.
        assert set(redelivered) <= set(leases), (redelivered, leases)
        assert set(in_flight) <= set(leases), (in_flight, leases)
        assert summaries["sweeper"]["retried"] == len(leases), summaries
        assert all(summary["redis_errors"] == 0 for summary in summaries.values()), summaries

        totals = check(
            "1 kill -9 consumer mid-batch",
            jobs,
            records,
            duration_s=duration,
            in_flight_at_kill=len(leases),
            handlers_cut_short=len(in_flight),
            redelivery_gap_ms=summary_stats(gaps).replace(" ", ","),
            lease_ms=TIMEOUT_S * 1000 + LEASE_GRACE_MS,
            killed_at_redis_ms=int(killed_at_ms),
        )
        report(f"[faults]   summaries: {summaries}")
        # At-least-once: a handler that finished just before the kill, its ack not yet sent, runs again.
        totals.assert_clean(duplicated_at_most=len(leases))
        assert totals.duplicated <= CONCURRENCY
        queue.close()


@pytest.mark.fault
@pytest.mark.timeout(60)
def test_sigterm_with_a_handler_stuck_past_its_timeout(tmp_path: Path) -> None:
    """SIGTERM while a handler hangs far past its timeout: the process settles it as a failed attempt,
    prints its summary and exits at once (it does not wait for the thread it cannot kill); the job is
    retried after its backoff by the next consumer, and delivered once."""
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer() as server:
        env = loop_env(server.url, "faults", topics_json(hangs={"timeout": 1, "backoff": [0.5]}), deliveries)
        queue = make_queue(env)
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            began = time.monotonic()
            stuck = queue.enqueue("hangs", {"sleep": 600, "sleep_until": 1}, id="stuck")
            results = queue.enqueue_many([{"topic": "hangs", "id": f"job-{i:02d}", "delay": 0.5} for i in range(10)])
            jobs = [Enqueued("hangs", "stuck", stuck.run_at_ms), *Enqueued.from_results(results)]
            first = fleet.consumer("consumer-a")
            assert wait_until(lambda: any(r["id"] == "stuck" for r in read_records(deliveries)), 15)
            assert wait_until(lambda: "timed out" in first.err.read_text(), 5), first.tail()
            asked = time.monotonic()
            summary_a = first.stop(timeout=10)  # SIGTERM; it must be gone well before the handler returns
            stop_s = time.monotonic() - asked
            assert summary_a["timed_out"] == 1, summary_a
            assert summary_a["retried"] == 1, summary_a

            fleet.consumer("consumer-b")
            ended = lambda: {r["id"] for r in read_records(deliveries) if r["ev"] == "end"}  # noqa: E731
            assert wait_until(lambda: len(ended()) == len(jobs), 15), ended()
            fleet.stop_all()
            duration = time.monotonic() - began

        records = read_records(deliveries)
        totals = check(
            "1b SIGTERM, handler stuck past timeout", jobs, records, duration_s=duration, stop_s=round(stop_s, 2)
        )
        totals.assert_clean()
        assert stop_s < 3, f"the consumer took {stop_s:.1f} s to stop"
        retry = [r for r in records if r["id"] == "stuck" and r["ev"] == "start"]
        assert [r["attempt"] for r in retry] == [1, 2]
        assert retry[1]["redis_ms"] - retry[0]["redis_ms"] >= 1000 + 500 - TAKE_TO_START_SLACK_MS  # timeout + backoff
        queue.close()


@pytest.mark.fault
@pytest.mark.timeout(60)
def test_sigterm_with_handlers_in_flight_redis_up_then_down(tmp_path: Path) -> None:
    """SIGTERM while handlers run: the consumer waits for them (without spinning: a bounded number
    of passes) and acks them. The same with Redis gone: it gives up on settling after a few tries
    and exits; the leases expire and the jobs are delivered again (at-least-once: at most what was
    in flight is delivered twice)."""
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer("--appendonly", "yes", "--appendfsync", "always") as server:
        topics = topics_json(busy={"timeout": TIMEOUT_S, "concurrency": CONCURRENCY, "backoff": [0.1]})
        env = loop_env(server.url, "faults", topics, deliveries)
        queue = make_queue(env)
        fleet = Fleet(env, tmp_path)
        jobs: list[Enqueued] = []

        def in_flight(prefix: str) -> list[Enqueued]:
            batch = [{"topic": "busy", "id": f"{prefix}-{i}", "body": {"sleep": 1.0}} for i in range(CONCURRENCY)]
            made = Enqueued.from_results(queue.enqueue_many(batch))
            jobs.extend(made)
            ids = {job.id for job in made}
            assert wait_until(lambda: ids <= {r["id"] for r in read_records(deliveries)}, 15), "not all started"
            return made

        with fleet.running():
            began = time.monotonic()
            first = fleet.consumer("consumer-up")
            in_flight("up")
            asked = time.monotonic()
            summary_up = first.stop()
            stop_up_s = time.monotonic() - asked
            assert summary_up["acked"] == CONCURRENCY, summary_up

            second = fleet.consumer("consumer-down")
            in_flight("down")
            server.stop()
            asked = time.monotonic()
            summary_down = second.stop()
            stop_down_s = time.monotonic() - asked
            assert summary_down["acked"] == 0, summary_down
            assert summary_down["redis_errors"] > 0, summary_down

            server.start()
            fleet.sweeper("sweeper")
            fleet.consumer("consumer-after")
            ended = lambda: {r["id"] for r in read_records(deliveries) if r["ev"] == "end" and r["pid"] != second.pid}  # noqa: E731
            assert wait_until(lambda: {f"down-{i}" for i in range(CONCURRENCY)} <= ended(), 20), ended()
            fleet.stop_all()
            duration = time.monotonic() - began

        records = read_records(deliveries)
        totals = check(
            "1c SIGTERM with handlers in flight, Redis up / down",
            jobs,
            records,
            duration_s=duration,
            stop_up_s=round(stop_up_s, 2),
            stop_down_s=round(stop_down_s, 2),
            passes_up=summary_up["passes"],
            passes_down=summary_down["passes"],
        )
        totals.assert_clean(duplicated_at_most=CONCURRENCY)  # the "down" ones ran to the end, unacked
        assert set(totals.duplicated_ids) <= {f"busy/down-{i}" for i in range(CONCURRENCY)}
        # Waiting for its handlers (~1 s), a stopping consumer sleeps between its passes: no spinning.
        assert summary_up["passes"] < 100, summary_up
        assert summary_down["passes"] < 100, summary_down
        assert stop_up_s < 3, stop_up_s
        assert stop_down_s < 3, stop_down_s
        again = by_job(records, "start")
        for i in range(CONCURRENCY):
            first_try, second_try = again[("busy", f"down-{i}")][:2]
            assert (
                second_try["redis_ms"] - first_try["redis_ms"]
                >= TIMEOUT_S * 1000 + LEASE_GRACE_MS - TAKE_TO_START_SLACK_MS
            )
        queue.close()
