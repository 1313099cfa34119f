"""The consumer: takes due jobs, hands each to its topic's target in a bounded worker pool with the
topic's timeout, and settles it: success acknowledged, failure or timeout retried after the backoff
or dead-lettered. Each pass is one round trip (takes, settlements and looks at the topic index, each
its own Lua call, pipelined without MULTI); it visits only the topics the index says have work.

This module is the loop: when to read the topic index, what to take, and the pass that sends it all.
``lanes.py`` holds the topics and their lanes, ``deliveries.py`` runs the handlers and judges them,
``settlement.py`` sends the verdicts and undoes lost takes, ``outages.py`` holds back the partitions
whose Redis does not answer. Why it works this way (the topic index and its looks, the
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
from itertools import chain, islice
from typing import Any

from redis.exceptions import RedisError

from delayq.core.activity import FLUSH_S as ACTIVITY_FLUSH_S
from delayq.core.activity import Counted, Counts, Tally
from delayq.core.clock import ServerClock
from delayq.core.errors import ConfigError, DelayqError
from delayq.core.loop import Budget
from delayq.core.settings import ENV
from delayq.store import calls
from delayq.store.calls import Ack, LaneTake, Taken
from delayq.store.connection import redis_errors, refused_unrun
from delayq.store.keys import Partition
from delayq.store.namespace import Namespace
from delayq.store.scripts import Call, run_many

from .deliveries import Deliveries, Delivery
from .lanes import TAKE_AHEAD_MS, TAKE_WINDOW_S, Lane, Lanes, Topic, first_due
from .outages import Outages
from .settlement import AckRoom, Pending, Settlement
from .workers import SPREAD_S

log = logging.getLogger("delayq.consume")

# Tuning of the loop (the pool's SPREAD_S is in workers.py, settlement's chunks in settlement.py).
LEASE_GRACE_MS = 2000  # a lease outlives the timeout by this much, so the consumer's verdict comes first
SETTLE_WINDOW_S = 0.001  # after a handler finishes, how long the loop may wait for the others before its pass
ACTIVITY_CHUNK = 50  # topics' minutes of activity one call adds (one call a pass while more wait: ~1 ms of Redis)
LANES_PER_CALL = 64  # lanes (takes and riding acks) one take call carries, at most: bounded work per call
PLAN_TOPICS = 256  # topics named per partition by one read of its topic index (the first to have work)
PLAN_MARGIN_MS = 100  # a read of the topic index looks this much beyond the next tick
LOOKS_PER_TICK = 20  # between those reads, plain looks at the index: every 50 ms at the default tick
LOOK_EARLY = 0.5  # of a look's interval: how early it may come to ride in a round trip the pass makes anyway
POLL_TOPICS = 64  # topics named per partition by one look
FINISH_TRIES = 3  # passes that fail to settle, at the end of a run, before giving up on Redis
REPORT_WAIT_S = 1.0  # at the end of a run, how long the last handlers' metrics and logs may take

__all__ = ["LEASE_GRACE_MS", "TAKE_AHEAD_MS", "Consumer"]


@dataclass(slots=True)
class Take:
    """A lane's take in a pass, with the lane's acks that ride with it (given once its call is known:
    ``Consumer._calls_of``). ``early``: the lane is not due yet, its jobs fall due within its take
    ahead; it takes what the due lanes leave of the workers."""

    lane: Lane
    count: int
    take_id: str
    early: bool = False
    acks: list[Ack] = field(default_factory=list)


@dataclass(slots=True)
class TakeCall:
    """One take call of a pass: the takes of some lanes of a partition, then the acks of its other
    lanes (``acking``), a reply each in that order."""

    partition: Partition
    takes: list[Take]
    acking: list[tuple[Pending, list[Ack]]]
    call: Call[list[Taken]]


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
        if namespace.topics_from_redis:  # their webhook targets have no path: tools' view, not a consumer's
            raise ConfigError(
                f"a consumer needs {ENV.TOPICS} of its own: this queue's topics are those the loops published "
                "for tools (Queue.from_env without it)"
            )
        self.namespace = namespace
        self.settings = namespace.settings
        self.tick = namespace.settings.tick
        self.look_every = self.tick / LOOKS_PER_TICK
        self.lease_grace_ms = lease_grace_ms
        self.stop = stop or threading.Event()
        self.counts: Counter[str] = Counter()
        self._plans = [0.0] * len(namespace.keys)  # per partition: when to read its topic index next
        self._full_reads: set[int] = set()  # partitions whose last read named PLAN_TOPICS topics
        self._backlogged: set[int] = set()  # shares (by id) that had more topics due than free workers
        self._unrecorded: dict[Counted, Counts] = {}  # taken from the tally, not yet sent
        self._polls = [0.0] * len(namespace.keys)  # per partition: when to look at it next, between reads
        self.server_clock = ServerClock()  # Redis' time, from the replies
        self.tally = Tally(self.server_clock.ms)  # the topics' activity counted here, not yet taken to be sent
        self._lock = threading.Lock()
        self.outages = Outages(namespace, tick=self.tick, name="consume")
        self._settlement = Settlement(
            self._lock,
            self.counts,
            namespace.telemetry,
            self._redis_error,
            tally=self.tally,
            resting=self.outages.until,
        )
        self.lanes = Lanes(self.settings, self._settlement, self._lock, partitions=len(namespace.keys), only=topics)
        self.deliveries = Deliveries(
            self._lock, self.counts, namespace.telemetry, tally=self.tally, size=self.lanes.pool_size()
        )
        self._activity_recorded = time.monotonic()
        self._next_takes: dict[Partition, float] = {}  # per partition, when its next take is due (this pass's)

    # --------------------------------------------------------------------------------- the loop

    def run(self, budget: Budget) -> dict[str, Any]:
        """Takes work until the budget's stop time (one pass if it asks for one), then finishes what it
        started and settles it."""
        self.lanes.start_run(budget.run_ms)
        try:
            first = True
            while first or (budget.taking() and not self.stop.is_set()):
                first = False
                self._pass(budget, take=True)
                if budget.one_pass:
                    break
                self._sleep(self._wait(budget, taking=True))
            self._finish(budget)
            self._record_activity_now()
        finally:
            self.deliveries.shutdown(REPORT_WAIT_S)  # a settled job's metrics, counted just after, in this flush
            self.namespace.telemetry.flush()
        return self.summary()

    def _finish(self, budget: Budget) -> None:
        """Waits for the handlers still running (each ends or times out), and settles them. Settling
        is given a few tries: if Redis stays away, the leases expire and the jobs are retried."""
        failed_settles = 0
        while self.deliveries.unsettled() or self._settlement.waiting():
            errors = self.counts["redis_errors"]
            self._pass(budget, take=False)
            if self.counts["redis_errors"] > errors and not self.deliveries.unsettled():
                failed_settles += 1
            if failed_settles >= FINISH_TRIES or (budget.finish_by is not None and time.monotonic() > budget.finish_by):
                if self.deliveries.unsettled() or self._settlement.waiting():
                    log.warning("stopping with jobs unsettled: their leases will expire and they will be retried")
                return
            if self.deliveries.unsettled() or self._settlement.waiting():
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
        self.deliveries.wake.set()

    def _sleep(self, seconds: float) -> None:
        """Sleeps ``seconds``, or until a worker finishes or a stop is requested. Also once stopped:
        ``_finish`` sleeps here between its passes, waiting for the handlers still running."""
        deliveries = self.deliveries
        if seconds > 0 and deliveries.wake.wait(seconds) and not self.stop.is_set():
            # Handlers finish in bursts: wait a moment for the others (until none runs, at most the
            # window), so that one pass settles them all and refills their workers at once.
            deliveries.idle.wait(SETTLE_WINDOW_S)
        deliveries.wake.clear()
        deliveries.workers.spread(time.monotonic())

    def _wait(self, budget: Budget, *, taking: bool) -> float:
        now = time.monotonic()
        waits = [self.tick]
        if self.deliveries.workers.waiting:
            waits.append(SPREAD_S)
        waits += [deadline - now for deadline in self.deliveries.deadlines()]
        waits.append(self._settlement.send_acks_by() - now)
        waits.append(self.outages.next_at(now) - now)
        if taking:
            waits.append(self._next_take(budget, now) - now)
            # A resting partition is read and looked at once its rest ends (``outages``), not before.
            rests = [self.outages.until(partition) for partition in self.namespace.keys.partitions]
            waits += [max(at, rest) - now for at, rest in zip(self._plans, rests, strict=True)]
            if self.server_clock.known:
                waits += [max(at, rest) - now for at, rest in zip(self._polls, rests, strict=True)]
            waits.append(budget.left(now))
        return max(0.0, min(waits))

    def _next_take(self, budget: Budget, now: float) -> float:
        """When the first lane that can take is due (inf: none can). Nothing to look at while every
        worker is busy; and the first lane found due ends the search."""
        first = float("inf")
        if all(share.running >= share.size for share in self.lanes.shares.values()):
            return first
        for lane in self.lanes:
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
        self.deliveries.expire(now)
        self.outages.follow_moves(now)
        if take:
            self._read_index(now)
        takes = self._take_calls(budget, now) if take else []  # first: the lanes' acks ride with them
        self._next_takes = self._first_takes() if take else {}
        settles = self._settlement.calls(now, hold=self._acks_can_wait if take else None)
        # In the same round trip (a lane they make takes next pass); early, rather than a wake of their own.
        looks = self._look_calls(now, riding=bool(takes or settles)) if take else []
        records = self._activity_records(now)
        sends: list[Call[Any]] = [settle.call for settle in settles] + [sent.call for sent in takes]
        sends += [call for _, pair in looks for call in pair] + [call for _, call in records]
        if not sends:
            self.lanes.forget_idle()
            self.outages.report(now)
            return
        partitions = [settle.pending.partition for settle in settles] + [sent.partition for sent in takes]
        partitions += [partition for partition, _ in looks for _ in range(2)] + [partition for partition, _ in records]
        replies = self._send(sends)
        self.outages.saw(partitions, replies, now)
        for settle, reply in zip(settles, replies[: len(settles)], strict=True):
            self._settlement.settled(settle, reply)
        for sent, reply in zip(takes, replies[len(settles) : len(settles) + len(takes)], strict=True):
            self._on_takes(sent, reply, now)
        looked = replies[len(settles) + len(takes) : len(settles) + len(takes) + 2 * len(looks)]
        for (partition, _), ready, delayed in zip(looks, looked[0::2], looked[1::2], strict=True):
            self._on_look(partition, ready, delayed, now)
        self.lanes.forget_idle()
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

    # --------------------------------------------------------------------------------- activity

    def _activity_records(self, now: float, *, due: bool = False) -> list[tuple[Partition, Call[int]]]:
        """Every ``activity.FLUSH_S`` (or now, if ``due``): what was counted since the last record,
        added to each topic's activity in Redis (``delayq.core.activity``), one call per partition for
        up to ``ACTIVITY_CHUNK`` topics' minutes. A pass sends one such call, so that thousands of topics spread
        their records over passes instead of holding one up; ``due`` sends them all. A topic whose
        partition rests (``outages``) waits for it."""
        if due or now - self._activity_recorded >= ACTIVITY_FLUSH_S:
            self._activity_recorded = now
            for counted, counts in self.tally.take().items():
                self._unrecorded.setdefault(counted, Counts()).add(counts)
        records: list[tuple[Partition, Call[int]]] = []
        waiting = iter(list(self._unrecorded))
        if self.outages:
            keys = self.namespace.keys
            waiting = (counted for counted in waiting if not self.outages.resting(keys.for_topic(counted[1]), now))
        while due or not records:
            chunk = {counted: self._unrecorded.pop(counted) for counted in islice(waiting, ACTIVITY_CHUNK)}
            if not chunk:
                break
            records += calls.add_activities(self.namespace.keys, chunk)
        return records

    def _record_activity_now(self) -> None:
        """At the end of a run: the activity of its last deliveries, so that none is lost (best effort)."""
        records = self._activity_records(time.monotonic(), due=True)
        if records:
            self._send([call for _, call in records])

    # --------------------------------------------------------------------------------- topics

    # --------------------------------------------------------------------------------- the topic index

    def _read_index(self, now: float) -> None:
        """Reads the topic index of each partition whose time has come (once a tick), in one round trip
        before the pass's takes, so that a lane it makes takes in the same pass."""
        horizon_ms = int(self.tick * 1000) + PLAN_MARGIN_MS
        if self._full_reads and len(self.lanes) < PLAN_TOPICS // 2:
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
            self._on_read(partition, reply, now)

    def _look_calls(
        self, now: float, *, riding: bool = False
    ) -> list[tuple[Partition, tuple[Call[list[str]], Call[dict[str, int]]]]]:
        """The plain looks due now: per partition, its ready topics and those due before the next look,
        by Redis' clock as the last reply gave it (none before a first read tells it, nor while every
        share has more topics due than free workers: what a look would find waits anyway). When the
        pass goes to Redis anyway (``riding``), a look due within ``LOOK_EARLY`` of a look's interval
        comes now: in steady traffic the looks ride with the takes instead of waking Redis alone."""
        if not self.server_clock.known or (self._backlogged and len(self._backlogged) == len(self.lanes.shares)):
            return []
        until_ms = int(self.server_clock.ms(now) + self.look_every * 1000) + 1
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

    def _on_read(self, partition: Partition, reply: calls.TopicsDue | Exception, now: float) -> None:
        """The topics with work in ``partition``: each lane takes when its next job falls due."""
        if isinstance(reply, Exception):
            self._redis_error("reading the topic index", partition, None, reply)
            if self.outages.resting(partition, now):  # read again once its rest ends
                self._plans[partition.index] = self.outages.until(partition)
            return
        self.server_clock.saw(reply.now_ms, now)
        self._due(partition, reply.due, now)
        if len(reply.due) >= PLAN_TOPICS:  # more may have work: read again once most of these have taken
            self._full_reads.add(partition.index)

    def _on_look(
        self, partition: Partition, ready: list[str] | Exception, delayed: dict[str, int] | Exception, now: float
    ) -> None:
        """What a plain look found: ready topics take now, the others when their job falls due."""
        if isinstance(ready, Exception):
            self._redis_error("looking at the topic index", partition, None, ready)
            return
        if isinstance(delayed, Exception):
            self._redis_error("looking at the topic index", partition, None, delayed)
            return
        if not self.server_clock.known:
            return
        server_now = self.server_clock.ms(now)
        due = {name: max(0, int(run_at - server_now)) for name, run_at in delayed.items()} | dict.fromkeys(ready, 0)
        if self._backlogged:  # a backlogged share's topics wait for a read, behind those due before
            due = {name: in_ms for name, in_ms in due.items() if not self._in_backlog(name)}
        self._due(partition, due, now)

    def _in_backlog(self, name: str) -> bool:
        """Whether the topic ``name`` shares the workers of a share that is ``_backlogged``."""
        return id(self.lanes.shares_with(name)) in self._backlogged

    def _due(self, partition: Partition, due: dict[str, int], now: float) -> None:
        """Each topic of ``due`` (name -> ms until it has a job due) takes then, unless held."""
        for name, in_ms in due.items():
            topic = self.lanes.topic(name)
            if topic is not None:
                lane = self.lanes.lane(topic, partition)
                lane.next_check = max(lane.held_until, min(lane.next_check, now + in_ms / 1000))

    # --------------------------------------------------------------------------------- take

    def _first_of_each_share(self, due: dict[Topic, list[Lane]]) -> dict[Topic, list[Lane]]:
        """Each take needs a free worker: of a share with more topics due than that (a burst over many
        topics), the ones due first; the others wait for the next passes, and the share is
        ``_backlogged`` until then."""
        by_share: dict[int, list[tuple[Topic, list[Lane]]]] = {}
        for item in due.items():
            by_share.setdefault(id(item[0].share), []).append(item)
        self._backlogged = set()
        first: dict[Topic, list[Lane]] = {}
        for key, items in by_share.items():
            share = items[0][0].share
            free = share.size - share.running
            if len(items) > free:
                self._backlogged.add(key)
            first.update(heapq.nsmallest(free, items, key=first_due) if len(items) > free else items)
        return first

    def _take_calls(self, budget: Budget, now: float) -> list[TakeCall]:
        """Takes for the lanes that are due, each topic's free workers shared among its due lanes
        (partitions), the first of them in turn, so that no partition waits behind another. Topics
        that share workers (those ``*`` covers) take in the order their lanes fell due, and no more in
        all than their share has free. With the workers left, a partition that takes brings its other
        lanes due within their take ahead (``_take_early``); one call per partition (``TakeCall``),
        with the acks of its other lanes."""
        takers = [
            lane
            for lane in self.lanes
            if self._can_take(lane, budget, now) and not self.outages.resting(lane.partition, now)
        ]
        due: dict[Topic, list[Lane]] = {}
        for lane in takers:
            if lane.next_check <= now:
                due.setdefault(lane.topic, []).append(lane)
        due = self._first_of_each_share(due)
        takes: dict[Partition, list[Take]] = {}
        planned: Counter[int] = Counter()  # per share (by id): jobs this pass's takes may bring
        sharing = Counter(id(topic.share) for topic in due)  # per share: its topics still to take
        for topic, lanes in sorted(due.items(), key=first_due):
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
                takes.setdefault(lane.partition, []).append(self._take(lane, count))
        allowed = self._take_early(takers, due, takes, planned, now)
        # Never negative: take.lua reads a negative longest as "no limit".
        longest_ms = -1 if budget.finish_by is None else max(0, int((budget.finish_by - now) * 1000))
        return [
            call
            for partition, lane_takes in takes.items()
            for call in self._calls_of(partition, lane_takes, allowed.get(partition, Counter()), longest_ms)
        ]

    def _take_early(
        self,
        takers: list[Lane],
        due: dict[Topic, list[Lane]],
        takes: dict[Partition, list[Take]],
        planned: Counter[int],
        now: float,
    ) -> dict[Partition, Counter[int]]:
        """Adds to ``takes`` the lanes not due yet whose jobs fall due within their take ahead, in the
        partitions that take now, the first to fall due a job each: they ride in that call, with the
        workers the due lanes of their share leave there (the call's pool), and its workers no due
        lane was given, split among those partitions: per partition and share (by id), what this
        returns. A job taken early holds its worker until its run-at, so at most half the share's
        free workers go to them, as a topic takes ahead only while at most half its workers are busy."""
        early: dict[int, list[Lane]] = {}  # per share
        for lane in sorted(takers, key=lambda lane: lane.next_check):
            if (
                lane.partition in takes
                and lane.topic not in due
                and 0 < lane.next_check - now <= lane.topic.ahead_ms / 1000
            ):
                early.setdefault(id(lane.topic.share), []).append(lane)
        due_here = Counter(
            (take.lane.partition, id(take.lane.topic.share)) for take in chain.from_iterable(takes.values())
        )
        allowed: dict[Partition, Counter[int]] = {}
        for key, lanes in early.items():
            share = lanes[0].topic.share
            left = share.size - share.running - planned[key]
            del lanes[(share.size - share.running) // 2 :]
            partitions = list(dict.fromkeys(lane.partition for lane in lanes))
            for n, partition in enumerate(partitions):
                allowed.setdefault(partition, Counter())[key] = max(
                    0, left // len(partitions) + (n < left % len(partitions))
                )
            for lane in lanes:
                if allowed[lane.partition][key] + due_here[(lane.partition, key)] > 0:
                    takes[lane.partition].append(self._take(lane, 1, early=True))
        return allowed

    def _calls_of(
        self, partition: Partition, takes: list[Take], allowed: Counter[int], longest_ms: int
    ) -> list[TakeCall]:
        """The calls of a partition's takes, ``LANES_PER_CALL`` lanes each, with their lanes' acks and
        then its other lanes' riding in the room left, in lanes and in bytes (an ``AckRoom`` a call).
        The lanes of a share take from one pool: what its due lanes were given, and in the last call
        what ``allowed`` gives its early ones."""
        taking = {take.lane.pending for take in takes}
        sent = []
        for start in range(0, len(takes), LANES_PER_CALL):
            chunk = takes[start : start + LANES_PER_CALL]
            budgets: Counter[int] = Counter()
            for take in chunk:
                budgets[id(take.lane.topic.share)] += 0 if take.early else take.count
            if start + LANES_PER_CALL >= len(takes):
                budgets.update(allowed)
            pools = {key: n for n, key in enumerate(budgets, 1)}
            room = AckRoom()
            for take in chunk:
                take.acks = self._settlement.ride(take.lane.pending, room)
            acking = self._settlement.ride_along(partition, taking, LANES_PER_CALL - len(chunk), room)
            parts = [self._part(take, pools[id(take.lane.topic.share)]) for take in chunk]
            parts += [calls.lane_acks(partition, pending.topic, pending.rules, acks) for pending, acks in acking]
            call = calls.takes(
                partition, parts, longest_ms=longest_ms, run_ms=self.lanes.run_ms, pools=list(budgets.values())
            )
            sent.append(TakeCall(partition, chunk, acking, call))
        return sent

    def _take(self, lane: Lane, count: int, *, early: bool = False) -> Take:
        """A take of up to ``count`` jobs from ``lane`` (its acks join it in ``_calls_of``)."""
        take_id = "t" + secrets.token_hex(8)  # never a number: those are the counter's tokens
        return Take(lane, count, take_id, early)

    def _part(self, take: Take, pool: int) -> LaneTake:
        """The take's part of its call, its jobs out of ``pool``."""
        lane, topic = take.lane, take.lane.topic
        return calls.lane_take(
            lane.partition,
            topic.name,
            count=take.count,
            timeout_ms=topic.config.timeout_ms,
            grace_ms=self.lease_grace_ms,
            take_id=take.take_id,
            rate=topic.rate,
            acks=take.acks,
            keeping=topic.config,
            ahead_ms=topic.ahead_ms,
            key_limits=topic.key_limits,
            pool=pool,
            on_dead=topic.config.on_dead,
        )

    def _on_takes(self, sent: TakeCall, reply: list[Taken] | Exception, now: float) -> None:
        """A take call's reply: each lane's take, then the acks that rode along."""
        replies: list[Taken | Exception] = (
            [reply] * (len(sent.takes) + len(sent.acking)) if isinstance(reply, Exception) else list(reply)
        )
        for take, taken in zip(sent.takes, replies[: len(sent.takes)], strict=True):
            self._on_take(take, taken, now)
        for (pending, acks), taken in zip(sent.acking, replies[len(sent.takes) :], strict=True):
            self._settlement.rode(pending, acks, taken if isinstance(taken, Exception) else taken.acked)

    def _on_take(self, take: Take, reply: Taken | Exception, now: float) -> None:
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
        self.server_clock.saw(reply.now_ms, now)
        if reply.paused:  # nothing taken: look again in a tick (a pause lasts minutes, not milliseconds)
            lane.next_check = lane.held_until = now + self.tick
            return
        answered = time.monotonic()
        if reply.dead:
            self._dead_for_timeout(lane, reply.dead)
        self.counts["taken"] += len(reply.jobs)
        server_now = reply.now_ms
        # Redis' clock read ``server_now`` before the reply came: at ``answered`` + t it reads at least
        # ``server_now`` + t. A job taken ahead starts once that reaches its start: its run-at, or its
        # key's slot when its key's rate paces it.
        deliveries = [
            Delivery(
                job,
                token,
                lane,
                timeout_ms / 1000,
                server_now - job.run_at_ms,
                answered,
                answered + max(0, start_ms - server_now) / 1000,
            )
            for job, token, timeout_ms, start_ms in zip(
                reply.jobs, reply.tokens, reply.timeouts_ms, reply.starts_ms, strict=True
            )
        ]
        if len(reply.jobs) + len(reply.dead) >= take.count and not take.early:
            # A full batch: more may be due, so take again as soon as workers are free; but if it was
            # taken ahead, nothing more is due before its last job starts, unless the take says jobs
            # due wait their turn still (``next_in_ms`` 0). (An early lane took one job of its
            # delayed set, and ``next_in_ms`` says when its next falls due.)
            starts = [] if reply.next_in_ms == 0 else [delivery.start_at for delivery in deliveries]
            lane.next_check = max([now, *starts])
        elif reply.next_in_ms is not None and reply.next_in_ms < self.tick * 1000:
            # Jobs falling due in a steady stream are taken a window at a time, not one wake each.
            lane.next_check = now + max(reply.next_in_ms / 1000, TAKE_WINDOW_S)
        else:  # nothing due within a tick: the topic index will say when (the lane goes once settled)
            lane.next_check = float("inf")
        if reply.held:  # the rate's next start: the index's ready jobs wait for it too
            lane.held_until = lane.next_check
        if deliveries:
            self.deliveries.start(lane.topic, deliveries)

    def _dead_for_timeout(self, lane: Lane, ids: list[str]) -> None:
        """Jobs the take sent to the dead letters: their own timeout is longer than a run can last."""
        topic = lane.topic.name
        self.counts["dead"] += len(ids)
        self.namespace.telemetry.count("Dead", topic, len(ids))
        self.tally.ended(topic, dead=len(ids))
        for job_id in ids:
            log.error(
                "%s/%s is dead: its timeout is longer than a consume run can last (%ds); enqueue it again"
                " with a shorter timeout, or raise the consume function's timeout",
                topic,
                job_id,
                self.lanes.run_ms // 1000,
                extra={"topic": topic, "id": job_id, "run_s": self.lanes.run_ms / 1000},
            )

    def _acks_can_wait(self, pending: Pending) -> bool:
        """Whether a lane's acks may wait for a take of their partition to ride with: one is coming
        before they must go (``Pending.send_acks_by``)."""
        by = pending.send_acks_by()
        return time.monotonic() < by and self._next_takes.get(pending.partition, float("inf")) <= by

    def _first_takes(self) -> dict[Partition, float]:
        """When each partition's first lane is due to take."""
        first: dict[Partition, float] = {}
        for lane in self.lanes:
            if lane.next_check < first.get(lane.partition, float("inf")):
                first[lane.partition] = lane.next_check
        return first

    @staticmethod
    def _can_take(lane: Lane, budget: Budget, now: float) -> bool:
        """Whether the lane's topic has a free worker and time to finish a job before the deadline."""
        return lane.topic.free > 0 and budget.fits(lane.topic.config.timeout, now)

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
