"""The HTTP API's routes, on a module-level Powertools ``Router``: each parses its request, calls the
``Queue`` and shapes its answer as JSON; and the error handlers, which answer every error as JSON
``{"status", "error", "field", "message"}`` naming the offending field, never a stack trace. The app
that answers them is ``resolver.py``; what they answer, ``schemas.py``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, cast

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.request import Request
from pydantic import BaseModel

from delayq.core.activity import DEFAULT_MINUTES as DEFAULT_HISTORY_MINUTES
from delayq.core.activity import KEEP_MINUTES
from delayq.core.errors import DelayqError, InvalidField, MalformedRequest, RedisUnavailable, TooLarge
from delayq.core.job import EnqueueResult, JobState, Scheduled
from delayq.core.models import (
    ID_PATTERN,
    KEY_PATTERN,
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
from delayq.surfaces import answers

from .schemas import (
    NO_JOB,
    NO_SCHEDULE,
    NO_TOPIC,
    BatchOut,
    CancelledOut,
    DeadErrorsOut,
    DeadListOut,
    ForecastOut,
    HealthOut,
    HistoryOut,
    JobOut,
    JobPageOut,
    KeyOut,
    KeyPageOut,
    KeySettings,
    PausedOut,
    PurgedOut,
    ReplayedOut,
    ScheduledOut,
    ScheduleListOut,
    ScheduleOut,
    TopicOut,
    TopicPageOut,
    responses,
)

if TYPE_CHECKING:
    from .resolver import DelayqResolver

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
KeyPath = Annotated[str, Path(pattern=KEY_PATTERN, description="Flow key")]
KeyQuery = Annotated[str | None, Query(pattern=KEY_PATTERN, description="Only the jobs of this flow key")]
# Powertools keeps the request being resolved in class and instance attributes: one request at a time
# per process (a Lambda serves one anyway; the local stack's server has a thread per connection).
ONE_AT_A_TIME = threading.Lock()


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


def error_answer(status: int, error: str, message: str, headers: Mapping[str, str] | None = None) -> Response[Any]:
    """An error that is about the request line, not a field."""
    return _json(status, {"status": status, "error": error, "field": None, "message": message}, headers)


def quoted(text: str) -> str:
    """``text`` quoted back safely: Unicode (an event may carry lone surrogates) and short (or megabytes)."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= MAX_ECHO else text[:MAX_ECHO] + "..."


# ---------------------------------------------------------------------------- routes

router = Router()  # type: ignore[no-untyped-call]
EXISTS = {409: "exists: the topic has a job with this id, or the receipt of one that succeeded (keep_done)"}


def _app(request: Request) -> DelayqResolver:
    """The app answering ``request``: ``DelayqResolver.resolve`` puts it in the routing context."""
    return cast("DelayqResolver", request.context[APP])


def _queue(request: Request) -> Queue:
    return _app(request).queue


def given(model: BaseModel, *, leave: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields a request body set, as the ``Queue`` method of its route takes them (which checks
    them by the same rules as the model: the route's model is what the OpenAPI document shows)."""
    return {name: value for name, value in model.model_dump(exclude_unset=True).items() if name not in leave}


@router.post("/jobs", summary="Create a job", responses=responses(201, ScheduledOut, 400, 409, 413, words=EXISTS))
def create_job(request: Request, job: Annotated[NewJob, Body()]) -> Response[Any]:
    return _scheduled(_queue(request).enqueue(**given(job)))


@router.post(
    "/topics/<topic>/jobs",
    summary="Create a job in the topic of the path (a policy on the path can limit a caller to its topics)",
    responses=responses(201, ScheduledOut, 400, 404, 409, 413, words=EXISTS),
)
def create_topic_job(request: Request, topic: TopicPath, job: Annotated[TopicJob, Body()]) -> Response[Any]:
    return _scheduled(_queue(request).enqueue(**given(job.in_topic(topic))))


@router.post(
    "/jobs/batch",
    summary=f"Create up to {MAX_BATCH} jobs; valid ones are written even when others are not",
    responses=responses(200, BatchOut, 400, 413),
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
    responses=responses(201, ScheduledOut, 400, 404, 409, 413, words={409: "reserved: the job is being handled"})
    | {200: {"description": "Replaced", "content": {"application/json": {"model": ScheduledOut}}}},
)
def put_job(request: Request, topic: TopicPath, job_id: IdPath, job: Annotated[PutJob, Body()]) -> Response[Any]:
    same_as_path("topic", job.topic, topic)
    same_as_path("id", job.id, job_id)
    return _scheduled(_queue(request).put(topic, job_id, **given(job, leave=("topic", "id"))))


@router.get("/jobs/<topic>/<id>", summary="Read a job", responses=responses(200, JobOut, 404, words={404: NO_JOB}))
def get_job(request: Request, topic: TopicPath, job_id: IdPath) -> Response[Any]:
    return _json(200, _queue(request).get(topic, job_id).to_dict())


@router.patch(
    "/jobs/<topic>/<id>",
    summary="Reschedule a delayed or ready job",
    responses=responses(
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


@router.post(
    "/jobs/<topic>/<id>/run",
    summary="Run a delayed job now",
    responses=responses(
        200, ScheduledOut, 404, 409, words={404: NO_JOB, 409: "reserved, dead or done (replay a dead job)"}
    ),
)
def run_job_now(request: Request, topic: TopicPath, job_id: IdPath) -> Response[Any]:
    return _scheduled(_queue(request).run_now(topic, job_id))


@router.delete(
    "/jobs/<topic>/<id>",
    summary="Cancel a job (a done job: forget its receipt)",
    responses=responses(204, None, 404, words={404: NO_JOB}),
)
def cancel_job(request: Request, topic: TopicPath, job_id: IdPath) -> Response[Any]:
    _queue(request).cancel(topic, job_id)
    return Response(status_code=204, body=None)


@router.get(
    "/topics/<topic>",
    summary="Counts of a topic's jobs",
    responses=responses(200, TopicOut, 404, words={404: NO_TOPIC}),
)
def topic_stats(request: Request, topic: TopicPath) -> Response[Any]:
    return _json(200, _queue(request).stats(topic).to_dict())


@router.get("/topics/<topic>/dead", summary="Dead jobs, newest first", responses=responses(200, DeadListOut, 404))
def dead_jobs(request: Request, topic: TopicPath, limit: Limit = DEFAULT_LIMIT) -> Response[Any]:
    return _json(200, answers.dead_jobs(_queue(request).dead(topic, limit)))


@router.get(
    "/topics/<topic>/dead/errors",
    summary="Dead jobs grouped by the first line of their error, most frequent first",
    responses=responses(200, DeadErrorsOut, 404, words={404: NO_TOPIC}),
)
def dead_errors(request: Request, topic: TopicPath) -> Response[Any]:
    return _json(200, _queue(request).dead_errors(topic).to_dict())


@router.get(
    "/topics/<topic>/history",
    summary="What happened to a topic's jobs, minute by minute (kept a day)",
    responses=responses(200, HistoryOut, 404, words={404: NO_TOPIC}),
)
def topic_history(
    request: Request,
    topic: TopicPath,
    minutes: Annotated[
        int, Query(ge=1, le=KEEP_MINUTES, description="How many minutes, up to the current one")
    ] = DEFAULT_HISTORY_MINUTES,
) -> Response[Any]:
    return _json(200, answers.history(_queue(request).history(topic, minutes)))


@router.post(
    "/topics/<topic>/dead/replay",
    summary="Replay dead jobs: the ids given, or all",
    responses=responses(200, ReplayedOut, 400, 404),
)
def replay_dead(request: Request, topic: TopicPath, replay: Annotated[Replay, Body()] = ALL_DEAD) -> Response[Any]:
    # Optional, but an object when given: the document says so (a JSON null is refused, 422).
    return _json(200, answers.replayed(_queue(request).replay(topic, replay.ids)))


@router.delete("/topics/<topic>/dead", summary="Purge dead jobs", responses=responses(200, PurgedOut, 404))
def purge_dead(request: Request, topic: TopicPath) -> Response[Any]:
    return _json(200, answers.purged(_queue(request).purge(topic)))


@router.get(
    "/topics",
    summary="Every configured topic and every topic holding jobs, by name, with its counts, a page at a time",
    responses=responses(200, TopicPageOut),
)
def list_topics(request: Request, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> Response[Any]:
    return _json(200, _queue(request).topics(limit, cursor).to_dict())


@router.get(
    "/topics/<topic>/jobs",
    summary="A topic's jobs in one state, a page at a time: delayed by run-at (soonest first), ready in the order "
    "they will be taken, reserved by lease deadline, dead and done newest first; walking the pages lists every job "
    "that stays in its state exactly once",
    responses=responses(200, JobPageOut, 404, words={404: NO_TOPIC}),
)
def list_jobs(
    request: Request,
    topic: TopicPath,
    state: State,
    *,
    limit: Limit = DEFAULT_LIMIT,
    cursor: Cursor = None,
    key: KeyQuery = None,
) -> Response[Any]:
    return _json(200, _queue(request).jobs(topic, state, limit, cursor, key).to_dict())


@router.delete(
    "/topics/<topic>/jobs",
    summary="Cancel every job of the topic in one state (delayed, ready or dead), or of one flow key in it, a bounded "
    "batch per Redis call",
    responses=responses(200, CancelledOut, 404, words={404: NO_TOPIC}),
)
def cancel_jobs(request: Request, topic: TopicPath, state: CancelState, key: KeyQuery = None) -> Response[Any]:
    return _json(200, answers.cancelled(_queue(request).cancel_all(topic, state, key)))


@router.get(
    "/topics/<topic>/forecast",
    summary=f"How many delayed jobs fall due in each bucket from Redis' now on (at most {MAX_BUCKETS} buckets)",
    responses=responses(200, ForecastOut, 404, words={404: NO_TOPIC}),
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
    responses=responses(200, PausedOut, 404, words={404: NO_TOPIC}),
)
def pause_topic(request: Request, topic: TopicPath) -> Response[Any]:
    _queue(request).pause(topic)
    return _json(200, answers.paused(True))


@router.post(
    "/topics/<topic>/resume",
    summary="Consumers start the topic's jobs again. Idempotent",
    responses=responses(200, PausedOut, 404, words={404: NO_TOPIC}),
)
def resume_topic(request: Request, topic: TopicPath) -> Response[Any]:
    _queue(request).resume(topic)
    return _json(200, answers.paused(False))


@router.get(
    "/topics/<topic>/keys",
    summary="The topic's flow keys holding jobs, settings or a hold, by name, each as GET of the key answers it, "
    "a page at a time",
    responses=responses(200, KeyPageOut, 404, words={404: NO_TOPIC}),
)
def list_keys(request: Request, topic: TopicPath, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None) -> Response[Any]:
    return _json(200, _queue(request).flow_keys(topic, limit, cursor).to_dict())


@router.get(
    "/topics/<topic>/keys/<key>",
    summary="A flow key's jobs by state, the limits in force for it (its own settings over the topic's), its hold",
    responses=responses(200, KeyOut, 404, words={404: NO_TOPIC}),
)
def get_key(request: Request, topic: TopicPath, key: KeyPath) -> Response[Any]:
    return _json(200, _queue(request).key(topic, key).to_dict())


@router.put(
    "/topics/<topic>/keys/<key>",
    summary="Set any of a flow key's own settings (null: the topic's again; a field left out is kept); every "
    "consumer applies them from its next tick. Answers the key as GET does",
    responses=responses(200, KeyOut, 400, 404, words={404: NO_TOPIC}),
)
def put_key(
    request: Request, topic: TopicPath, key: KeyPath, settings: Annotated[KeySettings, Body()]
) -> Response[Any]:
    return _json(200, _queue(request).set_key(topic, key, **given(settings)).to_dict())


@router.delete(
    "/topics/<topic>/keys/<key>",
    summary="A flow key back to the topic's defaults: its own settings and its hold cleared; its jobs stay",
    responses=responses(204, None, 404, words={404: NO_TOPIC}),
)
def reset_key(request: Request, topic: TopicPath, key: KeyPath) -> Response[Any]:
    _queue(request).reset_key(topic, key)
    return Response(status_code=204, body=None)


@router.put(
    "/schedules/<topic>/<name>",
    summary="Create or replace a recurring schedule; its first occurrence exists as a delayed job when this answers",
    responses=responses(201, ScheduleOut, 400, 404, 413)
    | {200: {"description": "Replaced", "content": {"application/json": {"model": ScheduleOut}}}},
)
def put_schedule(
    request: Request, topic: TopicPath, name: NamePath, schedule: Annotated[ScheduleIn, Body()]
) -> Response[Any]:
    return _schedule(_queue(request).schedule(topic, name, **given(schedule)))


@router.get(
    "/schedules/<topic>/<name>",
    summary="Read a schedule and its next runs",
    responses=responses(200, ScheduleOut, 404, words={404: NO_SCHEDULE}),
)
def get_schedule(request: Request, topic: TopicPath, name: NamePath) -> Response[Any]:
    return _json(200, _queue(request).get_schedule(topic, name).to_dict())


@router.delete(
    "/schedules/<topic>/<name>",
    summary="Delete a schedule; its pending occurrence is cancelled too",
    responses=responses(204, None, 404, words={404: NO_SCHEDULE}),
)
def delete_schedule(request: Request, topic: TopicPath, name: NamePath) -> Response[Any]:
    _queue(request).unschedule(topic, name)
    return Response(status_code=204, body=None)


@router.get("/schedules", summary="Every schedule, by topic and name", responses=responses(200, ScheduleListOut))
def list_schedules(
    request: Request,
    topic: Annotated[str | None, Query(pattern=TOPIC_PATTERN, description="Only this topic's")] = None,
) -> Response[Any]:
    return _json(200, answers.schedules(_queue(request).schedules(topic)))


@router.get("/health", summary="Whether Redis answers", responses=responses(200, HealthOut))
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
    return error_answer(500, "internal", "internal error")


router.exception_handler(DelayqError)(delayq_error)
router.exception_handler(RequestValidationError)(validation_error)
router.exception_handler(Exception)(unexpected)
