"""The sweep loop, run in-process against the real Redis: expired leases taken back, the partition
lock (held by one sweeper, taken over after its TTL, lost when stolen), how precisely it wakes for a
due job, and many jobs over several partitions."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from delayq import Queue
from delayq.core.loop import STOP_BEFORE_DEADLINE_S, Budget
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import SWEEP_LAG_MS, Sweeper
from delayq.store import calls
from delayq.store.calls import Failure, Taken
from delayq.store.keys import partition_of

from support import loop_targets, recorder
from support.loops import running, state, wait_until
from support.recorder import RECORDER
from support.scripts import server_ms

MakeQueue = Callable[..., Queue]


def _lease_directly(queue: Queue, topic: str, timeout_ms: int, grace_ms: int) -> Taken:
    """What a consumer does before it dies: take one job (and never answer)."""
    partition = queue.keys.partitions[0]
    return calls.take(partition, topic, count=1, timeout_ms=timeout_ms, grace_ms=grace_ms).run(queue.redis)


@pytest.mark.parametrize("retries", [1, 0])
def test_expired_lease_is_taken_back(make_queue: MakeQueue, retries: int, caplog: pytest.LogCaptureFixture) -> None:
    queue = make_queue(
        topics={"lease": {"target": RECORDER, "timeout": 1, "retries": retries, "backoff": [0]}}, tick=0.1
    )
    queue.enqueue("lease", {"x": 1}, id="l1", delay=0)
    reply = _lease_directly(queue, "lease", timeout_ms=1000, grace_ms=0)
    now_ms = reply.now_ms
    assert reply.ids == ["l1"]
    assert reply.jobs[0].attempt == 1
    assert state(queue, "lease", "l1") == "reserved"

    sweeper = Sweeper(queue)
    first = sweeper.run(Budget.of(0))  # the lease has not run out: nothing to take back
    assert (first["retried"], first["dead"]) == (0, 0)
    assert state(queue, "lease", "l1") == "reserved"

    def swept() -> bool:
        sweeper.sweep_once()
        return sweeper.counts["retried"] + sweeper.counts["dead"] >= 1

    assert wait_until(swept, timeout=4, interval=0.05)
    sweeper.release()
    info = queue.get("lease", "l1")
    assert info.last_error is not None
    assert "lease" in info.last_error
    assert info.attempts == 1

    if retries == 0:
        assert sweeper.counts["dead"] == 1
        assert info.state == "dead"
        dead = queue.dead("lease")
        assert [job.id for job in dead] == ["l1"]
        assert dead[0].died_at_ms >= now_ms + 1000  # not before the lease deadline (take + timeout + grace)
        assert "lease" in dead[0].last_error
        assert dead[0].body == {"x": 1}
        assert [r.getMessage() for r in caplog.records if " is dead" in r.getMessage()] == [
            "lease/l1 is dead: its lease expired, its last attempt unanswered"
        ]
        assert [(a.attempt, a.outcome, a.started_at_ms) for a in info.history] == [(1, "lease_expired", None)]
        summary = Consumer(queue).run(Budget.of(0.3))
        assert summary["taken"] == 0
        assert recorder.of("lease") == []
    else:
        assert sweeper.counts["retried"] == 1
        assert info.state in ("delayed", "ready")
        assert info.run_at_ms >= now_ms + 1000  # taken back (backoff 0) not before the lease deadline
        with running(Consumer(queue)) as consumer:
            assert wait_until(lambda: state(queue, "lease", "l1") == "done", timeout=4)
        deliveries = recorder.of("lease", "l1")
        assert [d.attempt for d in deliveries] == [2]
        assert deliveries[0].started_ms >= now_ms + 1000
        assert consumer.summary is not None
        assert consumer.summary["acked"] == 1
        assert queue.dead("lease") == []
        assert [(a.attempt, a.outcome) for a in queue.get("lease", "l1").history] == [(1, "lease_expired"), (2, "ok")]
        assert not [r for r in caplog.records if " is dead" in r.getMessage()]


def test_expired_lease_is_not_taken_back_early(make_queue: MakeQueue) -> None:
    """A sweeper running in the background takes the lease back at its deadline, not before."""
    queue = make_queue(topics={"lease": {"target": RECORDER, "timeout": 1, "retries": 0}}, tick=0.2)
    queue.enqueue("lease", {}, id="l2", delay=0)
    reply = _lease_directly(queue, "lease", timeout_ms=1000, grace_ms=0)
    deadline_ms = reply.now_ms + 1000

    seen: list[tuple[float, str | None]] = []

    def dead() -> bool:
        current = state(queue, "lease", "l2")
        seen.append((time.time() * 1000, current))
        return current == "dead"

    with running(Sweeper(queue)) as sweeper:
        assert wait_until(dead, timeout=4, interval=0.005)
    assert sweeper.summary is not None
    assert sweeper.summary["dead"] == 1
    early = [(t, s) for t, s in seen if s != "reserved" and t < deadline_ms]
    assert early == []
    died_at = queue.dead("lease")[0].died_at_ms
    assert died_at >= deadline_ms


def test_one_sweeper_per_partition_and_takeover_after_ttl(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"lk": {"target": RECORDER}}, tick=0.1)
    lock = queue.keys.partitions[0].lock
    holder, other = Sweeper(queue), Sweeper(queue)
    holder.lock_ttl_ms = 400  # the holder "dies" (never releases): its lock lapses after 0.4 s

    holder.sweep_once()
    other.sweep_once()
    assert holder.counts["locks_taken"] == 1
    assert other.counts["locks_taken"] == 0
    assert queue.redis.get(lock) == holder.token

    queue.enqueue("lk", {}, id="k1", delay=0.05)
    assert wait_until(lambda: _due(queue, "lk", "k1"))
    other.sweep_once()  # no lock, no sweep
    assert other.counts["moved"] == 0
    assert state(queue, "lk", "k1") == "delayed"

    def taken_over() -> bool:
        other.sweep_once()
        return other.counts["locks_taken"] == 1

    assert wait_until(taken_over, timeout=4, interval=0.05)
    assert queue.redis.get(lock) == other.token
    assert other.counts["moved"] == 1
    assert state(queue, "lk", "k1") == "ready"

    # the old holder comes back: the sweep script refuses it, it counts the loss and touches nothing
    queue.enqueue("lk", {}, id="k2", delay=0)
    holder.sweep_once()
    assert holder.counts["locks_lost"] == 1
    assert holder.counts["moved"] == 0
    assert queue.redis.get(lock) == other.token
    holder.release()
    assert queue.redis.get(lock) == other.token  # a lost lock is not released

    other.release()
    assert queue.redis.get(lock) is None


def _due(queue: Queue, topic: str, job_id: str) -> bool:
    seconds, micros = queue.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000 >= queue.get(topic, job_id).run_at_ms


def test_stolen_lock_stops_the_sweeper(make_queue: MakeQueue, redis_client: redis.Redis) -> None:
    queue = make_queue(topics={"st": {"target": RECORDER}}, tick=0.1)
    lock = queue.keys.partitions[0].lock
    sweeper = Sweeper(queue)
    sweeper.sweep_once()
    assert sweeper.counts["locks_taken"] == 1

    redis_client.set(lock, "someone-else")
    queue.enqueue("st", {}, id="s1", delay=0.05)
    assert wait_until(lambda: _due(queue, "st", "s1"))
    sweeper.sweep_once()
    assert sweeper.counts["locks_lost"] == 1
    assert sweeper.counts["moved"] == 0
    summary = sweeper.run(Budget.of(0.3))  # keeps trying to take the lock, never sweeps
    assert summary["locks_taken"] == 1
    assert summary["locks_lost"] == 1
    assert summary["moved"] == 0
    assert summary["passes"] > 2
    assert state(queue, "st", "s1") == "delayed"
    assert redis_client.get(lock) == "someone-else"


def test_sweeper_wakes_at_the_due_time_not_the_next_tick(make_queue: MakeQueue, redis_client: redis.Redis) -> None:
    """After a pass that finds the job not yet due, the sweeper sleeps until its run-at plus its lag
    (Redis' clock: the time consumers have to take it first), not a whole tick, and the pass that moves
    it runs at or after that, never before. The sleeps
    it asks for are read, not how long they took: a loaded machine may wake the thread late."""
    queue = make_queue(topics={"pr": {"target": RECORDER}}, tick=10.0)
    run_at_ms = queue.enqueue("pr", {}, id="p1", delay=1.5).run_at_ms
    sweeper = Sweeper(queue)
    passes: list[tuple[int, float, int, int]] = []  # Redis ms at its start, sleep asked, Redis ms at its end, moved
    sweep_once = sweeper.sweep_once

    def recorded(budget: Budget | None = None) -> float:
        start = server_ms(redis_client)
        wait = sweep_once(budget)
        passes.append((start, wait, server_ms(redis_client), sweeper.counts["moved"]))
        return wait

    sweeper.sweep_once = recorded  # type: ignore[method-assign]
    with running(sweeper) as run:
        assert wait_until(lambda: state(queue, "pr", "p1") == "ready", timeout=10)
    assert run.summary is not None
    assert run.summary["moved"] == 1
    waiting = [(start, wait, end) for start, wait, end, moved in passes if moved == 0]
    assert waiting, "no pass before the run-at"
    for start, wait, end in waiting:  # the time left until the run-at, as the pass saw it (Redis ms)
        due_ms = run_at_ms + sweeper.lag_ms
        assert due_ms - end - 1 <= wait * 1000 <= due_ms - start + 1, (wait, due_ms - start)
    moving_end = next(end for _, _, end, moved in passes if moved == 1)
    assert moving_end >= run_at_ms + sweeper.lag_ms  # moved by Redis' time, at or after its run-at and lag


def test_the_lag_grows_while_consumers_take_the_work_and_falls_back_once_the_sweeper_has_some(
    make_queue: MakeQueue,
) -> None:
    """In steady traffic a consumer takes each job as it falls due, and the sweeper, woken for work that
    was gone, doubles its lag up to the tick rather than pass every ``SWEEP_LAG_MS`` for nothing. Once
    a due job stays untaken (no consumer), it is moved within the grown lag, and the lag falls back."""
    queue = make_queue(topics={"lg": {"target": RECORDER}}, tick=1.0)
    sweeper = Sweeper(queue)
    partition = sweeper._states[0]
    lags: list[int] = []
    sweep_once = sweeper.sweep_once

    def recorded(budget: Budget | None = None) -> float:
        wait = sweep_once(budget)
        lags.append(partition.lag_ms)
        return wait

    sweeper.sweep_once = recorded  # type: ignore[method-assign]
    with running(sweeper) as sweeping:
        with running(Consumer(queue)):
            ends = time.monotonic() + 4.0
            n = 0
            while time.monotonic() < ends and max(lags, default=0) < sweeper.max_lag_ms:
                queue.enqueue("lg", {}, id=f"s{n}", delay=0.2)
                n += 1
                time.sleep(0.02)
            assert max(lags) == sweeper.max_lag_ms == 1000, lags
            assert wait_until(lambda: len(recorder.of("lg")) == n, timeout=10)
        passes = len(lags)
        queue.enqueue("lg", {}, id="alone", delay=0.05)  # no consumer now: the sweeper's to move
        assert wait_until(lambda: state(queue, "lg", "alone") == "ready", timeout=5)
        assert wait_until(lambda: partition.lag_ms == SWEEP_LAG_MS)
    assert sweeping.counts["moved"] >= 1
    assert len(lags) > passes


def test_many_jobs_over_three_partitions_delivered_once(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"pp": {"target": RECORDER}}, tick=0.1, partitions=3)
    jobs = [{"topic": "pp", "id": f"p{i}", "body": {"i": i}, "delay": (i % 10) / 20} for i in range(300)]
    results = queue.enqueue_many(jobs)
    assert [r.status for r in results] == [201] * 300
    per_partition = Counter(queue.keys.for_job("pp", f"p{i}").index for i in range(300))
    assert sorted(per_partition) == [0, 1, 2]
    assert min(per_partition.values()) > 50

    with (
        running(Sweeper(queue)) as first,
        running(Sweeper(queue)) as second,
        running(Consumer(queue)) as consumer,
    ):
        assert wait_until(lambda: len(recorder.of("pp")) >= 300, timeout=6)
        time.sleep(0.3)
        # Counted before the sweepers stop: the one that stops first releases its locks, and the other
        # may take them before it stops too (a hand-over, not a lock lost).
        locks_taken = first.counts["locks_taken"] + second.counts["locks_taken"]
    deliveries = recorder.of("pp")
    counts = Counter(d.id for d in deliveries)
    assert set(counts) == {f"p{i}" for i in range(300)}
    assert max(counts.values()) == 1
    assert all(d.started_ms >= d.run_at_ms for d in deliveries)
    assert consumer.summary is not None
    assert consumer.summary["acked"] == 300
    assert first.summary is not None
    assert second.summary is not None
    # each partition's lock was held by one of the two sweepers, and kept
    assert locks_taken == 3
    assert first.summary["locks_lost"] + second.summary["locks_lost"] == 0
    stats = queue.stats("pp")
    assert (stats.delayed, stats.ready, stats.reserved, stats.dead) == (0, 0, 0, 0)
    assert all(queue.redis.get(p.lock) is None for p in queue.keys.partitions)  # released on stop


def test_answers_for_a_taken_back_lease_change_nothing(make_queue: MakeQueue) -> None:
    """A consumer that was too slow answers after its lease expired and the job was leased again: its
    ack and its fail carry the old lease token and are refused."""
    queue = make_queue(
        topics={"st": {"target": "python:support.loop_targets:gate", "timeout": 1, "retries": 2, "backoff": [0]}},
        tick=0.1,
    )
    queue.enqueue("st", {}, id="x1", delay=0)
    reply = _lease_directly(queue, "st", timeout_ms=1000, grace_ms=0)
    old_token = reply.tokens[0]
    partition = queue.keys.partitions[0]

    with running(Sweeper(queue)) as sweeper, running(Consumer(queue)) as consumer:
        assert wait_until(lambda: loop_targets.of("x1"), timeout=4)  # attempt 2, leased anew
        assert state(queue, "st", "x1") == "reserved"
        assert calls.ack(partition, "st", queue.topic_config("st"), [("x1", old_token, 0)]).run(queue.redis) == 0
        late = [Failure("x1", old_token, "late failure")]
        assert calls.fail(partition, "st", queue.topic_config("st"), late).run(queue.redis)[:2] == (0, 0)
        info = queue.get("st", "x1")
        assert (info.state, info.attempts) == ("reserved", 2)
        assert info.last_error is not None
        assert "lease" in info.last_error
        loop_targets.release("x1")
        assert wait_until(lambda: state(queue, "st", "x1") == "done")
    assert [c.job.attempt for c in loop_targets.of("x1")] == [2]
    assert sweeper.summary is not None
    assert sweeper.summary["retried"] == 1
    assert consumer.summary is not None
    assert consumer.summary["acked"] == 1


# ------------------------------------------------------------------------- bounded passes, budgets


def _backlog(queue: Queue, per_partition: list[int]) -> None:
    """``per_partition[p]`` jobs of topic "bk" in partition p, all due for longer than the sweeper's lag
    (moved by the sweeper, not placed in the ready list at enqueue)."""
    partitions = len(per_partition)
    ids: list[str] = []
    left = list(per_partition)
    i = 0
    while any(left):
        job_id = f"b{i}"
        p = partition_of("bk", job_id, partitions)
        if left[p]:
            left[p] -= 1
            ids.append(job_id)
        i += 1
    results = queue.enqueue_many([{"topic": "bk", "id": job_id, "delay": 0.05} for job_id in ids])
    assert {r.status for r in results} == {201}
    time.sleep(0.1 + SWEEP_LAG_MS / 1000)


def _delayed(queue: Queue) -> int:
    return queue.stats("bk").delayed


def test_a_looping_run_stops_at_its_budget_and_partitions_take_turns(make_queue: MakeQueue) -> None:
    """A pass makes one bounded call per partition: a backlog in partition 0 neither holds up
    partition 1 nor keeps the run going past its stop time."""
    queue = make_queue(topics={"bk": {"target": RECORDER}}, tick=0.1, partitions=2)
    _backlog(queue, [40, 3])
    now = time.monotonic()
    spent = Budget(started=now, stop_at=now, finish_by=None)  # a looping run whose time is up

    summary = Sweeper(queue, limit=5).run(spent)
    assert (summary["passes"], summary["moved"]) == (1, 5 + 3)
    assert _delayed(queue) == 35

    sweeper = Sweeper(queue, limit=5)
    assert sweeper.sweep_once(Budget.of(10)) == 0  # more is due: the loop comes back at once
    assert sweeper.counts["moved"] == 5
    with running(sweeper):
        assert wait_until(lambda: _delayed(queue) == 0)
    assert queue.stats("bk").ready == 43


@pytest.mark.parametrize(
    ("remaining_s", "drains"),
    [(None, True), (60.0, True), (STOP_BEFORE_DEADLINE_S, False)],
)
def test_a_single_pass_drains_but_not_past_the_deadline(
    make_queue: MakeQueue, remaining_s: float | None, drains: bool
) -> None:
    queue = make_queue(topics={"bk": {"target": RECORDER}}, tick=0.1, partitions=2)
    _backlog(queue, [23, 12])
    summary = Sweeper(queue, limit=5).run(Budget.of(0, remaining_s=remaining_s))
    assert summary["passes"] == 1
    assert summary["moved"] == (35 if drains else 10)
    assert _delayed(queue) == (0 if drains else 25)


def test_the_sweeper_moves_the_leases_an_older_version_kept_and_takes_them_back(
    make_queue: MakeQueue, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A lease in its topic's own leased set, indexed in ``_leases`` (a consumer of an older version
    took the job and died): the next pass moves it into the partition's lease sets, and once it
    expires the job is retried as any other."""
    queue = make_queue(topics={"up": {"target": RECORDER, "timeout": 1, "retries": 1, "backoff": [0]}}, tick=0.1)
    queue.enqueue("up", {}, id="j", delay=0)
    _lease_directly(queue, "up", timeout_ms=1000, grace_ms=0)
    p = queue.keys.partitions[0]
    [(member, deadline)] = redis_client.zrange(p.leases, 0, -1, withscores=True)
    redis_client.delete(p.leases, p.leases_lex)  # as the older version kept it
    redis_client.zadd(p.old_leased("up"), {"j": deadline})
    redis_client.zadd(p.old_lease_index, {"up": deadline})
    sweeper = Sweeper(queue)
    caplog.set_level("INFO")
    sweeper.sweep_once()
    assert redis_client.zrange(p.leases, 0, -1, withscores=True) == [(member, deadline)]
    assert redis_client.exists(p.old_leased("up"), p.old_lease_index) == 0
    assert any("moved 1 leases of 1 topics" in r.getMessage() for r in caplog.records)

    def swept() -> bool:
        sweeper.sweep_once()
        return sweeper.counts["retried"] >= 1

    assert wait_until(swept, timeout=4, interval=0.05)
    sweeper.release()
    assert state(queue, "up", "j") in {"delayed", "ready"}
    assert redis_client.zcard(p.leases) == 0


def test_a_partition_without_a_topic_index_is_walked_once_which_builds_it(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """A namespace an older version wrote has no topic index: the first pass sweeps every topic of
    ``_topics`` and marks the index built; later passes read the index alone."""
    queue = make_queue(topics={"*": {"target": RECORDER}}, tick=0.1)
    for n in range(3):
        queue.enqueue(f"old{n}", {}, id="due", delay=0.05)
    later = queue.enqueue("old0", {}, id="later", delay=60).run_at_ms
    p = queue.keys.partitions[0]
    redis_client.delete(p.delayed_index, p.ready_index, p.indexed)  # the old layout
    time.sleep(0.1 + SWEEP_LAG_MS / 1000)
    sweeper = Sweeper(queue)
    walks = []
    walk = sweeper._walk

    def counted(state):  # type: ignore[no-untyped-def]
        walks.append(state.partition.index)
        return walk(state)

    sweeper._walk = counted  # type: ignore[method-assign]
    sweeper.sweep_once()
    assert sweeper.counts["moved"] == 3
    assert walks == [0]
    assert redis_client.get(p.indexed) == "1"
    assert redis_client.zrange(p.delayed_index, 0, -1, withscores=True) == [("old0", later)]
    queue.enqueue("old1", {}, id="next", delay=0.05)
    time.sleep(0.1 + SWEEP_LAG_MS / 1000)
    sweeper.sweep_once()
    sweeper.release()
    assert walks == [0]
    assert sweeper.counts["moved"] == 4
