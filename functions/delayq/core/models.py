"""What callers may send: the API's request bodies, also used to validate the Python client's calls.

The models are strict (JSON types only: ``"5"`` is not a number, ``true`` is not a number) and refuse
unknown fields, so a typo such as ``"delay_s"`` is a 422 naming it rather than a job run at once.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
from typing import Annotated, Any, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from .errors import InvalidField, TooLarge
from .schedule import MAX_DELAY_MS, parse_run_at, seconds_to_ms

# What a topic name and a job id may be: checked here for the API, by ``Queue`` for the Python
# client, and by ``Topics.parse`` for configured topics. A topic never starts with ``_``, so its
# keys never collide with a partition's own (``keys.py``).
TOPIC_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
TOPIC_RE = re.compile(TOPIC_PATTERN)
ID_RE = re.compile(ID_PATTERN)
KEY_PATTERN, KEY_RE = ID_PATTERN, ID_RE  # a flow key is written as an id is
MAX_BODY_BYTES = 256 * 1024
MAX_BODY_DEPTH = 64  # arrays and objects in a body, one inside another
MAX_BATCH = 1000
MAX_DELAY_S = MAX_DELAY_MS / 1000

TopicName = Annotated[str, Field(pattern=TOPIC_PATTERN, description="Topic name", examples=["orders"])]
JobId = Annotated[
    str, Field(pattern=ID_PATTERN, description="Job id, unique within its topic", examples=["order-1042"])
]
FlowKey = Annotated[
    str | None,
    Field(
        pattern=KEY_PATTERN,
        description="Who or what the job is for (a tenant, a customer, a destination): a topic's keys share "
        "its workers fairly, and each may have limits of its own",
        examples=["tenant-42"],
    ),
]
Delay = Annotated[
    float,
    Field(ge=0, le=MAX_DELAY_S, description="Seconds from now (Redis server time) until the job is due"),
]
RunAt = Annotated[
    float | str,
    Field(
        description="When the job is due: epoch seconds, or ISO-8601 with a zone; a past time means now",
        examples=["2026-11-22T18:30:00Z", 1795372200],
    ),
]
# A job's overrides of its topic's config (None: the topic's); a schedule's occurrences take the same.
Retries = Annotated[int | None, Field(ge=0, le=25, description="Retries after the first attempt")]
Timeout = Annotated[float | None, Field(ge=1, le=900, description="Seconds a handler may take")]
Backoff = Annotated[
    list[Annotated[float, Field(ge=0, le=MAX_DELAY_S)]] | None,
    Field(min_length=1, max_length=64, description="Seconds before retry n; the last repeats"),
]

MAX_EPOCH_S = 10**15  # run_at numbers beyond this are out of range, whatever the clock says
NOT_A_TIME = "must be epoch seconds or an ISO-8601 date-time with a zone"
STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
LONE_SURROGATE = "holds a lone surrogate (such as \\ud800): not Unicode text"


def too_deep(max_depth: int) -> str:
    return f"nests arrays and objects more than {max_depth} levels deep"


def json_problem(value: Any, max_depth: int) -> str | None:
    """Why ``value`` cannot be written as JSON text in UTF-8, or None: arrays and objects nested more
    than ``max_depth`` deep (JSON readers and writers recurse), or a string or key holding a lone
    surrogate (``"\\ud800"`` is valid JSON syntax but no Unicode text). Iterative: any depth is safe."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and not _is_unicode(item):
                return LONE_SURROGATE
            continue
        if isinstance(item, dict):
            children: list[Any] = [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            continue
        if depth >= max_depth:
            return too_deep(max_depth)
        stack.extend((child, depth + 1) for child in children)
    return None


def lone_surrogate_at(value: Any) -> str | None:
    """Where ``value`` holds a lone surrogate, as a field name (``jobs[2].body.note``; a key that holds
    one is written with the surrogate escaped, ``\\ud800``), or None. Slower than ``json_problem``:
    call it once that found one."""
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str) and not _is_unicode(item):
            return field_name(path)
        if isinstance(item, dict):
            for key in item:
                if not _is_unicode(key):
                    return field_name((*path, key.encode("utf-8", "backslashreplace").decode("utf-8")))
            stack.extend(((child, (*path, key)) for key, child in item.items()))
        elif isinstance(item, list | tuple):
            stack.extend((child, (*path, i)) for i, child in enumerate(item))
    return None


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)  # dumps() makes one a call
_encode_str = json.encoder.encode_basestring  # what _ENCODER does with a str, without its method call


def body_json(body: Any) -> str:
    """``body`` as the compact JSON text delayq stores; ``InvalidField`` (``TooLarge``) naming
    ``body`` when it is not JSON, nests too deep, holds a lone surrogate or is over 256 KiB.

    The encoder does the work: a lone surrogate fails the UTF-8 encoding, and nesting can only be too
    deep when the text holds that many brackets, so the walk of ``json_problem`` runs only then."""
    if type(body) is str and body.isascii():  # the common body: no nesting, no surrogate, 1 byte a character
        text = _encode_str(body)
        size = len(text)
    else:
        try:
            text = _ENCODER.encode(body)
            size = len(text) if text.isascii() else len(text.encode())  # isascii reads a flag: no scan
        except RecursionError:
            raise InvalidField("body", too_deep(MAX_BODY_DEPTH)) from None
        except UnicodeEncodeError:
            raise InvalidField("body", LONE_SURROGATE) from None
        except (TypeError, ValueError) as exc:
            raise InvalidField("body", f"must be JSON (no NaN, Infinity, sets or bytes): {exc}") from None
        if text.count("[") + text.count("{") > MAX_BODY_DEPTH and (problem := json_problem(body, MAX_BODY_DEPTH)):
            raise InvalidField("body", problem)
    if size > MAX_BODY_BYTES:
        raise TooLarge("body", f"body is {size} bytes as JSON; at most {MAX_BODY_BYTES}")
    return text


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def well_within_range(run_at_s: float, now_s: float) -> bool:
    """Whether epoch seconds ``run_at_s`` are a valid run_at without rounding them to ms: from 0 to a
    second short of 366 days after ``now_s`` (NaN is not)."""
    return 0 <= run_at_s <= now_s + MAX_DELAY_S - 1


class When(BaseModel):
    """``delay`` or ``run_at``, at most one of them; neither means now."""

    model_config = STRICT

    delay: Delay | None = None
    run_at: RunAt | None = None

    @field_validator("run_at", mode="before")
    @classmethod
    def _run_at_valid(cls, value: Any) -> Any:
        """The whole check of run_at, in one validator: one error naming run_at, rather than one per
        member of the union (run_at.float, run_at.str)."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                raise PydanticCustomError("run_at_type", NOT_A_TIME)
            if well_within_range(value, time.time()):
                return value
            if abs(value) > MAX_EPOCH_S:  # before any arithmetic: a larger int may not even convert to a float
                message = "must be epoch seconds >= 0" if value < 0 else "must be at most 366 days from now"
                raise PydanticCustomError("run_at_range", message)
        elif value is not None and not isinstance(value, str):
            raise PydanticCustomError("run_at_type", NOT_A_TIME)
        if value is not None and parse_run_at(value) > time.time() * 1000 + MAX_DELAY_MS:
            raise ValueError("must be at most 366 days from now")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> When:
        if self.delay is not None and self.run_at is not None:
            raise PydanticCustomError("delay_and_run_at", "give either delay or run_at, not both", {"field": "run_at"})
        return self

    def when(self) -> tuple[str, int]:
        """``('d', delay_ms)`` or ``('a', run_at_epoch_ms)``, as the Lua scripts take them."""
        if self.run_at is not None:
            return "a", parse_run_at(self.run_at)
        return "d", seconds_to_ms(self.delay or 0)


class JobOptions(When):
    """A job's body, due time and per-job overrides of its topic's config."""

    # Checked where it is encoded (``body_json``), once: the queue's writes all go through it.
    body: Any = Field(default=None, description=f"Any JSON, at most 256 KiB, nested at most {MAX_BODY_DEPTH} deep")
    key: FlowKey = None
    retries: Retries = None
    timeout: Timeout = None
    backoff: Backoff = None


class NewJob(JobOptions):
    """``POST /jobs``, and each item of ``POST /jobs/batch``."""

    topic: TopicName
    id: JobId | None = Field(default=None, description="Generated when absent")


class PutJob(JobOptions):
    """``PUT /jobs/{topic}/{id}``: the topic and id come from the path (if repeated here, they must match)."""

    topic: TopicName | None = None
    id: JobId | None = None


class TopicJob(JobOptions):
    """``POST /topics/{topic}/jobs``: the topic comes from the path (if repeated here, it must match)."""

    topic: TopicName | None = None
    id: JobId | None = Field(default=None, description="Generated when absent")

    def in_topic(self, topic: str) -> NewJob:
        """This job as ``POST /jobs`` takes it, in ``topic``; ``InvalidField`` if it names another."""
        same_as_path("topic", self.topic, topic)
        return NewJob.model_construct(**(dict(self) | {"topic": topic}))  # validated already, field by field


def same_as_path(name: str, given: str | None, path: str) -> None:
    """A field repeated in a body must be what the path says: ``InvalidField`` naming it otherwise."""
    if given is not None and given != path:
        raise InvalidField(name, f"{given!r} differs from the path's {path!r}")


class Reschedule(When):
    """``PATCH /jobs/{topic}/{id}``: exactly one of ``delay`` or ``run_at``."""

    @model_validator(mode="after")
    def _required(self) -> Reschedule:
        if self.delay is None and self.run_at is None:
            raise PydanticCustomError("delay_or_run_at", "give delay or run_at", {"field": "delay"})
        return self


class Batch(BaseModel):
    """``POST /jobs/batch``: each item is validated on its own, so valid items are written anyway."""

    model_config = STRICT

    # Documented as jobs (the schema's items are NewJob, at most MAX_BATCH of them: more is a 413, by
    # the route), but kept as sent: the queue validates each job on its own and answers it in place.
    jobs: list[NewJob] = Field(
        description=f"At most {MAX_BATCH} jobs, each as for POST /jobs", json_schema_extra={"maxItems": MAX_BATCH}
    )

    @field_validator("jobs", mode="wrap")
    @classmethod
    def _as_sent(cls, jobs: Any, as_jobs: ValidatorFunctionWrapHandler) -> Any:
        return jobs if isinstance(jobs, list) else as_jobs(jobs)  # not a list: refused as the schema says

    def as_sent(self) -> list[Any]:
        """The jobs as sent, each a JSON value still to validate."""
        return cast(list[Any], self.jobs)


class Replay(BaseModel):
    """``POST /topics/{topic}/dead/replay``: the ids to replay, or none for all."""

    model_config = STRICT

    ids: list[JobId] | None = Field(default=None, max_length=MAX_BATCH)


def field_name(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as the field a caller sent: ``("backoff", 2)`` -> ``backoff[2]``."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += f".{part}" if name else str(part)
    return name


def describe(error: ErrorDetails, skip: int = 0) -> tuple[str, str]:
    """``(field, message)`` of one pydantic error; ``skip`` drops leading location parts (``body``)."""
    field = field_name(error["loc"][skip:]) or str((error.get("ctx") or {}).get("field", ""))
    if error["type"] == "extra_forbidden":
        return field, "unknown field"
    return field, error["msg"].removeprefix("Value error, ")


def check_topic(topic: str) -> str:
    if not isinstance(topic, str) or not TOPIC_RE.fullmatch(topic):
        raise InvalidField("topic", f"must match {TOPIC_PATTERN}")
    return topic


def check_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not ID_RE.fullmatch(job_id):
        raise InvalidField("id", f"must match {ID_PATTERN}")
    return job_id


def check_key(key: str) -> str:
    """A flow key, else ``InvalidField`` naming ``key``."""
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise InvalidField("key", f"must match {KEY_PATTERN}")
    return key


def invalid(exc: ValidationError) -> InvalidField:
    """The first error of a pydantic ``ValidationError`` as an ``InvalidField`` naming the field."""
    field, message = describe(exc.errors(include_url=False)[0])
    return InvalidField(field, message)


# The model's validator itself: what ``NewJob.model_validate`` calls, without its per-call checks
# (a fifth of the time of validating a job, which bulk enqueues do once per job).
_validate_new_job = NewJob.__pydantic_validator__.validate_python


# The fields of a job of the common shape, which ``plain_job`` checks without the model.
_PLAIN_FIELDS = frozenset(("topic", "id", "key", "body", "delay", "run_at"))
_NUMBERS = (int, float)  # exactly these types: a bool is an int, but not a JSON number
_ms = functools.lru_cache(maxsize=1024)(seconds_to_ms)  # a batch's jobs often share a delay or run-at


def plain_job(item: Any, now_s: float) -> tuple[str, str | None, str, int, str] | None:
    """A job of the common shape, checked by ``NewJob``'s rules without building the model:
    ``(topic, id or None, when, value, key or '')`` with ``when`` and ``value`` as ``When.when`` gives
    them. The shape: a dict with a valid ``topic``, no ``id`` or ``key`` or valid ones, any ``body``, and
    no overrides; no ``delay`` nor ``run_at``,
    or one of them as a number well within range (``now_s``: ``time.time()`` at most this long ago).
    None for any other job, valid or not: ``validate_new_job`` decides those, and names what is wrong.
    The body is checked where it is encoded (``body_json``), as for any job."""
    if type(item) is not dict or not item.keys() <= _PLAIN_FIELDS:
        return None
    topic, job_id, delay, run_at = item.get("topic"), item.get("id"), item.get("delay"), item.get("run_at")
    key = item.get("key")
    if not (
        type(topic) is str
        and TOPIC_RE.fullmatch(topic)
        and (job_id is None or (type(job_id) is str and ID_RE.fullmatch(job_id)))
        and (key is None or (type(key) is str and KEY_RE.fullmatch(key)))
    ):
        return None
    if run_at is None:
        if delay is None:
            return topic, job_id, "d", 0, key or ""
        if type(delay) in _NUMBERS and 0 <= delay <= MAX_DELAY_S:  # NaN and infinities fail the comparison
            return topic, job_id, "d", _ms(float(delay)), key or ""
    elif delay is None and type(run_at) in _NUMBERS and well_within_range(run_at, now_s):
        return topic, job_id, "a", _ms(float(run_at)), key or ""  # parse_run_at of a number in range
    return None


def validate_new_job(item: Any) -> NewJob:
    """A job as given to ``POST /jobs`` or ``enqueue_many``, validated; raises ``InvalidField``."""
    if not isinstance(item, dict):
        raise InvalidField("job", "each job must be a JSON object")
    try:
        return cast(NewJob, _validate_new_job(item))
    except ValidationError as exc:
        raise invalid(exc) from None
