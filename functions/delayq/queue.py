"""``delayq.Queue``: the Python client, and the core the HTTP API calls.

Same rules and errors as the HTTP API, as exceptions: ``InvalidField`` (422), ``TooLarge`` (413),
``JobExists``/``JobReserved``/``JobDead`` (409), ``JobNotFound`` (404), ``RedisUnavailable`` (503).
Every write is one Lua call per partition, so it is whole or absent.
"""

from __future__ import annotations

import json
import re
import secrets
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Any

from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .connection import RedisClient, connect
from .errors import (
    Code,
    DelayqError,
    InvalidField,
    JobNotFound,
    RedisUnavailable,
    UnknownTopic,
    code_error,
)
from .job import DeadJob, JobInfo, Meta, Scheduled, TopicStats
from .keys import Keyspace, Partition
from .models import (
    ID_PATTERN,
    TOPIC_PATTERN,
    JobOptions,
    NewJob,
    PutJob,
    Reschedule,
    body_json,
    invalid,
    validate_new_job,
)
from .observability import Telemetry
from .schedule import encode_backoff, seconds_to_ms
from .scripts import Call, Scripts, run_many
from .settings import Settings, TopicConfig, Topics

WRITE_CHUNK = 1000  # jobs per enqueue call: bounded work per Lua call
PIPELINE_CALLS = 16  # script calls per round trip
STATE_NAMES = {"l": "reserved", "x": "dead"}
_TOPIC_RE = re.compile(TOPIC_PATTERN)
_ID_RE = re.compile(ID_PATTERN)
# Redis answers that mean "not now", not "never": the caller gets a 503 and may retry.
_UNAVAILABLE_PREFIXES = ("OOM", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "READONLY")


def new_ids(count: int) -> list[str]:
    """``count`` random job ids, 24 hex characters (96 bits) each, from one read of the system's
    random source."""
    text = secrets.token_bytes(12 * count).hex()
    return [text[i : i + 24] for i in range(0, 24 * count, 24)]


def new_id() -> str:
    """A random job id: 24 hex characters, 96 bits."""
    return new_ids(1)[0]


@contextmanager
def redis_errors() -> Iterator[None]:
    """Turns Redis being down, loading, out of memory or failing over into ``RedisUnavailable``."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, RedisClusterException) as exc:
        raise RedisUnavailable(f"Redis is unavailable: {type(exc).__name__}") from exc
    except ResponseError as exc:
        if str(exc).startswith(_UNAVAILABLE_PREFIXES):
            raise RedisUnavailable(f"Redis is unavailable: {str(exc).split(' ', 1)[0]}") from exc
        raise
    except RedisError as exc:
        raise RedisUnavailable(f"Redis is unavailable: {type(exc).__name__}") from exc


def check_topic(topic: str) -> str:
    if not isinstance(topic, str) or not _TOPIC_RE.fullmatch(topic):
        raise InvalidField("topic", f"must match {TOPIC_PATTERN}")
    return topic


def check_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not _ID_RE.fullmatch(job_id):
        raise InvalidField("id", f"must match {ID_PATTERN}")
    return job_id


@dataclass(frozen=True, slots=True)
class _Write:
    """One validated job, ready for the enqueue script."""

    topic: str
    id: str
    body: str
    mode: str  # 'c' create, 'r' create or replace
    when: str  # 'd' delay ms, 'a' epoch ms
    value: int
    retries: str
    timeout_ms: str
    backoff: str


class Queue:
    """A delay queue in one Redis namespace.

    ``Queue.from_env()`` reads the ``DELAYQ_*`` environment; explicit arguments win over it. Pass
    ``redis`` to share a client (or to use any redis-py compatible one).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        redis_url: str | None = None,
        namespace: str | None = None,
        partitions: int | None = None,
        topics: Topics | Mapping[str, Any] | str | None = None,
        redis: RedisClient | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        explicit: dict[str, Any] = {
            "redis_url": redis_url,
            "namespace": namespace,
            "partitions": partitions,
            "topics": topics if isinstance(topics, Topics) or topics is None else Topics.parse(topics),
        }
        explicit = {name: value for name, value in explicit.items() if value is not None}
        base = settings or Settings.from_env()
        self.settings = base.with_(**explicit) if explicit else base
        self.keys = Keyspace(self.settings.namespace, self.settings.partitions)
        self._redis = redis
        self.telemetry = telemetry or Telemetry.disabled()

    @classmethod
    def from_env(cls, **options: Any) -> Queue:
        """From the ``DELAYQ_*`` environment; ``options`` are the keyword arguments of ``Queue``."""
        return cls(Settings.from_env(), **options)

    @property
    def redis(self) -> RedisClient:
        if self._redis is None:
            self._redis = connect(self.settings)
        return self._redis

    def topic_config(self, topic: str) -> TopicConfig:
        config = self.settings.topics.for_topic(topic)
        if config is None:
            raise UnknownTopic(topic)
        return config

    # ----------------------------------------------------------------------------------- create

    def enqueue(
        self,
        topic: str,
        body: Any = None,
        *,
        id: str | None = None,  # noqa: A002 - the contract's name
        delay: float | None = None,
        run_at: float | str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: Sequence[float] | None = None,
    ) -> Scheduled:
        """Create a job; ``JobExists`` if (topic, id) exists in any state."""
        fields = _fields(
            topic=topic, id=id, body=body, delay=delay, run_at=run_at, retries=retries, timeout=timeout, backoff=backoff
        )
        return self.create(validate_new_job(fields))

    def create(self, job: NewJob) -> Scheduled:
        """Create a validated job (the API's ``POST /jobs``)."""
        write = self._prepare(job, job.topic, job.id or new_id(), "c")
        code, run_at_ms = self._write([write])[0]
        if code < 0:
            raise code_error(code, write.topic, write.id)
        self.telemetry.count("Enqueued", write.topic)
        return Scheduled(write.topic, write.id, run_at_ms, created=True)

    def put(
        self,
        topic: str,
        id: str,  # noqa: A002 - the contract's name
        body: Any = None,
        *,
        delay: float | None = None,
        run_at: float | str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: Sequence[float] | None = None,
    ) -> Scheduled:
        """Create a job, or replace the body and run-at (and overrides) of an existing one.

        A replaced job starts afresh: attempts 0, no last error. ``JobReserved`` while it is being handled.
        """
        fields = _fields(body=body, delay=delay, run_at=run_at, retries=retries, timeout=timeout, backoff=backoff)
        try:
            options = PutJob.model_validate(fields)
        except ValidationError as exc:
            raise invalid(exc) from None
        return self.replace(check_topic(topic), check_id(id), options)

    def replace(self, topic: str, job_id: str, job: PutJob) -> Scheduled:
        """Create or replace a validated job (the API's ``PUT /jobs/{topic}/{id}``)."""
        for name, given, path in (("topic", job.topic, topic), ("id", job.id, job_id)):
            if given is not None and given != path:
                raise InvalidField(name, f"{given!r} differs from the path's {path!r}")
        write = self._prepare(job, topic, job_id, "r")
        code, run_at_ms = self._write([write])[0]
        if code < 0:
            raise code_error(code, topic, job_id)
        self.telemetry.count("Enqueued", topic)
        return Scheduled(topic, job_id, run_at_ms, created=code == Code.CREATED)

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Create many jobs, each validated and written on its own: valid ones are written even when
        others are not. Answers like ``POST /jobs/batch``, in order: ``{"status": 201, "id", "run_at_ms",
        "run_at"}``, or ``{"status": 409 | 422 | 413, "id", "error": {...}}``."""
        results: list[dict[str, Any]] = []
        iterator = iter(jobs)
        while chunk := list(islice(iterator, WRITE_CHUNK * PIPELINE_CALLS)):
            results.extend(self._create_chunk(chunk))
        return results

    def _create_chunk(self, items: list[Any]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = [{} for _ in items]
        writes: list[tuple[int, _Write]] = []
        fresh = iter(new_ids(len(items)))
        for i, item in enumerate(items):
            try:
                job = validate_new_job(dict(item) if isinstance(item, Mapping) and type(item) is not dict else item)
                writes.append((i, self._prepare(job, job.topic, job.id or next(fresh), "c")))
            except InvalidField as exc:  # a body too large is a 422 here too: one status per invalid item
                results[i] = {"status": 422, "id": _item_id(item), "error": exc.to_dict() | {"status": 422}}
        answers = self._write([write for _, write in writes])
        for (i, write), (code, run_at_ms) in zip(writes, answers, strict=True):
            if code < 0:
                error = code_error(code, write.topic, write.id)
                results[i] = {"status": error.status, "id": write.id, "error": error.to_dict()}
            else:
                self.telemetry.count("Enqueued", write.topic)
                results[i] = {"status": 201, **Scheduled(write.topic, write.id, run_at_ms).to_dict()}
        return results

    def _prepare(self, job: JobOptions, topic: str, job_id: str, mode: str) -> _Write:
        self.topic_config(topic)
        body = body_json(job.body)
        when, value = job.when()
        return _Write(
            topic=topic,
            id=job_id,
            body=body,
            mode=mode,
            when=when,
            value=value,
            retries="" if job.retries is None else str(job.retries),
            timeout_ms="" if job.timeout is None else str(seconds_to_ms(job.timeout)),
            backoff="" if job.backoff is None else encode_backoff(job.backoff),
        )

    def _write(self, writes: Sequence[_Write]) -> list[tuple[int, int]]:
        """Run the enqueue script for ``writes``: one call per partition and chunk. Codes in order."""
        by_partition: dict[Partition, list[int]] = defaultdict(list)
        for i, write in enumerate(writes):
            by_partition[self.keys.for_job(write.topic, write.id)].append(i)
        calls: list[tuple[list[int], Call]] = []
        for partition, indexes in by_partition.items():
            for start in range(0, len(indexes), WRITE_CHUNK):
                chunk = indexes[start : start + WRITE_CHUNK]
                calls.append((chunk, _enqueue_call(partition, [writes[i] for i in chunk])))
        answers: list[tuple[int, int]] = [(0, 0)] * len(writes)
        with redis_errors():
            for start in range(0, len(calls), PIPELINE_CALLS):
                batch = calls[start : start + PIPELINE_CALLS]
                replies = run_many(self.redis, [call for _, call in batch])
                for (indexes, _), reply in zip(batch, replies, strict=True):
                    for n, i in enumerate(indexes):
                        answers[i] = (int(reply[2 * n]), int(reply[2 * n + 1]))
        return answers

    # ----------------------------------------------------------------------------------- one job

    def get(self, topic: str, id: str) -> JobInfo:  # noqa: A002 - the contract's name
        """A job in any state; ``JobNotFound`` when there is none."""
        partition = self.keys.for_job(check_topic(topic), check_id(id))
        with redis_errors():
            reply = Scripts.inspect(self.redis, partition.topic_keys(topic), [id])
        if not reply:
            raise JobNotFound(topic, id)
        state, raw_meta, body, last_error = reply
        meta = Meta.decode(raw_meta)
        config = self.settings.topics.for_topic(topic)
        retries = meta.retries if meta.retries is not None else (config.retries if config else 2)
        return JobInfo(
            topic=topic,
            id=id,
            state=state,
            run_at_ms=meta.run_at_ms,
            enqueued_at_ms=meta.enqueued_at_ms,
            attempts=meta.attempts,
            retries=retries,
            body=json.loads(body) if body is not None else None,
            last_error=last_error,
        )

    def reschedule(
        self,
        topic: str,
        id: str,  # noqa: A002 - the contract's name
        *,
        delay: float | None = None,
        run_at: float | str | None = None,
    ) -> Scheduled:
        """New run-at for a delayed or ready job. ``JobReserved`` or ``JobDead`` (409), ``JobNotFound``."""
        try:
            when = Reschedule.model_validate(_fields(delay=delay, run_at=run_at))
        except ValidationError as exc:
            raise invalid(exc) from None
        return self.reschedule_to(topic, id, when)

    def reschedule_to(self, topic: str, job_id: str, when: Reschedule) -> Scheduled:
        partition = self.keys.for_job(check_topic(topic), check_id(job_id))
        kind, value = when.when()
        with redis_errors():
            code, run_at_ms = Scripts.reschedule(self.redis, partition.topic_keys(topic), [job_id, kind, value])
        if code < 0:
            raise code_error(code, topic, job_id)
        return Scheduled(topic, job_id, int(run_at_ms))

    def cancel(self, topic: str, id: str) -> None:  # noqa: A002 - the contract's name
        """The job is gone, whatever its state; a reserved one is not retried. ``JobNotFound``."""
        partition = self.keys.for_job(check_topic(topic), check_id(id))
        with redis_errors():
            code = Scripts.cancel(self.redis, partition.topic_keys(topic), [id])
        if code < 0:
            raise code_error(code, topic, id)

    # ----------------------------------------------------------------------------------- topics

    def stats(self, topic: str) -> TopicStats:
        """How many jobs of ``topic`` are delayed, ready, reserved and dead, and the next run-at."""
        replies = self._each_partition(Scripts.stats, check_topic(topic))
        nexts = [int(reply[4]) for reply in replies if int(reply[4]) >= 0]
        return TopicStats(
            topic=topic,
            delayed=sum(int(reply[0]) for reply in replies),
            ready=sum(int(reply[1]) for reply in replies),
            reserved=sum(int(reply[2]) for reply in replies),
            dead=sum(int(reply[3]) for reply in replies),
            next_run_at_ms=min(nexts) if nexts else None,
        )

    def dead(self, topic: str, limit: int = 100) -> list[DeadJob]:
        """The most recent dead jobs of ``topic``, newest first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidField("limit", "must be an integer from 1 to 1000")
        jobs: list[DeadJob] = []
        for reply in self._each_partition(Scripts.dead, check_topic(topic), [limit]):
            for i in range(0, len(reply), 5):
                job_id, died_at, raw_meta, body, last_error = reply[i : i + 5]
                meta = Meta.decode(raw_meta)
                jobs.append(
                    DeadJob(
                        topic=topic,
                        id=job_id,
                        died_at_ms=int(float(died_at)),
                        attempts=meta.attempts,
                        run_at_ms=meta.run_at_ms,
                        enqueued_at_ms=meta.enqueued_at_ms,
                        body=json.loads(body) if body is not None else None,
                        last_error=last_error,
                    )
                )
        jobs.sort(key=lambda job: job.died_at_ms, reverse=True)
        return jobs[:limit]

    def replay(self, topic: str, ids: Sequence[str] | None = None) -> int:
        """Dead jobs become due now with fresh attempts: ``ids``, or all of them. Returns how many."""
        check_topic(topic)
        if ids is None:
            return self._drain(Scripts.replay, topic, ["oldest", WRITE_CHUNK])
        by_partition: dict[Partition, list[str]] = defaultdict(list)
        for job_id in ids:
            by_partition[self.keys.for_job(topic, check_id(job_id))].append(job_id)
        calls = [Call(Scripts.replay, p.topic_keys(topic), ["ids", *chunk]) for p, chunk in by_partition.items()]
        with redis_errors():
            return sum(int(n) for n in run_many(self.redis, calls)) if calls else 0

    def purge(self, topic: str) -> int:
        """Delete every dead job of ``topic``. Returns how many."""
        return self._drain(Scripts.purge, check_topic(topic), [WRITE_CHUNK])

    def known_topics(self) -> set[str]:
        """Every topic that ever had a job in this namespace."""
        pipe = self.redis.pipeline(transaction=False)
        for partition in self.keys.partitions:
            pipe.smembers(partition.topics)
        with redis_errors():
            return set().union(*pipe.execute())

    def ping(self) -> bool:
        """True when every partition's Redis answers."""
        with redis_errors():
            return bool(self.redis.ping())

    def _each_partition(self, script: Any, topic: str, args: Sequence[Any] = ()) -> list[Any]:
        calls = [Call(script, partition.topic_keys(topic), args) for partition in self.keys.partitions]
        with redis_errors():
            return run_many(self.redis, calls)

    def _drain(self, script: Any, topic: str, args: Sequence[Any]) -> int:
        """Calls a bounded script on every partition until each answers 0; the total."""
        total = 0
        with redis_errors():
            for partition in self.keys.partitions:
                while n := int(script(self.redis, partition.topic_keys(topic), args)):
                    total += n
        return total


def _enqueue_call(partition: Partition, writes: Sequence[_Write]) -> Call:
    topics: dict[str, int] = {}
    keys = [partition.topics]
    args: list[Any] = []
    for write in writes:
        if write.topic not in topics:
            topics[write.topic] = len(topics) + 1
            keys.extend(partition.topic_keys(write.topic))
        args += [
            topics[write.topic],
            write.id,
            write.body,
            write.mode,
            write.when,
            write.value,
            write.retries,
            write.timeout_ms,
            write.backoff,
        ]
    return Call(Scripts.enqueue, keys, [len(topics), *topics, *args])


def _fields(**given: Any) -> dict[str, Any]:
    """Keyword arguments as the JSON fields of a request: ``None`` means absent (``body`` excepted),
    a tuple is a list."""
    return {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in given.items()
        if value is not None or name == "body"
    }


def _item_id(item: Any) -> Any:
    return item.get("id") if isinstance(item, Mapping) else None


__all__ = ["DelayqError", "Queue", "new_id"]
