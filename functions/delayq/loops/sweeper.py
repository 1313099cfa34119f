"""The sweeper: under each partition's lock (a random token with a TTL, renewed by every sweep call,
released by a token-checked script), moves the jobs that stayed due untaken to their ready lists,
takes back expired leases and forgets expired receipts, visiting only the topics the partition's
topic index names; each call does bounded work, and partitions take turns. Its lag (how long a due job
is left to the consumers) and why: docs/how-it-works.md's "Finding the work". A partition whose Redis
does not answer rests (``outages.py``) while the others are swept.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from delayq.core.activity import FLUSH_S as ACTIVITY_FLUSH_S
from delayq.core.activity import Tally
from delayq.core.clock import ServerClock
from delayq.core.errors import RedisUnavailable
from delayq.core.loop import FINISH_BEFORE_DEADLINE_S, STOP_BEFORE_DEADLINE_S, Budget
from delayq.core.schedule import sleep_for
from delayq.store import calls
from delayq.store.calls import Swept
from delayq.store.connection import redis_errors
from delayq.store.keys import Partition
from delayq.store.namespace import Namespace
from delayq.store.scripts import run_many

from .callbacks import drain
from .occurrences import Scheduler
from .outages import Outages

log = logging.getLogger("delayq.sweep")

SWEEP_LIMIT = 1000  # jobs moved plus leases taken back per Lua call
TOPICS_PER_CALL = 64  # topics per Lua call (a key group each)
MOVE_JOBS_CALLS = 8  # calls of the walk that moves an older version's jobs, per pass, at most
SWEEP_LAG_MS = 100  # a due job is the sweeper's once no consumer took it for this long


class _LockLost(Exception):
    """The partition's lock no longer holds this sweeper's token."""


@dataclass
class _PartitionState:
    partition: Partition
    lag_ms: int  # how long a due job stays the consumers' before it is the sweeper's to move
    held: bool = False
    due: list[str] = field(default_factory=list)  # the topics the last call said have work now
    busy: bool = False  # the last call said more is due now
    work_at: float = math.inf  # monotonic time the last call said the sweeper's next work falls due
    moving: dict[str, str] | None = None  # the walk moving an older version's jobs: topic -> where it is


class Sweeper:
    """Sweeps every partition of a namespace whose lock it can hold."""

    def __init__(
        self,
        namespace: Namespace,
        *,
        stop: threading.Event | None = None,
        limit: int = SWEEP_LIMIT,
        lag_ms: int = SWEEP_LAG_MS,
    ) -> None:
        self.namespace = namespace
        self.tick = namespace.settings.tick
        self.lag_ms = lag_ms  # the lag while the sweeper finds work; it grows up to the tick while not
        self.max_lag_ms = max(lag_ms, int(self.tick * 1000))
        self.lock_ttl_ms = int(max(5.0, 5 * self.tick) * 1000)
        self.limit = limit
        self.token = secrets.token_hex(16)
        self.stop = stop or threading.Event()
        self.counts: Counter[str] = Counter()
        self._states = [_PartitionState(p, lag_ms) for p in namespace.keys.partitions]
        self.outages = Outages(namespace, tick=self.tick, name="sweep")
        # recurring schedules' occurrences, each pass
        self.scheduler = Scheduler(namespace, counts=self.counts, outages=self.outages)
        self.server_clock = ServerClock()  # Redis' time, from the sweeps' replies
        self.tally = Tally(self.server_clock.ms)  # the topics' activity: leases taken back, jobs gone dead
        self._activity_recorded = time.monotonic()

    def run(self, budget: Budget) -> dict[str, Any]:
        """Sweep until the budget's stop time (one pass if it asks for one); release the locks."""
        try:
            first = True
            while first or (budget.taking() and not self.stop.is_set()):
                first = False
                wait = self.sweep_once(budget)
                if budget.one_pass:
                    break
                self.stop.wait(max(0.0, min(wait, budget.left())))
        finally:
            self.release()
            self._record_activity(due=True)
            self.namespace.telemetry.flush()
        return self.summary()

    def request_stop(self) -> None:
        """Stops sweeping now (from a signal handler or another thread); ``run`` releases the locks."""
        self.stop.set()

    def summary(self) -> dict[str, Any]:
        keys = ["passes", "moved", "retried", "dead", "occurrences", "forgotten", "callbacks"]
        keys += ["locks_taken", "locks_lost", "redis_errors"]
        return {key: self.counts[key] for key in keys}

    def sweep_once(self, budget: Budget | None = None) -> float:
        """One pass over every partition; the seconds until the next pass is due (0: more is due now).

        A partition whose sweep answers that more is due is swept again, taking turns with the
        others, while ``budget`` allows it (``_drains``); otherwise the pass ends and the loop comes
        back at once. Without a budget, a pass drains everything due.
        """
        self.counts["passes"] += 1
        self.namespace.telemetry.flush_due()
        self._record_activity()
        outages = self.outages
        outages.follow_moves(time.monotonic())
        next_in: list[int | None] = [self.scheduler.pass_once()]
        states = self._states
        while True:
            busy = []
            for state in states:
                now = time.monotonic()
                if outages.resting(state.partition, now):
                    continue
                try:
                    with redis_errors():
                        ms = self._sweep_partition(state)
                except RedisUnavailable as exc:
                    state.busy = False
                    self._redis_error()
                    if not outages.failed(state.partition, exc, now):  # refused by an ACL: not an outage
                        log.warning("sweep of partition %d failed: %s", state.partition.index, exc.message)
                    continue
                except RedisError:  # not a Redis outage (a refused command, a script error): the run fails
                    self._redis_error()
                    raise
                outages.answered(state.partition)
                if state.busy:
                    busy.append(state)
                elif ms is not None:
                    # While work only comes due, at most a pass per lag: consumers take it meanwhile.
                    next_in.append(max(ms, state.lag_ms))
            if not busy:
                now = time.monotonic()
                outages.report(now)
                rest_ends = outages.next_at(now)  # a partition's rest, or the next read of the slot table
                if rest_ends < math.inf:
                    next_in.append(max(0, int((rest_ends - now) * 1000)))
                return sleep_for(self.tick, *next_in)
            if not self._drains(budget):
                outages.report(time.monotonic())
                return 0.0
            states = busy

    def _drains(self, budget: Budget | None) -> bool:
        """Whether a pass goes on sweeping while more is due. A looping run does not: its loop comes
        back at once, and stops when the budget or a stop request says so. A single pass does, but not
        past ``STOP_BEFORE_DEADLINE_S`` before the deadline, if it has one."""
        if budget is None:
            return not self.stop.is_set()
        if not budget.one_pass:
            return False
        return not self.stop.is_set() and budget.fits(STOP_BEFORE_DEADLINE_S - FINISH_BEFORE_DEADLINE_S)

    def _redis_error(self) -> None:
        self.counts["redis_errors"] += 1
        self.namespace.telemetry.count("RedisErrors", None)  # a partition's call is for all its topics

    def _sweep_partition(self, state: _PartitionState) -> int | None:
        """Sweeps one partition if its lock can be held: the topics the last call named (none: the call
        renews the lock and reads the index, and a second call sweeps what it names), and, the first
        time, every topic if the partition's index was never built. Sets ``state.busy`` if more is due
        now; returns the ms until the partition's next work (None: unknown)."""
        if not state.held:
            state.busy = False
            state.due = []
            state.held = calls.lock(state.partition, self.token, ttl_ms=self.lock_ttl_ms).run(self.namespace.redis)
            if not state.held:
                return None
            self.counts["locks_taken"] += 1
            log.info("sweeper %s holds partition %d", self.token[:8], state.partition.index)
        try:
            woken_for_work = time.monotonic() >= state.work_at
            topics = state.due[:TOPICS_PER_CALL]
            swept = self._sweep_topics(state, topics)
            found_work = bool(topics or swept.due) or not swept.indexed
            if not swept.indexed:
                swept = self._walk(state)
            elif not topics and swept.due:  # the call only read what is due: sweep it now
                swept = self._sweep_topics(state, swept.due[:TOPICS_PER_CALL])
            if swept.outbox:
                self._callbacks(state.partition)
            if not state.partition.moved.known:
                self._move_jobs(state)
            self._adapt_lag(state, found_work=found_work, woken_for_work=woken_for_work)
        except _LockLost:
            state.held = False
            state.busy = False
            state.due = []
            self.counts["locks_lost"] += 1
            log.warning("sweeper %s lost the lock of partition %d", self.token[:8], state.partition.index)
            return None
        state.due = swept.due
        state.busy = bool(swept.due)
        state.work_at = math.inf if swept.next_in_ms is None else time.monotonic() + swept.next_in_ms / 1000
        return swept.next_in_ms

    def _callbacks(self, partition: Partition) -> None:
        """Makes the callback jobs the partition's outbox holds (``callbacks.drain``). A partition that
        does not answer (where a callback topic's job goes) leaves the records for the next pass: it
        is not this partition's outage."""
        try:
            with redis_errors():
                self.counts["callbacks"] += drain(self.namespace, partition)
        except RedisUnavailable as exc:
            self._redis_error()
            log.warning("callbacks of partition %d wait: %s", partition.index, exc.message)

    def _adapt_lag(self, state: _PartitionState, *, found_work: bool, woken_for_work: bool) -> None:
        """Sets the partition's lag back once the sweeper finds work; doubles it (up to a tick) when the
        index said work was due for the sweeper by now and the consumers had already taken it."""
        if found_work:
            state.lag_ms = self.lag_ms
        elif woken_for_work:
            state.lag_ms = min(self.max_lag_ms, 2 * state.lag_ms)

    def _walk(self, state: _PartitionState) -> Swept:
        """Sweeps every topic of the partition's ``_topics``, a chunk per call, the last call marking
        the index built: once per partition whose index an older version left unbuilt."""
        topics = sorted(str(topic) for topic in self.namespace.redis.smembers(state.partition.topics))
        chunks = [topics[i : i + TOPICS_PER_CALL] for i in range(0, len(topics), TOPICS_PER_CALL)] or [[]]
        log.info("building the topic index of partition %d (%d topics)", state.partition.index, len(topics))
        swept = None
        for n, chunk in enumerate(chunks, 1):
            swept = self._sweep_topics(state, chunk, walked=n == len(chunks))
        assert swept is not None
        return swept

    def _move_jobs(self, state: _PartitionState) -> None:
        """Moves the jobs a version before the partitions' job hashes kept in its topics' own hashes
        (``move_jobs.lua``), ``MOVE_JOBS_CALLS`` bounded calls per pass over the topics of ``_topics``;
        once none is left, marks the partition, and its scripts look nowhere else."""
        partition, redis = state.partition, self.namespace.redis
        if state.moving is None:
            if calls.jobs_moved(partition).run(redis):
                partition.moved.known = True
                return
            state.moving = {str(topic): "m0" for topic in redis.smembers(partition.topics)}
            topics = len(state.moving)
            log.info("moving the jobs of partition %d (%d topics) into its job hashes", partition.index, topics)
        for _ in range(MOVE_JOBS_CALLS):
            if not state.moving:
                partition.moved.known = calls.jobs_moved(partition, mark=True).run(redis)
                log.info("partition %d keeps every job in its job hashes", partition.index)
                return
            walks = dict(sorted(state.moving.items())[:TOPICS_PER_CALL])
            moved = calls.move_jobs(partition, self.token, walks, self.limit).run(redis)
            if moved is None:
                raise _LockLost
            for topic, at in moved.items():
                if at:
                    state.moving[topic] = at
                else:
                    del state.moving[topic]

    def _sweep_topics(self, state: _PartitionState, topics: list[str], *, walked: bool = False) -> Swept:
        """One sweep call for ``topics``, its counts added up."""
        config = self.namespace.settings.topics
        rules = [(topic, config.retrying(topic)) for topic in topics]
        call = calls.sweep(
            state.partition,
            rules,
            token=self.token,
            ttl_ms=self.lock_ttl_ms,
            limit=self.limit,
            lag_ms=state.lag_ms,
            due_limit=TOPICS_PER_CALL,
            walked=walked,
        )
        if topics:  # and, in the same round trip, the receipts no ack forgets (bounded, like the sweep)
            forget = calls.forget(state.partition, rules, limit=self.limit)
            replies = run_many(self.namespace.redis, [call, forget])
            swept: Swept = replies[0]
            self.counts["forgotten"] += replies[1].forgotten
        else:
            swept = call.run(self.namespace.redis)
        if not swept.held:
            raise _LockLost
        self.server_clock.saw(swept.now_ms)
        if swept.old:
            carried = calls.move_leases(state.partition, swept.old).run(self.namespace.redis)
            log.info(
                "moved %d leases of %d topics into partition %d's lease sets",
                carried,
                len(swept.old),
                state.partition.index,
            )
        telemetry = self.namespace.telemetry
        for topic, (moved, retried, dead, dead_ids) in zip(topics, swept.per_topic, strict=True):
            self.counts.update(moved=moved, retried=retried, dead=dead)
            telemetry.count("Moved", topic, moved)
            telemetry.count("LeaseExpired", topic, retried + dead)
            telemetry.count("Retried", topic, retried)
            telemetry.count("Dead", topic, dead)
            self.tally.ended(topic, failed=retried + dead, dead=dead)
            for job_id in dead_ids:
                context = {"topic": topic, "id": job_id}
                log.error("%s/%s is dead: its lease expired, its last attempt unanswered", topic, job_id, extra=context)
        return swept

    def _record_activity(self, *, due: bool = False) -> None:
        """Every ``activity.FLUSH_S`` (or now, if ``due``): what was counted since, added to the topics'
        activity in Redis, a call per partition in one round trip. Counts whose call fails are lost, as
        a killed process's are (``delayq.core.activity``)."""
        now = time.monotonic()
        if not due and now - self._activity_recorded < ACTIVITY_FLUSH_S:
            return
        self._activity_recorded = now
        records = calls.add_activities(self.namespace.keys, self.tally.take())
        if records:
            try:
                with redis_errors():
                    run_many(self.namespace.redis, [call for _, call in records])
            except RedisUnavailable:
                self._redis_error()

    def release(self) -> None:
        """Releases every lock this sweeper holds (only if it still holds it)."""
        for state in self._states:
            if state.held:
                try:
                    calls.unlock(state.partition, self.token).run(self.namespace.redis)
                except RedisError as exc:
                    self._redis_error()
                    log.warning("could not release the lock of partition %d: %s", state.partition.index, exc)
                state.held = False
