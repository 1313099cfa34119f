"""A recurring schedule as callers define it (``PUT /schedules/{topic}/{name}``), validated, the ids
of the jobs it makes, and how it is shown (``ScheduleInfo``). How it is stored and advanced is
``scheduler.py``.

The definition is checked whole before anything is written: every wrong field is an ``InvalidField``
naming it. Its ``start_at`` and ``end_at`` take the forms of a job's ``run_at``, and its job overrides
the limits of a job's, from the same definitions in ``models``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, cast

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .calendar import MAX_EVERY_S, Calendar, CronCalendar, EveryCalendar, parse_cron, zone
from .errors import InvalidField
from .models import NOT_A_TIME, STRICT, Backoff, FlowKey, JobOptions, Retries, Timeout, body_json, invalid
from .schedule import iso_utc, parse_run_at

SCHEDULE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
LAST_INSTANT_S = 253_402_300_799  # 9999-12-31T23:59:59Z: the calendar's last second
MAX_CRON_LENGTH = 512  # every value of every field listed one by one fits in 400 characters
NEXT_RUNS = 5  # how many next runs an answer lists

Bound = Annotated[float | str | None, Field(examples=["2026-12-01T00:00:00Z", 1795996800])]
_AS_RUN_AT = "epoch seconds, or ISO-8601 with a zone, as a job's run_at"

_NAME_RE = re.compile(SCHEDULE_NAME_PATTERN)
_TOO_LATE = "must be before the year 10000"


class Schedule(BaseModel):
    """``PUT /schedules/{topic}/{name}``: exactly one of ``cron`` or ``every``, a zone, bounds, and
    the body and overrides of the jobs it makes."""

    model_config = STRICT

    cron: str | None = Field(
        default=None,
        max_length=MAX_CRON_LENGTH,
        description="minute hour day-of-month month day-of-week, as wall-clock times in `timezone`; or @hourly, "
        "@daily, @weekly, @monthly, @yearly",
        examples=["0 8 * * 1-5", "*/15 * * * *", "@daily"],
    )
    every: int | None = Field(
        default=None, ge=1, le=MAX_EVERY_S, description="Seconds between occurrences (elapsed time)", examples=[300]
    )
    timezone: str = Field(
        default="UTC", max_length=64, description="IANA zone of `cron`'s times", examples=["Europe/Paris"]
    )
    body: Any = Field(default=None, description=JobOptions.model_fields["body"].description)
    start_at: Bound = Field(default=None, description=f"No occurrence before it, one exactly at it: {_AS_RUN_AT}")
    end_at: Bound = Field(default=None, description=f"No occurrence after it: {_AS_RUN_AT}")
    key: FlowKey = None
    retries: Retries = None
    timeout: Timeout = None
    backoff: Backoff = None

    @field_validator("cron")
    @classmethod
    def _cron_valid(cls, value: str | None) -> str | None:
        if value is not None:
            parse_cron(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone_known(cls, value: str) -> str:
        zone(value)
        return value

    @field_validator("start_at", "end_at", mode="before")
    @classmethod
    def _bound_valid(cls, value: Any) -> Any:
        """As ``run_at``, without its limit of 366 days: a schedule may end years from now."""
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise PydanticCustomError("bound_type", NOT_A_TIME)
        if isinstance(value, float) and not math.isfinite(value):
            raise PydanticCustomError("bound_type", NOT_A_TIME)
        if not isinstance(value, str) and value > LAST_INSTANT_S:  # before any arithmetic on a huge int
            raise ValueError(_TOO_LATE)
        ms = parse_run_at(value)  # ValueError for a negative number, a string not ISO-8601 or zoneless
        if ms < 0:
            raise ValueError("must not be before 1970-01-01T00:00:00Z")
        if ms > LAST_INSTANT_S * 1000:
            raise ValueError(_TOO_LATE)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Schedule:
        if self.cron is not None and self.every is not None:
            raise PydanticCustomError("cron_and_every", "give either cron or every, not both", {"field": "cron"})
        if self.cron is None and self.every is None:
            raise PydanticCustomError(
                "cron_or_every", "give cron (a five-field expression) or every (seconds)", {"field": "cron"}
            )
        start_ms, end_ms = self.start_ms(), self.end_ms()
        if start_ms is not None and end_ms is not None and end_ms < start_ms:
            raise PydanticCustomError("end_before_start", "must not be before start_at", {"field": "end_at"})
        return self

    def start_ms(self) -> int | None:
        return None if self.start_at is None else parse_run_at(self.start_at)

    def end_ms(self) -> int | None:
        return None if self.end_at is None else parse_run_at(self.end_at)

    def calendar(self, created_ms: int) -> Calendar:
        """The occurrences, for a schedule created (or last replaced) at ``created_ms``.

        ``every`` counts from ``start_at``, the first occurrence; without one, from the creation: the
        first occurrence is one interval after it. Store ``created_ms`` with the definition: the
        calendar of every later sweep must be this one."""
        start_ms, end_ms = self.start_ms(), self.end_ms()
        if self.every is not None:
            anchor_ms = created_ms if start_ms is None else start_ms
            first_ms = created_ms + 1 if start_ms is None else start_ms
            return EveryCalendar(every_ms=self.every * 1000, anchor_ms=anchor_ms, start_ms=first_ms, end_ms=end_ms)
        assert self.cron is not None  # one of the two, by _consistent
        return CronCalendar.of(self.cron, self.timezone, start_ms=start_ms, end_ms=end_ms)


_validate_schedule = Schedule.__pydantic_validator__.validate_python


def validate_schedule(item: Any) -> Schedule:
    """A schedule's definition as sent, validated whole (its body too); raises ``InvalidField``
    (``TooLarge`` for a body over 256 KiB) naming the first wrong field."""
    if not isinstance(item, dict):
        raise InvalidField("schedule", "must be a JSON object")
    try:
        schedule = cast(Schedule, _validate_schedule(item))
    except ValidationError as exc:
        raise invalid(exc) from None
    body_json(schedule.body)
    return schedule


def check_schedule_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidField("name", f"must match {SCHEDULE_NAME_PATTERN}")
    return name


def occurrence_id(name: str, occurrence_ms: int) -> str:
    """The id of the job a schedule makes for one occurrence, e.g. ``daily-report@2026-11-26T08:00:00Z``:
    the same in every sweeper, so an occurrence is created once however many race to create it."""
    second = datetime.fromtimestamp(occurrence_ms // 1000, UTC).replace(tzinfo=None)
    return f"{name}@{second.isoformat()}Z"


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as ``GET /schedules/{topic}/{name}`` and ``Queue.get_schedule`` show it: its
    definition as given, when that was written (``created_at_ms``: by the PUT that created or last
    replaced it), and its next runs, the first being its pending occurrence (none once it has ended).
    ``created``: the write that answered this made the schedule (201), rather than replaced it (200)."""

    topic: str
    name: str
    schedule: Schedule
    created_at_ms: int
    next_runs_ms: tuple[int, ...]
    created: bool = False

    @property
    def status(self) -> int:
        return 201 if self.created else 200

    @property
    def next_run_at_ms(self) -> int | None:
        return self.next_runs_ms[0] if self.next_runs_ms else None

    def to_dict(self) -> dict[str, Any]:
        next_ms = self.next_run_at_ms
        return {
            "topic": self.topic,
            "name": self.name,
            **self.schedule.model_dump(mode="json"),
            "created_at": iso_utc(self.created_at_ms),
            "created_at_ms": self.created_at_ms,
            "next_run_at": None if next_ms is None else iso_utc(next_ms),
            "next_run_at_ms": next_ms,
            "next_runs": [iso_utc(ms) for ms in self.next_runs_ms],
        }
