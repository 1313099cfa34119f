"""When a recurring schedule's occurrences fall: cron expressions read as wall-clock times in an
IANA time zone, and intervals of elapsed seconds. Pure: no clock, no Redis. Every instant is epoch
milliseconds, UTC.

cronsim parses the expressions (Debian cron's syntax, and its checks); the walk through the calendar
and the time zone math are done here, because the contract's daylight-saving rule is not Debian's.
Debian cron (and so cronsim) keeps "wildcard" jobs such as ``*/15 * * * *`` on elapsed time across a
change: they run twice in a repeated hour and not at all in a skipped one. delayq applies one rule to
every expression:

- a local time that a change skips runs once, at the first instant after the gap (all the skipped
  times of one gap make that one occurrence);
- a local time that a change repeats runs once, at the first of its two instants.

Both follow from one mapping of wall-clock times to instants (``CronCalendar._instant``) that never
goes back as the wall-clock time goes forward, so the walk is done on the wall clock, where a cron
expression is simple, and its result mapped to an instant at the end. The walk skips whole months,
days and hours that cannot match: ``0 0 29 2 *`` looks at one day a year, never at every minute.

Zone rules come from the ``tzdata`` package, not from the machine: every sweeper must compute the
same instants (an occurrence's id is its instant), and a Lambda runtime promises no system zone data.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import MAXYEAR, UTC, date, datetime, timedelta
from functools import cache, lru_cache
from importlib import resources
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

MAX_EVERY_S = 31_622_400  # 366 days
SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_VALUES = ("0-59", "0-23", "1-31", "1-12 or JAN-DEC", "0-7 (0 and 7 are Sunday) or SUN-SAT")
_SYNTAX = "*, lists (1,15), ranges (1-5) and steps (*/15, 0-30/10)"
_MAX_MONTHS = 12 * 100  # a walk that finds no day in a hundred years stops (none does: 29 February is the rarest)
_ONE_MINUTE = timedelta(minutes=1)
_ONE_DAY = timedelta(days=1)
_ONE_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Cron:
    """A five-field expression, parsed: the values each field allows. Weekdays are 0 (Sunday) to 6.

    ``either_day`` is Vixie cron's rule, which cron, cronsim and croniter share: when both day fields
    are restricted (neither starts with ``*``), a day matching either of them matches
    (``0 0 1 * MON``: the 1st of each month, and every Monday); otherwise a day must match both.
    """

    minutes: tuple[int, ...]  # sorted, as are hours and months
    hours: tuple[int, ...]
    days: frozenset[int]
    months: tuple[int, ...]
    weekdays: frozenset[int]
    either_day: bool

    def day_matches(self, day: int, weekday: int) -> bool:
        if self.either_day:
            return day in self.days or weekday in self.weekdays
        return day in self.days and weekday in self.weekdays

    def next_match(self, start: datetime) -> datetime | None:
        """The first wall-clock time at or after ``start`` (a whole minute) that the expression matches."""
        today = start.date()
        day = self._next_day(today)
        if day == today:
            at = self._first_time(start.hour, start.minute)
            if at is not None:
                return datetime(today.year, today.month, today.day, *at)
            day = self._next_day(today + _ONE_DAY)
        if day is None:
            return None
        return datetime(day.year, day.month, day.day, self.hours[0], self.minutes[0])

    def last_match(self, end: datetime) -> datetime | None:
        """The last wall-clock time at or before ``end`` (a whole minute) that the expression matches."""
        today = end.date()
        day = self._last_day(today)
        if day == today:
            at = self._last_time(end.hour, end.minute)
            if at is not None:
                return datetime(today.year, today.month, today.day, *at)
            day = self._last_day(today - _ONE_DAY)
        if day is None:
            return None
        return datetime(day.year, day.month, day.day, self.hours[-1], self.minutes[-1])

    def _first_time(self, hour: int, minute: int) -> tuple[int, int] | None:
        """The first (hour, minute) of a matching day at or after the given one."""
        i = bisect_left(self.hours, hour)
        if i < len(self.hours) and self.hours[i] == hour:
            j = bisect_left(self.minutes, minute)
            if j < len(self.minutes):
                return hour, self.minutes[j]
            i += 1
        return (self.hours[i], self.minutes[0]) if i < len(self.hours) else None

    def _last_time(self, hour: int, minute: int) -> tuple[int, int] | None:
        """The last (hour, minute) of a matching day at or before the given one."""
        i = bisect_right(self.hours, hour) - 1
        if i >= 0 and self.hours[i] == hour:
            j = bisect_right(self.minutes, minute) - 1
            if j >= 0:
                return hour, self.minutes[j]
            i -= 1
        return (self.hours[i], self.minutes[-1]) if i >= 0 else None

    def _next_day(self, start: date) -> date | None:
        """The first matching day at or after ``start``: months the expression excludes are skipped whole."""
        year, month, first = start.year, start.month, start.day
        for _ in range(_MAX_MONTHS):
            if month in self.months and (day := self._day_in_month(year, month, first, _days_in(year, month))):
                return date(year, month, day)
            i = bisect_right(self.months, month)
            year, month = (year, self.months[i]) if i < len(self.months) else (year + 1, self.months[0])
            first = 1
            if year > MAXYEAR:
                return None
        return None

    def _last_day(self, end: date) -> date | None:
        """The last matching day at or before ``end``."""
        year, month, last = end.year, end.month, end.day
        for _ in range(_MAX_MONTHS):
            if month in self.months and (day := self._day_in_month(year, month, last, 1)):
                return date(year, month, day)
            i = bisect_left(self.months, month) - 1
            year, month = (year, self.months[i]) if i >= 0 else (year - 1, self.months[-1])
            last = _days_in(year, month)
            if year < 1:
                return None
        return None

    def _day_in_month(self, year: int, month: int, first: int, last: int) -> int | None:
        """The first matching day of a month going from ``first`` to ``last`` (either way), or None."""
        weekday_of_1st = date(year, month, 1).isoweekday() % 7
        step = 1 if last >= first else -1
        for day in range(first, last + step, step):
            if self.day_matches(day, (weekday_of_1st + day - 1) % 7):
                return day
        return None


def _days_in(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


@lru_cache(maxsize=1024)
def parse_cron(expression: str) -> Cron:
    """A cron expression (five fields, or an ``@`` shorthand) parsed; ValueError saying which part is wrong.

    Names of months and weekdays are case-insensitive, 7 is Sunday as 0 is. cronsim's extensions
    (a seconds field, ``L``, ``W``, ``#``) are refused: they are no part of the contract.
    """
    text = expression.strip()
    if not text.isascii():
        raise ValueError("must be ASCII: five fields (minute hour day-of-month month day-of-week) or an @ shorthand")
    if text.startswith("@"):
        if text.lower() not in SHORTHANDS:
            raise ValueError(f"unknown shorthand {text!r}: use one of {', '.join(SHORTHANDS)}")
        text = SHORTHANDS[text.lower()]
    fields = text.split()
    if len(fields) != len(FIELDS):
        raise ValueError(f"must have five fields (minute hour day-of-month month day-of-week), not {len(fields)}")
    try:
        parsed = CronSim(text, _EPOCH)
    except CronSimError as exc:
        raise ValueError(_wrong_part(fields, str(exc))) from None
    days, weekdays = parsed.days, parsed.weekdays
    if not all(isinstance(day, int) and 1 <= day <= 31 for day in days):
        raise ValueError(f"day-of-month {fields[2]!r}: L and LW are not supported; use {_VALUES[2]}, {_SYNTAX}")
    if not all(isinstance(weekday, int) for weekday in weekdays):
        raise ValueError(f"day-of-week {fields[4]!r}: L and # are not supported; use {_VALUES[4]}, {_SYNTAX}")
    return Cron(
        minutes=tuple(sorted(parsed.minutes)),
        hours=tuple(sorted(parsed.hours)),
        days=frozenset(day for day in days if isinstance(day, int)),
        months=tuple(sorted(parsed.months)),
        weekdays=frozenset(weekday % 7 for weekday in weekdays if isinstance(weekday, int)),
        either_day=not parsed.day_and,
    )


def _wrong_part(fields: list[str], problem: str) -> str:
    """cronsim's "Bad minute" as a message naming the field, what it holds and what it may hold."""
    for i, name in enumerate(FIELDS):
        if problem == f"Bad {name}":
            if i == 2 and _parses(f"0 0 {fields[2]} * *"):
                return f"day-of-month {fields[2]!r} never falls in month {fields[3]!r}"
            return f"{name} {fields[i]!r} is not valid: use {_VALUES[i]}, {_SYNTAX}"
    return f"is not a valid cron expression ({problem})"


def _parses(text: str) -> bool:
    try:
        CronSim(text, _EPOCH)
    except CronSimError:
        return False
    return True


@cache
def zone_names() -> frozenset[str]:
    """Every IANA zone name the ``tzdata`` package holds (``Europe/Paris``, ``UTC``, ``US/Eastern``...)."""
    return frozenset(resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8").split())


# The tz database keeps, for old systems, zones named by an abbreviation (CET, EST, EST5EDT) and fixed
# offsets (Etc/GMT+5, whose sign is the reverse of ISO's): a schedule written with one does not follow
# the clock of the place its author meant (EST never changes to EDT). Refused, as docs/schedules.md says.
ABBREVIATED_ZONE = re.compile(r"[A-Z]{3,5}[0-9]?(?:[A-Z]{3,4})?|GMT[+-]?0|Etc/(?:GMT|UTC|UCT)[+-]?[0-9]*|Etc/\w+")
NOT_ABBREVIATED = frozenset({"UTC", "GMT", "Etc/UTC", "PRC", "ROC", "ROK"})  # UTC, or a country's clock


@cache
def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``, read from the ``tzdata`` package; ValueError for an unknown name, and
    for an abbreviation or a fixed offset (``ABBREVIATED_ZONE``)."""
    if name not in zone_names():
        spelled = next((known for known in sorted(zone_names()) if known.lower() == name.lower()), None)
        hint = f"did you mean {spelled}?" if spelled else "use an IANA name such as Europe/Paris or America/New_York"
        raise ValueError(f"unknown time zone {name!r}: {hint}")
    if ABBREVIATED_ZONE.fullmatch(name) and name not in NOT_ABBREVIATED:
        raise ValueError(
            f"time zone {name!r} is an abbreviation or a fixed offset, not a place's clock (it does not follow "
            "daylight saving time as the place does): use an IANA name such as Europe/Paris or America/New_York"
        )
    with resources.files("tzdata.zoneinfo").joinpath(*name.split("/")).open("rb") as file:
        return ZoneInfo.from_file(file, key=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Calendar(ABC):
    """The occurrences of one schedule: instants (epoch ms) from ``start_ms`` (one at exactly
    ``start_ms`` is made) to ``end_ms`` (inclusive); None is no bound."""

    start_ms: int | None = None
    end_ms: int | None = None

    def next_after(self, t_ms: int) -> int | None:
        """The first occurrence strictly after ``t_ms``, or None once the calendar has ended."""
        if self.start_ms is not None:
            t_ms = max(t_ms, self.start_ms - 1)
        found = self._first_after(t_ms)
        if found is None or (self.end_ms is not None and found > self.end_ms):
            return None
        return found

    def last_at_or_before(self, t_ms: int) -> int | None:
        """The last occurrence at or before ``t_ms``, or None if none is."""
        if self.end_ms is not None:
            t_ms = min(t_ms, self.end_ms)
        found = self._last_at_or_before(t_ms)
        if found is None or (self.start_ms is not None and found < self.start_ms):
            return None
        return found

    def next_runs(self, after_ms: int, count: int = 5) -> list[int]:
        """Up to ``count`` occurrences strictly after ``after_ms``, in order."""
        runs: list[int] = []
        while len(runs) < count and (at := self.next_after(runs[-1] if runs else after_ms)) is not None:
            runs.append(at)
        return runs

    def next_to_create(self, last_ms: int, now_ms: int) -> int | None:
        """The catch-up rule: the occurrence to create after ``last_ms`` (the last one created) when
        a sweep runs at ``now_ms``. The next one while it is still ahead; when some fell due with no
        sweep to create them, only the latest of them (due at once), and the calendar goes on from
        there. None once the calendar has ended."""
        following = self.next_after(last_ms)
        if following is None or following > now_ms:
            return following
        return self.last_at_or_before(now_ms)

    @abstractmethod
    def _first_after(self, t_ms: int) -> int | None:
        """The first occurrence strictly after ``t_ms``, bounds aside."""

    @abstractmethod
    def _last_at_or_before(self, t_ms: int) -> int | None:
        """The last occurrence at or before ``t_ms``, bounds aside."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EveryCalendar(Calendar):
    """``every``: the instants ``anchor_ms + k * every_ms`` for every whole k, within the bounds.

    An interval is elapsed time, not wall-clock time: every 3,600 s stays 3,600 s apart across a
    daylight-saving change (the wall clock says 2 hours or none), and a time zone plays no part."""

    every_ms: int
    anchor_ms: int

    def _first_after(self, t_ms: int) -> int:
        return self.anchor_ms + ((t_ms - self.anchor_ms) // self.every_ms + 1) * self.every_ms

    def _last_at_or_before(self, t_ms: int) -> int:
        return self.anchor_ms + (t_ms - self.anchor_ms) // self.every_ms * self.every_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class CronCalendar(Calendar):
    """``cron``: the wall-clock times an expression matches in a zone, as instants by the DST rule
    (see the module's docstring)."""

    cron: Cron
    zone: ZoneInfo

    @classmethod
    def of(
        cls, expression: str, timezone: str = "UTC", *, start_ms: int | None = None, end_ms: int | None = None
    ) -> CronCalendar:
        """The calendar of an expression in a zone named as IANA does; ValueError if either is wrong."""
        return cls(cron=parse_cron(expression), zone=zone(timezone), start_ms=start_ms, end_ms=end_ms)

    def _first_after(self, t_ms: int) -> int | None:
        try:
            local = self.cron.next_match(self._wall_after(t_ms))
            return None if local is None else self._instant(local)
        except OverflowError:  # past the year 9999
            return None

    def _last_at_or_before(self, t_ms: int) -> int | None:
        try:
            local = self.cron.last_match(self._wall_at_or_before(t_ms))
            return None if local is None else self._instant(local)
        except OverflowError:  # before the year 1
            return None

    def _wall_after(self, t_ms: int) -> datetime:
        """The first whole minute of wall-clock time whose instant is after ``t_ms``."""
        here = _utc(t_ms).astimezone(self.zone)
        if here.fold:  # the second pass of a repeated hour: its times ran in the first
            return _ceil_minute(self._repeat_end(here, t_ms))
        return _floor_minute(here.replace(tzinfo=None)) + _ONE_MINUTE

    def _wall_at_or_before(self, t_ms: int) -> datetime:
        """The last whole minute of wall-clock time whose instant is at or before ``t_ms``."""
        here = _utc(t_ms).astimezone(self.zone)
        if here.fold:  # every time of the repeated hour ran in its first pass, before t_ms
            return _ceil_minute(self._repeat_end(here, t_ms)) - _ONE_MINUTE
        return _floor_minute(here.replace(tzinfo=None))

    def _repeat_end(self, here: datetime, t_ms: int) -> datetime:
        """The wall-clock time at which the repeat that ``here`` (at ``t_ms``, second pass) is in ends."""
        wall = here.replace(tzinfo=None)
        before = self._offset(wall, fold=0)
        change_ms = self._change_between(_ms(wall - before), t_ms)
        return _utc(change_ms).replace(tzinfo=None) + before

    def _instant(self, local: datetime) -> int:
        """A wall-clock time as the instant it runs at: the change's instant for a skipped time, the
        first of the two instants for a repeated one (fold 0), the only one otherwise."""
        before, after = self._offset(local, fold=0), self._offset(local, fold=1)
        if before < after:  # in a gap (PEP 495: fold 0 takes the offset before the change)
            return self._change_between(_ms(local - after), _ms(local - before))
        return _ms(local - before)

    def _offset(self, local: datetime, fold: int) -> timedelta:
        offset = local.replace(tzinfo=self.zone, fold=fold).utcoffset()
        assert offset is not None  # a ZoneInfo always has one
        return offset

    def _change_between(self, lo_ms: int, hi_ms: int) -> int:
        """The instant of the offset change between ``lo_ms`` and ``hi_ms``: zone rules change on
        whole seconds, so a binary search on seconds finds it in a dozen steps for an hour."""
        lo, hi = lo_ms // 1000, -(-hi_ms // 1000)
        offset = datetime.fromtimestamp(lo, self.zone).utcoffset()
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if datetime.fromtimestamp(mid, self.zone).utcoffset() == offset:
                lo = mid
            else:
                hi = mid
        return hi * 1000


def _utc(t_ms: int) -> datetime:
    return _EPOCH_UTC + timedelta(milliseconds=t_ms)


def _ms(utc_wall: datetime) -> int:
    """A naive UTC datetime as epoch milliseconds."""
    return (utc_wall - _EPOCH) // _ONE_MS


def _floor_minute(wall: datetime) -> datetime:
    return wall.replace(second=0, microsecond=0)


def _ceil_minute(wall: datetime) -> datetime:
    floor = _floor_minute(wall)
    return floor if floor == wall else floor + _ONE_MINUTE
