"""The pure parts of ``delayq.store.schedules``: a schedule's progress as stored, its next runs at a given
time (the pending occurrence, or what the sweep makes next by the catch-up rule), and what a write
of a schedule must cancel."""

from __future__ import annotations

import pytest

from delayq.core.calendar import CronCalendar, EveryCalendar
from delayq.core.recurring import Schedule, ScheduleInfo
from delayq.store.calls import Move
from delayq.store.schedules import (
    CANCEL,
    CREATE,
    FORGET,
    REPLACE,
    Definition,
    Progress,
    Step,
    _replacing,
    settling,
    upcoming,
)

T0 = 1_795_680_000_000  # 2026-11-26T08:00:00Z
SECOND = 1000
EVERY_10 = EveryCalendar(every_ms=10 * SECOND, anchor_ms=T0, start_ms=T0)


@pytest.mark.parametrize(
    "raw",
    [
        "7|1795680000000||",
        "7|||",
        "12|1795680000000|ab12|c1795680000000",
        "3|1795680000000|ab12|x1795670000000,x1795675000000,r1795680000000",
        "9|1795680000000|ab12|x1795680000000,d",
    ],
)
def test_progress_reads_back_as_written(raw: str) -> None:
    progress = Progress.decode(raw)
    assert progress.encode() == raw
    assert progress.tail() == raw.split("|", 1)[1]


def test_progress_fields() -> None:
    progress = Progress.decode("3|1795680000000|ab12|x1795679990000,r1795680000000,d")
    assert progress.generation == 3
    assert progress.last_ms == T0
    assert progress.claim == "ab12"
    assert progress.outbox == (Step(CANCEL, T0 - 10 * SECOND), Step(REPLACE, T0), Step(FORGET))
    assert Progress.decode("4|||") == Progress(4, None)


def test_a_definition_reads_back_with_its_creation_time() -> None:
    schedule = Schedule.model_validate({"every": 60, "body": {"é": [1, None]}, "start_at": "2026-11-26T08:00:00Z"})
    definition = Definition(schedule, T0 - 5)
    again = Definition.decode(definition.encode())
    assert again == definition
    assert again.calendar() == schedule.calendar(T0 - 5)


@pytest.mark.parametrize(
    ("last", "now", "expected"),
    [
        # the pending occurrence is ahead: it is the next run
        (T0 + 10 * SECOND, T0 + 1, [T0 + 10 * SECOND, T0 + 20 * SECOND, T0 + 30 * SECOND]),
        # it has just fallen due: the sweep makes the one after it next
        (T0 + 10 * SECOND, T0 + 10 * SECOND, [T0 + 20 * SECOND, T0 + 30 * SECOND, T0 + 40 * SECOND]),
        # no sweep for a while: the latest missed one, due at once, then the calendar from there
        (T0, T0 + 95 * SECOND, [T0 + 90 * SECOND, T0 + 100 * SECOND, T0 + 110 * SECOND]),
        # nothing made yet (the calendar had ended when it was written)
        (None, T0, []),
    ],
)
def test_upcoming_runs(last: int | None, now: int, expected: list[int]) -> None:
    assert list(upcoming(EVERY_10, last, now, count=3)) == expected


def test_upcoming_runs_stop_at_the_end() -> None:
    ending = EveryCalendar(every_ms=10 * SECOND, anchor_ms=T0, start_ms=T0, end_ms=T0 + 20 * SECOND)
    assert upcoming(ending, T0 + 10 * SECOND, T0) == (T0 + 10 * SECOND, T0 + 20 * SECOND)
    assert upcoming(ending, T0 + 20 * SECOND, T0 + 20 * SECOND) == ()  # the last one made has fallen due
    assert upcoming(ending, T0, T0 + 60 * SECOND) == (T0 + 20 * SECOND,)  # the latest missed, then none


def test_upcoming_runs_of_a_cron_calendar_across_the_spring_change() -> None:
    paris = CronCalendar.of("30 2 * * *", "Europe/Paris")
    last = 1_774_661_400_000  # 2026-03-28T01:30:00Z, 02:30 CET
    # 29 March: 02:30 never comes; its run is at the end of the gap, 03:00 CEST (01:00Z); then 02:30 CEST
    assert upcoming(paris, last, last + 1, count=3) == (1_774_746_000_000, 1_774_830_600_000, 1_774_917_000_000)


def test_a_write_cancels_the_pending_occurrence_and_an_unfinished_outboxs() -> None:
    new = T0 + 60 * SECOND
    assert _replacing("s", None, T0, new) == (Step(CREATE, new),)
    assert _replacing("s", None, T0, None) == ()
    pending = Progress(1, T0 + SECOND)  # ahead: cancelled
    assert _replacing("s", pending, T0, new) == (Step(CANCEL, T0 + SECOND), Step(CREATE, new))
    assert _replacing("s", Progress(1, T0), T0, new) == (Step(CREATE, new),)  # fallen due: it runs, as made
    unfinished = Progress(1, T0 + SECOND, "tok", (Step(CANCEL, T0 - SECOND), Step(CREATE, T0 + SECOND)))
    assert _replacing("s", unfinished, T0, None) == (Step(CANCEL, T0 - SECOND), Step(CANCEL, T0 + SECOND))
    deleting = Progress(1, T0, "tok", (Step(CANCEL, T0 - SECOND), Step(FORGET)))
    assert _replacing("s", deleting, T0, None) == (Step(CANCEL, T0 - SECOND),)


def test_a_new_first_occurrence_with_the_pending_ones_id_replaces_its_job() -> None:
    pending = Progress(1, T0 + 300)  # s@...08:00:00Z, at .300
    assert _replacing("s", pending, T0, T0 + 700) == (Step(REPLACE, T0 + 700),)  # same second, same id
    assert _replacing("s", pending, T0, T0 + SECOND) == (Step(CANCEL, T0 + 300), Step(CREATE, T0 + SECOND))


def test_settling_clears_the_outbox_or_forgets_a_deleted_schedule() -> None:
    claimed = Progress(4, T0, "tok", (Step(CREATE, T0),))
    assert settling("t/s", claimed) == Move("t/s", "4|1795680000000|tok|c1795680000000", "4|1795680000000||", T0)
    deleting = Progress(4, T0, "tok", (Step(CANCEL, T0), Step(FORGET)))
    assert settling("t/s", deleting) == Move("t/s", deleting.encode(), "", None)


def test_schedule_info_answers_like_the_contract() -> None:
    schedule = Schedule.model_validate({"cron": "0 8 * * *", "timezone": "Europe/Paris", "body": {"a": 1}})
    info = ScheduleInfo("reports", "daily", schedule, T0 - 1, (T0, T0 + 86_400_000), created=True)
    assert info.status == 201
    assert info.to_dict() == {
        "topic": "reports",
        "name": "daily",
        "cron": "0 8 * * *",
        "every": None,
        "timezone": "Europe/Paris",
        "body": {"a": 1},
        "start_at": None,
        "end_at": None,
        "key": None,
        "retries": None,
        "timeout": None,
        "backoff": None,
        "created_at": "2026-11-26T07:59:59.999Z",
        "created_at_ms": T0 - 1,
        "next_run_at": "2026-11-26T08:00:00.000Z",
        "next_run_at_ms": T0,
        "next_runs": ["2026-11-26T08:00:00.000Z", "2026-11-27T08:00:00.000Z"],
    }
    ended = ScheduleInfo("reports", "daily", schedule, T0 - 1, ())
    assert (ended.status, ended.to_dict()["next_run_at"], ended.to_dict()["next_runs"]) == (200, None, [])
