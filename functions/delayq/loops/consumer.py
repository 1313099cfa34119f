"""The consumer: takes due jobs, hands each to its topic's target in a bounded worker pool with the
topic's timeout, and settles it: success acknowledged, failure or timeout retried after the backoff
or dead-lettered. Each pass is one round trip (takes, settlements and looks at the topic index, each
its own Lua call, pipelined without MULTI); it visits only the topics the index says have work.

This module is the loop: what to take and when, and the handlers' verdicts. ``workers.py`` runs the
handlers, ``settlement.py`` sends the verdicts and undoes lost takes, ``outages.py`` holds back the
partitions whose Redis does not answer. Why it works this way (the topic index and its looks, the
take ahead, acks riding with takes, timeouts and deadlines): docs/how-it-works.md.
"""

from __future__ import annotations

import heapq
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from redis.exceptions import RedisError

from delayq.core.errors import ConfigError, DelayqError, PermanentFailure, RetryAfter
from delayq.core.job import Job
from delayq.core.lateness import FLUSH_S as LATENESS_FLUSH_S
from delayq.core.lateness import WINDOW_MINUTES as LATENESS_WINDOW_MINUTES
from delayq.core.lateness import bucket_of
from delayq.core.loop import Budget, pause
from delayq.core.settings import WILDCARD, TopicConfig
from delayq.store import calls
from delayq.store.calls import Failure, Taken
from delayq.store.connection import redis_errors, refused_unrun
from delayq.store.keys import Partition
from delayq.store.namespace import Namespace
from delayq.store.scripts import Call, run_many
from delayq.targets import Target, failing_target, resolve_target

from .outages import Outages
from .settlement import Pending, Settlement
from .workers import SPREAD_S, Workers

log = logging.getLogger("delayq.consume")

# Tuning of the loop (the pool's SPREAD_S is in workers.py, settlement's chunks in settlement.py).
LEASE_GRACE_MS = 2000  # a lease outlives the timeout by this much, so the consumer's verdict comes first
SETTLE_WINDOW_S = 0.001  # after a handler finishes, how long the loop may wait for the others before its pass
TAKE_WINDOW_S = 0.005  # a lane takes at most once per window while its jobs keep falling due
TAKE_AHEAD_MS = 40  # a take brings the jobs due within this, each started at its run-at (_Topic.ahead_ms)
LATENESS_CHUNK = 50  # topics whose recent lateness one call adds (one call a pass while more wait: ~1 ms of Redis)
PLAN_TOPICS = 256  # topics named per partition by one read of its topic index (the first to have work)
PLAN_MARGIN_MS = 100  # a read of the topic index looks this much beyond the next tick
LOOKS_PER_TICK = 20  # between those reads, plain looks at the index: every 50 ms at the default tick
LOOK_EARLY = 0.5  # of a look's interval: how early it may come to ride in a round trip the pass makes anyway
POLL_TOPICS = 64  # topics named per partition by one look
FINISH_TRIES = 3  # passes that fail to settle, at the end of a run, before giving up on Redis
REPORT_WAIT_S = 1.0  # at the end of a run, how long the last handlers' metrics and logs may take
MAX_ERROR_CHARS = 2000  # of a failure, as the job's last error
_NO_VERDICT = "the consumer failed before the handler answered (see its log)"


def _describe(exc: BaseException) -> str:
    """A failure as a job's last error: ``Type: message``, cut to ``MAX_ERROR_CHARS``."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - an exception whose message cannot be read is still a failure
        text = f"{type(exc).__name__} (its message could not be read)"
    return text[:MAX_ERROR_CHARS]


def _log_context(job: Job, lateness_ms: float, started: float) -> dict[str, Any]:
    """The fields of a delivery's log line."""
    return {
        "topic": job.topic,
        "id": job.id,
        "attempt": job.attempt,
        "lateness_ms": round(lateness_ms, 1),
        "duration_ms": round((time.monotonic() - started) * 1000, 1),
    }


def _first_due(item: tuple[_Topic, list[_Lane]]) -> float:
    """When the first of a topic's due lanes fell due: topics take in that order."""
    return min(lane.next_check for lane in item[1])


@dataclass(eq=False)
class _Share:
    """Worker threads a group of topics shares: a configured topic alone, or all that ``*`` covers."""

    size: int
    running: int = 0


@dataclass(eq=False)
class _Topic:
    name: str
    config: TopicConfig
    target: Target
    share: _Share
    running: int = 0  # worker threads busy, including handlers past their timeout
    turn: int = 0  # which due lane takes first, in rotation
    lateness: dict[int, int] = field(default_factory=dict)  # bucket -> deliveries since the last record
    lanes: int = 0  # its lanes (one per partition where it has work)
    rate: tuple[int, int] | None = None  # each partition's share of the rate limit (TopicConfig.rate_share)

    @property
    def free(self) -> int:
        return min(self.config.concurrency - self.running, self.share.size - self.share.running)

    def count_lateness(self, bucket: int) -> None:
        """One more delivery in ``bucket`` (with the consumer's lock held)."""
        self.lateness[bucket] = self.lateness.get(bucket, 0) + 1

    @property
    def ahead_ms(self) -> int:
        """How far ahead its takes reach: ``TAKE_AHEAD_MS`` while at most half its workers are busy, else
        0 (a busy topic's workers are for the jobs due, not for waiting on the next ones)."""
        return TAKE_AHEAD_MS if 2 * self.free >= min(self.config.concurrency, self.share.size) else 0


@dataclass(eq=False)
class _Lane:
    """One topic in one partition: its own take schedule and pending settlements."""

    topic: _Topic
    partition: Partition
    pending: Pending
    next_check: float = 0.0  # when to take next (inf: when the topic index says it has work)
    held_until: float = 0.0  # paused, or its rate spent: no take before this, whatever the index says
    running: int = 0  # its deliveries not yet finished


@dataclass(slots=True)
class _Take:
    """A take call of one pass, for the lane it takes from, with the lane's acks that ride with it."""

    lane: _Lane
    call: Call[Taken]
    count: int
    take_id: str
    acks: list[tuple[str, str, int]]


@dataclass(eq=False)
class _Delivery:
    job: Job
    token: str
    lane: _Lane
    timeout_s: float
    late_at_take_ms: int  # Redis' time at take minus the job's run-at (negative if taken ahead)
    taken: float  # monotonic time the take was answered
    start_at: float  # monotonic time it may start: by then Redis' clock has reached its run-at
    deadline: float = 0.0
    settled: bool = False  # the first verdict wins: the handler's result or the timeout

    def __str__(self) -> str:
        return f"the delivery of {self.job.topic}/{self.job.id}"


class Consumer:
    """Consumes the configured topics (and, with a ``*`` entry, every topic that has jobs)."""

    def __init__(
        self,
        namespace: Namespace,
        *,
        topics: Iterable[str] | None = None,
        stop: threading.Event | None = None,
        lease_grace_ms: int = LEASE_GRACE_MS,
    ) -> None:
        self.namespace = namespace
        self.settings = namespace.settings
        self.tick = namespace.settings.tick
        self.look_every = self.tick / LOOKS_PER_TICK
        self.lease_grace_ms = lease_grace_ms
        self.stop = stop or threading.Event()
        self.counts: Counter[str] = Counter()
        self._only = None if topics is None else set(topics)
        self._topics: dict[str, _Topic] = {}
        self._lanes: dict[tuple[str, int], _Lane] = {}
        self._plans = [0.0] * len(namespace.keys)  # per partition: when to read its topic index next
        self._full_reads: set[int] = set()  # partitions whose last read named PLAN_TOPICS topics
        self._backlogged: set[int] = set()  # shares (by id) that had more topics due than free workers
        self._kept = set(self.settings.topics.named) | (self._only or set())  # topics never forgotten
        self._unrecorded: dict[str, dict[int, int]] = {}  # lateness counted, not yet sent: topic -> counts
        self._polls = [0.0] * len(namespace.keys)  # per partition: when to look at it next, between reads
        self._server_clock: tuple[int, float] | None = None  # Redis' ms at a monotonic time, from a reply
        self._shares: dict[str, _Share] = {}  # by configured topic name, or ``*``
        self._workers = Workers("delayq-worker", self._pool_size(), self._deliver)
        self._running: set[_Delivery] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()  # set when a handler finishes, or a stop is requested
        self._idle = threading.Event()  # set while no handler runs
        self._idle.set()
        self._reporting = 0  # settled deliveries whose metrics and log lines are still being written
        self._reported = threading.Event()  # set while none is
        self._reported.set()
        self.outages = Outages(namespace, tick=self.tick, name="consume")
        self._settlement = Settlement(
            self._lock, self.counts, namespace.telemetry, self._redis_error, resting=self.outages.until
        )
        self._lateness_recorded = time.monotonic()
        self._run_ms = -1  # the longest timeout a run can ever give a job, in ms; -1: no deadline
        for name in self.settings.topics.named if self._only is None else sorted(self._only):
            self._add_topic(name)

    # --------------------------------------------------------------------------------- the loop

    def run(self, budget: Budget) -> dict[str, Any]:
        """Takes work until the budget's stop time (one pass if it asks for one), then finishes what it
        started and settles it."""
        self._run_ms = budget.run_ms
        for topic in self._topics.values():
            self._check_timeout(topic)
        try:
            first = True
            while first or (budget.taking() and not self.stop.is_set()):
                first = False
                self._pass(budget, take=True)
                if budget.one_pass:
                    break
                self._sleep(self._wait(budget, taking=True))
            self._finish(budget)
            self._record_lateness_now()
        finally:
            self._workers.shutdown()
            self._reported.wait(REPORT_WAIT_S)  # a settled job's metrics, counted just after, in this flush
            self.namespace.telemetry.flush()
        return self.summary()

    def _finish(self, budget: Budget) -> None:
        """Waits for the handlers still running (each ends or times out), and settles them. Settling
        is given a few tries: if Redis stays away, the leases expire and the jobs are retried."""
        failed_settles = 0
        while self._unsettled() or self._settlement.waiting():
            errors = self.counts["redis_errors"]
            self._pass(budget, take=False)
            if self.counts["redis_errors"] > errors and not self._unsettled():
                failed_settles += 1
            if failed_settles >= FINISH_TRIES or (budget.finish_by is not None and time.monotonic() > budget.finish_by):
                if self._unsettled() or self._settlement.waiting():
                    log.warning("stopping with jobs unsettled: their leases will expire and they will be retried")
                return
            if self._unsettled() or self._settlement.waiting():
                self._sleep(self._wait(budget, taking=False))

    def summary(self) -> dict[str, Any]:
        keys = (
            "passes",
            "taken",
            "succeeded",
            "failed",
            "timed_out",
            "acked",
            "retried",
            "dead",
            "late_results",
            "untaken",
            "redis_errors",
        )
        return {key: self.counts[key] for key in keys}

    def request_stop(self) -> None:
        """Stops taking work now (from a signal handler or another thread); ``run`` then finishes."""
        self.stop.set()
        self._wake.set()

    def _sleep(self, seconds: float) -> None:
        """Sleeps ``seconds``, or until a worker finishes or a stop is requested. Also once stopped:
        ``_finish`` sleeps here between its passes, waiting for the handlers still running."""
        if seconds > 0 and self._wake.wait(seconds) and not self.stop.is_set():
            # Handlers finish in bursts: wait a moment for the others (until none runs, at most the
            # window), so that one pass settles them all and refills their workers at once.
            self._idle.wait(SETTLE_WINDOW_S)
        self._wake.clear()
        self._workers.spread(time.monotonic())

    def _wait(self, budget: Budget, *, taking: bool) -> float:
        now = time.monotonic()
        waits = [self.tick]
        if self._workers.waiting:
            waits.append(SPREAD_S)
        with self._lock:
            waits += [d.deadline - now for d in self._running if not d.settled]
        waits.append(self._settlement.send_acks_by() - now)
        waits.append(self.outages.next_at(now) - now)
        if taking:
            waits.append(self._next_take(budget, now) - now)
            # A resting partition is read and looked at once its rest ends (``outages``), not before.
            rests = [self.outages.until(partition) for partition in self.namespace.keys.partitions]
            waits += [max(at, rest) - now for at, rest in zip(self._plans, rests, strict=True)]
            if self._server_clock is not None:
                waits += [max(at, rest) - now for at, rest in zip(self._polls, rests, strict=True)]
            waits.append(budget.left(now))
        return max(0.0, min(waits))

    def _next_take(self, budget: Budget, now: float) -> float:
        """When the first lane that can take is due (inf: none can). Nothing to look at while every
        worker is busy; and the first lane found due ends the search."""
        first = float("inf")
        if all(share.running >= share.size for share in self._shares.values()):
            return first
        for lane in self._lanes.values():
            at = max(lane.next_check, self.outages.until(lane.partition))
            if at < first and self._can_take(lane, budget, now):
                first = at
                if first <= now:
                    break
        return first

    def _pass(self, budget: Budget, *, take: bool) -> None:
        self.counts["passes"] += 1
        self.namespace.telemetry.flush_due()
        now = time.monotonic()
        self._expire(now)
        self.outages.follow_moves(now)
        if take:
            self._read_index(now)
        takes = self._takes(budget, now) if take else []  # first: the lanes' acks ride with them
        settles = self._settlement.calls(now, hold=self._acks_can_wait if take else None)
        # In the same round trip (a lane they make takes next pass); early, rather than a wake of their own.
        looks = self._looks(now, riding=bool(takes or settles)) if take else []
        records = self._lateness_records(now)
        sends: list[Call[Any]] = [settle.call for settle in settles] + [sent.call for sent in takes]
        sends += [call for _, pair in looks for call in pair] + [call for _, call in records]
        if not sends:
            self._forget_idle()
            self.outages.report(now)
            return
        partitions = [settle.pending.partition for settle in settles] + [sent.lane.partition for sent in takes]
        partitions += [partition for partition, _ in looks for _ in range(2)] + [partition for partition, _ in records]
        replies = self._send(sends)
        self.outages.saw(partitions, replies, now)
        for settle, reply in zip(settles, replies[: len(settles)], strict=True):
            self._settlement.settled(settle, reply)
        for sent, reply in zip(takes, replies[len(settles) : len(settles) + len(takes)], strict=True):
            self._taken(sent, reply, now)
        looked = replies[len(settles) + len(takes) : len(settles) + len(takes) + 2 * len(looks)]
        for (partition, _), ready, delayed in zip(looks, looked[0::2], looked[1::2], strict=True):
            self._looked(partition, ready, delayed, now)
        self._forget_idle()
        self.outages.report(time.monotonic())
        # The records' replies say nothing the pass needs: counts a failed call held are lost, and the
        # failure, the pass's own, is reported by its settles and takes.

    def _send(self, sends: list[Call[Any]]) -> list[Any]:
        """The replies of ``sends``, in one round trip: each call's, or its error; all the same error
        when Redis could not be reached at all."""
        try:
            with redis_errors():
                return run_many(self.namespace.redis, sends, return_exceptions=True)
        except ConfigError:  # another partition count than the namespace's: nothing here can help
            raise
        except DelayqError as exc:
            return [exc] * len(sends)

    # --------------------------------------------------------------------------------- recent lateness

    def _lateness_records(self, now: float, *, due: bool = False) -> list[tuple[Partition, Call[int]]]:
        """Every ``lateness.FLUSH_S`` (or now, if ``due``): the lateness counted since the last record,
        added to each topic's recent lateness in Redis (``delayq.core.lateness``), one call per partition
        for up to ``LATENESS_CHUNK`` topics. A pass sends one such call, so that thousands of topics
        spread their records over passes instead of holding one up; ``due`` sends them all. A topic
        whose partition rests (``outages``) waits for it."""
        if due or now - self._lateness_recorded >= LATENESS_FLUSH_S:
            self._lateness_recorded = now
            with self._lock:
                for topic in list(self._topics.values()):
                    if topic.lateness:
                        unsent = self._unrecorded.setdefault(topic.name, {})
                        for bucket, deliveries in topic.lateness.items():
                            unsent[bucket] = unsent.get(bucket, 0) + deliveries
                        topic.lateness = {}
                        self._forget_topic(topic)
        records: list[tuple[Partition, Call[int]]] = []
        names = iter(list(self._unrecorded))
        if self.outages:
            names = (name for name in names if not self.outages.resting(self.namespace.keys.for_topic(name), now))
        while due or not records:
            by_partition: dict[Partition, dict[str, dict[int, int]]] = {}
            for name in islice(names, LATENESS_CHUNK):
                by_partition.setdefault(self.namespace.keys.for_topic(name), {})[name] = self._unrecorded.pop(name)
            if not by_partition:
                break
            records += [
                (partition, calls.add_lateness(partition, counted, window_minutes=LATENESS_WINDOW_MINUTES))
                for partition, counted in by_partition.items()
            ]
        return records

    def _record_lateness_now(self) -> None:
        """At the end of a run: the lateness of its last deliveries, so that none is lost (best effort)."""
        records = self._lateness_records(time.monotonic(), due=True)
        if records:
            self._send([call for _, call in records])

    # --------------------------------------------------------------------------------- topics

    def _pool_size(self) -> int:
        """Threads for the whole process: each configured topic's concurrency, and the ``*`` entry's once
        for all the topics it covers (``_share``)."""
        topics = self.settings.topics
        names = sorted(self._only) if self._only is not None else [*topics.named, *([WILDCARD] * topics.has_wildcard)]
        configs = [topics.for_topic(name) for name in names]
        return max(1, sum(config.concurrency for config in configs if config is not None))

    def _share_key(self, name: str) -> str:
        """Whose workers the topic ``name`` runs on: its own (a configured topic), or ``*``'s."""
        return name if name in self.settings.topics or self._only is not None else WILDCARD

    def _share(self, name: str, config: TopicConfig) -> _Share:
        key = self._share_key(name)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = _Share(config.concurrency)
        return share

    def _consumes(self, name: str) -> bool:
        return name in self._only if self._only is not None else self.settings.topics.for_topic(name) is not None

    def _add_topic(self, name: str) -> _Topic | None:
        """The topic named ``name`` (made on first use); None if this consumer does not consume it."""
        topic = self._topics.get(name)
        if topic is not None or not self._consumes(name):
            return topic
        config = self.settings.topics.for_topic(name)
        if config is None:
            return None
        try:
            target = resolve_target(config, self.settings)
        except ConfigError as exc:
            log.error("topic %s: %s; its jobs will fail until this is fixed", name, exc.message)
            target = failing_target(exc.message)
        topic = _Topic(name, config, target, self._share(name, config))
        topic.rate = config.rate_share(len(self.namespace.keys))
        self._topics[name] = topic
        self._check_timeout(topic)
        return topic

    def _lane(self, topic: _Topic, partition: Partition) -> _Lane:
        """The topic's lane in ``partition`` (made on first use: when the topic index says it has work)."""
        lane = self._lanes.get((topic.name, partition.index))
        if lane is None:
            pending = self._settlement.lane(partition, topic.name, topic.config)
            lane = self._lanes[(topic.name, partition.index)] = _Lane(topic, partition, pending, float("inf"))
            topic.lanes += 1
        return lane

    def _forget_idle(self) -> None:
        """Lanes with nothing due soon, nothing running and nothing to settle are forgotten; so are the
        topics ``*`` covers once they have no lane, nothing running and no lateness to record."""
        with self._lock:
            idle = [lane for lane in self._lanes.values() if lane.next_check == float("inf") and not lane.running]
            for lane in idle:
                if not lane.pending:
                    del self._lanes[(lane.topic.name, lane.partition.index)]
                    self._settlement.drop(lane.pending)
                    lane.topic.lanes -= 1
                    self._forget_topic(lane.topic)

    def _forget_topic(self, topic: _Topic) -> None:
        """With the lock held: forgets a topic that ``*`` covers once it has no lane, nothing running
        and no lateness to record (checked when its last lane goes, and when its lateness is recorded)."""
        if not (topic.lanes or topic.running or topic.lateness or topic.name in self._kept):
            self._topics.pop(topic.name, None)

    # --------------------------------------------------------------------------------- the topic index

    def _read_index(self, now: float) -> None:
        """Reads the topic index of each partition whose time has come (once a tick), in one round trip
        before the pass's takes, so that a lane it makes takes in the same pass."""
        horizon_ms = int(self.tick * 1000) + PLAN_MARGIN_MS
        if self._full_reads and len(self._lanes) < PLAN_TOPICS // 2:
            for index in self._full_reads:
                self._plans[index] = now
            self._full_reads.clear()
        partitions = [
            p
            for p in self.namespace.keys.partitions
            if self._plans[p.index] <= now and not self.outages.resting(p, now)
        ]
        if not partitions:
            return
        for partition in partitions:
            self._plans[partition.index] = now + self.tick
            self._polls[partition.index] = now + self.look_every
        reads = [calls.topics_due(partition, limit=PLAN_TOPICS, horizon_ms=horizon_ms) for partition in partitions]
        replies = self._send(reads)
        self.outages.saw(partitions, replies, now)
        for partition, reply in zip(partitions, replies, strict=True):
            self._planned(partition, reply, now)

    def _looks(
        self, now: float, *, riding: bool = False
    ) -> list[tuple[Partition, tuple[Call[list[str]], Call[dict[str, int]]]]]:
        """The plain looks due now: per partition, its ready topics and those due before the next look,
        by Redis' clock as the last reply gave it (none before a first read tells it, nor while every
        share has more topics due than free workers: what a look would find waits anyway). When the
        pass goes to Redis anyway (``riding``), a look due within ``LOOK_EARLY`` of a look's interval
        comes now: in steady traffic the looks ride with the takes instead of waking Redis alone."""
        if self._server_clock is None or (self._backlogged and len(self._backlogged) == len(self._shares)):
            return []
        server_ms, at = self._server_clock
        until_ms = server_ms + int((now - at + self.look_every) * 1000) + 1
        due_by = now + (self.look_every * LOOK_EARLY if riding else 0)
        looks = []
        for partition in self.namespace.keys.partitions:
            if self._polls[partition.index] <= due_by and not self.outages.resting(partition, now):
                self._polls[partition.index] = now + self.look_every
                ready = calls.ready_topics(partition, limit=POLL_TOPICS)
                looks.append(
                    (partition, (ready, calls.delayed_topics(partition, until_ms=until_ms, limit=POLL_TOPICS)))
                )
        return looks

    def _planned(self, partition: Partition, reply: calls.TopicsDue | Exception, now: float) -> None:
        """The topics with work in ``partition``: each lane takes when its next job falls due."""
        if isinstance(reply, Exception):
            self._redis_error("reading the topic index", partition, None, reply)
            if self.outages.resting(partition, now):  # read again once its rest ends
                self._plans[partition.index] = self.outages.until(partition)
            return
        self._server_clock = (reply.now_ms, now)
        self._due(partition, reply.due, now)
        if len(reply.due) >= PLAN_TOPICS:  # more may have work: read again once most of these have taken
            self._full_reads.add(partition.index)

    def _looked(
        self, partition: Partition, ready: list[str] | Exception, delayed: dict[str, int] | Exception, now: float
    ) -> None:
        """What a plain look found: ready topics take now, the others when their job falls due."""
        if isinstance(ready, Exception):
            self._redis_error("looking at the topic index", partition, None, ready)
            return
        if isinstance(delayed, Exception):
            self._redis_error("looking at the topic index", partition, None, delayed)
            return
        if self._server_clock is None:
            return
        server_ms, at = self._server_clock
        server_now = server_ms + (now - at) * 1000
        due = {name: max(0, int(run_at - server_now)) for name, run_at in delayed.items()} | dict.fromkeys(ready, 0)
        if self._backlogged:  # a backlogged share's topics wait for a read, behind those due before
            due = {name: in_ms for name, in_ms in due.items() if not self._in_backlog(name)}
        self._due(partition, due, now)

    def _in_backlog(self, name: str) -> bool:
        """Whether the topic ``name`` shares the workers of a share that is ``_backlogged``."""
        return id(self._shares.get(self._share_key(name))) in self._backlogged

    def _due(self, partition: Partition, due: dict[str, int], now: float) -> None:
        """Each topic of ``due`` (name -> ms until it has a job due) takes then, unless held."""
        for name, in_ms in due.items():
            topic = self._add_topic(name)
            if topic is not None:
                lane = self._lane(topic, partition)
                lane.next_check = max(lane.held_until, min(lane.next_check, now + in_ms / 1000))

    def _check_timeout(self, topic: _Topic) -> None:
        """A topic whose timeout is longer than a run can last is never taken from: say so, loudly."""
        if 0 <= self._run_ms < topic.config.timeout_ms:
            log.error(
                "topic %s: timeout %gs is longer than a consume run can last (%ds): its jobs are never taken;"
                " lower the topic's timeout or raise the consume function's timeout",
                topic.name,
                topic.config.timeout,
                self._run_ms // 1000,
                extra={"topic": topic.name, "timeout_s": topic.config.timeout, "run_s": self._run_ms / 1000},
            )

    # --------------------------------------------------------------------------------- take

    def _first_of_each_share(self, due: dict[_Topic, list[_Lane]]) -> dict[_Topic, list[_Lane]]:
        """Each take needs a free worker: of a share with more topics due than that (a burst over many
        topics), the ones due first; the others wait for the next passes, and the share is
        ``_backlogged`` until then."""
        by_share: dict[int, list[tuple[_Topic, list[_Lane]]]] = {}
        for item in due.items():
            by_share.setdefault(id(item[0].share), []).append(item)
        self._backlogged = set()
        first: dict[_Topic, list[_Lane]] = {}
        for key, items in by_share.items():
            share = items[0][0].share
            free = share.size - share.running
            if len(items) > free:
                self._backlogged.add(key)
            first.update(heapq.nsmallest(free, items, key=_first_due) if len(items) > free else items)
        return first

    def _takes(self, budget: Budget, now: float) -> list[_Take]:
        """Takes for the lanes that are due, each topic's free workers shared among its due lanes
        (partitions), the first of them in turn, so that no partition waits behind another. Topics
        that share workers (those ``*`` covers) take in the order their lanes fell due, and no more in
        all than their share has free."""
        due: dict[_Topic, list[_Lane]] = {}
        for lane in self._lanes.values():
            if (
                lane.next_check <= now
                and self._can_take(lane, budget, now)
                and not self.outages.resting(lane.partition, now)
            ):
                due.setdefault(lane.topic, []).append(lane)
        due = self._first_of_each_share(due)
        # Never negative: take.lua reads a negative longest as "no limit".
        longest_ms = -1 if budget.finish_by is None else max(0, int((budget.finish_by - now) * 1000))
        takes = []
        planned: Counter[int] = Counter()  # per share (by id): jobs this pass's takes may bring
        sharing = Counter(id(topic.share) for topic in due)  # per share: its topics still to take
        for topic, lanes in sorted(due.items(), key=_first_due):
            first = topic.turn % len(lanes)
            topic.turn += 1
            share = topic.share
            # The share's free workers split among its due topics, a fair part each (rounded up), so
            # that one topic's take does not hold them all while the others wait a pass.
            share_free = max(0, share.size - share.running - planned[id(share)])
            free = min(topic.config.concurrency - topic.running, -(-share_free // sharing[id(share)]))
            sharing[id(share)] -= 1
            planned[id(share)] += max(0, free)
            for left, lane in zip(range(len(lanes), 0, -1), lanes[first:] + lanes[:first], strict=True):
                count = min(topic.config.batch, -(-free // left))  # a fair share, rounded up
                if count <= 0:
                    break
                free -= count
                take_id = "t" + secrets.token_hex(8)  # never a number: those are the counter's tokens
                acks = self._settlement.ride(lane.pending)
                call = calls.take(
                    lane.partition,
                    topic.name,
                    count=count,
                    timeout_ms=topic.config.timeout_ms,
                    grace_ms=self.lease_grace_ms,
                    longest_ms=longest_ms,
                    run_ms=self._run_ms,
                    take_id=take_id,
                    rate=topic.rate,
                    acks=acks,
                    keeping=topic.config,
                    ahead_ms=topic.ahead_ms,
                )
                takes.append(_Take(lane, call, count, take_id, acks))
        return takes

    def _taken(self, take: _Take, reply: Taken | Exception, now: float) -> None:
        lane = take.lane
        self._settlement.rode(lane.pending, take.acks, reply if isinstance(reply, Exception) else reply.acked)
        if isinstance(reply, Exception):
            self._redis_error("take", lane.partition, lane.topic.name, reply)
            resting = self.outages.resting(lane.partition, now)  # then take again once its rest ends
            lane.next_check = self.outages.until(lane.partition) if resting else now + self.tick
            if not refused_unrun(reply):
                # It may have run, its reply lost: undo it at the next passes (a take never sent is harmless).
                with self._lock:
                    lane.pending.undo_later([take.take_id])
            return
        self._server_clock = (reply.now_ms, now)
        if reply.paused:  # nothing taken: look again in a tick (a pause lasts minutes, not milliseconds)
            lane.next_check = lane.held_until = now + self.tick
            return
        answered = time.monotonic()
        if reply.dead:
            self._dead_for_timeout(lane, reply.dead)
        self.counts["taken"] += len(reply.jobs)
        server_now = reply.now_ms
        # Redis' clock read ``server_now`` before the reply came: at ``answered`` + t it reads at least
        # ``server_now`` + t. A job taken ahead starts once that reaches its run-at.
        deliveries = [
            _Delivery(
                job,
                token,
                lane,
                timeout_ms / 1000,
                server_now - job.run_at_ms,
                answered,
                answered + max(0, job.run_at_ms - server_now) / 1000,
            )
            for job, token, timeout_ms in zip(reply.jobs, reply.tokens, reply.timeouts_ms, strict=True)
        ]
        if len(reply.jobs) + len(reply.dead) >= take.count:
            # A full batch: more may be due, so take again as soon as workers are free; but if it was
            # taken ahead, nothing more is due before its last job starts.
            lane.next_check = max([now, *(delivery.start_at for delivery in deliveries)])
        elif reply.next_in_ms is not None and reply.next_in_ms < self.tick * 1000:
            # Jobs falling due in a steady stream are taken a window at a time, not one wake each.
            lane.next_check = now + max(reply.next_in_ms / 1000, TAKE_WINDOW_S)
        else:  # nothing due within a tick: the topic index will say when (the lane goes once settled)
            lane.next_check = float("inf")
        if reply.held:  # the rate's next start: the index's ready jobs wait for it too
            lane.held_until = lane.next_check
        if deliveries:
            self._start(lane.topic, deliveries)

    def _dead_for_timeout(self, lane: _Lane, ids: list[str]) -> None:
        """Jobs the take sent to the dead letters: their own timeout is longer than a run can last."""
        topic = lane.topic.name
        self.counts["dead"] += len(ids)
        self.namespace.telemetry.count("Dead", topic, len(ids))
        for job_id in ids:
            log.error(
                "%s/%s is dead: its timeout is longer than a consume run can last (%ds); enqueue it again"
                " with a shorter timeout, or raise the consume function's timeout",
                topic,
                job_id,
                self._run_ms // 1000,
                extra={"topic": topic, "id": job_id, "run_s": self._run_ms / 1000},
            )

    def _acks_can_wait(self, pending: Pending) -> bool:
        """Whether a lane's acks may wait for its next take to ride with: one is coming before they
        must go (``Pending.send_acks_by``)."""
        lane = self._lanes.get((pending.topic, pending.partition.index))
        if lane is None or lane.pending is not pending:
            return False
        by = pending.send_acks_by()
        return time.monotonic() < by and lane.next_check <= by

    @staticmethod
    def _can_take(lane: _Lane, budget: Budget, now: float) -> bool:
        """Whether the lane's topic has a free worker and time to finish a job before the deadline."""
        return lane.topic.free > 0 and budget.fits(lane.topic.config.timeout, now)

    # --------------------------------------------------------------------------------- deliveries and verdicts

    def _start(self, topic: _Topic, deliveries: list[_Delivery]) -> None:
        now = time.monotonic()
        with self._lock:
            for delivery in deliveries:
                delivery.deadline = max(now, delivery.start_at) + delivery.timeout_s
            topic.running += len(deliveries)
            topic.share.running += len(deliveries)
            deliveries[0].lane.running += len(deliveries)
            self._running.update(deliveries)
            self._idle.clear()
        self._workers.submit(deliveries)

    def _not_running(self, delivery: _Delivery) -> None:
        """With the lock held: the delivery's worker is free again."""
        delivery.lane.topic.running -= 1
        delivery.lane.topic.share.running -= 1
        delivery.lane.running -= 1
        self._running.discard(delivery)
        if not self._running:
            self._idle.set()

    def _deliver(self, delivery: _Delivery) -> None:
        """In a worker thread: run the target, then report. Whatever happens here, the job gets a
        verdict and its worker is counted free again (``finally``): a slot never leaks, and the loop is
        always woken."""
        job = delivery.job
        started = time.monotonic()
        while started < delivery.start_at:  # taken ahead of its run-at
            pause(delivery.start_at - started)
            started = time.monotonic()
        error: str | None = _NO_VERDICT  # until the target has answered
        permanent = False
        retry_after_ms = 0
        try:
            try:
                delivery.lane.topic.target(job, delivery.timeout_s)
                error = None
            except BaseException as exc:  # noqa: BLE001 - any failure of a handler is a failed attempt
                permanent = isinstance(exc, PermanentFailure)
                retry_after_ms = exc.wait_ms if isinstance(exc, RetryAfter) else 0
                error = _describe(exc)
        finally:
            lateness_ms = delivery.late_at_take_ms + (started - delivery.taken) * 1000
            bucket = bucket_of(lateness_ms)
            with self._lock:
                delivery.lane.topic.count_lateness(bucket)
                self._not_running(delivery)
                late = delivery.settled
                delivery.settled = True
                self._reporting += 1
                self._reported.clear()
                if late:
                    self.counts["late_results"] += 1
                elif error is None:
                    self.counts["succeeded"] += 1
                    # When the handler started, by Redis' clock: run-at plus lateness, which is Redis' time
                    # at the take (not this machine's clock) plus what passed here since.
                    started_at_ms = job.run_at_ms + round(lateness_ms)
                    delivery.lane.pending.ack(job.id, delivery.token, started_at_ms)
                else:
                    self.counts["failed"] += 1
                    failure = Failure(job.id, delivery.token, error, permanent, retry_after_ms)
                    delivery.lane.pending.fails.append(failure)
        try:
            # After the bookkeeping: a failing telemetry or log handler cannot hold a worker or a job.
            self.namespace.telemetry.lateness(job.topic, lateness_ms)
            if error is None and not late:  # the common case: a line only when DEBUG is on
                self.namespace.telemetry.count("Delivered", job.topic)
                if log.isEnabledFor(logging.DEBUG):
                    context = _log_context(job, lateness_ms, started)
                    log.debug("%s/%s attempt %d delivered", job.topic, job.id, job.attempt, extra=context)
            else:
                self._report(job, _log_context(job, lateness_ms, started), error, permanent=permanent, late=late)
        finally:
            self._reported_one()

    def _reported_one(self) -> None:
        """A delivery's metrics and log lines are written: the end of a run may flush them now, and the
        loop is woken."""
        with self._lock:
            self._reporting -= 1
            if not self._reporting:
                self._reported.set()
        # Set only if unset: what this worker did is visible to the pass that follows the loop's clear.
        if not self._wake.is_set():
            self._wake.set()

    def _report(self, job: Job, context: dict[str, Any], error: str | None, *, permanent: bool, late: bool) -> None:
        """A delivery that did not simply succeed: its late result dropped, or its failure."""
        if late:
            log.warning(
                "%s/%s attempt %d finished after its timeout; result dropped",
                job.topic,
                job.id,
                job.attempt,
                extra=context,
            )
            return
        self.namespace.telemetry.count("Failed", job.topic)
        extra = context | {"error": error, "permanent": permanent}
        log.warning("%s/%s attempt %d failed: %s", job.topic, job.id, job.attempt, error, extra=extra)

    def _expire(self, now: float) -> None:
        """Handlers past their timeout are failed attempts now; their threads are left to finish."""
        with self._lock:
            for delivery in self._running:
                if not delivery.settled and delivery.deadline <= now:
                    delivery.settled = True
                    error = f"timed out after {delivery.timeout_s:g}s"
                    delivery.lane.pending.fails.append(Failure(delivery.job.id, delivery.token, error))
                    self.counts["timed_out"] += 1
                    job = delivery.job
                    self.namespace.telemetry.count("TimedOut", job.topic)
                    context = {"topic": job.topic, "id": job.id, "attempt": job.attempt, "error": error}
                    log.warning("%s/%s attempt %d %s", job.topic, job.id, job.attempt, error, extra=context)

    def _unsettled(self) -> bool:
        with self._lock:
            return any(not delivery.settled for delivery in self._running)

    # --------------------------------------------------------------------------------- Redis errors

    def _redis_error(self, what: str, partition: Partition, topic: str | None, exc: Exception) -> None:
        """A take, settle or index read that failed: counted (per topic, or for the service when the call
        is the partition's) and logged, but for Redis not answering, which ``outages`` logs once; anything
        but Redis failing is raised."""
        self.counts["redis_errors"] += 1
        self.namespace.telemetry.count("RedisErrors", topic)
        message = exc.message if isinstance(exc, DelayqError) else f"{type(exc).__name__}: {exc}"
        where = f"{topic} (partition {partition.index})" if topic else f"partition {partition.index}"
        level = logging.DEBUG if self.outages.resting(partition, time.monotonic()) else logging.WARNING
        log.log(level, "%s on %s failed: %s", what, where, message)
        if not isinstance(exc, (RedisError, DelayqError)):
            raise exc
