"""``delayq.Queue``: the Python client, and the core the HTTP API calls.

Same rules and errors as the HTTP API, as exceptions: ``InvalidField`` (422), ``TooLarge`` (413),
``JobExists``/``JobReserved``/``JobDead``/``JobDone`` (409), ``JobNotFound`` (404), ``RedisUnavailable`` (503).
Every write is one Lua call per partition, so it is whole or absent.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import chain, islice
from typing import Any, cast

from pydantic import ValidationError

from delayq.core.activity import DEFAULT_MINUTES as DEFAULT_HISTORY_MINUTES
from delayq.core.activity import Minute, check_minutes, minutes_of
from delayq.core.clock import ServerClock
from delayq.core.errors import (
    Code,
    DelayqError,
    InvalidField,
    JobNotFound,
    TopicNotFound,
    code_error,
)
from delayq.core.flows import KeyPage, KeyState
from delayq.core.job import (
    NO_OVERRIDES,
    DeadJob,
    EnqueueResult,
    JobInfo,
    Refused,
    Scheduled,
    TopicStats,
    encode_overrides,
    lazy_ids,
    new_id,
)
from delayq.core.lateness import WINDOW_MINUTES as LATENESS_WINDOW_MINUTES
from delayq.core.lateness import Lateness
from delayq.core.models import (
    JobOptions,
    PutJob,
    Reschedule,
    body_json,
    check_id,
    check_key,
    check_topic,
    invalid,
    plain_job,
    validate_new_job,
)
from delayq.core.observability import Telemetry
from delayq.core.recurring import ScheduleInfo, check_schedule_name, validate_schedule
from delayq.core.settings import Settings, Topics

from . import calls
from .calls import JobWrite
from .connection import RedisClient, redis_errors
from .flows import Flows
from .keys import Partition
from .listing import (
    DEAD_ERRORS_PAGE,
    DEAD_ERRORS_SCAN,
    DEFAULT_BUCKET_S,
    DEFAULT_LIMIT,
    DEFAULT_MINUTES,
    DeadErrors,
    Forecast,
    JobPage,
    TopicPage,
    buckets,
    check_cancellable,
    check_limit,
    check_state,
    encode_cursor,
    forecast_window,
    group_errors,
    topics_cursor,
)
from .namespace import Namespace
from .pages import Pages
from .schedules import Schedules
from .scripts import Call, run_many, stream

WRITE_CHUNK = 1000  # jobs per enqueue call: bounded work per Lua call
STREAM_CHUNK = 250  # jobs enqueue_many validates and sends at a time, while Redis writes the chunk before
STATS_CALLS = 256  # stats calls per round trip of a page of topics (each small)
LATENESS_READS = 100  # topics per call of lateness_read.lua
ACTIVITY_READ_TRIES = 3  # reads of activity around Redis' time: the first may miss it (this machine's clock)


@dataclass(slots=True)
class _Batch:
    """A chunk of ``enqueue_many``, validated: the writes of its valid jobs and their positions in
    the chunk; ``results`` holds the answers of the invalid ones, ``None`` where a write's will be."""

    results: list[EnqueueResult | None]
    writes: list[JobWrite] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)


class Queue(Namespace):
    """A delay queue in one Redis namespace: the public client, and the core the HTTP API calls.

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
        super().__init__(base.with_(**explicit) if explicit else base, redis=redis, telemetry=telemetry)

    @classmethod
    def from_env(cls, **options: Any) -> Queue:
        """From the ``DELAYQ_*`` environment; ``options`` are the keyword arguments of ``Queue``. Without
        topics of its own, it takes those the loops published (``adopt_published_topics``)."""
        queue = cls(Settings.from_env(), **options)
        queue.adopt_published_topics()
        return queue

    # ----------------------------------------------------------------------------------- create

    def enqueue(
        self,
        topic: str,
        body: Any = None,
        *,
        id: str | None = None,  # noqa: A002 - the contract's name
        delay: float | None = None,
        run_at: float | str | None = None,
        key: str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: Sequence[float] | None = None,
    ) -> Scheduled:
        """Create a job; ``JobExists`` if (topic, id) exists in any state. ``key``: its flow key."""
        fields = _fields(
            topic=topic,
            id=id,
            body=body,
            delay=delay,
            run_at=run_at,
            key=key,
            retries=retries,
            timeout=timeout,
            backoff=backoff,
        )
        return self._create(self._job_write(fields, lazy_ids(1), time.time()))

    def _create(self, write: JobWrite) -> Scheduled:
        code, run_at_ms = self._write(write)
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
        key: str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: Sequence[float] | None = None,
    ) -> Scheduled:
        """Create a job, or replace the body, run-at, key and overrides of an existing one.

        A replaced job starts afresh: attempts 0, no last error. ``JobReserved`` while it is being handled.
        """
        fields = _fields(
            body=body, delay=delay, run_at=run_at, key=key, retries=retries, timeout=timeout, backoff=backoff
        )
        try:
            options = PutJob.model_validate(fields)
        except ValidationError as exc:
            raise invalid(exc) from None
        write = self._prepare(options, check_topic(topic), check_id(id))
        code, run_at_ms = self._write(write, replace=True)
        if code < 0:
            raise code_error(code, topic, id)
        self.telemetry.count("Enqueued", topic)
        return Scheduled(topic, id, run_at_ms, created=code == Code.CREATED)

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *, chunk: int = STREAM_CHUNK) -> list[EnqueueResult]:
        """Create many jobs, each validated and written on its own: valid ones are written even when
        others are not. One answer per job, in order, as ``POST /jobs/batch`` answers: a ``Scheduled``
        (``status`` 201) for a job written, a ``Refused`` (``status`` 409 or 422, ``error`` the
        ``DelayqError`` that ``enqueue`` would raise) for one that was not.

        Jobs go ``chunk`` (250; at most ``WRITE_CHUNK``) at a time, one Lua call per chunk and partition,
        each whole or not at all: a chunk is sent as soon as it is validated, and its answers read once
        the next one is sent, so Redis writes one chunk while Python validates the next. If Redis fails,
        ``RedisUnavailable`` is raised: the chunks before the one whose answers were lost are written,
        that one and the one after it may be, none later. Calling it again with the same ids is safe:
        the jobs already written answer 409. (``POST /jobs/batch`` takes its 1,000 jobs as one chunk:
        each partition's jobs are all written or none.)"""
        if not 1 <= chunk <= WRITE_CHUNK:
            raise ValueError(f"chunk must be between 1 and {WRITE_CHUNK}")
        chunks = _chunks(jobs, chunk)
        first = next(chunks, None)
        if first is None:
            return []
        validated: deque[tuple[_Batch, list[_Send]]] = deque()

        def sends() -> Iterator[list[Call[calls.Enqueued]]]:
            for items in chain((first,), chunks):
                batch = self._validate_chunk(items)
                parts = self._sends(batch.writes)
                validated.append((batch, parts))
                yield [call for _, call in parts]

        results: list[EnqueueResult] = []
        with redis_errors(self.server):
            for replies in stream(lambda: self.redis, sends(), replicas=self.replicas):
                batch, parts = validated.popleft()
                results += self._answers(batch, _merged(len(batch.writes), parts, replies))
        return results

    def _validate_chunk(self, items: list[Any]) -> _Batch:
        """Validates each job: the writes of the valid ones, the answers (422) of the others."""
        batch = _Batch(results=[None] * len(items))
        fresh = lazy_ids(len(items))
        now_s = time.time()
        for i, item in enumerate(items):
            try:
                batch.writes.append(self._job_write(item, fresh, now_s))
                batch.positions.append(i)
            except InvalidField as exc:
                batch.results[i] = Refused(_item_id(item), exc)
        return batch

    def _job_write(self, item: Any, fresh: Iterator[str], now_s: float) -> JobWrite:
        """A job as given to ``enqueue_many`` (or ``enqueue``), validated and ready to write; its id
        from ``fresh`` when it has none. ``InvalidField`` naming what is wrong."""
        plain = plain_job(item, now_s)
        if plain is None:  # any other shape, or something wrong: the model decides
            job = validate_new_job(item if type(item) is dict or not isinstance(item, Mapping) else dict(item))
            return self._prepare(job, job.topic, job.id or next(fresh))
        topic, job_id, when, value, key = plain
        self.topic_config(topic)  # UnknownTopic, as _prepare
        body = body_json(item.get("body"))
        return JobWrite(topic, job_id or next(fresh), body, f"{when}{value}", NO_OVERRIDES, key)

    def _answers(self, batch: _Batch, written: calls.Enqueued) -> list[EnqueueResult]:
        """The batch's answers, in order, with what the script answered for each write."""
        results = batch.results
        created: dict[str, int] = {}
        for i, write, code, run_at_ms in zip(batch.positions, batch.writes, *written, strict=True):
            if code < 0:
                results[i] = Refused(write.id, code_error(code, write.topic, write.id))
            else:
                created[write.topic] = created.get(write.topic, 0) + 1
                results[i] = Scheduled(write.topic, write.id, run_at_ms, True)
        for topic, count in created.items():
            self.telemetry.count("Enqueued", topic, count)
        return cast(list[EnqueueResult], results)  # every job is answered by now

    def _prepare(self, job: JobOptions, topic: str, job_id: str) -> JobWrite:
        config = self.topic_config(topic)
        when, value = job.when()
        overrides = encode_overrides(job, floor_s=config.min_backoff_s)
        body = body_json(job.body)
        return JobWrite(topic, job_id, body, f"{when}{value}", overrides, job.key or "")

    def _write(self, write: JobWrite, *, replace: bool = False) -> tuple[int, int]:
        """Run the enqueue script for one job: its code and run-at ms. ``replace``: create or replace,
        else create, refusing an existing job."""
        call = calls.enqueue(self.keys.for_job(write.topic, write.id), [write], replace=replace)
        with redis_errors(self.server):
            written: calls.Enqueued = run_many(self.redis, [call], replicas=self.replicas)[0]
        return written.codes[0], written.run_at_ms[0]

    def _sends(self, writes: Sequence[JobWrite]) -> list[_Send]:
        """The enqueue calls that create ``writes``: one per partition and ``WRITE_CHUNK`` jobs, each
        with the positions in ``writes`` of the jobs it creates."""
        partitions = self.keys.partitions
        by_partition: dict[int, Sequence[int]]
        if len(partitions) == 1:  # every job's (keys.for_job), without hashing each
            by_partition = {0: range(len(writes))}
        else:
            by_partition = defaultdict(list)
            for i, write in enumerate(writes):
                cast(list[int], by_partition[self.keys.for_job(write.topic, write.id).index]).append(i)
        return [
            (chunk, calls.enqueue(partitions[index], [writes[i] for i in chunk]))
            for index, indexes in by_partition.items()
            if indexes
            for chunk in (indexes[start : start + WRITE_CHUNK] for start in range(0, len(indexes), WRITE_CHUNK))
        ]

    # ----------------------------------------------------------------------------------- one job

    def get(self, topic: str, id: str) -> JobInfo:  # noqa: A002 - the contract's name
        """A job in any state; ``JobNotFound`` when there is none."""
        partition = self.keys.for_job(check_topic(topic), check_id(id))
        with redis_errors(self.server):
            found = calls.inspect(partition, topic, id).run(self.redis)
        if found is None:
            raise JobNotFound(topic, id)
        retries = self.settings.topics.retrying(topic).retries
        return JobInfo.of(
            topic,
            id,
            found.state,
            found.meta,
            body=found.body,
            history=found.history,
            retries=retries,
            dead_at_ms=found.dead_at_ms,
            result=found.result,
        )

    def reschedule(
        self,
        topic: str,
        id: str,  # noqa: A002 - the contract's name
        *,
        delay: float | None = None,
        run_at: float | str | None = None,
    ) -> Scheduled:
        """New run-at for a delayed or ready job. ``JobReserved``, ``JobDead`` or ``JobDone`` (409),
        ``JobNotFound``."""
        try:
            when = Reschedule.model_validate(_fields(delay=delay, run_at=run_at))
        except ValidationError as exc:
            raise invalid(exc) from None
        return self._reschedule(topic, id, *when.when())

    def run_now(self, topic: str, id: str) -> Scheduled:  # noqa: A002 - the contract's name
        """A delayed job due now (a ready one keeps its run-at and its place); its run-at.
        ``JobReserved``, ``JobDead`` or ``JobDone`` (409), ``JobNotFound``."""
        return self._reschedule(topic, id, "n", 0)

    def _reschedule(self, topic: str, job_id: str, kind: str, value: int) -> Scheduled:
        partition = self.keys.for_job(check_topic(topic), check_id(job_id))
        with redis_errors(self.server):
            code, run_at_ms = calls.reschedule(partition, topic, job_id, kind, value).run(self.redis)
        if code < 0:
            raise code_error(code, topic, job_id)
        return Scheduled(topic, job_id, run_at_ms)

    def cancel(self, topic: str, id: str) -> None:  # noqa: A002 - the contract's name
        """The job is gone, whatever its state; a reserved one is not retried. ``JobNotFound``."""
        partition = self.keys.for_job(check_topic(topic), check_id(id))
        with redis_errors(self.server):
            code = calls.cancel(partition, topic, id).run(self.redis)
        if code < 0:
            raise code_error(code, topic, id)

    # ----------------------------------------------------------------------------------- schedules

    def schedule(
        self,
        topic: str,
        name: str,
        *,
        cron: str | None = None,
        every: int | None = None,
        timezone: str = "UTC",
        body: Any = None,
        start_at: float | str | None = None,
        end_at: float | str | None = None,
        key: str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
        backoff: Sequence[float] | None = None,
    ) -> ScheduleInfo:
        """Create or replace the recurring schedule ``name`` of ``topic``: exactly one of ``cron`` (five
        fields, wall-clock times in ``timezone``) or ``every`` (seconds), making jobs of ``body`` with
        the given flow key and overrides, from ``start_at`` to ``end_at``. Its first occurrence exists as a delayed
        job when this returns; a replace cancels the old calendar's pending one. ``.created`` says which."""
        check_topic(topic)
        check_schedule_name(name)
        self.topic_config(topic)
        fields = _fields(
            cron=cron,
            every=every,
            timezone=timezone,
            body=body,
            start_at=start_at,
            end_at=end_at,
            key=key,
            retries=retries,
            timeout=timeout,
            backoff=backoff,
        )
        return self._schedules.put(topic, name, validate_schedule(fields))  # its body checked too

    def get_schedule(self, topic: str, name: str) -> ScheduleInfo:
        """A schedule with its next runs; ``ScheduleNotFound`` when there is none."""
        return self._schedules.get(check_topic(topic), check_schedule_name(name))

    def unschedule(self, topic: str, name: str) -> None:
        """Deletes a schedule and cancels its pending occurrence (unless it has started);
        ``ScheduleNotFound`` when there is none."""
        self._schedules.delete(check_topic(topic), check_schedule_name(name))

    def schedules(self, topic: str | None = None) -> list[ScheduleInfo]:
        """Every schedule, or those of ``topic``, by topic and name."""
        return self._schedules.find(None if topic is None else check_topic(topic))

    @cached_property
    def _schedules(self) -> Schedules:
        return Schedules(self)

    # -------------------------------------------------------------------------------- flow keys

    def key(self, topic: str, key: str) -> KeyState:
        """``key``'s jobs of ``topic`` by state (delayed, ready, reserved), the limits in force for it
        (its own settings over the topic's ``key_*`` config), and until when a Retry-After holds it."""
        return self._flows.get(topic, key)

    def flow_keys(self, topic: str, limit: int = DEFAULT_LIMIT, cursor: str | None = None) -> KeyPage:
        """The keys of ``topic`` holding jobs, settings or a hold, by name, each as ``key`` gives it, a
        page at a time: ``cursor`` is the ``next`` of the previous page. Walks the topic's jobs."""
        return self._flows.page(topic, limit, cursor)

    def set_key(self, topic: str, key: str, **settings: Any) -> KeyState:
        """Sets any of ``concurrency``, ``rate``, ``burst``, ``paused`` for ``key`` alone (None: the
        topic's again), the others kept; every consumer applies them from its next take."""
        return self._flows.put(topic, key, settings)

    def pause_key(self, topic: str, key: str) -> KeyState:
        """No job of ``key`` starts until ``resume_key``; its jobs stay ready, the other keys go on."""
        return self.set_key(topic, key, paused=True)

    def resume_key(self, topic: str, key: str) -> KeyState:
        return self.set_key(topic, key, paused=False)

    def reset_key(self, topic: str, key: str) -> None:
        """``key`` back to the topic's defaults: its own settings and its hold cleared."""
        self._flows.reset(topic, key)

    @cached_property
    def _flows(self) -> Flows:
        return Flows(self)

    @cached_property
    def _pages(self) -> Pages:
        return Pages(self)

    # ----------------------------------------------------------------------------------- topics

    def stats(self, topic: str) -> TopicStats:
        """How many jobs of ``topic`` are in each state, its next run-at, whether it is paused, how
        long ago its oldest due job fell due, and the lateness of its recent deliveries.
        ``TopicNotFound`` for a topic neither configured (nor covered by ``*``) nor holding jobs."""
        stats = _merge_stats(topic, self.each_partition(calls.stats, check_topic(topic)))
        if stats.jobs == 0 and self.settings.topics.for_topic(topic) is None:
            raise TopicNotFound(topic)
        return replace(stats, lateness=self.lateness([topic])[topic])

    def lateness(self, topics: Iterable[str]) -> dict[str, Lateness]:
        """The recent lateness of each of ``topics`` (``delayq.core.lateness``): p50 and p99 of the handler
        starts of the last ``lateness.WINDOW_MINUTES`` minutes; one call per partition involved."""
        by_partition: dict[Partition, list[str]] = defaultdict(list)
        for topic in dict.fromkeys(topics):
            by_partition[self.keys.for_topic(check_topic(topic))].append(topic)
        chunks = [
            (partition, names[i : i + LATENESS_READS])
            for partition, names in by_partition.items()
            for i in range(0, len(names), LATENESS_READS)
        ]
        if not chunks:
            return {}
        replies = self._read_activity(
            lambda around_ms: [
                calls.read_lateness(p, names, window_minutes=LATENESS_WINDOW_MINUTES, around_ms=around_ms)
                for p, names in chunks
            ]
        )
        return {
            topic: Lateness.of(counts)
            for (_, names), reply in zip(chunks, replies, strict=True)
            for topic, counts in zip(names, reply or [{}] * len(names), strict=True)
        }

    @cached_property
    def _redis_clock(self) -> ServerClock:
        """Redis' time as this queue's reads of activity last saw it: which minutes' keys they name."""
        return ServerClock()

    def _read_activity(self, reads: Callable[[float], list[Call[calls.Activity]]]) -> list[Any]:
        """What ``reads`` made around Redis' time (as last seen) read; made again around the time Redis
        answered while a read's keys missed the minutes it wanted (this machine's clock is off, the
        first time; a minute turned since). What still missed after a few tries reads as None."""
        replies: list[calls.Activity] = []
        with redis_errors(self.server):
            for _ in range(ACTIVITY_READ_TRIES):
                replies = run_many(self.redis, reads(self._redis_clock.ms()))
                self._redis_clock.saw(max(reply.now_ms for reply in replies))
                if all(reply.read is not None for reply in replies):
                    break
        return [reply.read for reply in replies]

    def topics(self, limit: int = DEFAULT_LIMIT, cursor: str | None = None) -> TopicPage:
        """Every configured topic and every topic holding jobs, by name, with its stats, a page at a
        time: ``cursor`` is the ``next`` of the previous page."""
        check_limit(limit)
        after = topics_cursor(cursor)
        named = set(self.settings.topics.named)
        names = sorted(name for name in named | self.known_topics() if after is None or name > after)
        found: list[TopicStats] = []
        start = 0
        while len(found) <= limit and start < len(names):  # one more than the page: are more left?
            chunk = names[start : start + limit + 1 - len(found)]
            start += len(chunk)
            found += [stats for stats in self.stats_of(chunk) if stats.topic in named or stats.jobs]
        page = found[:limit]
        lateness = self.lateness(stats.topic for stats in page)
        following = encode_cursor("topics", page[-1].topic) if len(found) > limit else None
        return TopicPage([replace(stats, lateness=lateness[stats.topic]) for stats in page], following)

    def jobs(
        self, topic: str, state: str, limit: int = DEFAULT_LIMIT, cursor: str | None = None, key: str | None = None
    ) -> JobPage:
        """A page of ``topic``'s jobs in ``state``: delayed by run-at (soonest first), ready in the
        order they will be taken, reserved by lease deadline, dead and done newest first. ``cursor`` is the
        ``next`` of the previous page; walking the pages lists every job that stays in its state
        meanwhile exactly once. With ``key``, only the jobs of that flow key: the pages are full still,
        read ``MAX_LIMIT`` jobs per partition and call (nothing indexes jobs by key)."""
        check_topic(topic)
        check_state(state)
        check_limit(limit)
        if key is None:
            listed, following = self._pages.listed(topic, state, limit, cursor)
        else:
            listed, following = self._pages.listed_of_key(topic, state, limit, cursor, check_key(key))
        if not listed and cursor is None:
            self.check_known(topic)
        retries = self.settings.topics.retrying(topic).retries
        infos = [
            JobInfo.of(
                topic,
                job.id,
                state,
                job.meta,
                body=job.body,
                history=job.history,
                retries=retries,
                dead_at_ms=job.place if state == "dead" and isinstance(job.place, int) else None,
                result=job.result,
            )
            for job in listed
        ]
        return JobPage(infos, following)

    def forecast(self, topic: str, minutes: int = DEFAULT_MINUTES, bucket: int = DEFAULT_BUCKET_S) -> Forecast:
        """How many delayed jobs of ``topic`` fall due in each ``bucket`` seconds of the next
        ``minutes``, from Redis' now; every bucket listed, empty ones with 0."""
        check_topic(topic)
        bucket_ms, window_ms = forecast_window(minutes, bucket)
        parts: list[calls.Forecast] = self.each_partition(
            calls.forecast, topic, bucket_ms=bucket_ms, window_ms=window_ms
        )
        counts = [sum(column) for column in zip(*(part.counts for part in parts), strict=True)]
        if not any(counts):
            self.check_known(topic)
        return Forecast(topic, buckets(parts[0].now_ms, bucket_ms, window_ms, counts))

    def pause(self, topic: str) -> None:
        """From the next tick no consumer, anywhere, starts a job of ``topic``. Jobs keep falling due,
        creates are accepted, jobs already reserved finish. Idempotent."""
        self._set_paused(topic, paused=True)

    def resume(self, topic: str) -> None:
        """Undoes ``pause``. Idempotent."""
        self._set_paused(topic, paused=False)

    def _set_paused(self, topic: str, *, paused: bool) -> None:
        self.check_known(check_topic(topic))
        self.each_partition(calls.pause, topic, paused)

    def check_known(self, topic: str) -> None:
        """``TopicNotFound`` unless ``topic`` is configured (or covered by ``*``) or holds jobs."""
        if self.settings.topics.for_topic(topic) is None:
            self.stats(topic)

    def stats_of(self, topics: Sequence[str]) -> list[TopicStats]:
        """The counts, next run-at, paused state and oldest ready job of each of ``topics``, in order,
        read in round trips of ``STATS_CALLS`` calls: no lateness, and no check that a topic is known
        (one that holds nothing reads 0)."""
        stats = [calls.stats(p, topic) for topic in topics for p in self.keys.partitions]
        parts: list[TopicStats] = []
        with redis_errors(self.server):
            for start in range(0, len(stats), STATS_CALLS):
                parts += run_many(self.redis, stats[start : start + STATS_CALLS])
        n = len(self.keys)
        return [_merge_stats(topic, parts[i * n : (i + 1) * n]) for i, topic in enumerate(topics)]

    def dead(self, topic: str, limit: int = 100) -> list[DeadJob]:
        """The most recent dead jobs of ``topic``, newest first."""
        check_limit(limit)
        parts: list[list[DeadJob]] = self.each_partition(calls.dead, check_topic(topic), limit)
        jobs = [job for part in parts for job in part]
        jobs.sort(key=lambda job: job.died_at_ms, reverse=True)
        return jobs[:limit]

    def dead_errors(self, topic: str) -> DeadErrors:
        """``topic``'s dead jobs grouped by the first line of their last error, most frequent first: of
        each partition's newest, ``DEAD_ERRORS_SCAN`` in all at most, read ``DEAD_ERRORS_PAGE`` a call."""
        check_topic(topic)
        share = -(-DEAD_ERRORS_SCAN // len(self.keys))
        found: list[tuple[str, int, str]] = []
        dead = 0
        with redis_errors(self.server):
            for partition in self.keys.partitions:
                start = 0
                while start < share:
                    page = calls.dead_errors(partition, topic, start, min(DEAD_ERRORS_PAGE, share - start))
                    reply = page.run(self.redis)
                    found += reply.jobs
                    start += len(reply.jobs)
                    if start >= reply.dead or not reply.jobs:
                        break
                dead += reply.dead
        if not found:
            self.check_known(topic)
        return DeadErrors(group_errors(found), len(found), dead)

    def history(self, topic: str, minutes: int = DEFAULT_HISTORY_MINUTES) -> list[Minute]:
        """What happened to ``topic``'s jobs in each of its last ``minutes`` minutes (``delayq.core.activity``),
        oldest first, the current minute (by Redis' clock) last; empty minutes with zeros."""
        check_topic(topic)
        check_minutes(minutes)
        partition = self.keys.for_topic(topic)
        (read,) = self._read_activity(lambda at_ms: [calls.read_activity(partition, topic, minutes, around_ms=at_ms)])
        # None: every read missed its minutes (Redis' clock jumped between them): nothing to show
        found: list[Minute] = read if read is not None else minutes_of(int(self._redis_clock.ms()), [None] * minutes)
        if not any(minute.counts for minute in found):
            self.check_known(topic)
        return found

    def replay(self, topic: str, ids: Sequence[str] | None = None) -> int:
        """Dead jobs become due now with fresh attempts: ``ids``, or all of them. Returns how many."""
        check_topic(topic)
        if ids is None:
            return self._drain(calls.replay_oldest, topic)
        by_partition: dict[Partition, list[str]] = defaultdict(list)
        for job_id in ids:
            by_partition[self.keys.for_job(topic, check_id(job_id))].append(job_id)
        replays = [calls.replay(partition, topic, chunk) for partition, chunk in by_partition.items()]
        with redis_errors(self.server):
            return sum(run_many(self.redis, replays)) if replays else 0

    def purge(self, topic: str) -> int:
        """Delete every dead job of ``topic``. Returns how many."""
        return self._drain(calls.purge, check_topic(topic))

    def cancel_all(self, topic: str, state: str, key: str | None = None) -> int:
        """Cancels every job of ``topic`` in ``state`` ('delayed', 'ready' or 'dead'), ``WRITE_CHUNK``
        per Redis call, safe while consumers and sweepers run. Returns how many. Each partition is
        worked through until none is left in that state, or as many as were there at its first call
        are cancelled (so that jobs falling due as fast as they go cannot keep it going forever).
        With ``key``, only that flow key's: the state's listing is walked once, and each job of the key
        found is cancelled if it is still in that state."""
        check_topic(topic)
        check_cancellable(state)
        if key is not None:
            total = self._pages.cancel_of_key(topic, state, check_key(key))
        else:
            total = 0
            with redis_errors(self.server):
                for partition in self.keys.partitions:
                    cancelled, left = calls.cancel_all(partition, topic, state, WRITE_CHUNK).run(self.redis)
                    found, done = cancelled + left, cancelled
                    while left and done < found:
                        cancelled, left = calls.cancel_all(partition, topic, state, WRITE_CHUNK).run(self.redis)
                        done += cancelled
                    total += done
        if not total:
            self.check_known(topic)
        return total

    def known_topics(self) -> set[str]:
        """Every topic that holds jobs (or is paused) in this namespace."""
        with redis_errors(self.server):
            return set().union(*run_many(self.redis, [calls.topics(partition) for partition in self.keys.partitions]))

    def each_partition(self, call: Callable[..., Call[Any]], topic: str, *args: Any, **options: Any) -> list[Any]:
        """``call(partition, topic, *args, **options)`` on every partition, in one round trip; the results."""
        with redis_errors(self.server):
            calls_ = [call(partition, topic, *args, **options) for partition in self.keys.partitions]
            return run_many(self.redis, calls_)

    def _drain(self, call: Callable[[Partition, str, int], Call[int]], topic: str) -> int:
        """A bounded call, ``WRITE_CHUNK`` at a time, on every partition until each answers 0; the total."""
        total = 0
        with redis_errors(self.server):
            for partition in self.keys.partitions:
                while n := call(partition, topic, WRITE_CHUNK).run(self.redis):
                    total += n
        return total


def _merge_stats(topic: str, parts: Sequence[TopicStats]) -> TopicStats:
    """A topic's stats from its partitions' (paused: in any of them, as a pause cut short leaves it)."""
    nexts = [part.next_run_at_ms for part in parts if part.next_run_at_ms is not None]
    return TopicStats(
        topic=topic,
        delayed=sum(part.delayed for part in parts),
        ready=sum(part.ready for part in parts),
        reserved=sum(part.reserved for part in parts),
        dead=sum(part.dead for part in parts),
        next_run_at_ms=min(nexts) if nexts else None,
        paused=any(part.paused for part in parts),
        oldest_ready_ms=max(part.oldest_ready_ms for part in parts),
        done=sum(part.done for part in parts),
    )


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def _fields(**given: Any) -> dict[str, Any]:
    """Keyword arguments as the JSON fields of a request: ``None`` means absent (``body`` excepted),
    a tuple is a list."""
    return {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in given.items()
        if value is not None or name == "body"
    }


_Send = tuple[Sequence[int], Call[calls.Enqueued]]  # an enqueue call, and the positions of its jobs


def _merged(writes: int, sends: Sequence[_Send], replies: Sequence[calls.Enqueued]) -> calls.Enqueued:
    """The answers of ``sends``' calls (one per partition and chunk), each job's in its position."""
    if len(sends) == 1 and len(sends[0][0]) == writes:  # one call, in the writes' order
        return replies[0]
    codes, run_at_ms = [0] * writes, [0] * writes
    for (positions, _), reply in zip(sends, replies, strict=True):
        for n, i in enumerate(positions):
            codes[i], run_at_ms[i] = reply.codes[n], reply.run_at_ms[n]
    return calls.Enqueued(codes, run_at_ms)


def _item_id(item: Any) -> Any:
    return item.get("id") if isinstance(item, Mapping) else None


__all__ = ["DelayqError", "Queue", "new_id"]
