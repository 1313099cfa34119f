"""What a job is, to its handler and to the API, and how its metadata is stored.

A job's metadata is one string in its topic's ``meta`` hash, fields separated by ``|``::

    state|attempts|run_at_ms|enqueued_at_ms|lease_token|retries|timeout_ms|backoff_ms_csv[|key]

``state`` is ``q`` (queued: in ``delayed`` while waiting, in ``ready`` once due), ``l`` (leased to a
consumer), ``x`` (dead) or ``d`` (done: a receipt, in ``done``; its ``lease_token`` field holds
``started_at:done_at``, when the handler of its last attempt started and when it succeeded, ms). The
next three are per-job overrides of the topic's config, empty when the topic's value applies; a job
with a flow key ends with it (a key, like an id, holds no ``|``).
``lua/includes/meta.lua`` is the Lua side of this codec.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from .errors import DelayqError, InvalidField
from .lateness import NONE, Lateness
from .schedule import encode_backoff, iso_utc, seconds_to_ms

JobState = Literal["delayed", "ready", "reserved", "dead", "done"]  # as the API names them, in their order
STATES: tuple[str, ...] = get_args(JobState)
# As a job's meta stores its state (store/lua/includes/meta.lua names the same letters): queued is
# delayed or ready, by where the job is; a done job's meta is its receipt.
QUEUED, LEASED, DEAD, DONE = "q", "l", "x", "d"


@dataclass(frozen=True, slots=True)
class Job:
    """A job as its topic's handler receives it. ``attempt`` is 1 on the first delivery."""

    topic: str
    id: str
    body: Any
    attempt: int
    run_at_ms: int
    enqueued_at_ms: int
    key: str | None = None  # its flow key: who or what it is for (a tenant, a destination), if any

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "id": self.id,
            "key": self.key,
            "body": self.body,
            "attempt": self.attempt,
            "run_at_ms": self.run_at_ms,
            "run_at": iso_utc(self.run_at_ms),
            "enqueued_at_ms": self.enqueued_at_ms,
        }


NO_OVERRIDES = "||"  # a job with the topic's retries, timeout and backoff


class Overrides(Protocol):
    """A job's overrides of its topic's config (``JobOptions``; a schedule's, for its occurrences)."""

    @property
    def retries(self) -> int | None: ...

    @property
    def timeout(self) -> float | None: ...

    @property
    def backoff(self) -> list[float] | None: ...


def encode_overrides(job: Overrides, *, floor_s: float) -> str:
    """A job's overrides as its meta stores them, ``retries|timeout_ms|backoff_ms_csv`` ('' for the
    topic's), a backoff raised to ``floor_s`` (its topic's ``min_backoff_s``)."""
    if job.retries is None and job.timeout is None and job.backoff is None:
        return NO_OVERRIDES
    retries = "" if job.retries is None else str(job.retries)
    timeout_ms = "" if job.timeout is None else str(seconds_to_ms(job.timeout))
    backoff = "" if job.backoff is None else encode_backoff(job.backoff, floor_s=floor_s)
    return f"{retries}|{timeout_ms}|{backoff}"


@dataclass(frozen=True, slots=True)
class Meta:
    state: str
    attempts: int
    run_at_ms: int
    enqueued_at_ms: int
    lease: str = ""
    retries: int | None = None
    timeout_ms: int | None = None
    backoff_ms: tuple[int, ...] | None = None
    key: str | None = None

    @classmethod
    def decode(cls, raw: str) -> Meta:
        state, attempts, run_at, enqueued_at, lease, retries, timeout, backoff, *key = raw.split("|")
        if len(key) > 1 or key == [""]:
            raise ValueError(f"a meta has 8 fields, or 9 ending with a key: {raw!r}")
        return cls(
            state=state,
            attempts=int(attempts),
            run_at_ms=int(run_at),
            enqueued_at_ms=int(enqueued_at),
            lease=lease,
            retries=int(retries) if retries else None,
            timeout_ms=int(timeout) if timeout else None,
            backoff_ms=tuple(int(ms) for ms in backoff.split(",")) if backoff else None,
            key=key[0] if key else None,
        )

    @property
    def started_at_ms(self) -> int | None:
        """A done job's: when the handler of its attempt that succeeded started (Redis time)."""
        return int(self.lease.partition(":")[0]) if self.state == DONE else None

    @property
    def done_at_ms(self) -> int | None:
        """A done job's: when it succeeded (Redis time)."""
        return int(self.lease.partition(":")[2]) if self.state == DONE else None

    def encode(self) -> str:
        return "|".join(
            (
                self.state,
                str(self.attempts),
                str(self.run_at_ms),
                str(self.enqueued_at_ms),
                self.lease,
                "" if self.retries is None else str(self.retries),
                "" if self.timeout_ms is None else str(self.timeout_ms),
                "" if self.backoff_ms is None else ",".join(map(str, self.backoff_ms)),
                *(() if self.key is None else (self.key,)),
            )
        )


OUTCOMES = ("ok", "error", "timeout", "lease_expired")  # of an attempt
HISTORY_KEEP = 10  # attempts a job's history keeps, the last ones (history.lua, the same)
HISTORY_SEPARATOR = "\x1e"  # between the entries of a stored history (history.lua's RS)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a job: its number, when it started and ended (Redis ms; None where not known:
    an expired lease's start), how it ended (``OUTCOMES``) and, unless it succeeded, its error."""

    attempt: int
    started_at_ms: int | None
    ended_at_ms: int | None
    outcome: str
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "started_at_ms": self.started_at_ms,
            "ended_at_ms": self.ended_at_ms,
            "outcome": self.outcome,
            "error": self.error,
        }


def history_of(stored: str | None, meta: Meta) -> list[Attempt]:
    """A job's last ``HISTORY_KEEP`` attempts, oldest first: its failed ones as history.lua keeps them,
    then a receipt's success, which its meta holds. A last error stored before histories were kept is
    its last attempt's."""
    history = []
    for entry in stored.split(HISTORY_SEPARATOR) if stored else ():
        attempt, started, ended, outcome, error = [*entry.split("|", 4), "", "", "", ""][:5]
        if attempt.isdigit() and outcome in OUTCOMES:
            history.append(Attempt(int(attempt), _ms(started), _ms(ended), outcome, error))
        else:
            history.append(Attempt(meta.attempts, None, None, "error", entry))
    if meta.state == DONE:
        history.append(Attempt(meta.attempts, meta.started_at_ms, meta.done_at_ms, "ok", None))
    return history[-HISTORY_KEEP:]


def last_error_of(history: list[Attempt]) -> str | None:
    """The error of a job's last attempt; None if it succeeded or none was made."""
    return history[-1].error if history and history[-1].outcome != "ok" else None


def _ms(text: str) -> int | None:
    return int(text) if text.isdigit() else None


RESULT_MAX_BYTES = 64 * 1024  # of a result as its receipt keeps it (UTF-8); beyond, it is cut
_JSON, _TEXT, _CUT = "=", '"', "~"  # a stored result's first character: JSON, a text, a text cut


def encode_result(value: Any) -> str:
    """What a successful attempt answered, as its receipt keeps it: '' for None; a string as its
    text, anything else as its JSON; either cut to its first ``RESULT_MAX_BYTES`` (then a text) when
    longer. A value JSON cannot hold (a set, NaN, a cycle) is kept as its ``repr``: the attempt
    succeeded, and its result should not undo that."""
    if value is None:
        return ""
    if isinstance(value, str):
        kind, text = _TEXT, value
    else:
        try:
            kind, text = _JSON, json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            kind, text = _TEXT, repr(value)
    if len(text) * 4 <= RESULT_MAX_BYTES or len(text.encode()) <= RESULT_MAX_BYTES:
        return kind + text
    return _CUT + text.encode()[:RESULT_MAX_BYTES].decode(errors="ignore")  # a character cut in two is dropped


def decode_result(stored: str | None) -> tuple[Any, bool]:
    """A stored result (``encode_result``): the value, and whether it was cut (then the value is the
    text it was cut to)."""
    if not stored:
        return None, False
    if stored[0] == _JSON:
        return json.loads(stored[1:]), False
    return stored[1:], stored[0] == _CUT


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as ``GET /jobs/{topic}/{id}`` and ``Queue.get`` show it: its last attempts, oldest first
    (``history``), and a dead job when it went dead. A done job (a receipt) has no body and no last
    error, and says when its handler started, when it succeeded and what it answered."""

    topic: str
    id: str
    state: str  # delayed | ready | reserved | dead | done
    run_at_ms: int
    enqueued_at_ms: int
    attempts: int
    retries: int
    body: Any
    last_error: str | None
    started_at_ms: int | None = None  # done jobs only
    done_at_ms: int | None = None  # done jobs only
    key: str | None = None
    history: tuple[Attempt, ...] = ()
    dead_at_ms: int | None = None  # dead jobs only
    result: Any = None  # done jobs only: what the attempt that succeeded answered
    result_truncated: bool = False  # the result was cut to RESULT_MAX_BYTES (it is then that text)

    @classmethod
    def of(
        cls,
        topic: str,
        job_id: str,
        state: str,
        meta: Meta,
        *,
        body: Any,
        history: str | None,
        retries: int,
        dead_at_ms: int | None = None,
        result: str | None = None,
    ) -> JobInfo:
        """From what a script read: the stored ``history`` (history.lua) and ``result``
        (``encode_result``); ``retries`` is the topic's, for a job without its own."""
        attempts = history_of(history, meta)
        value, truncated = decode_result(result)
        return cls(
            topic=topic,
            id=job_id,
            state=state,
            run_at_ms=meta.run_at_ms,
            enqueued_at_ms=meta.enqueued_at_ms,
            attempts=meta.attempts,
            retries=meta.retries if meta.retries is not None else retries,
            body=body,
            last_error=last_error_of(attempts),
            started_at_ms=meta.started_at_ms,
            done_at_ms=meta.done_at_ms,
            key=meta.key,
            history=tuple(attempts),
            dead_at_ms=dead_at_ms if state == "dead" else None,
            result=value,
            result_truncated=truncated,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "id": self.id,
            "key": self.key,
            "state": self.state,
            "run_at": iso_utc(self.run_at_ms),
            "run_at_ms": self.run_at_ms,
            "enqueued_at_ms": self.enqueued_at_ms,
            "attempts": self.attempts,
            "retries": self.retries,
            "body": self.body,
            "last_error": self.last_error,
            "started_at_ms": self.started_at_ms,
            "done_at": None if self.done_at_ms is None else iso_utc(self.done_at_ms),
            "done_at_ms": self.done_at_ms,
            "dead_at_ms": self.dead_at_ms,
            "history": [attempt.to_dict() for attempt in self.history],
            "result": self.result,
            "result_truncated": self.result_truncated,
        }


@dataclass(slots=True)
class Scheduled:
    """The answer to a create, replace or reschedule: when the job is due. Not frozen: a frozen
    dataclass takes twice as long to make, and ``enqueue_many`` makes one per job."""

    topic: str
    id: str
    run_at_ms: int
    created: bool = False

    @property
    def status(self) -> int:
        """201 for a job created, 200 for one replaced or rescheduled."""
        return 201 if self.created else 200

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "id": self.id,
            "run_at": iso_utc(self.run_at_ms),
            "run_at_ms": self.run_at_ms,
        }


@dataclass(slots=True)
class Refused:
    """A job of ``Queue.enqueue_many`` (an item of ``POST /jobs/batch``) that was not written, and why:
    ``error`` is what ``Queue.enqueue`` would have raised for it."""

    id: Any  # the item's own ``id``, whatever it was (None when it had none)
    error: DelayqError

    @property
    def status(self) -> int:
        """409 for a conflict, 422 for anything invalid: in a batch, a body over the size limit is one
        more invalid field (the request itself was not too large)."""
        return 422 if isinstance(self.error, InvalidField) else self.error.status


EnqueueResult = Scheduled | Refused  # each answer of ``Queue.enqueue_many``: ``.status`` 201, 409 or 422, and ``.id``


@dataclass(frozen=True, slots=True)
class TopicStats:
    """A topic's counts by state (``done``: receipts kept), its next run-at, whether it is paused, and
    how long ago (Redis time) the job that has waited longest since it fell due did (0: none is due)."""

    topic: str
    delayed: int
    ready: int
    reserved: int
    dead: int
    next_run_at_ms: int | None
    paused: bool = False
    oldest_ready_ms: int = 0
    lateness: Lateness = NONE  # of the recent deliveries (delayq.core.lateness)
    done: int = 0

    @property
    def jobs(self) -> int:
        """Every job the topic holds, in any state (receipts of done jobs included)."""
        return self.delayed + self.ready + self.reserved + self.dead + self.done

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "delayed": self.delayed,
            "ready": self.ready,
            "reserved": self.reserved,
            "dead": self.dead,
            "done": self.done,
            "next_run_at_ms": self.next_run_at_ms,
            "next_run_at": None if self.next_run_at_ms is None else iso_utc(self.next_run_at_ms),
            "paused": self.paused,
            "oldest_ready_ms": self.oldest_ready_ms,
            "lateness": self.lateness.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class DeadJob:
    """A dead letter: a job whose retries are spent, kept with its body and last error."""

    topic: str
    id: str
    died_at_ms: int
    attempts: int
    run_at_ms: int
    enqueued_at_ms: int
    body: Any
    last_error: str
    history: tuple[Attempt, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "id": self.id,
            "died_at": iso_utc(self.died_at_ms),
            "died_at_ms": self.died_at_ms,
            "attempts": self.attempts,
            "run_at_ms": self.run_at_ms,
            "enqueued_at_ms": self.enqueued_at_ms,
            "body": self.body,
            "last_error": self.last_error,
            "history": [attempt.to_dict() for attempt in self.history],
        }


def new_ids(count: int) -> list[str]:
    """``count`` random job ids, 24 hex characters (96 bits) each, from one read of the system's
    random source."""
    text = secrets.token_bytes(12 * count).hex()
    return [text[i : i + 24] for i in range(0, 24 * count, 24)]


def lazy_ids(count: int) -> Iterator[str]:
    """Up to ``count`` random ids, made at the first one asked for: none when every job has its own."""
    yield from new_ids(count)


def new_id() -> str:
    """A random job id: 24 hex characters, 96 bits."""
    return new_ids(1)[0]
