"""A schedule's definition (``delayq.core.recurring``): validation naming each wrong field, the calendar it
makes, and the ids of its occurrences."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from delayq.core.calendar import MAX_EVERY_S, CronCalendar, EveryCalendar
from delayq.core.errors import InvalidField, TooLarge
from delayq.core.models import ID_PATTERN, NewJob, invalid
from delayq.core.recurring import (
    LAST_INSTANT_S,
    SCHEDULE_NAME_PATTERN,
    Schedule,
    check_schedule_name,
    occurrence_id,
    validate_schedule,
)
from delayq.store.queue import check_id

T0_MS = 1_795_680_000_000  # 2026-11-26T08:00:00Z


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def error_of(data: Any) -> tuple[str | None, str]:
    with pytest.raises(InvalidField) as info:
        validate_schedule(data)
    assert info.value.status == 422
    return info.value.field, info.value.message


def test_the_name_pattern_is_the_contracts():
    assert SCHEDULE_NAME_PATTERN == r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
    assert MAX_EVERY_S == 31_622_400


# ----------------------------------------------------------------------------- valid definitions


def test_a_cron_schedule():
    schedule = validate_schedule({"cron": "0 8 * * 1-5", "timezone": "Europe/Paris", "body": {"report": "daily"}})
    assert (schedule.cron, schedule.every, schedule.timezone) == ("0 8 * * 1-5", None, "Europe/Paris")
    calendar = schedule.calendar(created_ms=T0_MS)
    assert isinstance(calendar, CronCalendar)
    # Thursday 2026-11-26 09:00 in Paris is 08:00Z: the next weekday at 08:00 Paris is Friday's, 07:00Z
    assert calendar.next_runs(T0_MS, 2) == [ms("2026-11-27T07:00:00Z"), ms("2026-11-30T07:00:00Z")]


def test_defaults():
    schedule = validate_schedule({"every": 60})
    assert schedule.timezone == "UTC"
    assert (schedule.body, schedule.start_at, schedule.end_at) == (None, None, None)
    assert (schedule.retries, schedule.timeout, schedule.backoff) == (None, None, None)


def test_every_without_start_at_counts_from_the_creation():
    calendar = validate_schedule({"every": 300}).calendar(created_ms=T0_MS + 250)
    assert isinstance(calendar, EveryCalendar)
    assert calendar.next_after(T0_MS) == T0_MS + 250 + 300_000  # one interval after the creation
    assert calendar.next_runs(T0_MS + 250, 2) == [T0_MS + 250 + 300_000, T0_MS + 250 + 600_000]
    assert calendar.last_at_or_before(T0_MS + 299_000) is None  # the creation itself is no occurrence


def test_every_from_start_at_starts_exactly_there():
    schedule = validate_schedule({"every": 60, "start_at": "2026-11-26T09:00:00Z"})
    calendar = schedule.calendar(created_ms=T0_MS)
    assert calendar.next_after(T0_MS) == T0_MS + 3_600_000
    assert calendar.next_runs(T0_MS, 2) == [T0_MS + 3_600_000, T0_MS + 3_660_000]


def test_bounds_reach_the_calendar():
    schedule = validate_schedule({"cron": "@hourly", "start_at": T0_MS / 1000, "end_at": "2026-11-26T10:00:00+00:00"})
    assert schedule.start_ms() == T0_MS
    assert schedule.end_ms() == T0_MS + 2 * 3_600_000
    calendar = schedule.calendar(created_ms=0)
    assert calendar.next_runs(0, 5) == [T0_MS, T0_MS + 3_600_000, T0_MS + 7_200_000]


def test_a_schedule_whose_end_has_passed_is_valid_and_makes_nothing():
    schedule = validate_schedule({"cron": "* * * * *", "end_at": "2020-01-01T00:00:00Z"})
    assert schedule.calendar(created_ms=T0_MS).next_after(T0_MS) is None


@pytest.mark.parametrize(
    "data",
    [
        {"every": 1},
        {"every": MAX_EVERY_S},
        {"cron": "@daily", "timezone": "Asia/Kolkata"},
        {"cron": "0 0 29 2 *"},
        {"cron": "0 0 * * SUN", "start_at": 0},
        {"every": 5, "start_at": "2026-11-26T08:00:00Z", "end_at": "2026-11-26T08:00:00Z"},  # one occurrence
        {"every": 5, "end_at": "9999-12-31T23:59:59Z"},
        {"every": 5, "end_at": LAST_INSTANT_S},
        {"every": 5, "retries": 25, "timeout": 900, "backoff": [0, 366 * 86_400]},
        {"every": 5, "timezone": "US/Eastern"},
        {"every": 5, "body": [1, "two", {"three": None}]},
    ],
)
def test_valid(data):
    assert isinstance(validate_schedule(data), Schedule)


# ----------------------------------------------------------------------------- each wrong field named


CRON_HINT = "use 0-59, *, lists (1,15), ranges (1-5) and steps (*/15, 0-30/10)"


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({}, "cron", "give cron (a five-field expression) or every (seconds)"),
        ({"timezone": "Europe/Paris"}, "cron", "give cron (a five-field expression) or every (seconds)"),
        ({"cron": "* * * * *", "every": 60}, "cron", "give either cron or every, not both"),
        ({"cron": None, "every": None}, "cron", "give cron (a five-field expression) or every (seconds)"),
        ({"cron": "61 * * * *"}, "cron", f"minute '61' is not valid: {CRON_HINT}"),
        ({"cron": "0 8 * * monday"}, "cron", "day-of-week 'monday' is not valid"),
        ({"cron": "0 0 31 2 *"}, "cron", "day-of-month '31' never falls in month '2'"),
        ({"cron": "0 8 * *"}, "cron", "must have five fields (minute hour day-of-month month day-of-week), not 4"),
        ({"cron": "@reboot"}, "cron", "unknown shorthand '@reboot'"),
        ({"cron": "0 0 L * *"}, "cron", "day-of-month 'L': L and LW are not supported"),
        ({"cron": 5}, "cron", "Input should be a valid string"),
        ({"cron": "0 " * 300}, "cron", "String should have at most 512 characters"),
        ({"every": 0}, "every", "Input should be greater than or equal to 1"),
        ({"every": -5}, "every", "Input should be greater than or equal to 1"),
        ({"every": MAX_EVERY_S + 1}, "every", "Input should be less than or equal to 31622400"),
        ({"every": 1.5}, "every", "Input should be a valid integer"),
        ({"every": "60"}, "every", "Input should be a valid integer"),
        ({"every": True}, "every", "Input should be a valid integer"),
        ({"every": 60, "timezone": "Mars/Olympus_Mons"}, "timezone", "unknown time zone 'Mars/Olympus_Mons'"),
        ({"every": 60, "timezone": "europe/paris"}, "timezone", "unknown time zone 'europe/paris': did you mean"),
        ({"every": 60, "timezone": "+02:00"}, "timezone", "unknown time zone '+02:00'"),
        ({"every": 60, "timezone": None}, "timezone", "Input should be a valid string"),
        ({"every": 60, "timezone": "x" * 65}, "timezone", "String should have at most 64 characters"),
        ({"every": 60, "start_at": "2026-11-26T08:00:00"}, "start_at", "must carry a zone"),
        ({"every": 60, "start_at": "tomorrow"}, "start_at", "must be epoch seconds or an ISO-8601 date-time"),
        ({"every": 60, "start_at": -1}, "start_at", "must be epoch seconds >= 0"),
        ({"every": 60, "start_at": True}, "start_at", "must be epoch seconds or an ISO-8601 date-time"),
        ({"every": 60, "start_at": [1]}, "start_at", "must be epoch seconds or an ISO-8601 date-time"),
        ({"every": 60, "start_at": float("nan")}, "start_at", "must be epoch seconds or an ISO-8601 date-time"),
        ({"every": 60, "start_at": float("inf")}, "start_at", "must be epoch seconds or an ISO-8601 date-time"),
        ({"every": 60, "start_at": 10**400}, "start_at", "must be before the year 10000"),
        ({"every": 60, "start_at": LAST_INSTANT_S + 1}, "start_at", "must be before the year 10000"),
        ({"every": 60, "end_at": "9999-12-31T23:59:59-01:00"}, "end_at", "must be before the year 10000"),
        ({"every": 60, "end_at": "1969-12-31T23:59:59Z"}, "end_at", "must not be before 1970-01-01T00:00:00Z"),
        (
            {"every": 60, "start_at": "2026-11-26T08:00:00Z", "end_at": "2026-11-26T07:59:59.999Z"},
            "end_at",
            "must not be before start_at",
        ),
        ({"every": 60, "start_at": 1_800_000_000, "end_at": 1_799_999_999}, "end_at", "must not be before start_at"),
        ({"every": 60, "retries": 26}, "retries", "Input should be less than or equal to 25"),
        ({"every": 60, "timeout": 0.5}, "timeout", "Input should be greater than or equal to 1"),
        ({"every": 60, "backoff": []}, "backoff", "List should have at least 1 item"),
        ({"every": 60, "backoff": [5, -1]}, "backoff[1]", "Input should be greater than or equal to 0"),
        ({"every": 60, "delay": 5}, "delay", "unknown field"),
        ({"every": 60, "name": "daily"}, "name", "unknown field"),
    ],
)
def test_each_wrong_field_is_named(data, field, message):
    got_field, got_message = error_of(data)
    assert got_field == field
    assert got_message.startswith(message)


def test_a_definition_must_be_an_object():
    assert error_of([{"every": 60}]) == ("schedule", "must be a JSON object")


def test_a_body_over_256_kib_is_too_large():
    with pytest.raises(TooLarge) as info:
        validate_schedule({"every": 60, "body": "x" * 300_000})
    assert (info.value.status, info.value.field) == (413, "body")


def test_a_body_that_is_no_json_is_refused():
    assert error_of({"every": 60, "body": {1, 2}})[0] == "body"


def test_the_model_alone_names_the_field_too():
    with pytest.raises(ValidationError) as info:
        Schedule.model_validate({"cron": "0 8 * * *", "every": 5})
    assert (invalid(info.value).field, invalid(info.value).message) == ("cron", "give either cron or every, not both")


@pytest.mark.parametrize("override", ["retries", "timeout", "backoff"])
def test_overrides_have_a_jobs_limits(override):
    """One definition for both: the JSON schemas of the two fields are the same."""
    schedule = Schedule.model_json_schema()["properties"][override]
    job = NewJob.model_json_schema()["properties"][override]
    assert schedule == job


# ----------------------------------------------------------------------------- names and occurrence ids


@pytest.mark.parametrize("name", ["daily-report", "a", "0", "x" * 64, "billing:eu.daily_v2-b", "A.b:C"])
def test_good_names(name):
    assert check_schedule_name(name) == name


@pytest.mark.parametrize("name", ["", "-daily", ".daily", ":a", "x" * 65, "daily report", "a/b", "a@b", "é", "a\n", 5])
def test_bad_names(name):
    with pytest.raises(InvalidField) as info:
        check_schedule_name(name)
    assert (info.value.field, info.value.message) == ("name", f"must match {SCHEDULE_NAME_PATTERN}")


@pytest.mark.parametrize(
    ("name", "occurrence_ms", "expected"),
    [
        ("daily-report", T0_MS, "daily-report@2026-11-26T08:00:00Z"),
        ("every.second", T0_MS + 999, "every.second@2026-11-26T08:00:00Z"),  # to the second, floored
        ("every.second", T0_MS + 1000, "every.second@2026-11-26T08:00:01Z"),
        ("a:b", 0, "a:b@1970-01-01T00:00:00Z"),
        ("x" * 64, LAST_INSTANT_S * 1000, "x" * 64 + "@9999-12-31T23:59:59Z"),
    ],
)
def test_occurrence_ids(name, occurrence_ms, expected):
    assert occurrence_id(name, occurrence_ms) == expected


names = st.from_regex(SCHEDULE_NAME_PATTERN, fullmatch=True)
occurrences = st.integers(0, LAST_INSTANT_S * 1000 + 999)


@settings(deadline=None, max_examples=500)
@given(name=names, occurrence_ms=occurrences)
def test_every_occurrence_id_is_a_job_id(name, occurrence_ms):
    """The name pattern allows ``:`` and ``.``; every id made from a valid name is a valid job id, and
    reads back as the name and the occurrence's second."""
    job_id = occurrence_id(name, occurrence_ms)
    assert re.fullmatch(ID_PATTERN, job_id)
    assert check_id(job_id) == job_id
    read_name, second = job_id.split("@")
    assert read_name == name
    assert datetime.fromisoformat(second.replace("Z", "+00:00")) == datetime.fromtimestamp(occurrence_ms // 1000, UTC)


@settings(deadline=None, max_examples=200)
@given(name=names, first=occurrences, second=occurrences)
def test_occurrences_in_different_seconds_have_different_ids(name, first, second):
    same_second = first // 1000 == second // 1000
    assert (occurrence_id(name, first) == occurrence_id(name, second)) == same_second
