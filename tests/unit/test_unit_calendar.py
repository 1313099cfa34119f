"""The calendar of recurring schedules (``delayq.core.calendar``): pure, no Redis, no clock.

Tables first, as arq's ``tests/test_cron.py`` has for ``next_cron``: each row is an expression, a
zone, an instant, and the occurrences that follow it, written as local times with their offset so a
reader can check them against a wall clock. Then hypothesis properties, checked against references
that share no code with the calendar: cronsim's own iteration (for UTC, where Debian's DST quirks do
not apply) and a minute-by-minute scan of the instants around each DST change.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from functools import cache

import pytest
from cronsim import CronSim
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from delayq.core.calendar import (
    MAX_EVERY_S,
    SHORTHANDS,
    Calendar,
    CronCalendar,
    EveryCalendar,
    parse_cron,
    zone,
    zone_names,
)

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000


def ms(text: str) -> int:
    """An ISO-8601 instant (with its offset) as epoch milliseconds."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def local(instant_ms: int, timezone: str) -> str:
    """An instant as the local time in ``timezone``, with its offset: ``2026-03-29T03:00:00+02:00``."""
    return datetime.fromtimestamp(instant_ms / 1000, zone(timezone)).isoformat()


def runs(expression: str, timezone: str, after: str, count: int) -> list[str]:
    calendar = CronCalendar.of(expression, timezone)
    return [local(at, timezone) for at in calendar.next_runs(ms(after), count)]


# ----------------------------------------------------------------------------- syntax


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # steps, ranges, lists
        ("*/15 * * * *", "2026-11-26T08:07:30Z", ["08:15", "08:30", "08:45", "09:00"]),
        ("5-20/5 * * * *", "2026-11-26T08:00:00Z", ["08:05", "08:10", "08:15", "08:20", "09:05"]),
        ("7/20 * * * *", "2026-11-26T08:00:00Z", ["08:07", "08:27", "08:47", "09:07"]),
        ("0 9-17/4 * * *", "2026-11-26T00:00:00Z", ["09:00", "13:00", "17:00", "27T09:00"]),
        ("0,30 8,12 * * *", "2026-11-26T08:00:00Z", ["08:30", "12:00", "12:30", "27T08:00"]),
        ("0 0 1,15 * *", "2026-11-20T00:00:00Z", ["2026-12-01T00:00", "2026-12-15T00:00", "2027-01-01T00:00"]),
        ("0 12 1 1-3/2 *", "2026-11-26T00:00:00Z", ["2027-01-01T12:00", "2027-03-01T12:00", "2028-01-01T12:00"]),
        # names, any case; 7 is Sunday as 0 is
        ("0 12 1 JAN,jul *", "2026-11-26T00:00:00Z", ["2027-01-01T12:00", "2027-07-01T12:00"]),
        ("0 12 1 Jan-Mar/2 *", "2026-11-26T00:00:00Z", ["2027-01-01T12:00", "2027-03-01T12:00"]),
        ("30 6 * * mon-fri", "2026-11-27T07:00:00Z", ["30T06:30", "2026-12-01T06:30"]),  # Friday -> Monday
        ("0 0 * * 7", "2026-11-26T00:00:00Z", ["29T00:00", "2026-12-06T00:00"]),
        ("0 0 * * SUN", "2026-11-26T00:00:00Z", ["29T00:00", "2026-12-06T00:00"]),
        ("0 0 * * 5-7", "2026-11-26T00:00:00Z", ["27T00:00", "28T00:00", "29T00:00", "2026-12-04T00:00"]),
        # both day fields restricted: either matches (the 13th, and every Friday)
        (
            "0 0 13 * fri",
            "2026-11-26T00:00:00Z",
            ["27T00:00", "2026-12-04T00:00", "2026-12-11T00:00", "2026-12-13T00:00", "2026-12-18T00:00"],
        ),
        # a day field starting with * makes both required: the 1st, 11th, 21st or 31st, on a Friday
        ("0 0 */10 * fri", "2026-11-26T00:00:00Z", ["2026-12-11T00:00", "2027-01-01T00:00"]),
        ("0 0 13 * *", "2026-11-26T00:00:00Z", ["2026-12-13T00:00", "2027-01-13T00:00"]),
        # the @ shorthands
        ("@hourly", "2026-11-26T08:30:00Z", ["09:00", "10:00"]),
        ("@daily", "2026-11-26T08:30:00Z", ["27T00:00", "28T00:00"]),
        ("@midnight", "2026-11-26T08:30:00Z", ["27T00:00", "28T00:00"]),
        ("@DAILY", "2026-11-26T08:30:00Z", ["27T00:00", "28T00:00"]),
        ("@weekly", "2026-11-26T08:30:00Z", ["29T00:00", "2026-12-06T00:00"]),
        ("@monthly", "2026-11-26T08:30:00Z", ["2026-12-01T00:00", "2027-01-01T00:00"]),
        ("@yearly", "2026-11-26T08:30:00Z", ["2027-01-01T00:00", "2028-01-01T00:00"]),
        ("@annually", "2026-11-26T08:30:00Z", ["2027-01-01T00:00", "2028-01-01T00:00"]),
        ("  0 8 * * *  ", "2026-11-26T08:30:00Z", ["27T08:00"]),
    ],
)
def test_syntax(expression, after, expected):
    """Each expected entry completes 2026-11-26T (so ``08:15`` is 2026-11-26T08:15 and ``27T00:00`` the
    27th) in UTC."""
    full = [_complete(entry) for entry in expected]
    assert runs(expression, "UTC", after, len(full)) == full


def _complete(entry: str) -> str:
    if entry[:4].isdigit():
        return f"{entry}:00+00:00"
    if "T" in entry:
        return f"2026-11-{entry}:00+00:00"
    return f"2026-11-26T{entry}:00+00:00"


def test_shorthands_are_the_usual_expressions():
    for shorthand, expression in SHORTHANDS.items():
        assert parse_cron(shorthand) == parse_cron(expression)
    assert set(SHORTHANDS) == {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


def test_parsed_fields():
    cron = parse_cron("0,30 9-17 */10 jan-mar 1-5")
    assert cron.minutes == (0, 30)
    assert cron.hours == tuple(range(9, 18))
    assert cron.days == {1, 11, 21, 31}
    assert cron.months == (1, 2, 3)
    assert cron.weekdays == {1, 2, 3, 4, 5}
    assert not cron.either_day
    assert parse_cron("0 0 1 * 7").weekdays == {0}
    assert parse_cron("0 0 1 * 7").either_day
    assert not parse_cron("0 0 * * 1").either_day


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("61 * * * *", "minute '61' is not valid: use 0-59, *, lists (1,15), ranges (1-5) and steps"),
        ("5-1 * * * *", "minute '5-1' is not valid"),
        ("*/0 * * * *", "minute '*/0' is not valid"),
        ("x * * * *", "minute 'x' is not valid"),
        ("* 24 * * *", "hour '24' is not valid: use 0-23"),
        ("* * 0 * *", "day-of-month '0' is not valid: use 1-31"),
        ("* * 32 * *", "day-of-month '32' is not valid"),
        ("* * * 13 *", "month '13' is not valid: use 1-12 or JAN-DEC"),
        ("* * * foo *", "month 'foo' is not valid"),
        ("* * * * 8", "day-of-week '8' is not valid: use 0-7 (0 and 7 are Sunday) or SUN-SAT"),
        ("* * * * mon-", "day-of-week 'mon-' is not valid"),
        ("* * * * jan", "day-of-week 'jan' is not valid"),
        ("0 0 30 2 *", "day-of-month '30' never falls in month '2'"),
        ("0 0 31 4,6,9,11 *", "day-of-month '31' never falls in month '4,6,9,11'"),
        ("0 0 L * *", "day-of-month 'L': L and LW are not supported"),
        ("0 0 LW * *", "day-of-month 'LW': L and LW are not supported"),
        ("0 0 * * 5L", "day-of-week '5L': L and # are not supported"),
        ("0 0 * * MON#2", "day-of-week 'MON#2': L and # are not supported"),
        ("* * * *", "must have five fields (minute hour day-of-month month day-of-week), not 4"),
        ("0 * * * * *", "must have five fields (minute hour day-of-month month day-of-week), not 6"),
        ("", "must have five fields (minute hour day-of-month month day-of-week), not 0"),
        ("@reboot", "unknown shorthand '@reboot': use one of @yearly, @annually, @monthly, @weekly, @daily"),
        ("@every 5m", "unknown shorthand '@every 5m'"),
        ("0 0 * * mön", "must be ASCII"),
        ("0 0 * * \u017fun", "must be ASCII"),  # the long s upper-cases to S: SUN would slip through
    ],
)
def test_bad_expressions_say_which_part_is_wrong(expression, message):
    with pytest.raises(ValueError, match="^" + _escaped(message)):
        parse_cron(expression)


def _escaped(text: str) -> str:
    return re.escape(text)


def test_a_day_that_exists_only_with_the_weekday_is_valid():
    """``0 0 30 2 mon``: 30 February never comes, but with both fields restricted every Monday of
    February matches."""
    assert runs("0 0 30 2 mon", "UTC", "2027-01-01T00:00:00Z", 2) == [
        "2027-02-01T00:00:00+00:00",
        "2027-02-08T00:00:00+00:00",
    ]


# ----------------------------------------------------------------------------- 29 February, month ends


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("2026-01-01T00:00:00Z", ["2028-02-29", "2032-02-29", "2036-02-29"]),
        ("2028-02-29T00:00:00Z", ["2032-02-29"]),  # strictly after
        ("2028-02-28T23:59:59.999Z", ["2028-02-29"]),
        ("2096-03-01T00:00:00Z", ["2104-02-29"]),  # 2100 is not a leap year
        ("2399-03-01T00:00:00Z", ["2400-02-29"]),  # 2400 is
    ],
)
def test_29_february(after, expected):
    assert runs("0 0 29 2 *", "UTC", after, len(expected)) == [f"{day}T00:00:00+00:00" for day in expected]


def test_29_february_in_a_zone():
    assert runs("0 0 29 2 *", "Europe/Paris", "2026-01-01T00:00:00Z", 2) == [
        "2028-02-29T00:00:00+01:00",
        "2032-02-29T00:00:00+01:00",
    ]


def test_29_february_backwards():
    calendar = CronCalendar.of("0 0 29 2 *")
    assert calendar.last_at_or_before(ms("2104-02-28T00:00:00Z")) == ms("2096-02-29T00:00:00Z")


def test_the_31st_skips_shorter_months():
    assert runs("0 0 31 * *", "UTC", "2026-01-31T00:00:00Z", 6) == [
        f"2026-{month}-31T00:00:00+00:00" for month in ("03", "05", "07", "08", "10", "12")
    ]


def test_the_30th_skips_february():
    assert runs("0 0 30 * *", "UTC", "2027-01-30T00:00:00Z", 2) == [
        "2027-03-30T00:00:00+00:00",
        "2027-04-30T00:00:00+00:00",
    ]


def test_the_last_days_of_months():
    """28-31 makes the last days of every month, whatever its length (29 only in a leap February)."""
    assert runs("0 0 28-31 2 *", "UTC", "2027-01-01T00:00:00Z", 3) == [
        "2027-02-28T00:00:00+00:00",
        "2028-02-28T00:00:00+00:00",
        "2028-02-29T00:00:00+00:00",
    ]
    assert runs("59 23 31 12 *", "UTC", "2026-11-26T00:00:00Z", 2) == [
        "2026-12-31T23:59:00+00:00",
        "2027-12-31T23:59:00+00:00",
    ]


def test_the_31st_in_a_zone():
    assert runs("0 0 31 * *", "America/New_York", "2026-01-01T00:00:00Z", 2) == [
        "2026-01-31T00:00:00-05:00",
        "2026-03-31T00:00:00-04:00",
    ]


# ----------------------------------------------------------------------------- DST


@pytest.mark.parametrize(
    ("expression", "timezone", "after", "expected"),
    [
        # Europe/Paris, spring: 02:00 CET jumps to 03:00 CEST on 2026-03-29 (01:00Z)
        (
            "30 2 * * *",
            "Europe/Paris",
            "2026-03-28T12:00:00Z",
            ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
        ),
        (
            "*/15 2 * * *",  # four skipped times make one occurrence
            "Europe/Paris",
            "2026-03-28T12:00:00Z",
            ["2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00", "2026-03-30T02:15:00+02:00"],
        ),
        (
            "*/30 * * * *",  # 02:00, 02:30 and 03:00 are one instant
            "Europe/Paris",
            "2026-03-29T01:00:00+01:00",
            ["2026-03-29T01:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"],
        ),
        (
            "0 3 * * *",
            "Europe/Paris",
            "2026-03-28T12:00:00Z",
            ["2026-03-29T03:00:00+02:00", "2026-03-30T03:00:00+02:00"],
        ),
        (
            "0 1 * * *",
            "Europe/Paris",
            "2026-03-28T12:00:00Z",
            ["2026-03-29T01:00:00+01:00", "2026-03-30T01:00:00+02:00"],
        ),
        # Europe/Paris, autumn: 03:00 CEST goes back to 02:00 CET on 2026-10-25 (01:00Z)
        (
            "30 2 * * *",
            "Europe/Paris",
            "2026-10-24T12:00:00Z",
            ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
        ),
        (
            "*/30 * * * *",  # the second 02:00 and 02:30 do not run
            "Europe/Paris",
            "2026-10-25T01:30:00+02:00",
            ["2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-25T03:00:00+01:00"],
        ),
        (
            "*/30 * * * *",  # from inside the second pass: on to 03:00, nothing in the past
            "Europe/Paris",
            "2026-10-25T02:10:00+01:00",
            ["2026-10-25T03:00:00+01:00", "2026-10-25T03:30:00+01:00"],
        ),
        ("*/30 * * * *", "Europe/Paris", "2026-10-25T02:00:00+01:00", ["2026-10-25T03:00:00+01:00"]),  # at the change
        ("*/30 * * * *", "Europe/Paris", "2026-10-25T02:59:59+02:00", ["2026-10-25T03:00:00+01:00"]),
        # America/New_York: 02:00 EST -> 03:00 EDT on 2026-03-08, 02:00 EDT -> 01:00 EST on 2026-11-01
        (
            "30 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
        ),
        (
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T12:00:00Z",
            ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
        ),
        (
            "0 * * * *",  # 24 occurrences in a day of 25 hours: 01:00 EST (the second 01:00) does not run
            "America/New_York",
            "2026-11-01T00:30:00-04:00",
            ["2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"],
        ),
        (
            "0 * * * *",  # 23 in a day of 23 hours: 02:00 never comes, and 03:00 is the change itself
            "America/New_York",
            "2026-03-08T00:30:00-05:00",
            ["2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"],
        ),
        # Australia/Lord_Howe shifts by 30 minutes: 02:00 -> 02:30 on 2026-10-04, 02:00 -> 01:30 on 2026-04-05
        (
            "15 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-03T00:00:00Z",
            ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
        ),
        (
            "*/10 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-03T00:00:00Z",
            [
                "2026-10-04T02:30:00+11:00",
                "2026-10-04T02:40:00+11:00",
                "2026-10-04T02:50:00+11:00",
                "2026-10-05T02:00:00+11:00",
            ],
        ),
        (
            "45 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T00:00:00Z",
            ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
        ),
        (
            "*/20 * * * *",
            "Australia/Lord_Howe",
            "2026-04-05T01:10:00+11:00",
            [
                "2026-04-05T01:20:00+11:00",
                "2026-04-05T01:40:00+11:00",
                "2026-04-05T02:00:00+10:30",
                "2026-04-05T02:20:00+10:30",
            ],
        ),
        # America/Santiago changes at midnight: 00:00 -> 01:00 on 2026-09-06, 24:00 -> 23:00 on 2026-04-04
        (
            "0 0 * * *",
            "America/Santiago",
            "2026-09-05T12:00:00-04:00",
            ["2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"],
        ),
        (
            "0 0 6 9 *",
            "America/Santiago",
            "2026-09-05T12:00:00-04:00",
            ["2026-09-06T01:00:00-03:00", "2027-09-06T00:00:00-03:00"],
        ),
        (
            "30 23 * * *",
            "America/Santiago",
            "2026-04-04T12:00:00-03:00",
            ["2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"],
        ),
        (
            "0 0 * * *",
            "America/Santiago",
            "2026-04-04T12:00:00-03:00",
            ["2026-04-05T00:00:00-04:00", "2026-04-06T00:00:00-04:00"],
        ),
        # Asia/Kolkata (+05:30, no DST) and UTC: nothing moves
        (
            "0 8 * * *",
            "Asia/Kolkata",
            "2026-11-26T00:00:00Z",
            ["2026-11-26T08:00:00+05:30", "2026-11-27T08:00:00+05:30"],
        ),
        (
            "30 * * * *",
            "Asia/Kolkata",
            "2026-03-28T23:45:00Z",
            ["2026-03-29T05:30:00+05:30", "2026-03-29T06:30:00+05:30"],
        ),
        ("30 2 * * *", "UTC", "2026-03-28T12:00:00Z", ["2026-03-29T02:30:00+00:00", "2026-03-30T02:30:00+00:00"]),
        ("0 * * * *", "UTC", "2026-10-25T00:30:00Z", ["2026-10-25T01:00:00+00:00", "2026-10-25T02:00:00+00:00"]),
    ],
)
def test_dst(expression, timezone, after, expected):
    assert runs(expression, timezone, after, len(expected)) == expected


@pytest.mark.parametrize(
    ("expression", "timezone", "at", "expected"),
    [
        ("30 2 * * *", "Europe/Paris", "2026-03-29T12:00:00+02:00", "2026-03-29T03:00:00+02:00"),
        ("*/30 * * * *", "Europe/Paris", "2026-10-25T02:10:00+01:00", "2026-10-25T02:30:00+02:00"),  # second pass
        ("*/30 * * * *", "Europe/Paris", "2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+02:00"),  # at one
        ("*/30 * * * *", "Europe/Paris", "2026-10-25T03:29:00+01:00", "2026-10-25T03:00:00+01:00"),
        ("45 1 * * *", "Australia/Lord_Howe", "2026-04-05T01:50:00+10:30", "2026-04-05T01:45:00+11:00"),
        ("0 0 * * *", "America/Santiago", "2026-09-05T23:59:59-04:00", "2026-09-05T00:00:00-04:00"),
        ("0 0 * * *", "America/Santiago", "2026-09-06T01:00:00-03:00", "2026-09-06T01:00:00-03:00"),
    ],
)
def test_last_at_or_before_across_dst(expression, timezone, at, expected):
    calendar = CronCalendar.of(expression, timezone)
    assert local(calendar.last_at_or_before(ms(at)), timezone) == expected


@pytest.mark.parametrize(
    ("day", "hours", "count"),
    [("2026-03-29", 23, 23), ("2026-10-25", 25, 24), ("2026-11-26", 24, 24)],
)
def test_hourly_on_the_days_of_the_changes(day, hours, count):
    """Paris: a day of 23 hours has 23 hourly occurrences, a day of 25 hours 24 (its repeated hour
    runs once), any other day 24."""
    calendar = CronCalendar.of("0 * * * *", "Europe/Paris")
    midnight = ms(f"{day}T00:00:00+02:00" if day == "2026-10-25" else f"{day}T00:00:00+01:00")
    next_midnight = midnight + hours * HOUR_MS
    that_day = [at for at in calendar.next_runs(midnight - 1, 30) if at < next_midnight]
    assert len(that_day) == count
    assert that_day[0] == midnight
    assert calendar.next_after(that_day[-1]) == next_midnight


def test_every_is_elapsed_time_across_dst():
    """Every 3,600 s stays 3,600 s apart when Paris' clock jumps: the wall clock reads 01:00, 03:00,
    04:00 in spring and 02:00, 02:00, 03:00 in autumn. A zone plays no part in ``every``."""
    spring = EveryCalendar(every_ms=HOUR_MS, anchor_ms=ms("2026-03-29T00:00:00Z"))
    instants = spring.next_runs(ms("2026-03-28T23:30:00Z"), 3)
    assert [local(at, "Europe/Paris") for at in instants] == [
        "2026-03-29T01:00:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T04:00:00+02:00",
    ]
    autumn = EveryCalendar(every_ms=HOUR_MS, anchor_ms=ms("2026-10-25T00:00:00Z"))
    instants = autumn.next_runs(ms("2026-10-24T23:30:00Z"), 3)
    assert [local(at, "Europe/Paris") for at in instants] == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]


# ----------------------------------------------------------------------------- every


@pytest.mark.parametrize(
    ("every_s", "after", "expected"),
    [
        (1, "2026-11-26T08:00:00Z", ["08:00:01", "08:00:02", "08:00:03"]),
        (1, "2026-11-26T08:00:00.500Z", ["08:00:01", "08:00:02"]),
        (300, "2026-11-26T08:00:00Z", ["08:05:00", "08:10:00"]),
        (300, "2026-11-26T07:58:00Z", ["08:00:00", "08:05:00"]),
        (300, "2026-11-26T08:04:59.999Z", ["08:05:00"]),
        (7, "2026-11-26T08:00:01Z", ["08:00:07", "08:00:14"]),
    ],
)
def test_every(every_s, after, expected):
    calendar = EveryCalendar(every_ms=every_s * 1000, anchor_ms=ms("2026-11-26T08:00:00Z"))
    assert calendar.next_runs(ms(after), len(expected)) == [ms(f"2026-11-26T{hms}Z") for hms in expected]


def test_every_keeps_the_anchors_milliseconds():
    calendar = EveryCalendar(every_ms=1000, anchor_ms=ms("2026-11-26T08:00:00.250Z"))
    assert calendar.next_runs(ms("2026-11-26T08:00:00Z"), 2) == [
        ms("2026-11-26T08:00:00.250Z"),
        ms("2026-11-26T08:00:01.250Z"),
    ]


def test_every_at_its_longest():
    anchor = ms("2028-01-01T00:00:00Z")
    calendar = EveryCalendar(every_ms=MAX_EVERY_S * 1000, anchor_ms=anchor, start_ms=anchor)
    assert MAX_EVERY_S == 366 * 86_400
    assert [local(at, "UTC") for at in calendar.next_runs(anchor - 1, 2)] == [
        "2028-01-01T00:00:00+00:00",
        "2029-01-01T00:00:00+00:00",  # 2028 has 366 days
    ]


# ----------------------------------------------------------------------------- start_at, end_at


START = ms("2026-11-26T08:00:00Z")


def daily(start_ms: int | None = None, end_ms: int | None = None) -> CronCalendar:
    return CronCalendar.of("0 8 * * *", start_ms=start_ms, end_ms=end_ms)


def test_an_occurrence_exactly_at_start_at_is_made():
    calendar = daily(start_ms=START)
    assert calendar.next_after(START - DAY_MS * 10) == START
    assert calendar.next_after(START - 1) == START
    assert calendar.next_after(START) == START + DAY_MS  # strictly after


def test_none_before_start_at():
    calendar = daily(start_ms=START + 1)
    assert calendar.next_after(START - DAY_MS) == START + DAY_MS
    assert calendar.last_at_or_before(START + HOUR_MS) is None


def test_an_occurrence_exactly_at_end_at_is_made_and_none_after():
    calendar = daily(end_ms=START)
    assert calendar.next_after(START - 1) == START
    assert calendar.next_after(START) is None
    assert calendar.next_runs(START - 3 * DAY_MS, 5) == [START - 2 * DAY_MS, START - DAY_MS, START]
    assert calendar.last_at_or_before(START + 10 * DAY_MS) == START


def test_nothing_once_end_at_has_passed():
    calendar = daily(end_ms=START + HOUR_MS)
    assert calendar.next_after(START + HOUR_MS) is None
    assert calendar.next_after(START + 100 * DAY_MS) is None
    assert calendar.next_runs(START + HOUR_MS, 5) == []


def test_start_equal_to_end_on_an_occurrence_makes_one():
    calendar = daily(start_ms=START, end_ms=START)
    assert calendar.next_runs(0, 5) == [START]


def test_bounds_between_occurrences_make_none():
    calendar = daily(start_ms=START + 1, end_ms=START + DAY_MS - 1)
    assert calendar.next_runs(0, 5) == []
    assert calendar.last_at_or_before(START + 10 * DAY_MS) is None


def test_every_from_start_at():
    calendar = EveryCalendar(every_ms=60_000, anchor_ms=START, start_ms=START, end_ms=START + 120_000)
    assert calendar.next_runs(0, 5) == [START, START + 60_000, START + 120_000]
    assert calendar.next_after(START + 120_000) is None


def test_the_end_of_time():
    """Past the year 9999 there is nothing, rather than an error."""
    assert CronCalendar.of("0 0 31 12 *").next_after(ms("9999-12-31T00:00:00Z")) is None
    assert CronCalendar.of("* * * * *").next_after(ms("9999-12-31T23:59:00Z")) is None
    kiritimati = CronCalendar.of("59 23 * * *", "Pacific/Kiritimati")  # +14:00
    assert kiritimati.next_after(ms("9999-12-31T00:00:00Z")) == ms("9999-12-31T23:59:00+14:00")
    assert kiritimati.next_after(ms("9999-12-31T10:00:00Z")) is None
    assert CronCalendar.of("0 0 1 1 *").last_at_or_before(0) == 0


# ----------------------------------------------------------------------------- catch-up


@pytest.mark.parametrize(
    ("last", "now", "expected"),
    [
        ("08:00", "08:02", "08:05"),  # on time: the next one, still ahead
        ("08:00", "08:05", "08:05"),  # due right now
        ("08:00", "08:07", "08:05"),  # one missed: made at once
        ("08:00", "09:32", "09:30"),  # many missed: only the latest
        ("09:30", "09:32", "09:35"),  # and the calendar goes on from there
    ],
)
def test_catch_up_makes_only_the_latest_missed(last, now, expected):
    calendar = CronCalendar.of("*/5 * * * *")
    day = "2026-11-26T"
    assert calendar.next_to_create(ms(f"{day}{last}:00Z"), ms(f"{day}{now}:00Z")) == ms(f"{day}{expected}:00Z")


def test_catch_up_stops_at_end_at():
    calendar = CronCalendar.of("*/5 * * * *", end_ms=ms("2026-11-26T08:20:00Z"))
    assert calendar.next_to_create(ms("2026-11-26T08:00:00Z"), ms("2026-11-26T10:00:00Z")) == ms("2026-11-26T08:20:00Z")
    assert calendar.next_to_create(ms("2026-11-26T08:20:00Z"), ms("2026-11-26T10:00:00Z")) is None


def test_catch_up_of_every_after_a_day_down():
    anchor = ms("2026-11-26T08:00:00.250Z")
    calendar = EveryCalendar(every_ms=60_000, anchor_ms=anchor)
    assert calendar.next_to_create(anchor, anchor + DAY_MS + 30_000) == anchor + DAY_MS
    assert calendar.next_to_create(anchor + DAY_MS, anchor + DAY_MS + 30_000) == anchor + DAY_MS + 60_000


def test_catch_up_across_a_gap():
    """Down through Paris' spring change: the latest missed is the gap's one occurrence."""
    calendar = CronCalendar.of("*/30 * * * *", "Europe/Paris")
    created = calendar.next_to_create(ms("2026-03-29T01:30:00+01:00"), ms("2026-03-29T03:10:00+02:00"))
    assert local(created, "Europe/Paris") == "2026-03-29T03:00:00+02:00"


# ----------------------------------------------------------------------------- zones


def test_zones_come_from_tzdata():
    assert {"UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"} <= zone_names()
    assert zone("Europe/Paris").key == "Europe/Paris"
    assert zone("Europe/Paris") is zone("Europe/Paris")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Europe/Pariss", "unknown time zone 'Europe/Pariss': use an IANA name such as Europe/Paris"),
        ("europe/paris", "unknown time zone 'europe/paris': did you mean Europe/Paris?"),
        ("utc", "unknown time zone 'utc': did you mean UTC?"),
        ("CEST", "unknown time zone 'CEST'"),
        ("+02:00", "unknown time zone '+02:00'"),
        ("../../etc/passwd", "unknown time zone '../../etc/passwd'"),
        ("", "unknown time zone ''"),
    ],
)
def test_unknown_zones(name, message):
    with pytest.raises(ValueError, match="^" + _escaped(message)):
        zone(name)


@pytest.mark.parametrize("name", ["CET", "EST", "EST5EDT", "MST", "Etc/GMT+5", "Etc/GMT-2", "GMT0", "Etc/Zulu"])
def test_abbreviations_and_fixed_offsets_are_refused_though_the_tz_database_has_them(name):
    """As docs/schedules.md says: EST never turns into EDT, Etc/GMT+5 is five hours behind, not ahead."""
    with pytest.raises(ValueError, match=f"^time zone '{_escaped(name)}' is an abbreviation or a fixed offset"):
        zone(name)


@pytest.mark.parametrize("name", ["UTC", "GMT", "Etc/UTC", "PRC", "ROK", "Japan", "US/Eastern"])
def test_utc_and_the_names_of_places_are_zones(name):
    assert zone(name).key == name


# ----------------------------------------------------------------------------- properties

ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata"]
YEAR_2000_MS = ms("2000-01-01T00:00:00Z")
YEAR_2100_MS = ms("2100-01-01T00:00:00Z")


def field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """One cron field: *, a value or name, a range, a step, or a list of them."""
    value = st.integers(low, high)
    atom = st.one_of(value.map(str), st.sampled_from(names)) if names else value.map(str)
    span = st.tuples(value, value).map(lambda pair: "{}-{}".format(*sorted(pair)))
    step = st.integers(1, high - low + 1)
    single = st.one_of(
        st.just("*"),
        step.map("*/{}".format),
        atom,
        span,
        st.tuples(span, step).map("{0[0]}/{0[1]}".format),
    )
    return st.one_of(single, st.lists(st.one_of(atom, span), min_size=2, max_size=4).map(",".join))


MONTHS = ("JAN", "feb", "Mar", "apr", "MAY", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("SUN", "mon", "Tue", "wed", "thu", "fri", "sat")
expressions = st.tuples(field(0, 59), field(0, 23), field(1, 31), field(1, 12, MONTHS), field(0, 7, DAYS)).map(
    " ".join
) | st.sampled_from(sorted(SHORTHANDS))
instants = st.integers(YEAR_2000_MS, YEAR_2100_MS)


@cache
def changes(timezone: str, year: int) -> tuple[int, ...]:
    """The instants (ms) at which the zone's offset changes in a year, found hour by hour then minute
    by minute: slow, simple, and nothing like the calendar's own search."""
    tz = zone(timezone)
    found = []
    hour = datetime(year, 1, 1, tzinfo=UTC)
    while hour.year == year:
        after = hour + timedelta(hours=1)
        if hour.astimezone(tz).utcoffset() != after.astimezone(tz).utcoffset():
            minute = hour
            while minute.astimezone(tz).utcoffset() == hour.astimezone(tz).utcoffset():
                minute += timedelta(minutes=1)
            found.append(int(minute.timestamp() * 1000))
        hour = after
    return tuple(found)


@st.composite
def zoned_instants(draw: st.DrawFn) -> tuple[str, int]:
    """A zone and an instant: anywhere in 2000-2100, or within 90 minutes of one of the zone's DST
    changes (inside a gap's aftermath or a repeated hour's second pass, where mistakes hide)."""
    timezone = draw(st.sampled_from(ZONES))
    near = changes(timezone, draw(st.integers(2020, 2040)))
    if near and draw(st.booleans()):
        return timezone, draw(st.sampled_from(near)) + draw(st.integers(-90 * MINUTE_MS, 90 * MINUTE_MS))
    return timezone, draw(instants)


def calendar_of(expression: str, timezone: str, **bounds: int | None) -> CronCalendar:
    try:
        return CronCalendar.of(expression, timezone, **bounds)
    except ValueError:
        assume(False)
        raise


def wall_of(instant_ms: int, timezone: str) -> datetime:
    return datetime.fromtimestamp(instant_ms / 1000, zone(timezone))


@settings(deadline=None, max_examples=300)
@given(expression=expressions, after=instants)
def test_in_utc_the_calendar_is_cronsims(expression, after):
    """In UTC there is no DST: the calendar and cronsim's own iteration must agree exactly."""
    calendar = calendar_of(expression, "UTC")
    start = datetime.fromtimestamp(after / 1000, UTC).replace(tzinfo=None)
    expected = CronSim(SHORTHANDS.get(expression, expression), start.replace(microsecond=0))
    for occurrence in calendar.next_runs(after, 4):
        assert datetime.fromtimestamp(occurrence / 1000, UTC).replace(tzinfo=None) == next(expected)


@settings(deadline=None, max_examples=300)
@given(expression=expressions, zoned=zoned_instants())
def test_occurrences_increase_and_match_the_expression(expression, zoned):
    """Each occurrence is later than the last, and is either a wall-clock time the expression
    matches, met for the first time (not the second pass of a repeated hour), or the first instant
    after a gap that swallowed at least one matching time."""
    timezone, after = zoned
    calendar = calendar_of(expression, timezone)
    previous = after
    for occurrence in calendar.next_runs(after, 4):
        assert occurrence > previous
        previous = occurrence
        wall = wall_of(occurrence, timezone)
        assert wall.fold == 0
        assert occurrence % 1000 == 0
        just_before = wall_of(occurrence - 1000, timezone).replace(tzinfo=None)
        first_match_after = next(CronSim(SHORTHANDS.get(expression, expression), just_before))
        assert first_match_after <= wall.replace(tzinfo=None)


@settings(deadline=None, max_examples=300)
@given(expression=expressions, zoned=zoned_instants())
def test_forward_and_backward_agree(expression, zoned):
    """The next occurrence after t is the next after the last one at or before t, and the last at or
    before it is itself: no occurrence hides between them."""
    timezone, after = zoned
    calendar = calendar_of(expression, timezone)
    following = calendar.next_after(after)
    assert following is not None
    assert following > after
    assert calendar.last_at_or_before(following) == following
    assert calendar.last_at_or_before(following - 1) == calendar.last_at_or_before(after)
    last = calendar.last_at_or_before(after)
    assert last is not None
    assert last <= after
    assert calendar.next_after(last) == following


@settings(deadline=None, max_examples=200)
@given(
    expression=expressions,
    timezone=st.sampled_from(ZONES),
    start=instants,
    span=st.integers(0, 40 * DAY_MS),
    after=st.integers(-40 * DAY_MS, 80 * DAY_MS),
)
def test_never_before_start_nor_after_end(expression, timezone, start, span, after):
    calendar = calendar_of(expression, timezone, start_ms=start, end_ms=start + span)
    unbounded = calendar_of(expression, timezone)
    occurrences = calendar.next_runs(start + after, 5)
    assert all(start <= at <= start + span for at in occurrences)
    from_start = unbounded.next_runs(max(start + after, start - 1), 5)
    assert occurrences == [at for at in from_start if at <= start + span]
    first = unbounded.next_after(start - 1)
    if first is not None and first <= start + span:
        assert calendar.next_after(start - DAY_MS) == first


def reference(expression: str, timezone: str, begin_ms: int, end_ms: int) -> list[int]:
    """The occurrences in [begin, end] by the contract's rule, read literally: walk the instants one
    UTC minute at a time; a matching wall-clock time runs at the first instant at which the clock
    reads it or later (for a repeated time, its first pass; for a skipped one, the end of the gap)."""
    tz, found = zone(timezone), []
    walls = [
        datetime.fromtimestamp(at / 1000, tz).replace(tzinfo=None)
        for at in range(begin_ms - 3 * HOUR_MS, end_ms + 1, MINUTE_MS)
    ]
    seen = max(walls[:180])  # the latest wall-clock time reached before begin
    matching = matching_minutes(expression, min(walls) - timedelta(minutes=1), max(walls))
    for instant, wall in zip(range(begin_ms, end_ms + 1, MINUTE_MS), walls[180:], strict=True):
        if wall > seen:
            if any(seen < minute <= wall for minute in matching):
                found.append(instant)
            seen = wall
    return found


def matching_minutes(expression: str, after: datetime, until: datetime) -> list[datetime]:
    """The wall-clock minutes in (after, until] that cronsim matches (naive: cronsim does no zone math)."""
    found = []
    for minute in CronSim(SHORTHANDS.get(expression, expression), after):
        if minute > until:
            return found
        found.append(minute)
    return found


DST_ZONES = ["Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Europe/Dublin"]


@settings(deadline=None, max_examples=150)
@given(
    expression=expressions,
    timezone=st.sampled_from(DST_ZONES),
    year=st.integers(2024, 2032),
    which=st.integers(0, 1),
    shift=st.integers(-36 * 60, 12 * 60) | st.integers(-90, 90),  # or starting in or near the change
)
def test_around_dst_changes_the_calendar_is_the_reference(expression, timezone, year, which, shift):
    """Two days around a DST change, the calendar's occurrences are exactly the reference's."""
    calendar = calendar_of(expression, timezone)
    begin = changes(timezone, year)[which] + shift * MINUTE_MS
    end = begin + 2 * DAY_MS
    occurrences = []
    at = calendar.next_after(begin - 1)
    while at is not None and at <= end:
        occurrences.append(at)
        at = calendar.next_after(at)
    assert occurrences == reference(expression, timezone, begin, end)


@settings(deadline=None, max_examples=200)
@given(every_s=st.integers(1, MAX_EVERY_S), anchor=instants, after=instants, now_gap=st.integers(0, 400 * DAY_MS))
def test_every_properties(every_s, anchor, after, now_gap):
    calendar = EveryCalendar(every_ms=every_s * 1000, anchor_ms=anchor)
    following = calendar.next_after(after)
    assert following is not None
    assert after < following <= after + every_s * 1000
    assert (following - anchor) % (every_s * 1000) == 0
    created = calendar.next_to_create(after, after + now_gap)
    assert created is not None
    if following > after + now_gap:
        assert created == following
    else:
        assert created <= after + now_gap < created + every_s * 1000


@settings(deadline=None, max_examples=200)
@given(expression=expressions, timezone=st.sampled_from(ZONES), last=instants, down=st.integers(0, 10 * DAY_MS))
def test_catch_up_properties(expression, timezone, last, down):
    """What the catch-up makes is an occurrence after the last one made; it is the next one when the
    sweep is on time, and otherwise the latest one due, with none due after it."""
    calendar: Calendar = calendar_of(expression, timezone)
    now = last + down
    created = calendar.next_to_create(last, now)
    assert created is not None
    assert created > last
    following = calendar.next_after(created)
    assert following is not None
    if created <= now:
        assert following > now
    else:
        assert created == calendar.next_after(last)


@settings(deadline=None, max_examples=300)
@given(text=st.text(max_size=40))
def test_any_text_parses_or_is_refused_with_a_value_error(text):
    try:
        parse_cron(text)
    except ValueError as exc:
        message = str(exc)
    else:
        return
    assert message


@settings(deadline=None, max_examples=200)
@given(
    minutes=field(0, 59),
    timezone=st.sampled_from(DST_ZONES),
    year=st.integers(2024, 2032),
    which=st.integers(0, 1),
    offset=st.integers(-120, 120),
    extra_ms=st.integers(0, MINUTE_MS - 1),
)
def test_from_inside_a_change_nothing_runs_in_the_past_or_twice(*, minutes, timezone, year, which, offset, extra_ms):
    """Hourly expressions from instants in and around a change (a repeated hour's second pass, the
    minutes after a gap): the next occurrence is ahead, the last one behind, and the three hours
    that follow are the reference's."""
    calendar = calendar_of(f"{minutes} * * * *", timezone)
    begin = changes(timezone, year)[which] + offset * MINUTE_MS
    at = begin + extra_ms
    following, last = calendar.next_after(at), calendar.last_at_or_before(at)
    assert following is not None
    assert last is not None
    assert last <= at < following
    assert calendar.next_after(last) == following
    occurrences = []
    at = calendar.next_after(begin - 1)
    while at is not None and at <= begin + 3 * HOUR_MS:
        occurrences.append(at)
        at = calendar.next_after(at)
    assert occurrences == reference(f"{minutes} * * * *", timezone, begin, begin + 3 * HOUR_MS)
