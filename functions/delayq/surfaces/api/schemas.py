"""What the API answers, as the OpenAPI document describes it: one model per answer, and the errors
each route can answer (``responses``); and the body of ``PUT /topics/{topic}/keys/{key}``
(``KeySettings``)."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from delayq.core.flows import MAX_KEY_CONCURRENCY, MAX_RATE, MIN_RATE
from delayq.core.models import STRICT
from delayq.core.recurring import Schedule as ScheduleIn
from delayq.store.listing import DEAD_ERRORS_SCAN


class ErrorOut(BaseModel):
    status: int
    error: str = Field(
        description="malformed, invalid, too_large, not_found, method_not_allowed, exists, reserved, dead, done, "
        "unavailable, not_replicated"
    )
    field: str | None = Field(description="The request field at fault, when there is one")
    message: str


class UnavailableOut(ErrorOut):
    """A 503: Redis down, failing over, loading or full (``unavailable``), or a create that too few
    replicas hold (``not_replicated``, with the counts)."""

    replicas: int | None = Field(
        default=None, description="not_replicated: how many replicas said they hold the write in time"
    )
    wanted: int | None = Field(default=None, description="not_replicated: how many were wanted (DELAYQ_MIN_REPLICAS)")


class ScheduledOut(BaseModel):
    topic: str
    id: str
    run_at: str = Field(description="ISO-8601 UTC")
    run_at_ms: int


class AttemptOut(BaseModel):
    attempt: int
    started_at_ms: int | None = Field(description="When its handler started (Redis time); null if not known")
    ended_at_ms: int | None = Field(description="When it ended (Redis time); null if not known")
    outcome: str = Field(description="ok, error, timeout or lease_expired (no answer from the consumer in time)")
    error: str | None = Field(description="Why it failed (at most 2 KiB); null when it succeeded")


HISTORY = "The job's last 10 attempts, oldest first"


class JobOut(ScheduledOut):
    key: str | None = Field(description="The job's flow key; null without one")
    state: str = Field(description="delayed, ready, reserved, dead or done (succeeded: a receipt, kept keep_done s)")
    enqueued_at_ms: int
    attempts: int
    retries: int
    body: Any = Field(default=None, description="null for a done job: its receipt keeps no body")
    result: Any = Field(
        default=None,
        description="A done job's: what the attempt that succeeded answered (a Python target's return value, a "
        "webhook's 2xx body, a Lambda function's payload), at most 64 KiB; null when none, and for other states",
    )
    result_truncated: bool = Field(
        default=False, description="The result was over 64 KiB: it is its first 64 KiB, as text"
    )
    last_error: str | None
    started_at_ms: int | None = Field(
        description="A done job's: when the handler of the attempt that succeeded started (Redis time); else null"
    )
    done_at: str | None = Field(description="A done job's: when it succeeded, ISO-8601 UTC; else null")
    done_at_ms: int | None = Field(description="A done job's: when it succeeded (Redis time); else null")
    dead_at_ms: int | None = Field(description="A dead job's: when it went dead (Redis time); else null")
    history: list[AttemptOut] = Field(description=HISTORY)


class BatchItemOut(BaseModel):
    status: int = Field(description="201 created, 409 exists, 422 invalid")
    id: Any = None
    topic: str | None = None
    run_at: str | None = None
    run_at_ms: int | None = None
    error: ErrorOut | None = None


class BatchOut(BaseModel):
    results: list[BatchItemOut]


class LatenessOut(BaseModel):
    window_s: int = Field(description="How far back the deliveries counted started")
    deliveries: int = Field(description="Handler starts in the window, by every consumer")
    p50_ms: float | None = Field(description="Median of handler start minus run-at (ms, within 9%); null: none")
    p99_ms: float | None = Field(description="99th percentile of the same; null: none")


class TopicOut(BaseModel):
    topic: str
    delayed: int
    ready: int
    reserved: int
    dead: int
    done: int = Field(description="Receipts of jobs that succeeded, kept for the topic's keep_done")
    next_run_at_ms: int | None
    next_run_at: str | None
    paused: bool = Field(description="No consumer starts a job of the topic while it is paused")
    oldest_ready_ms: int = Field(description="How long ago (Redis time) the oldest due job fell due; 0 if none")
    lateness: LatenessOut


class DeadJobOut(BaseModel):
    topic: str
    id: str
    died_at: str
    died_at_ms: int
    attempts: int
    run_at_ms: int
    enqueued_at_ms: int
    body: Any = None
    last_error: str
    history: list[AttemptOut] = Field(description=HISTORY)


class DeadListOut(BaseModel):
    jobs: list[DeadJobOut]


NEXT = "The cursor of the next page (pass it as ?cursor=); null on the last page"


class JobPageOut(BaseModel):
    jobs: list[JobOut]
    next: str | None = Field(description=NEXT)


class TopicPageOut(BaseModel):
    topics: list[TopicOut]
    next: str | None = Field(description=NEXT)


class BucketOut(BaseModel):
    from_ms: int
    to_ms: int
    count: int = Field(description="Delayed jobs falling due from from_ms (included) to to_ms (excluded)")


class ForecastOut(BaseModel):
    topic: str
    buckets: list[BucketOut] = Field(description="From Redis' now on, every bucket, empty ones with count 0")


class MinuteOut(BaseModel):
    from_ms: int = Field(description="The minute's start (a whole minute, Redis time)")
    started: int = Field(description="Attempts whose handler started")
    done: int = Field(description="Jobs that succeeded")
    failed: int = Field(description="Failed attempts (an error, a timeout, an expired lease), a dead job's last too")
    dead: int = Field(description="Jobs that went dead")
    p50_ms: float | None = Field(description="Median lateness of the starts (handler start minus run-at); null without")
    p99_ms: float | None = Field(description="99th percentile lateness of the starts; null without")


class HistoryOut(BaseModel):
    minutes: list[MinuteOut] = Field(description="One per minute up to the current one, oldest first, empty ones too")


class ErrorGroupOut(BaseModel):
    error: str = Field(description="The first line of the jobs' last error ('' where none was recorded)")
    count: int
    example_id: str = Field(description="The most recent of these dead jobs")
    last_at_ms: int = Field(description="When it went dead (Redis time)")


class DeadErrorsOut(BaseModel):
    errors: list[ErrorGroupOut] = Field(description="Most frequent first")
    scanned: int = Field(description=f"How many dead jobs were grouped: the newest, {DEAD_ERRORS_SCAN:,} at most")
    dead: int = Field(description="How many dead jobs the topic holds")


class PausedOut(BaseModel):
    paused: bool


class ReplayedOut(BaseModel):
    replayed: int


class PurgedOut(BaseModel):
    purged: int


class CancelledOut(BaseModel):
    cancelled: int


class HealthOut(BaseModel):
    status: str = Field(description="ok, or unavailable (with 503)")


class KeyOut(BaseModel):
    """One flow key of a topic: its jobs by state, the limits in force for it (its own settings over
    the topic's key_concurrency, key_rate, key_burst), and until when a receiver's Retry-After holds it."""

    key: str
    delayed: int
    ready: int
    reserved: int
    concurrency: int | None = Field(description="Jobs of the key reserved at once, at most; null: unlimited")
    rate: float | None = Field(description="Job starts of the key per second, at most; null: unlimited")
    burst: int | None = Field(description="Starts that may come at once after a quiet spell; null: as the rate")
    paused: bool = Field(description="No consumer starts a job of the key while it is paused")
    held_until_ms: int | None = Field(
        description="Until when (Redis time) a webhook's Retry-After holds every job of the key; else null"
    )


class KeyPageOut(BaseModel):
    keys: list[KeyOut] = Field(description="Keys holding jobs, settings or a hold, by name")
    next: str | None = Field(description=NEXT)


def _no_defaults(schema: dict[str, Any]) -> None:
    """A field left out of a ``PUT /topics/{topic}/keys/{key}`` keeps the key's setting: it has no
    default, which the document would show as the value of a field left out."""
    for field in schema.get("properties", {}).values():
        field.pop("default", None)


class KeySettings(BaseModel):
    """``PUT /topics/{topic}/keys/{key}``: any of the key's own settings. A field given replaces that
    setting (null: the topic's again), a field left out keeps it."""

    # The queue checks them by the same rules (``KeyLimits.parse``): this is what the document shows.
    model_config = STRICT | ConfigDict(json_schema_extra=_no_defaults)

    concurrency: int | None = Field(
        default=None,
        ge=1,
        le=MAX_KEY_CONCURRENCY,
        description="Jobs of the key reserved at once, across every consumer; null: the topic's key_concurrency",
    )
    rate: float | None = Field(
        default=None,
        ge=MIN_RATE,
        le=MAX_RATE,
        description="Job starts of the key per second, fractions allowed; null: the topic's key_rate",
    )
    burst: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RATE,
        description="Starts that may come at once after a quiet spell; null: the topic's key_burst",
    )
    paused: bool = Field(
        default=False, description="true: no job of the key starts (its jobs stay ready); false: they start again"
    )


class ScheduleOut(ScheduleIn):
    """A schedule: its definition as given, when it was written, its next runs."""

    topic: str
    name: str
    created_at: str = Field(description="ISO-8601 UTC: when the PUT that created or last replaced it was made")
    created_at_ms: int
    next_run_at: str | None = Field(description="ISO-8601 UTC: its pending occurrence; null once it has ended")
    next_run_at_ms: int | None
    next_runs: list[str] = Field(description="The next five runs, ISO-8601 UTC (fewer near its end)")


class ScheduleListOut(BaseModel):
    schedules: list[ScheduleOut]


NO_ROUTE = "No route for the path (a path parameter with characters no route takes)"
NO_JOB = "No such job; or " + NO_ROUTE.lower()
NO_TOPIC = "No such topic: neither configured (nor covered by *) nor holding jobs; or " + NO_ROUTE.lower()
NO_SCHEDULE = "No such schedule; or " + NO_ROUTE.lower()
RETRY_AFTER_HEADER = {
    "description": "Seconds to wait before trying again (Redis down, failing over, loading or full)",
    "schema": {"type": "integer"},
}
_ERROR_TEXT = {
    400: "Malformed JSON",
    404: NO_ROUTE,
    409: "Conflict with the job's state",
    413: "Too large",
    422: "A field is invalid",
    503: "Redis is unavailable",
}


def responses(ok: int, model: type[BaseModel] | None, *errors: int, words: Mapping[int, str] = {}) -> dict[int, Any]:
    """OpenAPI responses of a route: its success, and the errors it can answer (always 422, 503),
    described by ``_ERROR_TEXT`` or, for this route, by ``words``."""
    out: dict[int, Any] = {
        ok: {"description": HTTPStatus(ok).phrase}
        | ({"content": {"application/json": {"model": model}}} if model else {})
    }
    for code in sorted({*errors, 422, 503}):
        out[code] = {
            "description": words.get(code, _ERROR_TEXT[code]),
            "content": {"application/json": {"model": UnavailableOut if code == 503 else ErrorOut}},
        }
    out[503]["headers"] = {"Retry-After": RETRY_AFTER_HEADER}
    return out
