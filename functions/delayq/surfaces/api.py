"""The HTTP API, on Powertools' event handler: the routes on a module-level ``Router``, answered by a
``DelayqResolver`` per queue (``create_app``) for API Gateway events of either payload format
(``delayq.surfaces.gateway``).

Routes parse and answer; ``Queue`` decides and returns typed results, which this module shapes into
JSON. Every error is JSON ``{"status", "error", "field", "message"}`` naming the offending field; never
a stack trace. Routing is exact: a route matches a path to its very end, so a trailing newline or any
other control character matches nothing (404); a path that has routes, asked with another method, is
a 405 naming the methods in ``Allow``; ``OPTIONS`` answers 204 with ``Allow``; ``HEAD`` is ``GET``
without the body. ``GET /openapi.json`` is generated from the same models that validate the requests.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from functools import cached_property
from http import HTTPStatus
from re import Pattern
from typing import Annotated, Any, cast

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver, ResponseBuilder, Router
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.models import Server
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.request import Request
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent
from pydantic import BaseModel, Field

from delayq.core.errors import DelayqError, InvalidField, MalformedRequest, RedisUnavailable, TooLarge
from delayq.core.job import EnqueueResult, JobState, Scheduled
from delayq.core.models import (
    ID_PATTERN,
    MAX_BATCH,
    TOPIC_PATTERN,
    Batch,
    NewJob,
    PutJob,
    Replay,
    Reschedule,
    TopicJob,
    describe,
    same_as_path,
)
from delayq.core.recurring import SCHEDULE_NAME_PATTERN, ScheduleInfo
from delayq.core.recurring import Schedule as ScheduleIn
from delayq.store.listing import (
    DEFAULT_BUCKET_S,
    DEFAULT_LIMIT,
    DEFAULT_MINUTES,
    MAX_BUCKET_S,
    MAX_BUCKETS,
    MAX_CURSOR_CHARS,
    MAX_LIMIT,
    MAX_MINUTES,
    CancellableState,
)
from delayq.store.queue import Queue
from delayq.version import VERSION

from . import answers
from .gateway import DelayqEvent, proxy_event

log = logging.getLogger("delayq.api")

APP = "delayq.app"  # the routing context's key for the app answering the request (``DelayqResolver``)
MAX_ECHO = 256  # characters of a request's path or method quoted back in an error
ALL_DEAD = Replay()  # POST /topics/{topic}/dead/replay without a body: every dead job
TopicPath = Annotated[str, Path(pattern=TOPIC_PATTERN, description="Topic name")]
IdPath = Annotated[str, Path(alias="id", pattern=ID_PATTERN, description="Job id")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many per page")]
Cursor = Annotated[
    str | None, Query(max_length=MAX_CURSOR_CHARS, description="The 'next' of the previous page; none for the first")
]
State = Annotated[JobState, Query(description="Which of the topic's jobs")]
CancelState = Annotated[CancellableState, Query(description="Which of the topic's jobs to cancel")]
NamePath = Annotated[str, Path(pattern=SCHEDULE_NAME_PATTERN, description="Schedule name")]
# Powertools keeps the request being resolved in class and instance attributes: one request at a time
# per process (a Lambda serves one anyway; the local stack's server has a thread per connection).
_ONE_AT_A_TIME = threading.Lock()


# ---------------------------------------------------------------------------- response documents


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


class JobOut(ScheduledOut):
    state: str = Field(description="delayed, ready, reserved, dead or done (succeeded: a receipt, kept keep_done s)")
    enqueued_at_ms: int
    attempts: int
    retries: int
    body: Any = Field(default=None, description="null for a done job: its receipt keeps no body")
    last_error: str | None
    started_at_ms: int | None = Field(
        description="A done job's: when the handler of the attempt that succeeded started (Redis time); else null"
    )
    done_at: str | None = Field(description="A done job's: when it succeeded, ISO-8601 UTC; else null")
    done_at_ms: int | None = Field(description="A done job's: when it succeeded (Redis time); else null")


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


def _responses(ok: int, model: type[BaseModel] | None, *errors: int, words: Mapping[int, str] = {}) -> dict[int, Any]:
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


# ---------------------------------------------------------------------------- answers


def _json(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Response[Any]:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body, headers=headers)


def _schedule(info: ScheduleInfo) -> Response[Any]:
    """A schedule written: 201 when the PUT created it, 200 when it replaced it."""
    return _json(info.status, info.to_dict())


def _scheduled(scheduled: Scheduled) -> Response[Any]:
    """A create, replace or reschedule: 201 for a job created, 200 otherwise."""
    return _json(scheduled.status, scheduled.to_dict())


def _batch_item(result: EnqueueResult) -> dict[str, Any]:
    """One result of ``POST /jobs/batch``: ``status`` and the job, or ``status``, ``id`` and ``error``."""
    if isinstance(result, Scheduled):
        return {"status": result.status, **result.to_dict()}
    return {"status": result.status, "id": result.id, "error": result.error.to_dict() | {"status": result.status}}


def _error(status: int, error: str, message: str, headers: Mapping[str, str] | None = None) -> Response[Any]:
    """An error that is about the request line, not a field."""
    return _json(status, {"status": status, "error": error, "field": None, "message": message}, headers)


def _echo(text: str) -> str:
    """``text`` quoted back safely: Unicode (an event may carry lone surrogates) and short (or megabytes)."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= MAX_ECHO else text[:MAX_ECHO] + "..."


# ---------------------------------------------------------------------------- routes

router = Router()  # type: ignore[no-untyped-call]
EXISTS = {409: "exists: the topic has a job with this id, or the receipt of one that succeeded (keep_done)"}


def _app(request: Request) -> DelayqResolver:
    """The app answering ``request``: ``DelayqResolver.resolve`` puts it in the routing context."""
    return cast(DelayqResolver, request.context[APP])


def _queue(request: Request) -> Queue:
    return _app(request).queue


def given(model: BaseModel, *, leave: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields a request body set, as the ``Queue`` method of its route takes them (which checks
    them by the same rules as the model: the route's model is what the OpenAPI document shows)."""
    return {name: value for name, value in model.model_dump(exclude_unset=True).items() if name not in leave}


@router.post("/jobs", summary="Create a job", responses=_responses(201, ScheduledOut, 400, 409, 413, words=EXISTS))
def create_job(request: Request, job: Annotated[NewJob, Body()]) -> Response[Any]:
    return _scheduled(_queue(request).enqueue(**given(job)))


@router.post(
    "/topics/<topic>/jobs",
    summary="Create a job in the topic of the path (a policy on the path can limit a caller to its topics)",
    responses=_responses(201, ScheduledOut, 400, 404, 409, 413, words=EXISTS),
)
def create_topic_job(request: Request, topic: TopicPath, job: Annotated[TopicJob, Body()]) -> Response[Any]:
    return _scheduled(_queue(request).enqueue(**given(job.in_topic(topic))))


@router.post(
    "/jobs/batch",
    summary=f"Create up to {MAX_BATCH} jobs; valid ones are written even when others are not",
    responses=_responses(200, BatchOut, 400, 413),
)
def create_batch(request: Request, batch: Annotated[Batch, Body()]) -> Response[Any]:
    if len(batch.jobs) > MAX_BATCH:
        raise TooLarge("jobs", f"{len(batch.jobs)} jobs; at most {MAX_BATCH} per batch")
    results = _queue(request).enqueue_many(batch.as_sent(), chunk=MAX_BATCH)  # each partition's, whole or none
    return _json(200, {"results": [_batch_item(result) for result in results]})


@router.put(
    "/jobs/<topic>/<id>",
    summary="Create a job, or replace it (its body and run-at, whatever its state, dead included); a done job's "
    "receipt is replaced by a new job (201)",
    responses=_responses(201, ScheduledOut, 400, 404, 409, 413, words={409: "reserved: the job is being handled"})
    | {200: {"description": "Replaced", "content": {"application/json": {"model": ScheduledOut}}}},
)
def put_job(request: Request, topic: TopicPath, job_id: IdPath, job: Annotated[PutJob, Body()]) -> Response[Any]:
    same_as_path("topic", job.topic, topic)
    same_as_path("id", job.id, job_id)
    return _scheduled(_queue(request).put(topic, job_id, **given(job, leave=("topic", "id"))))


@router.get("/jobs/<topic>/<id>", summary="Read a job", responses=_responses(200, JobOut, 404, words={404: NO_JOB}))
def get_job(request: Request, topic: TopicPath, job_id: IdPath) -> Response[Any]:
    return _json(200, _queue(request).get(topic, job_id).to_dict())


@router.patch(
    "/jobs/<topic>/<id>",
    summary="Reschedule a delayed or ready job",
    responses=_responses(
        200,
        ScheduledOut,
        400,
        404,
        409,
        words={404: NO_JOB, 409: "reserved, dead or done (replay a dead job, or PUT it; PUT a done job)"},
    ),
)
def reschedule_job(
    request: Request, topic: TopicPath, job_id: IdPath, when: Annotated[Reschedule, Body()]
) -> Response[Any]:
    return _scheduled(_queue(request).reschedule(topic, job_id, **given(when)))


@router.delete(
    "/jobs/<topic>/<id>",
    summary="Cancel a job (a done job: forget its receipt)",
    responses=_responses(204, None, 404, words={404: NO_JOB}),
)
def cancel_job(request: Request, topic: TopicPath, job_id: IdPath) -> Response[Any]:
    _queue(request).cancel(topic, job_id)
    return Response(status_code=204, body=None)


@router.get(
    "/topics/<topic>",
    summary="Counts of a topic's jobs",
    responses=_responses(200, TopicOut, 404, words={404: NO_TOPIC}),
)
def topic_stats(request: Request, topic: TopicPath) -> Response[Any]:
    return _json(200, _queue(request).stats(topic).to_dict())


@router.get("/topics/<topic>/dead", summary="Dead jobs, newest first", responses=_responses(200, DeadListOut, 404))
def dead_jobs(request: Request, topic: TopicPath, limit: Limit = DEFAULT_LIMIT) -> Response[Any]:
    return _json(200, answers.dead_jobs(_queue(request).dead(topic, limit)))


@router.post(
    "/topics/<topic>/dead/replay",
    summary="Replay dead jobs: the ids given, or all",
    responses=_responses(200, ReplayedOut, 400, 404),
)
def replay_dead(request: Request, topic: TopicPath, replay: Annotated[Replay, Body()] = ALL_DEAD) -> Response[Any]:
    # Optional, but an object when given: the document says so (a JSON null is refused, 422).
    return _json(200, answers.replayed(_queue(request).replay(topic, replay.ids)))


@router.delete("/topics/<topic>/dead", summary="Purge dead jobs", responses=_responses(200, PurgedOut, 404))
def purge_dead(request: Request, topic: TopicPath) -> Response[Any]:
    return _json(200, answers.purged(_queue(request).purge(topic)))


@router.get(
    "/topics",
    summary="Every configured topic and every topic holding jobs, by name, with its counts, a page at a time",
    responses=_responses(200, TopicPageOut),
)
def list_topics(request: Request, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> Response[Any]:
    return _json(200, _queue(request).topics(limit, cursor).to_dict())


@router.get(
    "/topics/<topic>/jobs",
    summary="A topic's jobs in one state, a page at a time: delayed by run-at (soonest first), ready in the order "
    "they will be taken, reserved by lease deadline, dead and done newest first; walking the pages lists every job "
    "that stays in its state exactly once",
    responses=_responses(200, JobPageOut, 404, words={404: NO_TOPIC}),
)
def list_jobs(
    request: Request, topic: TopicPath, state: State, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> Response[Any]:
    return _json(200, _queue(request).jobs(topic, state, limit, cursor).to_dict())


@router.delete(
    "/topics/<topic>/jobs",
    summary="Cancel every job of the topic in one state (delayed, ready or dead), a bounded batch per Redis call",
    responses=_responses(200, CancelledOut, 404, words={404: NO_TOPIC}),
)
def cancel_jobs(request: Request, topic: TopicPath, state: CancelState) -> Response[Any]:
    return _json(200, answers.cancelled(_queue(request).cancel_all(topic, state)))


@router.get(
    "/topics/<topic>/forecast",
    summary=f"How many delayed jobs fall due in each bucket from Redis' now on (at most {MAX_BUCKETS} buckets)",
    responses=_responses(200, ForecastOut, 404, words={404: NO_TOPIC}),
)
def topic_forecast(
    request: Request,
    topic: TopicPath,
    minutes: Annotated[int, Query(ge=1, le=MAX_MINUTES, description="How far ahead")] = DEFAULT_MINUTES,
    bucket: Annotated[int, Query(ge=1, le=MAX_BUCKET_S, description="Seconds per bucket")] = DEFAULT_BUCKET_S,
) -> Response[Any]:
    return _json(200, _queue(request).forecast(topic, minutes, bucket).to_dict())


@router.post(
    "/topics/<topic>/pause",
    summary="From the next tick no consumer starts a job of the topic; jobs keep falling due, creates are "
    "accepted, jobs already reserved finish. Idempotent",
    responses=_responses(200, PausedOut, 404, words={404: NO_TOPIC}),
)
def pause_topic(request: Request, topic: TopicPath) -> Response[Any]:
    _queue(request).pause(topic)
    return _json(200, answers.paused(True))


@router.post(
    "/topics/<topic>/resume",
    summary="Consumers start the topic's jobs again. Idempotent",
    responses=_responses(200, PausedOut, 404, words={404: NO_TOPIC}),
)
def resume_topic(request: Request, topic: TopicPath) -> Response[Any]:
    _queue(request).resume(topic)
    return _json(200, answers.paused(False))


@router.put(
    "/schedules/<topic>/<name>",
    summary="Create or replace a recurring schedule; its first occurrence exists as a delayed job when this answers",
    responses=_responses(201, ScheduleOut, 400, 404, 413)
    | {200: {"description": "Replaced", "content": {"application/json": {"model": ScheduleOut}}}},
)
def put_schedule(
    request: Request, topic: TopicPath, name: NamePath, schedule: Annotated[ScheduleIn, Body()]
) -> Response[Any]:
    return _schedule(_queue(request).schedule(topic, name, **given(schedule)))


@router.get(
    "/schedules/<topic>/<name>",
    summary="Read a schedule and its next runs",
    responses=_responses(200, ScheduleOut, 404, words={404: NO_SCHEDULE}),
)
def get_schedule(request: Request, topic: TopicPath, name: NamePath) -> Response[Any]:
    return _json(200, _queue(request).get_schedule(topic, name).to_dict())


@router.delete(
    "/schedules/<topic>/<name>",
    summary="Delete a schedule; its pending occurrence is cancelled too",
    responses=_responses(204, None, 404, words={404: NO_SCHEDULE}),
)
def delete_schedule(request: Request, topic: TopicPath, name: NamePath) -> Response[Any]:
    _queue(request).unschedule(topic, name)
    return Response(status_code=204, body=None)


@router.get("/schedules", summary="Every schedule, by topic and name", responses=_responses(200, ScheduleListOut))
def list_schedules(
    request: Request,
    topic: Annotated[str | None, Query(pattern=TOPIC_PATTERN, description="Only this topic's")] = None,
) -> Response[Any]:
    return _json(200, answers.schedules(_queue(request).schedules(topic)))


@router.get("/health", summary="Whether Redis answers", responses=_responses(200, HealthOut))
def health(request: Request) -> Response[Any]:
    _queue(request).ping()
    return _json(200, {"status": "ok"})


@router.get("/openapi.json", summary="This API's OpenAPI 3 document", include_in_schema=False)
def openapi(request: Request) -> Response[Any]:
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=_app(request).openapi_document)


# ---------------------------------------------------------------------------- errors


def delayq_error(exc: DelayqError) -> Response[Any]:
    if isinstance(exc, RedisUnavailable):
        log.warning("answering 503: %s", exc.message)
        return _json(exc.status, exc.to_dict(), {"Retry-After": str(exc.retry_after_s)})
    return _json(exc.status, exc.to_dict())


def validation_error(exc: RequestValidationError) -> Response[Any]:
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        error: DelayqError = MalformedRequest("request body is not valid JSON")
    elif first["type"] == "missing" and tuple(first["loc"]) == ("body",):
        error = MalformedRequest("request body must be a JSON object")
    else:
        field, message = describe(first, skip=1)
        error = InvalidField(field or str(first["loc"][0]), message)
    return _json(error.status, error.to_dict())


def unexpected(exc: Exception) -> Response[Any]:
    log.exception("unexpected error")
    return _error(500, "internal", "internal error")


router.exception_handler(DelayqError)(delayq_error)
router.exception_handler(RequestValidationError)(validation_error)
router.exception_handler(Exception)(unexpected)


# ---------------------------------------------------------------------------- the app


class DelayqResolver(APIGatewayRestResolver):
    """The API of one queue, for events of either payload format (``delayq.surfaces.gateway``).

    Around Powertools' routing: an event that routing cannot read is a 400; a route matches a path to
    its very end; a path with routes but none for the method is a 405 (``OPTIONS``: 204), each with
    ``Allow``; ``HEAD`` is answered as ``GET``, without the body; anything unexpected is a JSON 500,
    logged, never a Lambda error."""

    def __init__(self, queue: Queue | Callable[[], Queue]) -> None:
        super().__init__(enable_validation=True)
        self._make_queue: Callable[[], Queue] = (lambda: queue) if isinstance(queue, Queue) else queue
        self._queue: Queue | None = None
        self._read: DelayqEvent | None = None  # the event being resolved, as ``_answer`` read it
        self.include_router(router)

    @property
    def queue(self) -> Queue:
        """The queue, made on the first request when the app was given a factory."""
        if self._queue is None:
            self._queue = self._make_queue()
        return self._queue

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        proxy = proxy_event(dict(event) if isinstance(event, Mapping) else {})
        with _ONE_AT_A_TIME:
            try:
                response = self._answer(proxy, context)
            except Exception:  # routing or the answer failed (a route's errors are answered above)
                log.exception("unexpected error")
                response = self._built(proxy, _error(500, "internal", "internal error"))
        if proxy.is_head:
            response["body"], response["isBase64Encoded"] = "", False
        return response

    def _answer(self, proxy: DelayqEvent, context: Any) -> dict[str, Any]:
        problem: DelayqError | None = proxy.problem()
        if problem is None:
            try:
                proxy.read_body()
                proxy.base_path = self.queue.settings.api_base_path  # a broken environment is answered too
            except DelayqError as exc:
                problem = exc
        if problem is not None:
            return self._built(proxy, delayq_error(problem))
        self.context[APP] = self
        self._read = proxy
        try:
            return super().resolve(proxy.raw_event, context)
        finally:
            self._read = None

    def _built(self, proxy: DelayqEvent, response: Response[Any]) -> dict[str, Any]:
        """``response`` as the Lambda returns it in ``proxy``'s payload format, outside routing."""
        return ResponseBuilder[DelayqEvent](response, serializer=self._serializer).build(proxy)

    def _to_proxy_event(self, event: dict[str, Any]) -> BaseProxyEvent:
        """The event as ``_answer`` read it (its body parsed once), for Powertools' routing."""
        if self._read is not None and self._read.raw_event is event:
            return self._read
        return proxy_event(event, self.queue.settings.api_base_path)

    @staticmethod
    def _compile_regex(rule: str, base_regex: str = "") -> Pattern[str]:
        """A route's pattern, anchored at the very end of the path (``\\Z``). Powertools ends it with
        ``$``, which also matches before a trailing newline: ``DELETE /topics/t/dead%0a`` purged. As in
        Powertools' REST resolver, trailing slashes are allowed."""
        return cast(Pattern[str], ApiGatewayResolver._compile_regex(rule, r"^{}/*\Z"))

    def _handle_not_found(self, method: str, path: str) -> ResponseBuilder[Any]:
        """No route for (method, path): 404, or for a path with routes, 405 (``OPTIONS``: 204) with ``Allow``."""
        allowed = self._allowed(path)
        if not allowed:
            response = _error(404, "not_found", f"no route for {_echo(path)}")
        elif method == "OPTIONS":
            response = Response(status_code=204, content_type=None, body=None, headers={"Allow": allowed})
        else:
            message = f"{_echo(method)} is not allowed on {_echo(path)}; it allows {allowed}"
            response = _error(405, "method_not_allowed", message, {"Allow": allowed})
        return ResponseBuilder(response, serializer=self._serializer)

    def _allowed(self, path: str) -> str:
        """The methods ``path`` answers, for ``Allow``: ``""`` when it has no route."""
        methods = {route.method for route in (*self._static_routes, *self._dynamic_routes) if route.rule.match(path)}
        if not methods:
            return ""
        return ", ".join(sorted(methods | {"OPTIONS"} | ({"HEAD"} if "GET" in methods else set())))

    @cached_property
    def openapi_document(self) -> str:
        """This API's OpenAPI document, generated from the routes and made exact: a 204 has no content,
        each operation is named after its route's function (a generated client's function names:
        ``create_job``, ``get_job`` ...), and the schemas listed are the ones the operations use."""
        base = self.queue.settings.api_base_path
        document = json.loads(
            self.get_openapi_json_schema(
                title="delayq",
                version=VERSION,
                description="A delay queue on Redis: jobs handed to their topic's target at their run-at.",
                servers=[Server(url=base or "/")],
            )
        )
        names = {
            (r.openapi_path, r.method.lower()): r.func.__name__ for r in (*self._static_routes, *self._dynamic_routes)
        }
        for path, item in document["paths"].items():
            for method, operation in item.items():
                operation["operationId"] = names[(path, method)]
                operation["responses"].get("204", {}).pop("content", None)
        document["components"]["schemas"] = _used_schemas(document)
        return json.dumps(document, separators=(",", ":"))


def _used_schemas(document: dict[str, Any]) -> dict[str, Any]:
    """The component schemas that the document's paths use, directly or through other schemas
    (Powertools also lists its own validation errors, which this API never answers)."""
    schemas = document["components"]["schemas"]
    used: set[str] = set()
    pending: list[Any] = [document["paths"]]
    while pending:
        for name in re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(pending.pop())):
            if name not in used:
                used.add(name)
                pending.append(schemas[name])
    return {name: schema for name, schema in schemas.items() if name in used}


def create_app(queue: Queue | Callable[[], Queue]) -> DelayqResolver:
    """The API of ``queue`` (or of the queue a factory makes on the first request)."""
    return DelayqResolver(queue)
