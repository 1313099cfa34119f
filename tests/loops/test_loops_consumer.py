"""The consume loop, run in-process against the real Redis: lifecycle, never early, exactly once,
retries on the backoff schedule, dead letters and replay, timeouts and late results, cancel,
reschedule, and the bounds on what one consumer takes."""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from delayq import Job, JobNotFound, Queue
from delayq.core.job import RESULT_MAX_BYTES
from delayq.core.loop import Budget
from delayq.core.observability import Telemetry
from delayq.loops import consumer as consumer_module
from delayq.loops import lanes as lanes_module
from delayq.loops import workers as workers_module
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper
from delayq.store import calls as calls_module
from delayq.store.keys import partition_of
from delayq.store.scripts import run_many

from support import loop_targets, recorder
from support.answers import created
from support.loops import Running, running, state, wait_until
from support.recorder import RECORDER

GATE = "python:support.loop_targets:gate"
MakeQueue = Callable[..., Queue]


def test_lifecycle_delayed_ready_reserved_gone(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"life": {"target": GATE}}, tick=0.1)
    scheduled = queue.enqueue("life", {"n": 1}, id="job-1", delay=0.4)
    before = queue.get("life", "job-1")
    assert before.state == "delayed"
    assert before.attempts == 0

    with running(Sweeper(queue)) as sweeper:
        assert wait_until(lambda: state(queue, "life", "job-1") == "ready")
        assert time.time() * 1000 >= scheduled.run_at_ms
    assert sweeper.summary is not None
    assert sweeper.summary["moved"] == 1
    assert sweeper.summary["locks_taken"] == 1

    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "life", "job-1") == "reserved")
        reserved = queue.get("life", "job-1")
        assert reserved.attempts == 1
        assert queue.stats("life").reserved == 1
        loop_targets.release("job-1")
        assert wait_until(lambda: state(queue, "life", "job-1") == "done")
    summary = consumer.summary
    assert summary is not None
    assert {k: summary[k] for k in ("taken", "succeeded", "acked", "failed", "timed_out", "retried", "dead")} == {
        "taken": 1,
        "succeeded": 1,
        "acked": 1,
        "failed": 0,
        "timed_out": 0,
        "retried": 0,
        "dead": 0,
    }
    assert summary["late_results"] == 0
    assert summary["redis_errors"] == 0
    assert summary["passes"] >= 1

    calls = loop_targets.of("job-1")
    assert len(calls) == 1
    job = calls[0].job
    assert isinstance(job, Job)
    assert job == Job(
        topic="life",
        id="job-1",
        body={"n": 1},
        attempt=1,
        run_at_ms=scheduled.run_at_ms,
        enqueued_at_ms=before.enqueued_at_ms,
    )
    assert job.enqueued_at_ms <= job.run_at_ms
    assert calls[0].started_ms >= job.run_at_ms
    stats = queue.stats("life")
    assert (stats.delayed, stats.ready, stats.reserved, stats.dead) == (0, 0, 0, 0)


@pytest.mark.parametrize("mode", ["sweeper_and_consumer", "consumer_only", "sweeper_first"])
def test_never_early_and_exactly_once(make_queue: MakeQueue, mode: str) -> None:
    queue = make_queue(topics={"early": {"target": RECORDER}}, tick=0.1)
    rng = random.Random(20261122)
    jobs = [
        {"topic": "early", "id": f"e{i}", "body": {"i": i}, "delay": round(rng.uniform(0.2, 1.5), 3)}
        for i in range(200)
    ]
    results = queue.enqueue_many(jobs)
    assert [r.status for r in results] == [201] * 200
    run_at = {created(r).id: created(r).run_at_ms for r in results}

    def all_delivered() -> bool:
        return len(recorder.of("early")) >= 200

    sweep_summary = None
    if mode == "sweeper_first":
        with running(Sweeper(queue)) as sweeper:
            assert wait_until(lambda: queue.stats("early").ready == 200, timeout=6)
        sweep_summary = sweeper.summary
        assert recorder.of("early") == []
        assert queue.stats("early").delayed == 0
    if mode == "sweeper_and_consumer":
        with running(Sweeper(queue)) as sweeper, running(Consumer(queue)) as consumer:
            assert wait_until(all_delivered, timeout=6)
            time.sleep(0.3)  # room for a duplicate to show up
        sweep_summary = sweeper.summary
    else:
        with running(Consumer(queue)) as consumer:
            assert wait_until(all_delivered, timeout=6)
            time.sleep(0.3)

    deliveries = recorder.of("early")
    counts = Counter(d.id for d in deliveries)
    assert set(counts) == set(run_at)
    assert [job_id for job_id, n in counts.items() if n != 1] == []
    early = [(d.id, d.started_ms - d.run_at_ms) for d in deliveries if d.started_ms < d.run_at_ms]
    assert early == []
    assert all(d.run_at_ms == run_at[d.id] and d.attempt == 1 and d.ok for d in deliveries)
    summary = consumer.summary
    assert summary is not None
    assert summary["taken"] == 200
    assert summary["acked"] == 200
    stats = queue.stats("early")
    assert (stats.delayed, stats.ready, stats.reserved, stats.dead) == (0, 0, 0, 0)
    if mode == "sweeper_first":
        assert sweep_summary is not None
        assert sweep_summary["moved"] == 200


def test_retry_follows_the_backoff_schedule(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"retry": {"target": RECORDER, "retries": 2, "backoff": [0.3, 0.6]}}, tick=0.1)
    queue.enqueue("retry", {"fail_until": 2}, id="r1", delay=0)

    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "retry", "r1") == "done", timeout=5)
    deliveries = recorder.of("retry", "r1")
    assert [d.attempt for d in deliveries] == [1, 2, 3]
    assert [d.ok for d in deliveries] == [False, False, True]
    for previous, current, backoff_ms in zip(deliveries, deliveries[1:], (300, 600), strict=False):
        # run-at of the retry is Redis time at the failure (after the attempt started) + the backoff
        assert current.run_at_ms - math.floor(previous.started_ms) >= backoff_ms
        assert current.started_ms >= current.run_at_ms
        assert current.started_ms - previous.started_ms >= backoff_ms - 1  # 1 ms: Redis floors its clock
    summary = consumer.summary
    assert summary is not None
    assert (summary["taken"], summary["failed"], summary["retried"]) == (3, 2, 2)
    assert (summary["succeeded"], summary["acked"], summary["dead"]) == (1, 1, 0)


def test_retries_spent_dead_letter_then_replay(make_queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    queue = make_queue(
        topics={"dl": {"target": "python:support.loop_targets:switch", "retries": 2, "backoff": [0.1]}}, tick=0.1
    )
    loop_targets.failing = True
    queue.enqueue("dl", {"keep": "me"}, id="d1", delay=0)

    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "dl", "d1") == "dead", timeout=5)
    summary = consumer.summary
    assert summary is not None
    assert (summary["failed"], summary["retried"], summary["dead"], summary["acked"]) == (3, 2, 1, 0)
    assert [c.job.attempt for c in loop_targets.of("d1")] == [1, 2, 3]
    dead_lines = [r for r in caplog.records if r.levelname == "ERROR" and " is dead" in r.getMessage()]
    assert [r.getMessage() for r in dead_lines] == ["dl/d1 is dead: RuntimeError: switched off at attempt 3"]

    info = queue.get("dl", "d1")
    assert info.state == "dead"
    assert info.attempts == 3
    assert info.body == {"keep": "me"}
    assert info.last_error is not None
    assert "switched off at attempt 3" in info.last_error
    # Each attempt in the job's history, its start within a moment of the handler's (one host's clock)
    assert [(a.attempt, a.outcome) for a in info.history] == [(1, "error"), (2, "error"), (3, "error")]
    for attempt, call in zip(info.history, loop_targets.of("d1"), strict=True):
        assert attempt.error == f"RuntimeError: switched off at attempt {attempt.attempt}"
        assert attempt.started_at_ms is not None
        assert attempt.ended_at_ms is not None
        assert abs(attempt.started_at_ms - call.started_ms) < 1000
        assert attempt.started_at_ms <= attempt.ended_at_ms
    assert info.dead_at_ms is not None
    assert info.dead_at_ms >= info.history[-1].started_at_ms
    dead = queue.dead("dl")
    assert [job.id for job in dead] == ["d1"]
    assert "switched off at attempt 3" in dead[0].last_error
    assert dead[0].body == {"keep": "me"}
    assert dead[0].attempts == 3
    stats = queue.stats("dl")
    assert (stats.dead, stats.delayed, stats.ready, stats.reserved) == (1, 0, 0, 0)

    loop_targets.failing = False
    assert queue.replay("dl", ["d1"]) == 1
    replayed = queue.get("dl", "d1")
    assert replayed.state == "ready"
    assert replayed.attempts == 0
    with running(Consumer(queue)) as again:
        assert wait_until(lambda: state(queue, "dl", "d1") == "done", timeout=5)
    calls = loop_targets.of("d1")
    assert [c.job.attempt for c in calls] == [1, 2, 3, 1]
    assert calls[-1].job.body == {"keep": "me"}
    assert queue.dead("dl") == []
    assert again.summary is not None
    assert again.summary["acked"] == 1
    done = queue.get("dl", "d1")  # the receipt keeps the history of both lives
    assert [(a.attempt, a.outcome) for a in done.history] == [(1, "error"), (2, "error"), (3, "error"), (1, "ok")]
    assert (done.last_error, done.dead_at_ms) == (None, None)


def test_a_success_keeps_what_its_handler_returned(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"ans": {"target": "python:support.loop_targets:answers"}}, tick=0.1)
    queue.enqueue("ans", {"answer": {"charged": 12, "currency": "EUR"}}, id="dict", delay=0)
    queue.enqueue("ans", {"answer": None}, id="none", delay=0)
    queue.enqueue("ans", {"answer_mb": 10}, id="big", delay=0)
    with running(Consumer(queue)):
        assert wait_until(lambda: all(state(queue, "ans", i) == "done" for i in ("dict", "none", "big")), timeout=5)
    got = {i: queue.get("ans", i) for i in ("dict", "none", "big")}
    assert (got["dict"].result, got["dict"].result_truncated) == ({"charged": 12, "currency": "EUR"}, False)
    assert (got["none"].result, got["none"].result_truncated) == (None, False)
    assert got["big"].result_truncated
    assert got["big"].result == "r" * RESULT_MAX_BYTES  # 10 MB answered, 64 KiB kept
    bodies = queue.keys.for_job("ans", "big").bodies
    assert queue.redis.hstrlen(bodies, "ans/big") == 1 + RESULT_MAX_BYTES
    assert not queue.redis.hexists(bodies, "ans/none")
    listed = {job.id: job.result for job in queue.jobs("ans", state="done").jobs}
    assert listed == {"dict": {"charged": 12, "currency": "EUR"}, "none": None, "big": "r" * RESULT_MAX_BYTES}


def test_timeout_is_a_failed_attempt_and_the_late_result_is_dropped(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"slow": {"target": RECORDER, "timeout": 1, "retries": 0}}, tick=0.1)
    queue.enqueue("slow", {"sleep": 2.5}, id="s1", delay=0)

    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "slow", "s1") == "dead", timeout=4)
        # the handler is still sleeping: its success, when it comes, must change nothing
        assert wait_until(lambda: consumer.counts["late_results"] == 1, timeout=4)
    summary = consumer.summary
    assert summary is not None
    assert summary["timed_out"] == 1
    assert summary["dead"] == 1
    assert summary["late_results"] == 1
    assert (summary["succeeded"], summary["acked"], summary["failed"]) == (0, 0, 0)
    info = queue.get("slow", "s1")
    assert info.state == "dead"
    assert info.last_error == "timed out after 1s"
    (attempt,) = info.history
    assert (attempt.attempt, attempt.outcome) == (1, "timeout")
    assert attempt.started_at_ms is not None
    assert attempt.ended_at_ms is not None
    assert attempt.ended_at_ms - attempt.started_at_ms >= 900  # its timeout, give or take Redis' clock
    assert [job.last_error for job in queue.dead("slow")] == ["timed out after 1s"]
    assert len(recorder.of("slow", "s1")) == 1


def test_late_result_does_not_disturb_the_next_lease(make_queue: MakeQueue) -> None:
    queue = make_queue(
        topics={
            "slow": {"target": "python:support.loop_targets:first_sleeps", "timeout": 1, "retries": 1, "backoff": [0]}
        },
        tick=0.1,
    )
    loop_targets.queue = queue
    queue.enqueue("slow", {"sleep": 1.5}, id="t1", delay=0)

    with running(Consumer(queue)) as consumer:
        assert wait_until(
            lambda: state(queue, "slow", "t1") == "done" and consumer.counts["late_results"] == 1, timeout=5
        )
    first, second = loop_targets.of("t1")
    assert (first.job.attempt, second.job.attempt) == (1, 2)
    # the second attempt was leased while the first thread was still sleeping ...
    assert second.extra["first_was_running"] is True
    assert first.ended_ms is not None
    assert second.started_ms < first.ended_ms
    # ... and its lease was intact after the first thread's late result came in
    assert second.seen is not None
    assert second.seen.state == "reserved"
    assert second.seen.attempts == 2
    assert second.seen.last_error == "timed out after 1s"
    assert second.ended_ms is not None
    assert second.ended_ms > first.ended_ms

    summary = consumer.summary
    assert summary is not None
    assert (summary["taken"], summary["timed_out"], summary["retried"]) == (2, 1, 1)
    assert (summary["succeeded"], summary["acked"], summary["late_results"]) == (1, 1, 1)
    assert (summary["failed"], summary["dead"]) == (0, 0)
    assert queue.dead("slow") == []
    assert queue.get("slow", "t1").attempts == 2  # done by its second attempt


def test_cancelled_delayed_job_is_never_delivered(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"c": {"target": RECORDER}}, tick=0.1)
    queue.enqueue("c", {}, id="cancelled", delay=0.3)
    queue.enqueue("c", {}, id="kept", delay=0.4)
    queue.cancel("c", "cancelled")
    with pytest.raises(JobNotFound):
        queue.get("c", "cancelled")
    with pytest.raises(JobNotFound):
        queue.cancel("c", "cancelled")

    with running(Sweeper(queue)), running(Consumer(queue)) as consumer:
        assert wait_until(lambda: recorder.of("c", "kept"), timeout=5)
        time.sleep(0.3)
    assert recorder.of("c", "cancelled") == []
    assert consumer.summary is not None
    assert consumer.summary["taken"] == 1


def test_cancelled_reserved_job_is_not_retried_and_the_late_ack_changes_nothing(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"g": {"target": GATE, "retries": 2, "backoff": [0]}}, tick=0.1)
    queue.enqueue("g", {"v": 1}, id="g1", delay=0)

    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "g", "g1") == "reserved")
        queue.cancel("g", "g1")
        assert state(queue, "g", "g1") is None
        assert queue.stats("g").reserved == 0
        # a new job under the same id: the old attempt's ack must not touch it
        fresh = queue.enqueue("g", {"v": 2}, id="g1", delay=60)
        loop_targets.release("g1")
        assert wait_until(lambda: consumer.counts["succeeded"] == 1)
        passes = consumer.counts["passes"]
        assert wait_until(lambda: consumer.counts["passes"] >= passes + 2)  # the ack went out
    summary = consumer.summary
    assert summary is not None
    assert (summary["taken"], summary["succeeded"]) == (1, 1)
    assert (summary["acked"], summary["retried"], summary["dead"], summary["failed"]) == (0, 0, 0, 0)
    info = queue.get("g", "g1")
    assert info.state == "delayed"
    assert info.attempts == 0
    assert info.body == {"v": 2}
    assert info.run_at_ms == fresh.run_at_ms
    assert info.last_error is None
    assert queue.dead("g") == []
    assert len(loop_targets.of("g1")) == 1
    # nothing left to take back either
    sweep = Sweeper(queue).run(Budget.of(0))
    assert (sweep["retried"], sweep["dead"]) == (0, 0)


def test_reschedule_delayed_job_later_is_not_delivered_before_the_new_time(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"rs": {"target": RECORDER}}, tick=0.1)
    old = queue.enqueue("rs", {}, id="later", delay=0.2)
    new = queue.reschedule("rs", "later", delay=1.0)
    assert new.run_at_ms > old.run_at_ms + 500
    assert queue.get("rs", "later").run_at_ms == new.run_at_ms

    with running(Sweeper(queue)), running(Consumer(queue)):
        assert wait_until(lambda: recorder.of("rs", "later"), timeout=5)
        time.sleep(0.2)
    (delivery,) = recorder.of("rs", "later")
    assert delivery.run_at_ms == new.run_at_ms
    assert delivery.started_ms >= new.run_at_ms


def test_reschedule_ready_job_to_the_future_goes_back_to_delayed(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"rs": {"target": RECORDER}}, tick=0.1)
    queue.enqueue("rs", {}, id="back", delay=0)
    assert state(queue, "rs", "back") == "ready"
    moved = queue.reschedule("rs", "back", delay=30)
    assert state(queue, "rs", "back") == "delayed"
    stats = queue.stats("rs")
    assert (stats.ready, stats.delayed) == (0, 1)
    assert stats.next_run_at_ms == moved.run_at_ms

    summary = Consumer(queue).run(Budget.of(0.3))
    assert summary["taken"] == 0
    assert recorder.of("rs") == []
    assert state(queue, "rs", "back") == "delayed"

    queue.reschedule("rs", "back", delay=0)
    assert state(queue, "rs", "back") == "ready"
    summary = Consumer(queue).run(Budget.of(0))
    assert (summary["taken"], summary["acked"]) == (1, 1)
    assert len(recorder.of("rs", "back")) == 1


def test_concurrency_bounds_handlers_and_takes(make_queue: MakeQueue) -> None:
    queue = make_queue(
        topics={"busy": {"target": "python:support.loop_targets:counted", "concurrency": 2, "batch": 100}}, tick=0.1
    )
    for i in range(10):
        queue.enqueue("busy", {"sleep": 0.25}, id=f"b{i}", delay=0)

    reserved_seen: list[int] = []

    def done() -> bool:
        stats = queue.stats("busy")
        reserved_seen.append(stats.reserved)
        return len(loop_targets.of()) == 10 and stats.reserved == stats.ready == 0

    with running(Consumer(queue)) as consumer:
        assert wait_until(done, timeout=6)
        workers = [thread for thread in threading.enumerate() if thread.name.startswith("delayq-worker_")]
        assert len(workers) == 2  # threads started as needed, never more than the topic's concurrency
    assert loop_targets.max_active == 2
    assert wait_until(lambda: not any(t.name.startswith("delayq-worker_") for t in threading.enumerate()))
    assert max(reserved_seen) <= 2  # never leased more jobs than it had free workers
    assert sorted(c.job.id for c in loop_targets.of()) == sorted(f"b{i}" for i in range(10))
    summary = consumer.summary
    assert summary is not None
    assert (summary["taken"], summary["acked"]) == (10, 10)


def test_handlers_that_wait_each_get_a_worker_at_once(make_queue: MakeQueue) -> None:
    """A batch wakes one thread; when the deliveries wait behind handlers that take their time, each
    gets a thread of its own a moment later: the whole batch is in flight while the first is still
    waiting. The handlers wait at a gate until the test opens it, so "in flight at once" does not
    depend on how fast the machine is."""
    queue = make_queue(topics={"io": {"target": "python:support.loop_targets:gate", "concurrency": 20}}, tick=0.1)
    ids = [f"w{i}" for i in range(20)]
    queue.enqueue_many([{"topic": "io", "id": job_id, "body": {}} for job_id in ids])

    with running(Consumer(queue)):
        assert wait_until(lambda: len(loop_targets.of()) == 20, timeout=loop_targets.GATE_LIMIT_S - 1)
        assert all(call.ended_ms is None for call in loop_targets.of())  # all 20 wait at the gate at once
        workers = [thread for thread in threading.enumerate() if thread.name.startswith("delayq-worker_")]
        assert len(workers) == 20
        for job_id in ids:
            loop_targets.release(job_id)
        assert wait_until(lambda: queue.stats("io").reserved == 0, timeout=5)
    assert sorted(call.job.id for call in loop_targets.of()) == sorted(ids)


def test_quick_handlers_are_run_in_turn_by_the_threads_awake(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Handlers that return at once are not each handed to a thread of their own: a context switch per
    job would cost more than the job. A batch wakes one thread, which runs its deliveries one after
    another; more threads come only from ``spread``, when deliveries have waited ``SPREAD_S`` with none
    taken up. A loaded machine's scheduler can leave the thread awake off the CPU that long at any
    moment (and then ``spread`` rightly adds threads), so here ``spread`` waits an hour: what is
    counted depends on the consumer, not on the machine."""
    monkeypatch.setattr(workers_module, "SPREAD_S", 3600.0)
    batches: list[tuple[int, int]] = []  # per batch handed to the workers: its deliveries, the threads it started
    submit = workers_module.Workers.submit

    def counted_submit(workers: Any, deliveries: list[Any], *, threads: int = 1) -> None:
        before = len(workers._threads)
        submit(workers, deliveries, threads=threads)
        batches.append((len(deliveries), len(workers._threads) - before))

    monkeypatch.setattr(workers_module.Workers, "submit", counted_submit)
    queue = make_queue(topics={"quick": {"target": "python:support.loop_targets:counted", "concurrency": 50}}, tick=0.1)
    queue.enqueue_many([{"topic": "quick", "id": f"q{i}", "body": {}} for i in range(500)])

    with running(Consumer(queue)):
        assert wait_until(lambda: len(loop_targets.of()) == 500, timeout=30)
        workers = [thread for thread in threading.enumerate() if thread.name.startswith("delayq-worker_")]
    assert sum(size for size, _ in batches) == 500
    assert max(size for size, _ in batches) == 50  # the first batch fills the 50 free workers ...
    assert [started for _, started in batches if started > 1] == []  # ... and each batch woke one thread at most
    assert 1 <= len(workers) <= len(batches)


def test_jobs_taken_ahead_go_first_each_with_a_thread_of_its_own(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job taken ahead holds the thread that takes it until its run-at: such jobs go first in their
    batch, a thread woken for each at once, and the due ones after them on one thread more, not run
    in turn behind them (nor waiting for ``spread``)."""
    monkeypatch.setattr(lanes_module, "TAKE_AHEAD_MS", 5000)  # a second's margin on a loaded machine
    batches: list[tuple[list[str], list[bool], int]] = []  # per batch: its ids, which are not due, threads woken
    submit = workers_module.Workers.submit

    def recorded(workers: Any, deliveries: list[Any], *, threads: int = 1) -> None:
        now = time.monotonic()
        batches.append(([d.job.id for d in deliveries], [d.start_at > now for d in deliveries], threads))
        submit(workers, deliveries, threads=threads)

    monkeypatch.setattr(workers_module.Workers, "submit", recorded)
    queue = make_queue(topics={"t": {"target": "python:support.loop_targets:counted", "concurrency": 8}}, tick=0.1)
    jobs = [("due", 0.0), ("later1", 1.0), ("later2", 1.5)]
    queue.enqueue_many([{"topic": "t", "id": job_id, "delay": delay} for job_id, delay in jobs])
    with running(Consumer(queue)):
        assert wait_until(lambda: len(loop_targets.of()) == 3, timeout=10)
    assert batches == [(["later1", "later2", "due"], [True, True, False], 3)]


def test_free_workers_are_shared_among_partitions(make_queue: MakeQueue) -> None:
    """With a backlog in every partition, no partition waits until another is drained: the
    first deliveries come from all of them."""
    partitions = 4
    queue = make_queue(
        topics={"fair": {"target": "python:support.loop_targets:counted", "concurrency": 2, "batch": 100}},
        partitions=partitions,
        tick=0.1,
    )
    by_partition: dict[int, list[str]] = {p: [] for p in range(partitions)}
    for job_id in (f"j{n}" for n in range(400)):
        by_partition[partition_of("fair", job_id, partitions)].append(job_id)
    chosen = [job_id for p in range(partitions) for job_id in by_partition[p][:6]]
    queue.enqueue_many([{"topic": "fair", "id": job_id, "body": {"sleep": 0.02}} for job_id in chosen])

    with running(Consumer(queue)):
        assert wait_until(lambda: len(loop_targets.of()) == len(chosen), timeout=10)
    first = [partition_of("fair", c.job.id, partitions) for c in loop_targets.of()[: 2 * partitions]]
    assert set(first) == set(range(partitions)), first


def test_takes_nothing_it_could_not_finish_before_the_deadline(make_queue: MakeQueue) -> None:
    queue = make_queue(
        topics={"long": {"target": RECORDER, "timeout": 30}, "short": {"target": RECORDER, "timeout": 1}},
        tick=0.1,
    )
    queue.enqueue("long", {}, id="l1", delay=0)
    queue.enqueue("short", {}, id="s1", delay=0)

    budget = Budget.of(0.5, remaining_s=7)  # finish_by is 5 s away: 30 s does not fit, 1 s does
    summary = Consumer(queue).run(budget)
    assert summary["taken"] == 1
    assert summary["acked"] == 1
    assert recorder.of("long") == []
    assert state(queue, "long", "l1") == "ready"
    assert [d.id for d in recorder.of("short")] == ["s1"]
    assert state(queue, "short", "s1") == "done"


def test_job_timeout_override_counts_for_the_deadline(make_queue: MakeQueue) -> None:
    """A job's own ``timeout`` (create option) overrides its topic's; a job that may run 30 s must not
    be taken 5 s before the deadline just because its topic's timeout is 1 s. It is left for a run
    with more time: this one, 40 s long, could have taken it at its start."""
    queue = make_queue(topics={"short": {"target": RECORDER, "timeout": 1}}, tick=0.1)
    queue.enqueue("short", {}, id="own-timeout", delay=0, timeout=30)

    late_in_a_run = Budget.of(0, remaining_s=40, now=time.monotonic() - 33)  # 7 s left
    summary = Consumer(queue).run(late_in_a_run)
    assert (summary["taken"], summary["dead"]) == (0, 0)
    assert state(queue, "short", "own-timeout") == "ready"


def test_permanent_failure_goes_dead_at_once_whatever_its_retries(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"doomed": {"target": "python:support.loop_targets:permanent", "retries": 5}}, tick=0.1)
    queue.enqueue("doomed", {"n": 1}, id="p1")
    queue.enqueue("doomed", {"n": 2}, id="p2", retries=25)
    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: queue.stats("doomed").dead == 2)
    assert [c.job.attempt for c in loop_targets.of("p1")] == [1]
    assert [c.job.attempt for c in loop_targets.of("p2")] == [1]
    dead = {job.id: job for job in queue.dead("doomed")}
    assert dead["p1"].last_error == "PermanentFailure: job p1 can never succeed"
    assert dead["p2"].attempts == 1
    assert consumer.summary is not None
    assert consumer.summary["dead"] == 2
    assert consumer.summary["retried"] == 0


# ------------------------------------------------------------------- timeouts no run can last


def test_a_job_whose_timeout_no_run_can_last_goes_dead_at_once(make_queue: MakeQueue) -> None:
    """With a deadline (a Lambda run of 60 s: 58 s to finish work in), a job's own timeout of 900 s
    can never fit: it goes to the dead letters, saying why, instead of being put back every pass."""
    queue = make_queue(topics={"t": {"target": RECORDER, "timeout": 10, "retries": 5}}, tick=0.1)
    queue.enqueue("t", {}, id="too-long", delay=0, timeout=900)
    queue.enqueue("t", {}, id="just-fits", delay=0, timeout=57)
    queue.enqueue("t", {}, id="topic-timeout", delay=0)

    summary = Consumer(queue).run(Budget.of(0, remaining_s=60))
    assert (summary["taken"], summary["acked"], summary["dead"]) == (2, 2, 1)
    assert sorted(d.id for d in recorder.of("t")) == ["just-fits", "topic-timeout"]
    (dead,) = queue.dead("t")
    assert dead.id == "too-long"
    assert dead.attempts == 0  # never handed to a handler
    assert dead.last_error == (
        "timeout 900s is longer than a consume run can last (58s): enqueue it again with a shorter timeout,"
        " or raise the consume function's timeout"
    )
    stats = queue.stats("t")
    assert (stats.ready, stats.reserved, stats.dead) == (0, 0, 1)

    # A consumer without a deadline (CLI, local stack) takes any job: replayed, it is delivered.
    assert queue.replay("t") == 1
    summary = Consumer(queue).run(Budget.of(0))
    assert (summary["taken"], summary["acked"], summary["dead"]) == (1, 1, 0)
    assert [d.id for d in recorder.of("t", "too-long")] == ["too-long"]


def test_jobs_dead_for_their_timeout_do_not_hold_up_the_batch(make_queue: MakeQueue) -> None:
    """A take whose batch was full of jobs sent to the dead letters looks again at once: within the
    run, which ends before the next tick would have come (however slow the machine is)."""
    queue = make_queue(topics={"t": {"target": RECORDER, "timeout": 1, "batch": 2}}, tick=5)
    queue.enqueue_many([{"topic": "t", "id": f"long-{i}", "delay": 0, "timeout": 900} for i in range(4)])
    queue.enqueue("t", {}, id="short", delay=0)
    consumer = Running(Consumer(queue))
    consumer.budget = Budget.of(3, remaining_s=60)  # a deadline; the tick (5 s) outlasts the run
    consumer.start()
    try:
        consumer.thread.join(30)  # the run ends by itself, at its budget
        assert not consumer.thread.is_alive()
    finally:
        consumer.stop()
    assert state(queue, "t", "short") == "done"
    assert consumer.summary is not None
    assert (consumer.summary["dead"], consumer.summary["acked"]) == (4, 1)
    assert queue.stats("t").dead == 4


@pytest.mark.parametrize("named", [True, False])
def test_a_topic_whose_timeout_no_run_can_last_is_reported_at_start(
    make_queue: MakeQueue, caplog: pytest.LogCaptureFixture, named: bool
) -> None:
    topics = {"quick": {"target": RECORDER, "timeout": 1}}
    topics["slow" if named else "*"] = {"target": RECORDER, "timeout": 120}
    queue = make_queue(topics=topics, tick=0.1)
    queue.enqueue("slow", {}, id="s1", delay=0)

    with caplog.at_level("ERROR", logger="delayq.consume"):
        summary = Consumer(queue).run(Budget.of(0.3, remaining_s=60))
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [
        "topic slow: timeout 120s is longer than a consume run can last (58s): its jobs are never taken;"
        " lower the topic's timeout or raise the consume function's timeout"
    ]
    assert summary["taken"] == 0
    assert state(queue, "slow", "s1") == "ready"  # a config to fix, not jobs to kill

    caplog.clear()
    with caplog.at_level("ERROR", logger="delayq.consume"):
        summary = Consumer(queue).run(Budget.of(0.3))  # no deadline: any timeout fits
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []
    assert summary["taken"] == 1


def test_a_take_with_no_time_left_takes_nothing(make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its deadline, the time a consumer has left is 0, never negative (which take.lua would read
    as "no limit")."""
    queue = make_queue(topics={"t": {"target": RECORDER, "timeout": 1}}, tick=0.1)
    queue.enqueue("t", {}, id="j1", delay=0)
    consumer = Consumer(queue)
    now = time.monotonic()
    past_deadline = Budget(started=now - 60, stop_at=now - 8, finish_by=now - 3)
    monkeypatch.setattr(Consumer, "_can_take", staticmethod(lambda lane, budget, now: True))

    consumer._read_index(now)  # the topic index names t: its lane takes
    (sent,) = consumer._take_calls(past_deadline, now)
    assert sent.call.args[0] == 0  # the longest timeout the consumer can still finish
    (reply,) = run_many(queue.redis, [sent.call])
    consumer._on_takes(sent, reply, now)
    assert consumer.counts["taken"] == 0
    assert state(queue, "t", "j1") == "ready"


# ---------------------------------------------------------------------------- worker bookkeeping


class _BrokenLateness(Telemetry):
    def lateness(self, topic: str, ms: float) -> None:
        raise RuntimeError("telemetry is broken")


def test_a_failing_telemetry_never_costs_a_worker(make_queue: MakeQueue, caplog: pytest.LogCaptureFixture) -> None:
    """With one worker, a slot lost once would stop the topic for good: every job must still be
    delivered and acknowledged, and the worker counted free after each."""
    queue = make_queue(topics={"t": {"target": RECORDER, "concurrency": 1}}, tick=0.1)
    queue.telemetry = _BrokenLateness(enabled=True)
    queue.enqueue_many([{"topic": "t", "id": f"j{i}", "delay": 0} for i in range(3)])
    consumer = Consumer(queue)
    with caplog.at_level("ERROR", logger="delayq.consume"), running(consumer):
        assert wait_until(lambda: queue.stats("t").ready + queue.stats("t").reserved == 0, timeout=5)
    assert sorted(d.id for d in recorder.of("t")) == ["j0", "j1", "j2"]
    assert consumer.counts["acked"] == 3
    assert consumer.lanes.topics["t"].running == 0
    assert "telemetry is broken" in caplog.text


def test_a_failure_whose_message_cannot_be_read_is_still_a_failure(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"t": {"target": "python:support.loop_targets:unreadable", "retries": 0}}, tick=0.1)
    queue.enqueue("t", {}, id="u1", delay=0)
    consumer = Consumer(queue)
    summary = consumer.run(Budget.of(0))
    assert (summary["failed"], summary["dead"], summary["acked"]) == (1, 1, 0)
    assert consumer.lanes.topics["t"].running == 0
    (dead,) = queue.dead("t")
    assert dead.last_error == "UnreadableError (its message could not be read)"


def test_topics_that_hold_nothing_cost_no_thread_and_are_forgotten(make_queue: MakeQueue) -> None:
    """With ``*``, a consumer takes from the topics the topic index names: 60 one-job topics run on the
    ``*`` entry's threads, shared, and once their jobs are done it keeps no lane and no topic of them."""
    queue = make_queue(topics={"*": {"target": RECORDER, "concurrency": 4}}, tick=0.1, partitions=2)
    for n in range(60):
        queue.enqueue(f"one{n}", {}, id="j", delay=0.05 if n % 2 else 0)
    consumer = Consumer(queue)
    with running(consumer):
        assert wait_until(lambda: len(recorder.of()) == 60, timeout=20)
        assert wait_until(lambda: not consumer.lanes.lanes and not consumer.lanes.topics, timeout=5)
        workers = [thread for thread in threading.enumerate() if thread.name.startswith("delayq-worker_")]
        assert 1 <= len(workers) <= 4
    assert sorted(d.topic for d in recorder.of()) == sorted(f"one{n}" for n in range(60))


def _most_until(
    consumer: Consumer, measure: Callable[[], int], done: Callable[[], bool], *, timeout: float, interval: float
) -> int:
    """Runs ``consumer`` until ``done()``: the most ``measure()`` gave meanwhile, read under its lock."""
    most = 0

    def finished() -> bool:
        nonlocal most
        with consumer._lock:
            most = max(most, measure())
        return done()

    with running(consumer, budget_s=timeout + 20):
        assert wait_until(finished, timeout=timeout, interval=interval)
    return most


def test_a_burst_over_many_topics_keeps_few_lanes_and_drains(make_queue: MakeQueue) -> None:
    """1,500 topics with a job due at once, under ``*``: the consumer makes lanes for the first the
    topic index names (``PLAN_TOPICS`` a read, and what its looks find), reads on as they are served,
    and a pass's work stays that of a few hundred lanes, not of every topic with work."""
    queue = make_queue(topics={"*": {"target": RECORDER}}, tick=0.1)
    topics = 1500
    queue.enqueue_many([{"topic": f"b{n}", "id": "j", "delay": 0} for n in range(topics)])
    consumer = Consumer(queue)
    most = _most_until(
        consumer, lambda: len(consumer.lanes.lanes), lambda: len(recorder.of()) == topics, timeout=100, interval=0.005
    )
    assert sorted(d.topic for d in recorder.of()) == sorted(f"b{n}" for n in range(topics))
    # At most two reads' worth (the lanes of the last one still settling as the next comes) and what
    # the looks found; before, every topic with work had a lane.
    assert most <= 2 * (consumer_module.PLAN_TOPICS + consumer_module.POLL_TOPICS) < topics, most


def test_more_topics_due_than_free_workers_take_in_the_order_they_fell_due(make_queue: MakeQueue) -> None:
    """A pass with more due topics than a share has free workers takes for those due first; the others
    wait, and so do the share's topics a look finds. A topic with workers of its own takes all the same."""
    queue = make_queue(topics={"*": {"target": RECORDER, "concurrency": 2}, "own": {"target": RECORDER}}, tick=0.1)
    consumer = Consumer(queue)
    now = time.monotonic()
    partition = queue.keys.partitions[0]
    for name, late_s in (("t0", 0.3), ("t1", 0.1), ("t2", 0.5), ("t3", 0.2), ("own", 0.01)):  # due that long ago
        topic = consumer.lanes.topic(name)
        assert topic is not None
        consumer.lanes.lane(topic, partition).next_check = now - late_s
    (sent,) = consumer._take_calls(Budget.forever(), now)  # one partition: one call for every lane
    takes = sent.takes
    assert sorted(take.lane.topic.name for take in takes) == ["own", "t0", "t2"]
    assert [take.count for take in takes if take.lane.topic.name != "own"] == [1, 1]
    assert consumer._backlogged == {id(consumer.lanes.topics["t0"].share)}
    # A look finds t4 (under *) and own ready: own's lane takes, t4 waits for a read.
    consumer.lanes.lanes[("own", 0)].next_check = float("inf")  # as once own's take found nothing more
    consumer.server_clock.saw(0, now)
    consumer._on_look(partition, ["t4", "own"], {}, now)
    assert ("t4", 0) not in consumer.lanes.lanes
    assert consumer.lanes.lanes[("own", 0)].next_check == now


def test_a_partitions_take_brings_the_lanes_due_within_its_window_and_the_acks_of_others(
    make_queue: MakeQueue,
) -> None:
    """Jobs alone in their topics: a take due now is one call for its partition, bringing the lanes
    due within the take ahead but not those due later, and the acks of a lane with nothing to take
    ride in it, done as an ack call would do them."""
    queue = make_queue(topics={"*": {"target": RECORDER}}, tick=0.1)
    queue.enqueue_many([{"topic": name, "id": "j", "delay": 0} for name in ("now", "soon", "later", "done")])
    partition = queue.keys.partitions[0]
    leased = calls_module.take(partition, "done", count=1, timeout_ms=30_000, grace_ms=0).run(queue.redis)
    consumer = Consumer(queue)
    now = time.monotonic()
    lanes = {}
    for name, in_s in (("now", -0.001), ("soon", 0.02), ("later", 0.2), ("done", math.inf)):
        topic = consumer.lanes.topic(name)
        assert topic is not None
        lanes[name] = consumer.lanes.lane(topic, partition)
        lanes[name].next_check = now + in_s
    lanes["done"].pending.ack(calls_module.Ack("j", leased.tokens[0], leased.now_ms))

    (sent,) = consumer._take_calls(Budget.forever(), now)
    assert sorted(take.lane.topic.name for take in sent.takes) == ["now", "soon"]
    assert [(pending.topic, [ack[0] for ack in acks]) for pending, acks in sent.acking] == [("done", ["j"])]
    (reply,) = run_many(queue.redis, [sent.call])
    consumer._on_takes(sent, reply, now)
    assert consumer.counts["taken"] == 2
    assert consumer.counts["acked"] == 1
    assert not lanes["done"].pending
    assert (state(queue, "done", "j"), state(queue, "later", "j")) == ("done", "ready")
    consumer.deliveries.shutdown(5)


def test_a_consumer_of_star_alone_looks_before_it_knows_any_topic(make_queue: MakeQueue) -> None:
    """No topic yet, so no share: nothing is backlogged, and the looks go out (a job created due now
    is found within a look, not a read)."""
    queue = make_queue(topics={"*": {"target": RECORDER}}, tick=0.1)
    consumer = Consumer(queue)
    consumer.server_clock.saw(0)
    assert not consumer.lanes.shares
    assert len(consumer._look_calls(time.monotonic())) == len(queue.keys.partitions)


def test_a_look_due_soon_rides_early_in_a_round_trip_the_pass_makes_anyway(make_queue: MakeQueue) -> None:
    """Alone, a look waits for its time; with takes or settles going to Redis anyway it comes up to half
    a look's interval early (``LOOK_EARLY``), and the next one is a whole interval after it."""
    queue = make_queue(topics={"t": {"target": RECORDER}}, tick=1.0)
    consumer = Consumer(queue)
    now = time.monotonic()
    consumer.server_clock.saw(0, now)
    soon, later = now + 0.3 * consumer.look_every, now + 0.7 * consumer.look_every
    consumer._polls = [soon]
    assert consumer._look_calls(now) == []
    assert len(consumer._look_calls(now, riding=True)) == 1
    assert consumer._polls == [now + consumer.look_every]
    consumer._polls = [later]
    assert consumer._look_calls(now, riding=True) == []


def test_topics_sharing_the_wildcards_workers_take_no_more_than_it_has_free(make_queue: MakeQueue) -> None:
    """Twenty topics due at once under ``*`` with concurrency 3: no pass takes more jobs than the
    shared workers have free (none waits, leased, for a thread), and every job runs."""
    queue = make_queue(
        topics={"*": {"target": "python:support.loop_targets:counted", "concurrency": 3}}, tick=0.1, partitions=2
    )
    queue.enqueue_many([{"topic": f"many{n}", "id": "j", "body": {"sleep": 0.05}, "delay": 0} for n in range(20)])
    consumer = Consumer(queue)
    most = _most_until(
        consumer,
        lambda: len(consumer.deliveries.running),
        lambda: len(loop_targets.of()) == 20,
        timeout=20,
        interval=0.002,
    )
    assert most <= 3
    assert loop_targets.max_active <= 3


def test_one_pass_takes_the_due_jobs_of_every_topic_sharing_the_wildcards_workers(make_queue: MakeQueue) -> None:
    """``seconds: 0`` is one pass: with four topics under ``*`` each holding a due job and workers enough
    for all, that pass runs every one of them, not just the first topic's (the share's free workers are
    split among its due topics, not all planned for the first)."""
    queue = make_queue(topics={"*": {"target": "python:support.loop_targets:counted", "concurrency": 8}}, tick=0.1)
    queue.enqueue_many([{"topic": f"shared{n}", "id": "j", "body": {}, "delay": 0} for n in range(4)])
    summary = Consumer(queue).run(Budget.of(0))
    assert summary["succeeded"] == 4, summary
    assert sorted(call.job.topic for call in loop_targets.of()) == [f"shared{n}" for n in range(4)]


def test_a_job_created_due_now_or_soon_does_not_wait_a_tick(make_queue: MakeQueue) -> None:
    """Between its reads of the topic index (once a tick: 10 s here), the consumer looks at it with
    plain reads twenty times a tick (every 0.5 s here): a job created due now, one due in 300 ms and a
    replayed dead job are each started long before the next tick (a consumer that waited for it would
    be 7 s late or more), and never before their run-at."""
    queue = make_queue(topics={"t": {"target": RECORDER, "retries": 0}, "*": {"target": RECORDER}}, tick=10.0)
    with running(Consumer(queue)):
        time.sleep(0.3)  # its first read is done, with nothing in the index: only a look can find them
        queue.enqueue("t", {}, id="now")
        queue.enqueue("other", {}, id="soon", delay=0.3)
        queue.enqueue("t", {"fail": True}, id="dies")
        assert wait_until(lambda: len(recorder.of()) == 3, timeout=5), recorder.of()
        assert wait_until(lambda: queue.stats("t").dead == 1, timeout=5)
        assert queue.replay("t", ["dies"]) == 1
        assert wait_until(lambda: len(recorder.of()) == 4, timeout=5), recorder.of()
    late = [(d.id, round(d.lateness_ms)) for d in recorder.of()]
    assert all(0 <= ms < 3000 for _, ms in late), late


def test_a_paused_topic_named_ready_by_every_look_is_asked_once_a_tick(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The looks name a paused topic's ready jobs every 50 ms (a tick of 1 s); its lane still waits the
    tick its paused take answered, instead of taking again at each look."""
    takes: Counter[str] = Counter()
    take = calls_module.lane_take
    monkeypatch.setattr(calls_module, "lane_take", lambda p, topic, **kw: takes.update([topic]) or take(p, topic, **kw))
    queue = make_queue(topics={"t": {"target": RECORDER}}, tick=1.0)
    queue.pause("t")
    queue.enqueue_many([{"topic": "t", "id": f"j{i}"} for i in range(3)])
    with running(Consumer(queue)):
        time.sleep(0.9)  # about eighteen looks, and no read of the index but the first
    assert recorder.of() == []
    assert 1 <= takes["t"] <= 2, takes  # without the hold: a take at each look, about eighteen


def _takes_with_jobs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many jobs each take that leased any brought, in order, from now on."""
    replies: list[int] = []
    taken = calls_module._taken

    def counted(topic: str, reply: list[Any]) -> calls_module.Taken:
        result = taken(topic, reply)
        if result.jobs:
            replies.append(len(result.jobs))
        return result

    monkeypatch.setattr(calls_module, "_taken", counted)
    return replies


def _deliver_spaced(
    make_queue: MakeQueue, jobs: int, *, spacing_s: float
) -> tuple[list[recorder.Delivery], dict[str, int]]:
    """``jobs`` jobs of one topic due 0.6 s from now, ``spacing_s`` apart, run by one consumer until all
    are delivered: the deliveries, and each job's run-at by id."""
    queue = make_queue(topics={"t": {"target": RECORDER}}, tick=0.2)
    results = queue.enqueue_many([{"topic": "t", "id": f"j{i}", "delay": 0.6 + spacing_s * i} for i in range(jobs)])
    run_at = {created(r).id: created(r).run_at_ms for r in results}
    with running(Consumer(queue)):
        assert wait_until(lambda: len(recorder.of("t")) == jobs)
    return recorder.of("t"), run_at


def test_jobs_falling_due_close_together_come_in_one_take_each_started_at_its_run_at(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A take brings the jobs due within ``TAKE_AHEAD_MS`` (40 ms): five jobs 4 ms apart cost one or
    two takes, not five, and none starts before its run-at (each waits in its worker until then)."""
    replies = _takes_with_jobs(monkeypatch)
    deliveries, run_at = _deliver_spaced(make_queue, 5, spacing_s=0.004)
    assert sorted(d.id for d in deliveries) == sorted(run_at)
    assert [(d.id, d.lateness_ms) for d in deliveries if d.started_ms < run_at[d.id]] == []
    assert sum(replies) == 5
    assert len(replies) <= 2, replies  # one take per job without the take ahead


def test_a_full_take_ahead_waits_for_its_last_job_before_taking_again(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A take ahead that fills the free workers (8) takes again when its last job starts, not as soon
    as a worker frees up: 24 jobs due within 12 ms come in a few takes, not one take per job."""
    replies = _takes_with_jobs(monkeypatch)
    deliveries, run_at = _deliver_spaced(make_queue, 24, spacing_s=0.0005)
    assert [(d.id, d.lateness_ms) for d in deliveries if d.started_ms < run_at[d.id]] == []
    assert sum(replies) == 24
    assert len(replies) <= 5, replies  # taking again whenever a worker frees up: a dozen takes or more


def test_a_topic_with_most_of_its_workers_busy_takes_one_window_ahead(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its workers are for the jobs due: with three of four held by handlers, its takes reach no
    further than one ``TAKE_WINDOW_S`` (what its next take would find late); with them free again,
    ``TAKE_AHEAD_MS`` ahead."""
    aheads: list[int] = []
    take = calls_module.lane_take
    monkeypatch.setattr(
        calls_module, "lane_take", lambda p, topic, **kw: aheads.append(kw["ahead_ms"]) or take(p, topic, **kw)
    )
    queue = make_queue(topics={"t": {"target": GATE, "concurrency": 4}}, tick=0.2)
    queue.enqueue_many([{"topic": "t", "id": f"held{i}"} for i in range(3)])
    with running(Consumer(queue)):
        assert wait_until(lambda: len(loop_targets.of()) == 3)
        assert aheads[0] == consumer_module.TAKE_AHEAD_MS > 0
        aheads.clear()
        queue.enqueue("t", {}, id="due", delay=0.3)
        assert wait_until(lambda: len(loop_targets.of()) == 4)
        busy = list(aheads)
        for i in range(3):
            loop_targets.release(f"held{i}")
        loop_targets.release("due")
        assert wait_until(lambda: state(queue, "t", "due") == "done")
    assert busy
    assert set(busy) == {round(lanes_module.TAKE_WINDOW_S * 1000)}, busy
