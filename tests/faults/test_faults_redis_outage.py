"""Scenario 4: Redis unreachable for 10 s while the API, a sweeper and a consumer run.

The outage is a stop (SIGTERM: Redis syncs its AOF and exits) and, 10 s later, a start on the same
port and directory: with ``appendfsync always`` nothing acknowledged is lost, so what is tested is
the functions' behaviour while nothing listens. This is what a failover, a restart or a network cut
looks like to a client: connections are refused (or reset) at once. (SIGSTOP/SIGCONT would model a
hung server instead: the kernel still accepts connections and every command waits for its socket
timeout, 5 s, before the 503; not a quick answer, and a case of its own.)

During the outage the API answers 503 JSON at once and writes nothing; the loop processes log, count
``redis_errors`` and keep going; when Redis is back they resume by themselves, and jobs enqueued
before the outage (falling due during it) and after it are each delivered once.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from delayq import JobNotFound, Queue
from delayq.store.connection import SOCKET_TIMEOUT_S

from support.faults import (
    Enqueued,
    Fleet,
    HandlerApi,
    check,
    loop_env,
    make_queue,
    read_records,
    report,
    topics_json,
    wait_until,
)
from support.invariants import check_redis, unsettled
from support.servers import RedisServer

OUTAGE_S = 10.0
QUICK_S = 1.0  # a 503 during the outage comes at least this fast
HANG_S = 8.0  # at least; the two API probes take a socket timeout each


@pytest.mark.fault
@pytest.mark.timeout(120)
def test_redis_unreachable_for_10_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer("--appendonly", "yes", "--appendfsync", "always") as server:
        env = loop_env(server.url, "faults", topics_json(steady={"timeout": 5, "backoff": [0.5]}), deliveries)
        api = HandlerApi(monkeypatch, env)
        queue = make_queue(env)
        jobs: list[Enqueued] = []

        def enqueue(prefix: str, delays: list[float]) -> None:
            batch = [{"topic": "steady", "id": f"{prefix}-{i:03d}", "delay": d} for i, d in enumerate(delays)]
            status, body, _ = api("POST", "/jobs/batch", {"jobs": batch})
            assert status == 200, body
            jobs.extend(Enqueued.from_results(body["results"]))

        def delivered() -> int:
            return len({r["id"] for r in read_records(deliveries) if r["ev"] == "end"})

        fleet = Fleet(env, tmp_path)
        with fleet.running():
            began = time.monotonic()
            sweeper, consumer = fleet.sweeper(), fleet.consumer()
            lock = queue.keys.partitions[0].lock
            client = server.client()
            assert wait_until(lambda: client.exists(lock), 15), "the sweeper never took its lock"
            enqueue("before", [0.0] * 20)
            assert wait_until(lambda: delivered() == 20, 15), delivered()
            # Due during the outage (and a few just after it): waiting in Redis when it goes away.
            enqueue("during", [1 + i * (OUTAGE_S - 2) / 30 for i in range(30)] + [OUTAGE_S + 1] * 5)
            # Nothing mid-flight: a clean cut. The last "end" is written before its ack, which lands a
            # pass later.
            assert wait_until(lambda: queue.stats("steady").reserved == 0, 5), queue.stats("steady")

            server.stop()
            stopped = time.monotonic()
            answers: list[tuple[str, int, float]] = []
            refused: list[str] = []
            probe = 0
            while time.monotonic() - stopped < OUTAGE_S:
                job_id = f"refused-{probe:03d}"
                for method, path, body in (
                    ("GET", "/health", None),
                    ("POST", "/jobs", {"topic": "steady", "id": job_id}),
                    ("POST", "/jobs/batch", {"jobs": [{"topic": "steady", "id": f"{job_id}-b"}]}),
                ):
                    status, answer, took = api(method, path, body)
                    answers.append((f"{method} {path}", status, took))
                    assert status == 503, (method, path, status, answer)
                    assert answer["error"] == "unavailable", answer
                    assert set(answer) == {"status", "error", "field", "message"}, answer
                    assert took < QUICK_S, (method, path, took)
                refused += [job_id, f"{job_id}-b"]
                probe += 1
                assert sweeper.alive, sweeper.tail()
                assert consumer.alive, consumer.tail()
                time.sleep(1.0)
            server.start()
            outage_s = time.monotonic() - stopped
            # The lock expired during the outage (Redis' clock ran on); the sweeper takes it again.
            assert wait_until(lambda: client.exists(lock), 5), "the sweeper did not take its lock again"

            enqueue("after", [0.0] * 10 + [0.5] * 10)
            assert wait_until(lambda: delivered() == len(jobs), 30), (delivered(), len(jobs))
            assert sweeper.alive
            assert consumer.alive
            summaries = fleet.stop_all()
            duration = time.monotonic() - began
            # What Redis restored from its AOF, and everything since: whole, and nothing left behind.
            assert unsettled(check_redis(client, "faults")) == {}

        for job_id in refused:  # a refused write wrote nothing
            with pytest.raises(JobNotFound):
                queue.get("steady", job_id)
        status, answer, _ = api("GET", "/health")
        assert (status, answer) == (200, {"status": "ok"})
        totals = check(
            "4 redis unreachable 10 s",
            jobs,
            read_records(deliveries),
            duration_s=duration,
            outage_s=round(outage_s, 1),
            api_503s=len(answers),
            api_503_max_s=round(max(took for *_, took in answers), 3),
            sweeper_redis_errors=summaries[sweeper.name]["redis_errors"],
            consumer_redis_errors=summaries[consumer.name]["redis_errors"],
        )
        report(f"[faults]   summaries: {summaries}")
        totals.assert_clean()
        assert summaries[sweeper.name]["redis_errors"] > 0, summaries
        assert summaries[consumer.name]["redis_errors"] > 0, summaries
        queue.close()


@pytest.mark.fault
@pytest.mark.timeout(90)
def test_redis_hung_for_10_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """4b, the other kind of outage: Redis hung (SIGSTOP, then SIGCONT), not gone.

    The kernel still accepts connections, so every command waits for the socket timeout (5 s) before
    the 503 (bounded, not quick), and every command sent meanwhile is executed when Redis resumes, its
    answer lost: a take whose reply the consumer never got leases jobs to nobody. The consumer undoes
    each such take at its next pass (untake), so those jobs are taken again at once, their attempt not
    counted, instead of waiting for their leases to expire as failed attempts: none lost, none twice,
    none early, no attempt burnt, and a job with ``retries: 0`` is delivered like the rest.
    """
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer() as server:
        topics = topics_json(two={"timeout": 2, "retries": 2, "backoff": [0.5]}, zero={"timeout": 2, "retries": 0})
        env = loop_env(server.url, "faults", topics, deliveries)
        api = HandlerApi(monkeypatch, env)
        queue = make_queue(env)
        client = server.client()
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            sweeper, consumer = fleet.sweeper(), fleet.consumer()
            assert wait_until(lambda: client.exists(queue.keys.partitions[0].lock), 15)
            began = time.monotonic()
            results = queue.enqueue_many(
                {"topic": topic, "id": f"{topic}-{i:02d}", "delay": 1 + i * 0.2}
                for topic in ("two", "zero")
                for i in range(20)
            )
            jobs = Enqueued.from_results(results)
            assert api("GET", "/health")[0] == 200  # a warm container: its connection is open
            time.sleep(0.5)
            os.kill(server.pid, signal.SIGSTOP)
            try:
                # One at a time: a Lambda container never runs two requests at once.
                answers = [api("POST", "/jobs", {"topic": "two", "id": "during-the-hang"}), api("GET", "/health")]
                time.sleep(max(0.0, HANG_S - (time.monotonic() - began - 0.5)))
                assert sweeper.alive
                assert consumer.alive
            finally:
                os.kill(server.pid, signal.SIGCONT)
            for status, answer, took in answers:
                assert status == 503, answer
                assert answer["error"] == "unavailable", answer
                assert took < SOCKET_TIMEOUT_S + 1.5, took
            # Sent on an open connection before the 503, run when Redis resumed: a 503 after a timeout
            # means "maybe written" (a client retrying with the same id gets 409, or 200 with PUT).
            written_anyway = bool(wait_until(lambda: _exists(queue, "during-the-hang"), 2))
            if written_anyway:
                jobs.append(Enqueued("two", "during-the-hang", queue.get("two", "during-the-hang").run_at_ms))

            def settled() -> bool:
                left = sum(
                    queue.stats(t).delayed + queue.stats(t).ready + queue.stats(t).reserved for t in ("two", "zero")
                )
                return left == 0

            assert wait_until(settled, 30), "jobs left in Redis"
            summaries = fleet.stop_all()
            duration = time.monotonic() - began
            left = check_redis(client, "faults")  # whole after the hang: only dead letters and receipts left
            assert {job.place for job in left.values()} <= {"dead", "done"}, left

        records = read_records(deliveries)
        first_attempts = {
            (r["topic"], r["id"]): r["attempt"]
            for r in sorted(records, key=lambda r: -r["attempt"])
            if r["ev"] == "start"
        }
        burnt = sum(1 for attempt in first_attempts.values() if attempt > 1)
        totals = check(
            "4b redis hung (SIGSTOP) ~10 s",
            jobs,
            records,
            duration_s=duration,
            api_503_s=[round(took, 1) for *_, took in answers],
            post_503_written_anyway=written_anyway,
            attempts_burnt_by_lost_take_replies=burnt,
            untaken=summaries["consume-2"]["untaken"],
        )
        report(f"[faults]   summaries: {summaries}")
        totals.assert_clean()
        assert burnt == 0, first_attempts
        assert queue.dead("zero", limit=100) == []
        assert queue.dead("two", limit=100) == []
        queue.close()


def _exists(queue: Queue, job_id: str) -> bool:
    try:
        queue.get("two", job_id)
    except JobNotFound:
        return False
    return True
