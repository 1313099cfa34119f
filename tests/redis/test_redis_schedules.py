"""Recurring schedules against the real Redis: the client's calls (``Queue.schedule``, ``get_schedule``,
``unschedule``, ``schedules``) and the sweep's part (``Scheduler``), its races and its recovery."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from delayq import InvalidField, JobNotFound, Queue, ScheduleInfo, ScheduleNotFound, UnknownTopic
from delayq.core.calendar import CronCalendar
from delayq.core.recurring import Schedule, occurrence_id
from delayq.loops import occurrences
from delayq.loops.occurrences import Scheduler
from delayq.store import calls
from delayq.store import schedules as scheduler_module
from delayq.store.schedules import Progress, Schedules, schedule_key
from delayq.store.scripts import Call, Script

from support.scripts import dump, lua_for, server_ms, sleep_until_server_ms

MakeQueue = Callable[..., Queue]
SECOND = 1000


def occurrence(queue: Queue, topic: str, name: str, at_ms: int) -> Any:
    """The job of an occurrence (``JobNotFound`` if there is none)."""
    return queue.get(topic, occurrence_id(name, at_ms))


def jobs_of(queue: Queue, redis_client: redis.Redis, topic: str) -> dict[str, int]:
    """Every delayed or ready job of ``topic``: id -> run-at (ms)."""
    found: dict[str, int] = {}
    for partition in queue.keys.partitions:
        delayed, ready = partition.topic_keys(topic)[:2]
        found.update({job_id: int(at) for job_id, at in redis_client.zrange(delayed, 0, -1, withscores=True)})
        for job_id in redis_client.lrange(ready, 0, -1):
            found[job_id] = queue.get(topic, job_id).run_at_ms
    return found


def progress_of(queue: Queue, redis_client: redis.Redis, topic: str, name: str) -> Progress | None:
    keys = queue.keys.for_schedule(topic, name).schedule_keys()
    raw = redis_client.hget(keys[2], schedule_key(topic, name))
    return None if raw is None else Progress.decode(raw)


def due_at(queue: Queue, redis_client: redis.Redis, topic: str, name: str) -> float | None:
    keys = queue.keys.for_schedule(topic, name).schedule_keys()
    return redis_client.zscore(keys[3], schedule_key(topic, name))


class Died(BaseException):
    """A process dying at this line: nothing after it runs, no handler catches it."""


# ------------------------------------------------------------------------------------- create


def test_a_schedule_is_created_with_its_first_occurrence_as_a_delayed_job(
    queue: Queue, redis_client: redis.Redis
) -> None:
    before = server_ms(redis_client)
    info = queue.schedule("orders", "every-minute", every=60, body={"n": 1}, retries=3, timeout=10, backoff=[1, 2])
    after = server_ms(redis_client)
    assert isinstance(info, ScheduleInfo)
    assert (info.topic, info.name, info.created, info.status) == ("orders", "every-minute", True, 201)
    assert before <= info.created_at_ms <= after
    first = info.created_at_ms + 60 * SECOND  # every: one interval after it was written
    assert info.next_runs_ms == tuple(first + i * 60 * SECOND for i in range(5))
    job = occurrence(queue, "orders", "every-minute", first)
    assert (job.state, job.run_at_ms, job.body, job.retries, job.attempts) == ("delayed", first, {"n": 1}, 3, 0)
    assert job.id == occurrence_id("every-minute", first)
    meta = lua_for(redis_client, queue, "orders", job.id).meta("orders", job.id)
    assert (meta.timeout_ms, meta.backoff_ms) == (10_000, (1000, 2000))
    answer = info.to_dict()
    assert (answer["every"], answer["cron"], answer["body"], answer["backoff"]) == (60, None, {"n": 1}, [1, 2])
    assert answer["next_run_at_ms"] == first
    assert queue.get_schedule("orders", "every-minute").to_dict() == answer


def test_a_cron_schedule_runs_at_its_wall_clock_times_in_its_zone(queue: Queue) -> None:
    info = queue.schedule("reminders", "paris-8am", cron="0 8 * * 1-5", timezone="Europe/Paris", body="wake up")
    expected = CronCalendar.of("0 8 * * 1-5", "Europe/Paris").next_runs(info.created_at_ms - 1, 5)
    assert list(info.next_runs_ms) == expected
    assert occurrence(queue, "reminders", "paris-8am", expected[0]).body == "wake up"


def test_a_schedule_bounded_in_the_past_makes_nothing(queue: Queue, redis_client: redis.Redis) -> None:
    info = queue.schedule("orders", "over", every=10, start_at="2020-01-01T00:00:00Z", end_at=1_600_000_000)
    assert info.next_runs_ms == ()
    assert info.to_dict()["next_run_at"] is None
    assert jobs_of(queue, redis_client, "orders") == {}
    assert due_at(queue, redis_client, "orders", "over") is None
    assert [s.name for s in queue.schedules()] == ["over"]  # it exists, and ended


def test_every_with_start_at_counts_from_it(queue: Queue, redis_client: redis.Redis) -> None:
    start_ms = server_ms(redis_client) - 7_250  # 7.25 s ago: the next on its grid is 2.75 s ahead
    info = queue.schedule("orders", "grid", every=10, start_at=start_ms / 1000)
    assert info.next_run_at_ms == start_ms + 10 * SECOND
    assert occurrence(queue, "orders", "grid", start_ms + 10 * SECOND).state == "delayed"


# ------------------------------------------------------------------------------------- replace


def test_a_replace_cancels_the_pending_occurrence_and_makes_the_new_calendars(queue: Queue) -> None:
    old = queue.schedule("orders", "s", every=60, body="old")
    new = queue.schedule("orders", "s", cron="*/5 * * * *", body="new")
    assert (new.created, new.status) == (False, 200)
    assert new.created_at_ms >= old.created_at_ms
    with pytest.raises(JobNotFound):
        occurrence(queue, "orders", "s", old.next_runs_ms[0])
    assert occurrence(queue, "orders", "s", new.next_runs_ms[0]).body == "new"
    shown = queue.get_schedule("orders", "s")
    assert (shown.schedule.cron, shown.schedule.every, shown.next_runs_ms) == ("*/5 * * * *", None, new.next_runs_ms)


def test_a_replace_whose_first_occurrence_is_the_pending_one_replaces_its_job(queue: Queue) -> None:
    old = queue.schedule("orders", "hourly", cron="@hourly", body="old", retries=1)
    new = queue.schedule("orders", "hourly", cron="0 * * * *", body="new")
    assert new.next_runs_ms[0] == old.next_runs_ms[0]  # the same occurrence, the same job id
    job = occurrence(queue, "orders", "hourly", new.next_runs_ms[0])
    assert (job.state, job.body, job.retries) == ("delayed", "new", 2)  # the topic's retries now


def test_a_replace_leaves_an_occurrence_that_has_started(queue: Queue, redis_client: redis.Redis) -> None:
    old = queue.schedule("orders", "s", every=3600)
    job_id = occurrence_id("s", old.next_runs_ms[0])
    lua = lua_for(redis_client, queue, "orders", job_id)
    lua.make_due("orders", job_id)
    assert lua.take("orders").ids == [job_id]  # a consumer runs it (early here, by the test's hand)
    queue.schedule("orders", "s", every=60)
    assert queue.get("orders", job_id).state == "reserved"


# ------------------------------------------------------------------------------------- read, list, delete


def test_get_and_unschedule_of_a_schedule_that_does_not_exist(queue: Queue) -> None:
    for call in (queue.get_schedule, queue.unschedule):
        with pytest.raises(ScheduleNotFound) as info:
            call("orders", "nope")
        assert (info.value.status, info.value.field) == (404, "name")


def test_unschedule_cancels_the_pending_occurrence_and_forgets_the_schedule(
    queue: Queue, redis_client: redis.Redis, namespace: str
) -> None:
    before = dump(redis_client, namespace)
    info = queue.schedule("orders", "s", every=60)
    queue.unschedule("orders", "s")
    with pytest.raises(JobNotFound):
        occurrence(queue, "orders", "s", info.next_run_at_ms)
    with pytest.raises(ScheduleNotFound):
        queue.get_schedule("orders", "s")
    with pytest.raises(ScheduleNotFound):
        queue.unschedule("orders", "s")
    assert queue.schedules() == []
    left = {key: value for key, value in dump(redis_client, namespace).items() if key not in before}
    # What is left is the partition's bookkeeping: topics seen and counters, no trace of the schedule.
    assert all(key.endswith(("_topics", "_seq", "_layout", "_jobs_moved")) for key in left), left


def test_schedules_are_listed_by_topic_and_name_across_partitions(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_module, "LIST_PAGE", 3)  # several pages per partition
    queue = make_queue(partitions=4)
    # topics that sort next to "a" when a '/' follows each: a-b, a.b < a/ < a0, ab
    wanted = [(topic, f"s{i}") for topic in ("a", "a-b", "a.b", "a0", "ab") for i in range(7)]
    for topic, name in reversed(wanted):
        queue.schedule(topic, name, every=60)
    assert {queue.keys.for_schedule(t, n).index for t, n in wanted} == {0, 1, 2, 3}
    assert [(s.topic, s.name) for s in queue.schedules()] == sorted(wanted)
    assert [(s.topic, s.name) for s in queue.schedules("a")] == [("a", f"s{i}") for i in range(7)]
    assert [s.name for s in queue.schedules("a0")] == [f"s{i}" for i in range(7)]
    assert queue.schedules("b") == []
    assert all(s.next_run_at_ms is not None for s in queue.schedules())


# ------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda q: q.schedule("orders", "s"), "cron"),
        (lambda q: q.schedule("orders", "s", cron="* * * * *", every=5), "cron"),
        (lambda q: q.schedule("orders", "s", cron="61 * * * *"), "cron"),
        (lambda q: q.schedule("orders", "s", every=0), "every"),
        (lambda q: q.schedule("orders", "s", every=60, timezone="europe/paris"), "timezone"),
        (lambda q: q.schedule("orders", "s", every=60, start_at="2026-11-26T08:00:00"), "start_at"),
        (lambda q: q.schedule("orders", "s", every=60, start_at=20, end_at=10), "end_at"),
        (lambda q: q.schedule("orders", "s", every=60, retries=26), "retries"),
        (lambda q: q.schedule("orders", "s", every=60, body={1, 2}), "body"),
        (lambda q: q.schedule("orders", "daily report", every=60), "name"),
        (lambda q: q.schedule("-bad", "s", every=60), "topic"),
        (lambda q: q.get_schedule("orders", "a/b"), "name"),
        (lambda q: q.unschedule("orders", ""), "name"),
        (lambda q: q.schedules("_x"), "topic"),
    ],
)
def test_a_wrong_field_is_named_and_nothing_is_written(
    queue: Queue, redis_client: redis.Redis, namespace: str, call: Callable[[Queue], Any], field: str
) -> None:
    queue.schedule("orders", "s", every=3600)
    before = dump(redis_client, namespace)
    with pytest.raises(InvalidField) as info:
        call(queue)
    assert (info.value.status, info.value.field) == (422, field)
    assert dump(redis_client, namespace) == before


def test_a_topic_nobody_configured_is_refused(make_queue: MakeQueue, redis_client: redis.Redis, namespace: str) -> None:
    queue = make_queue(topics={"orders": {"target": "python:support.recorder:deliver"}})
    with pytest.raises(UnknownTopic) as info:
        queue.schedule("elsewhere", "s", every=60)
    assert (info.value.status, info.value.field) == (422, "topic")
    assert dump(redis_client, namespace) == {}


# ------------------------------------------------------------------------------------- the sweep


def test_a_pass_with_nothing_due_is_one_call_per_partition(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = make_queue(partitions=3)
    for i in range(60):
        queue.schedule("orders", f"s{i}", every=3600)
    sent: list[str] = []
    call = Script.__call__
    monkeypatch.setattr(Script, "__call__", lambda self, *args: sent.append(self.name) or call(self, *args))
    next_in = Scheduler(queue).pass_once()
    assert sent == ["schedules_due"] * 3
    assert next_in is not None
    assert 3_500_000 < next_in <= 3_600_000


@pytest.mark.slow
def test_each_occurrence_is_made_when_the_previous_one_falls_due(queue: Queue, redis_client: redis.Redis) -> None:
    """every: 1, swept as the sweeper does it: one occurrence pending at a time, the next one made once
    the previous one has fallen due (so about a second ahead of its time), none skipped."""
    info = queue.schedule("orders", "tick", every=1)
    scheduler = Scheduler(queue)
    made: dict[str, int] = {}  # occurrence id -> run-at
    deadline = time.monotonic() + 4.5
    while time.monotonic() < deadline:
        before = server_ms(redis_client)
        next_in = scheduler.pass_once()
        jobs = jobs_of(queue, redis_client, "orders")
        after = server_ms(redis_client)
        assert sum(1 for at in jobs.values() if at > after) <= 1, jobs  # never more than one pending
        for job_id, run_at in sorted(jobs.items(), key=lambda item: item[1]):
            if job_id not in made and made:
                assert max(made.values()) <= after, (job_id, made)  # the previous one had fallen due
            made.setdefault(job_id, run_at)
        assert all(at <= before for job_id, at in made.items() if at != max(made.values()))
        time.sleep(min(0.05, (next_in or 50) / 1000))
    expected = [info.created_at_ms + k * SECOND for k in range(1, len(made) + 1)]
    assert sorted(made.values()) == expected
    assert len(made) >= 3
    assert scheduler.counts["occurrences"] == len(made) - 1  # the first was made by the PUT


def grid_at(first: int, t: int, every: int = SECOND) -> int:
    """The last occurrence at or before ``t`` of a calendar ``first + k * every``."""
    return first + (t - first) // every * every


@pytest.mark.slow
def test_after_sweeps_stopped_only_the_latest_missed_occurrence_is_made(
    queue: Queue, redis_client: redis.Redis
) -> None:
    info = queue.schedule("orders", "tick", every=1)
    first = info.next_run_at_ms
    sleep_until_server_ms(redis_client, first + 2100)  # no sweep meanwhile: at least +1 s and +2 s are missed
    scheduler = Scheduler(queue)
    before = server_ms(redis_client)
    scheduler.pass_once()
    after = server_ms(redis_client)
    jobs = jobs_of(queue, redis_client, "orders")
    assert jobs.pop(occurrence_id("tick", first)) == first  # the pending one, late (no consumer here)
    [(job_id, run_at)] = jobs.items()  # and only the latest missed one, by the pass's clock, due at once
    latest = next(at for at in (grid_at(first, before), grid_at(first, after)) if occurrence_id("tick", at) == job_id)
    assert latest >= first + 2 * SECOND  # at least +1 s was skipped
    assert before <= run_at <= after  # late, so due when it was made (its id keeps its time)
    scheduler.pass_once()  # the calendar goes on from the latest missed one
    jobs = jobs_of(queue, redis_client, "orders")
    assert len(jobs) == 3
    [following] = set(jobs) - {occurrence_id("tick", first), job_id}
    assert following in {occurrence_id("tick", latest + k * SECOND) for k in range(1, 4)}


@pytest.mark.slow
def test_a_schedule_past_its_end_stops_and_stays_listed(queue: Queue, redis_client: redis.Redis) -> None:
    end_ms = server_ms(redis_client) + 1900
    info = queue.schedule("orders", "short", every=1, end_at=end_ms / 1000)
    assert len(info.next_runs_ms) == 1  # +1 s; +2 s is after end_at
    sleep_until_server_ms(redis_client, info.next_runs_ms[0])
    scheduler = Scheduler(queue)
    assert scheduler.pass_once() is None  # nothing more to make, nothing due later
    assert due_at(queue, redis_client, "orders", "short") is None
    assert scheduler.counts["occurrences"] == 0
    assert queue.get_schedule("orders", "short").to_dict()["next_run_at"] is None
    assert [s.name for s in queue.schedules("orders")] == ["short"]


# ------------------------------------------------------------------------------------- races, crashes


@pytest.fixture
def racing(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Barrier]:
    """Three schedulers that race: each one's read of the due schedules answers only once all three
    have read, so that all three decide on the same progress before any of them claims it."""
    barrier = threading.Barrier(3, timeout=10)
    read = calls.schedules_due

    def schedules_due(partition: Any, limit: int) -> Call[calls.Due]:
        call = read(partition, limit)
        return Call(call.script, call.keys, call.args, lambda reply: (barrier.wait(), call.decode(reply))[1])

    monkeypatch.setattr(calls, "schedules_due", schedules_due)
    yield barrier
    barrier.abort()


@pytest.mark.slow
def test_three_schedulers_racing_make_each_occurrence_once(
    make_queue: MakeQueue, redis_client: redis.Redis, racing: threading.Barrier, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = make_queue(partitions=1)
    infos = [queue.schedule("orders", f"s{i}", every=1) for i in range(5)]
    attempts: list[str] = []  # every create of an occurrence sent, by anyone
    carry_out = Schedules.carry_out

    def counted(self: Schedules, outboxes: Any) -> list[bool]:
        attempts.extend(f"{box.name}@{step.at_ms}" for box in outboxes for step in box.steps)
        return carry_out(self, outboxes)

    monkeypatch.setattr(Schedules, "carry_out", counted)
    schedulers = [Scheduler(queue) for _ in range(3)]
    stop = time.monotonic() + 3.5

    def sweep(scheduler: Scheduler) -> None:
        try:
            while time.monotonic() < stop:
                scheduler.pass_once()
        except threading.BrokenBarrierError:
            pass  # another one stopped first
        finally:
            racing.abort()

    threads = [threading.Thread(target=sweep, args=(s,)) for s in schedulers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    made = sum(s.counts["occurrences"] for s in schedulers)
    lost = sum(s.counts["schedule_races_lost"] for s in schedulers)
    jobs = jobs_of(queue, redis_client, "orders")
    assert made >= 10, made
    assert lost > 0  # they did race (each read when the others had: those that saw a schedule due all claimed it)
    assert len(attempts) == len(set(attempts)) == made  # no create was ever sent twice
    assert len(jobs) == made + len(infos)  # the first ones were made by the PUTs
    for info in infos:  # each schedule's occurrences: consecutive on its calendar, none missing
        mine = sorted(at for job_id, at in jobs.items() if job_id.startswith(f"{info.name}@"))
        assert mine == [info.created_at_ms + k * SECOND for k in range(1, len(mine) + 1)]


def test_three_schedulers_that_find_the_same_schedules_due_claim_each_once(
    make_queue: MakeQueue, redis_client: redis.Redis, racing: threading.Barrier
) -> None:
    queue = make_queue(partitions=1)
    infos = [queue.schedule("orders", f"s{i}", every=1) for i in range(5)]
    sleep_until_server_ms(redis_client, max(info.next_run_at_ms or 0 for info in infos))
    schedulers = [Scheduler(queue) for _ in range(3)]
    threads = [threading.Thread(target=s.pass_once) for s in schedulers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert sorted(s.counts["occurrences"] for s in schedulers) == [0, 0, 5]
    assert sorted(s.counts["schedule_races_lost"] for s in schedulers) == [0, 5, 5]
    assert len(jobs_of(queue, redis_client, "orders")) == 10


def test_a_sweep_that_dies_after_its_claim_is_taken_over_once_the_claim_expires(
    queue: Queue, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = queue.schedule("orders", "s", every=1)
    first = info.next_run_at_ms
    sleep_until_server_ms(redis_client, first)
    dying = Scheduler(queue, claim_ms=2000)

    def die(outboxes: Any) -> list[bool]:
        raise Died

    monkeypatch.setattr(dying.store, "carry_out", die)
    with pytest.raises(Died):
        dying.pass_once()
    claimed = progress_of(queue, redis_client, "orders", "s")
    assert claimed is not None
    assert claimed.claim
    made = claimed.last_ms or 0
    assert made > first
    assert (made - first) % SECOND == 0
    with pytest.raises(JobNotFound):
        occurrence(queue, "orders", "s", made)

    other = Scheduler(queue)
    other.pass_once()
    if server_ms(redis_client) < int(due_at(queue, redis_client, "orders", "s") or 0):
        assert other.counts["occurrences"] == 0  # the claim has not expired: left alone
    sleep_until_server_ms(redis_client, int(due_at(queue, redis_client, "orders", "s") or 0))
    other.pass_once()
    assert other.counts["occurrences"] == 1  # taken over: the claimed occurrence made, late: due at once
    assert occurrence(queue, "orders", "s", made).run_at_ms >= made
    assert progress_of(queue, redis_client, "orders", "s") == Progress(claimed.generation, made)
    assert due_at(queue, redis_client, "orders", "s") == made


def test_a_claimant_too_slow_to_start_its_writes_leaves_them_to_the_next_sweep(
    queue: Queue, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = queue.schedule("orders", "s", every=1)
    sleep_until_server_ms(redis_client, info.next_run_at_ms)
    slow = Scheduler(queue, claim_ms=400)
    monkeypatch.setattr(occurrences, "in_time", lambda claimed_at, claim_ms: False)
    slow.pass_once()
    monkeypatch.undo()
    assert slow.counts["occurrences"] == 0
    assert len(jobs_of(queue, redis_client, "orders")) == 1  # only the first, made by the PUT
    claimed = progress_of(queue, redis_client, "orders", "s")
    assert claimed is not None
    assert claimed.claim
    sleep_until_server_ms(redis_client, int(due_at(queue, redis_client, "orders", "s") or 0))
    Scheduler(queue).pass_once()
    assert occurrence(queue, "orders", "s", claimed.last_ms or 0).state in ("delayed", "ready")


def test_a_put_that_dies_before_its_job_writes_is_finished_by_the_sweep(
    queue: Queue, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    dying = Schedules(queue, claim_ms=300)

    def die(outboxes: Any) -> list[bool]:
        raise Died

    monkeypatch.setattr(dying, "carry_out", die)
    with pytest.raises(Died):
        dying.put("orders", "s", Schedule.model_validate({"every": 60}))
    info = queue.get_schedule("orders", "s")  # the definition is there at once; its job is not
    with pytest.raises(JobNotFound):
        occurrence(queue, "orders", "s", info.next_run_at_ms)
    sleep_until_server_ms(redis_client, int(due_at(queue, redis_client, "orders", "s") or 0))
    Scheduler(queue).pass_once()
    assert occurrence(queue, "orders", "s", info.next_run_at_ms).state == "delayed"
    settled = progress_of(queue, redis_client, "orders", "s")
    assert settled is not None
    assert (settled.last_ms, settled.claim, settled.outbox) == (info.next_run_at_ms, "", ())


def test_a_put_waits_for_a_claim_in_the_way_then_cancels_what_it_was_making(
    queue: Queue, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = queue.schedule("orders", "s", every=1, body="old")
    sleep_until_server_ms(redis_client, info.next_run_at_ms)
    dying = Scheduler(queue, claim_ms=300)
    monkeypatch.setattr(dying.store, "carry_out", lambda outboxes: [False])  # its writes failed, say
    dying.pass_once()
    claimed = progress_of(queue, redis_client, "orders", "s")
    assert claimed is not None
    assert claimed.claim
    deadline = int(due_at(queue, redis_client, "orders", "s") or 0)
    replaced = queue.schedule("orders", "s", every=60, body="new")  # waits out the 300 ms claim
    assert replaced.created_at_ms >= deadline
    with pytest.raises(JobNotFound):  # what the dead claim was making: cancelled, or never made
        occurrence(queue, "orders", "s", claimed.last_ms or 0)
    assert occurrence(queue, "orders", "s", replaced.next_run_at_ms).body == "new"
    settled = progress_of(queue, redis_client, "orders", "s")
    assert settled is not None
    assert (settled.last_ms, settled.claim, settled.outbox) == (replaced.next_run_at_ms, "", ())


def test_a_sweep_that_read_the_old_definition_cannot_advance_the_new_one(
    queue: Queue, redis_client: redis.Redis
) -> None:
    """A replace bumps the generation: a sweep holding the progress read before it loses its claim,
    even when the new progress is otherwise the same (same pending occurrence)."""
    info = queue.schedule("orders", "hourly", cron="@hourly", body="old")
    partition = queue.keys.for_schedule("orders", "hourly")
    stale = calls.schedule_read(partition, ["orders/hourly"]).run(redis_client)
    queue.schedule("orders", "hourly", cron="@hourly", body="new")
    old = Progress.decode(stale.schedules[0].progress or "")
    advance = calls.Move("orders/hourly", old.encode(), Progress(old.generation, 1, "t").encode(), calls.CLAIM)
    assert calls.schedules_cas(partition, [advance], 5000).run(redis_client).made == [False]
    assert occurrence(queue, "orders", "hourly", info.next_run_at_ms).body == "new"
