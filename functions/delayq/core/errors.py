"""Every error a caller of delayq can see, and the Lua return codes they come from.

Each exception carries the HTTP status the API answers with, so the API, the Python client and the
loops share one vocabulary: the API turns an exception into ``{"status", "error", "field", "message"}``,
the client raises it as is.
"""

from __future__ import annotations

from enum import IntEnum


class Code(IntEnum):
    """Codes the Lua scripts return for one job (see the header of each script)."""

    CREATED = 1
    REPLACED = 2
    OK = 3
    EXISTS = -1
    NOT_FOUND = -2
    RESERVED = -3
    DEAD = -4
    LOCK_LOST = -5
    CHANGED = -6  # a schedule's progress is no longer the one read
    BUSY = -7  # a schedule's outbox is claimed by another caller
    DONE = -8  # the job succeeded: only its receipt is left


class DelayqError(Exception):
    """Base of every delayq error. ``status`` is the HTTP status the API answers with."""

    status = 500
    error = "internal"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_dict(self) -> dict[str, object]:
        return {"status": self.status, "error": self.error, "field": self.field, "message": self.message}


class MalformedRequest(DelayqError):
    """The request body is not JSON (400)."""

    status = 400
    error = "malformed"


class NotAnObject(DelayqError):
    """The request body is JSON, but not an object (422)."""

    status = 422
    error = "invalid"


class InvalidField(DelayqError):
    """A field has a value delayq refuses (422)."""

    status = 422
    error = "invalid"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)


class TooLarge(InvalidField):
    """A body or a batch is larger than allowed (413)."""

    status = 413
    error = "too_large"


class UnknownTopic(InvalidField):
    """The topic has no config and there is no ``*`` entry (422)."""

    def __init__(self, topic: str) -> None:
        super().__init__("topic", f"topic {topic!r} is not configured and there is no '*' default")


class JobNotFound(DelayqError):
    status = 404
    error = "not_found"

    def __init__(self, topic: str, job_id: str) -> None:
        super().__init__(f"no job {job_id!r} in topic {topic!r}", field="id")


class ScheduleNotFound(DelayqError):
    status = 404
    error = "not_found"

    def __init__(self, topic: str, name: str) -> None:
        super().__init__(f"no schedule {name!r} in topic {topic!r}", field="name")


class TopicNotFound(DelayqError):
    """A topic that is neither configured (nor covered by ``*``) nor holding jobs."""

    status = 404
    error = "not_found"

    def __init__(self, topic: str) -> None:
        super().__init__(f"no topic {topic!r}: it is not configured and holds no jobs", field="topic")


class JobExists(DelayqError):
    status = 409
    error = "exists"

    def __init__(self, topic: str, job_id: str) -> None:
        super().__init__(f"job {job_id!r} already exists in topic {topic!r}", field="id")


class JobReserved(DelayqError):
    """The job is being handled by a consumer right now."""

    status = 409
    error = "reserved"

    def __init__(self, topic: str, job_id: str) -> None:
        super().__init__(f"job {job_id!r} of topic {topic!r} is reserved by a consumer", field="id")


class JobDead(DelayqError):
    """The job is a dead letter: replay it instead."""

    status = 409
    error = "dead"

    def __init__(self, topic: str, job_id: str) -> None:
        super().__init__(
            f"job {job_id!r} of topic {topic!r} is dead; replay it with POST /topics/{topic}/dead/replay",
            field="id",
        )


class JobDone(DelayqError):
    """The job succeeded and only its receipt is left: put it again to run it again."""

    status = 409
    error = "done"

    def __init__(self, topic: str, job_id: str) -> None:
        super().__init__(
            f"job {job_id!r} of topic {topic!r} is done (only its receipt is kept); "
            f"PUT /jobs/{topic}/{job_id} to run it again",
            field="id",
        )


class RedisUnavailable(DelayqError):
    """Redis did not answer, or answered "not now" (503): down, failing over, loading, full. Nothing
    was written, or the write is safe to retry. ``reason``: the reply's code (``CLUSTERDOWN``) or the
    error's class (``ConnectionError``); ``retry_after_s``: the API's ``Retry-After``."""

    status = 503
    error = "unavailable"
    retry_after_s = 1

    def __init__(self, message: str = "Redis is unavailable", *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class NotReplicated(RedisUnavailable):
    """A create was written, but fewer replicas than ``DELAYQ_MIN_REPLICAS`` said they hold it within
    ``DELAYQ_MIN_REPLICAS_WAIT_MS`` (503): a failover now could lose it. Creating it again is safe."""

    error = "not_replicated"

    def __init__(self, replicas: int, wanted: int, wait_ms: int) -> None:
        super().__init__(
            f"the write reached {replicas} of the {wanted} replicas wanted within {wait_ms} ms: a failover now "
            "could lose it; creating the same job again is safe (409 exists: it is there)",
            reason="NOREPLICAS",
        )
        self.replicas = replicas
        self.wanted = wanted

    def to_dict(self) -> dict[str, object]:
        return super().to_dict() | {"replicas": self.replicas, "wanted": self.wanted}


MAX_RETRY_AFTER_S = 86_400  # the longest a Retry-After can hold a retry back: a day


class RetryAfter(Exception):
    """Raised by a target (or a handler) that knows when trying again can help: a failed attempt like
    any other, whose retry, while retries are left, waits max(backoff, min(``seconds``, a day)). The
    webhook target raises it for a 429 or 503 answer with ``Retry-After``."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds

    @property
    def wait_ms(self) -> int:
        """The least wait before the retry, in ms: ``seconds``, within 0 and a day."""
        return round(min(max(self.seconds, 0.0), MAX_RETRY_AFTER_S) * 1000)


class PermanentFailure(Exception):
    """Raised by a target (or a handler) when retrying cannot help: the job goes dead at once, with
    this error as its last error, whatever retries it has left. Replay it once the cause is fixed."""


class ConfigError(DelayqError):
    """The environment or the topics config is invalid: raised at start-up, never to API callers."""

    error = "config"


_BY_CODE: dict[int, type[JobNotFound | JobExists | JobReserved | JobDead | JobDone]] = {
    Code.EXISTS: JobExists,
    Code.NOT_FOUND: JobNotFound,
    Code.RESERVED: JobReserved,
    Code.DEAD: JobDead,
    Code.DONE: JobDone,
}


def code_error(code: int, topic: str, job_id: str) -> DelayqError:
    """The exception for a negative Lua code about one job."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return DelayqError(f"unexpected code {code} for job {job_id!r} of topic {topic!r}")
    return cls(topic, job_id)
