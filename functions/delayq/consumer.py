"""The consumer: per topic, takes due jobs in batches no larger than its free workers, hands each to
the topic's target in a bounded worker pool with the topic's timeout, and settles them: success is
acknowledged, failure or timeout retried after the backoff or dead-lettered.

Each pass is one round trip: the acks and failures gathered since the last pass and the takes for
every topic with free workers go out together as one pipeline (no MULTI), each its own Lua call.

It adds no tick of delay of its own: every take answers when the topic's next delayed job falls due
(Redis server time), and the consumer sleeps until then, at most one tick, and wakes at once when a
worker frees up. The take moves due jobs itself, so a job is taken the moment it falls due even if
the sweeper is late.

A handler that outlives its timeout is a failed attempt at once. Its thread cannot be killed: it
keeps its worker until it returns, and its late result is dropped. Even if it were not, the lease
token would refuse it (ack and fail only touch a job still leased with the same token).

A consumer with a deadline (a Lambda run) takes no job it could not finish before it. A job whose
timeout is longer than the whole run (``Budget.finish_by`` minus its start) could never be taken by
such a consumer: the take sends it to the dead letters at once, with that as its last error, rather
than put it back forever; a topic whose own timeout is that long is reported at start. A consumer
without a deadline (the CLI, the local stack) takes any job.

A Redis call that fails is logged, counted (``redis_errors``, metric ``RedisErrors``) and retried at
a later pass. A take whose reply never came may have run, or may still run when Redis reads it: each
take carries an id of its own, and the next passes undo it (``untake.lua``: the jobs it leased go back
to the head of the ready list, their attempt not counted), rather than leave them leased to nobody
until the leases expire as failed attempts.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from .errors import ConfigError, DelayqError, PermanentFailure
from .job import Job
from .keys import Partition
from .loop import Budget
from .queue import Queue, redis_errors
from .schedule import sleep_for
from .scripts import Arg, Call, Scripts, run_many
from .settings import TopicConfig
from .targets import Target, failing_target, resolve_target

log = logging.getLogger("delayq.consume")

LEASE_GRACE_MS = 2000  # a lease outlives the timeout by this much, so the consumer's verdict comes first
MAX_ERROR_CHARS = 2000
TOPICS_REFRESH_S = 1.0
SETTLE_CHUNK = 1000
RETRY, PERMANENT = "r", "p"  # how fail.lua treats a failure
SETTLE_WINDOW_S = 0.001  # after a handler finishes, how long the loop may wait for the others before its pass
SPREAD_S = 0.002  # deliveries left waiting this long while a topic's threads are all busy get threads of their own
FINISH_TRIES = 3  # passes that fail to settle, at the end of a run, before giving up on Redis
MAX_UNTAKES = 256  # per lane: take ids kept for untake while Redis stays away (the oldest are dropped)
_NO_VERDICT = "the consumer failed before the handler answered (see its log)"
# A stored body is compact JSON written by delayq: decoded without json.loads' checks for whitespace
# around it, which cost more than the decoding of a small body.
_decode_body = json.JSONDecoder().raw_decode


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


class _Workers:
    """A topic's worker threads, started as they are needed, up to its concurrency, running the
    deliveries queued for the topic.

    A thread that finishes a delivery takes the next one waiting itself, and a batch wakes one thread:
    quick handlers are run one after another by the thread already awake, with no context switch and
    hand-over of the GIL per job (those cost more than a quick handler, and every blocking call a
    handler makes, even a write to a file, would hand the GIL to another thread that wants it). The
    loop calls ``spread`` every ``SPREAD_S`` while deliveries wait: if none was taken up since, each
    still waiting gets a thread, so handlers that wait (I/O, sleep) run together, the later ones about
    ``SPREAD_S`` late.

    Daemon threads: a handler hung past its timeout does not hold the process at exit."""

    def __init__(self, name: str, size: int, run: Callable[[_Delivery], None]) -> None:
        self._name = name
        self._size = size
        self._run = run
        self._queued: deque[_Delivery] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for work
        self._woken = 0  # threads woken or started that have not looked at the queue yet
        self._moved = 0.0  # when a thread last took a delivery (monotonic)
        self._closed = False

    @property
    def waiting(self) -> bool:
        """Whether deliveries wait for a thread (read without the lock: a hint for the loop's sleep)."""
        return bool(self._queued)

    def submit(self, deliveries: list[_Delivery]) -> None:
        with self._ready:
            self._queued.extend(deliveries)
            self._wake(1)

    def spread(self, now: float) -> None:
        """If deliveries have waited ``SPREAD_S`` with none taken up (the threads awake are all in
        handlers that take their time), wakes or starts a thread for each, up to the concurrency."""
        with self._ready:
            if self._queued and now - max(self._moved, self._queued[0].taken) >= SPREAD_S:
                self._wake(len(self._queued))

    def shutdown(self) -> None:
        """Each thread ends when it is done with what it runs (a hung handler's thread, never)."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def _wake(self, wanted: int) -> None:
        """With the lock held: threads on their way for ``wanted`` deliveries, woken or started."""
        wanted -= self._woken
        while wanted > 0 and self._idle > self._woken:
            self._ready.notify()
            self._woken += 1
            wanted -= 1
        while wanted > 0 and len(self._threads) < self._size:
            thread = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            self._woken += 1
            wanted -= 1
            thread.start()

    def _work(self) -> None:
        with self._ready:
            self._woken -= 1  # started: looks at the queue now
        while True:
            with self._ready:
                while not self._queued:
                    if self._closed:
                        return
                    self._idle += 1
                    self._ready.wait()
                    self._idle -= 1
                    self._woken = max(0, self._woken - 1)
                delivery = self._queued.popleft()
                self._moved = time.monotonic()
            try:
                self._run(delivery)
            except Exception:  # a bug, not a handler's failure (_deliver catches those): the lease expires
                log.exception("delivery of %s/%s failed", delivery.job.topic, delivery.job.id)


@dataclass(eq=False)
class _Topic:
    name: str
    config: TopicConfig
    target: Target
    workers: _Workers
    running: int = 0  # worker threads busy, including handlers past their timeout
    turn: int = 0  # which due lane takes first, in rotation

    @property
    def free(self) -> int:
        return self.config.concurrency - self.running


@dataclass(eq=False)
class _Lane:
    """One topic in one partition: its own take schedule and pending settlements."""

    topic: _Topic
    partition: Partition
    next_check: float = 0.0
    acks: list[str] = field(default_factory=list)  # id, token, id, token ...
    fails: list[str] = field(default_factory=list)  # id, token, error, 'r' or 'p' (permanent), ...
    untakes: list[str] = field(default_factory=list)  # ids of takes whose reply never came, to undo

    def undo_later(self, take_ids: list[str]) -> None:
        """Takes to undo at the next passes, after those already waiting; the newest ``MAX_UNTAKES`` kept."""
        self.untakes = (self.untakes + take_ids)[-MAX_UNTAKES:]


@dataclass(frozen=True)
class _Take:
    """A take call of one pass, for the lane it takes from."""

    lane: _Lane
    call: Call
    count: int
    take_id: str


@dataclass(eq=False)
class _Delivery:
    job: Job
    token: str
    lane: _Lane
    timeout_s: float
    late_at_take_ms: int  # Redis' time at take minus the job's run-at
    taken: float  # monotonic time the take was answered
    deadline: float = 0.0
    settled: bool = False  # the first verdict wins: the handler's result or the timeout


class Consumer:
    """Consumes the configured topics (and, with a ``*`` entry, every topic that has jobs)."""

    def __init__(
        self,
        queue: Queue,
        *,
        topics: Iterable[str] | None = None,
        stop: threading.Event | None = None,
        lease_grace_ms: int = LEASE_GRACE_MS,
    ) -> None:
        self.queue = queue
        self.settings = queue.settings
        self.tick = queue.settings.tick
        self.lease_grace_ms = lease_grace_ms
        self.stop = stop or threading.Event()
        self.counts: Counter[str] = Counter()
        self._only = None if topics is None else set(topics)
        self._topics: dict[str, _Topic] = {}
        self._lanes: list[_Lane] = []
        self._running: set[_Delivery] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()  # set when a handler finishes, or a stop is requested
        self._idle = threading.Event()  # set while no handler runs
        self._idle.set()
        self._topics_checked = -float("inf")
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
        finally:
            for topic in self._topics.values():
                topic.workers.shutdown()
            self.queue.telemetry.flush()
        return self.summary()

    def _finish(self, budget: Budget) -> None:
        """Waits for the handlers still running (each ends or times out), and settles them. Settling
        is given a few tries: if Redis stays away, the leases expire and the jobs are retried."""
        failed_settles = 0
        while self._unsettled() or self._pending():
            errors = self.counts["redis_errors"]
            self._pass(budget, take=False)
            if self.counts["redis_errors"] > errors and not self._unsettled():
                failed_settles += 1
            if failed_settles >= FINISH_TRIES or (budget.finish_by is not None and time.monotonic() > budget.finish_by):
                if self._unsettled() or self._pending():
                    log.warning("stopping with jobs unsettled: their leases will expire and they will be retried")
                return
            if self._unsettled() or self._pending():
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
        now = time.monotonic()
        for topic in self._topics.values():
            topic.workers.spread(now)

    def _wait(self, budget: Budget, *, taking: bool) -> float:
        now = time.monotonic()
        waits = [self.tick]
        if any(topic.workers.waiting for topic in self._topics.values()):
            waits.append(SPREAD_S)
        with self._lock:
            waits += [d.deadline - now for d in self._running if not d.settled]
        if taking:
            waits += [lane.next_check - now for lane in self._lanes if self._can_take(lane, budget, now)]
            waits.append(budget.left(now))
        return max(0.0, min(waits))

    def _pass(self, budget: Budget, *, take: bool) -> None:
        self.counts["passes"] += 1
        self.queue.telemetry.flush_due()
        now = time.monotonic()
        self._expire(now)
        if take:
            self._refresh_topics(now)
        settle = self._settlements()
        takes = self._takes(budget, now) if take else []
        calls = [call for _, call in settle] + [sent.call for sent in takes]
        if not calls:
            return
        try:
            with redis_errors():
                replies = run_many(self.queue.redis, calls, return_exceptions=True)
        except ConfigError:  # another partition count than the namespace's: nothing here can help
            raise
        except DelayqError as exc:
            replies = [exc] * len(calls)
        for (lane_and_kind, call), reply in zip(settle, replies[: len(settle)], strict=True):
            self._settled(lane_and_kind, call, reply)
        for sent, reply in zip(takes, replies[len(settle) :], strict=True):
            self._taken(sent, reply, now)

    # --------------------------------------------------------------------------------- topics

    def _add_topic(self, name: str) -> None:
        config = self.settings.topics.for_topic(name)
        if config is None or name in self._topics:
            return
        try:
            target = resolve_target(config, self.settings)
        except ConfigError as exc:
            log.error("topic %s: %s; its jobs will fail until this is fixed", name, exc.message)
            target = failing_target(exc.message)
        topic = _Topic(name, config, target, _Workers(f"delayq-{name}", config.concurrency, self._deliver))
        self._topics[name] = topic
        self._lanes += [_Lane(topic, partition) for partition in self.queue.keys.partitions]
        self._check_timeout(topic)

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

    def _refresh_topics(self, now: float) -> None:
        """With a ``*`` entry, any topic with jobs is consumed: look for new ones once a second."""
        if self._only is not None or not self.settings.topics.has_wildcard:
            return
        if now - self._topics_checked < TOPICS_REFRESH_S:
            return
        self._topics_checked = now
        try:
            for name in sorted(self.queue.known_topics() - self._topics.keys()):
                self._add_topic(name)
        except ConfigError:
            raise
        except DelayqError as exc:
            self.counts["redis_errors"] += 1
            self.queue.telemetry.count("RedisErrors", None)
            log.warning("could not list topics: %s", exc.message)

    # --------------------------------------------------------------------------------- take

    def _takes(self, budget: Budget, now: float) -> list[_Take]:
        """Takes for the lanes that are due, each topic's free workers shared among its due lanes
        (partitions), the first of them in turn, so that no partition waits behind another."""
        due: dict[_Topic, list[_Lane]] = {}
        for lane in self._lanes:
            if lane.next_check <= now and self._can_take(lane, budget, now):
                due.setdefault(lane.topic, []).append(lane)
        # Never negative: take.lua reads a negative longest as "no limit".
        longest_ms = -1 if budget.finish_by is None else max(0, int((budget.finish_by - now) * 1000))
        takes = []
        for topic, lanes in due.items():
            first = topic.turn % len(lanes)
            topic.turn += 1
            free = topic.free
            for left, lane in zip(range(len(lanes), 0, -1), lanes[first:] + lanes[:first], strict=True):
                count = min(topic.config.batch, -(-free // left))  # a fair share, rounded up
                if count <= 0:
                    break
                free -= count
                take_id = "t" + secrets.token_hex(8)  # never a number: those are the counter's tokens
                args: list[Arg] = [
                    count,
                    topic.config.timeout_ms,
                    self.lease_grace_ms,
                    longest_ms,
                    self._run_ms,
                    take_id,
                ]
                keys = [*lane.partition.topic_keys(topic.name), lane.partition.seq, lane.partition.untaken]
                takes.append(_Take(lane, Call(Scripts.take, keys, args), count, take_id))
        return takes

    def _taken(self, take: _Take, reply: Any, now: float) -> None:
        lane, count = take.lane, take.count
        if isinstance(reply, Exception):
            self._redis_error("take", lane, reply)
            lane.next_check = now + self.tick
            # It may have run, its reply lost: undo it at the next passes (a take never sent is harmless).
            lane.undo_later([take.take_id])
            return
        server_now, next_in, dead = int(reply[0]), int(reply[1]), int(reply[2])
        answered = time.monotonic()
        if dead:
            self._dead_for_timeout(lane, reply[-dead:])
            jobs = reply[3:-dead]
        else:
            jobs = reply[3:]
        taken = len(jobs) // 7
        self.counts["taken"] += taken
        # A full batch means more may be due: take again as soon as workers are free.
        lane.next_check = now if taken + dead >= count else now + sleep_for(self.tick, next_in)
        deliveries = []
        topic = lane.topic.name
        for i in range(0, len(jobs), 7):
            job_id, body, attempt, run_at, enqueued_at, token, timeout_ms = jobs[i : i + 7]
            run_at_ms = int(run_at)
            body = _decode_body(body)[0] if body is not None else None
            job = Job(topic, job_id, body, int(attempt), run_at_ms, int(enqueued_at))
            deliveries.append(_Delivery(job, token, lane, int(timeout_ms) / 1000, server_now - run_at_ms, answered))
        if deliveries:
            self._start(lane.topic, deliveries)

    def _dead_for_timeout(self, lane: _Lane, ids: list[str]) -> None:
        """Jobs the take sent to the dead letters: their own timeout is longer than a run can last."""
        topic = lane.topic.name
        self.counts["dead"] += len(ids)
        self.queue.telemetry.count("Dead", topic, len(ids))
        for job_id in ids:
            log.error(
                "%s/%s is dead: its timeout is longer than a consume run can last (%ds); enqueue it again"
                " with a shorter timeout, or raise the consume function's timeout",
                topic,
                job_id,
                self._run_ms // 1000,
                extra={"topic": topic, "id": job_id, "run_s": self._run_ms / 1000},
            )

    @staticmethod
    def _can_take(lane: _Lane, budget: Budget, now: float) -> bool:
        """Whether the lane's topic has a free worker and time to finish a job before the deadline."""
        return lane.topic.free > 0 and budget.fits(lane.topic.config.timeout, now)

    def _start(self, topic: _Topic, deliveries: list[_Delivery]) -> None:
        now = time.monotonic()
        with self._lock:
            for delivery in deliveries:
                delivery.deadline = now + delivery.timeout_s
            topic.running += len(deliveries)
            self._running.update(deliveries)
            self._idle.clear()
        topic.workers.submit(deliveries)

    def _deliver(self, delivery: _Delivery) -> None:
        """In a worker thread: run the target, then report. Whatever happens here, the job gets a
        verdict and its worker is counted free again (``finally``): a slot never leaks, and the loop is
        always woken."""
        job = delivery.job
        started = time.monotonic()
        error: str | None = _NO_VERDICT  # until the target has answered
        kind = RETRY
        try:
            try:
                delivery.lane.topic.target(job, delivery.timeout_s)
                error = None
            except BaseException as exc:  # noqa: BLE001 - any failure of a handler is a failed attempt
                kind = PERMANENT if isinstance(exc, PermanentFailure) else RETRY
                error = _describe(exc)
        finally:
            with self._lock:
                delivery.lane.topic.running -= 1
                self._running.discard(delivery)
                if not self._running:
                    self._idle.set()
                late = delivery.settled
                delivery.settled = True
                if late:
                    self.counts["late_results"] += 1
                elif error is None:
                    self.counts["succeeded"] += 1
                    delivery.lane.acks += [job.id, delivery.token]
                else:
                    self.counts["failed"] += 1
                    delivery.lane.fails += [job.id, delivery.token, error, kind]
        try:
            # After the bookkeeping: a failing telemetry or log handler cannot hold a worker or a job.
            lateness_ms = delivery.late_at_take_ms + (started - delivery.taken) * 1000
            telemetry = self.queue.telemetry
            telemetry.lateness(job.topic, lateness_ms)
            if error is None and not late:  # the common case: a line only when DEBUG is on
                telemetry.count("Delivered", job.topic)
                if log.isEnabledFor(logging.DEBUG):
                    context = _log_context(job, lateness_ms, started)
                    log.debug("%s/%s attempt %d delivered", job.topic, job.id, job.attempt, extra=context)
            elif late:
                log.warning(
                    "%s/%s attempt %d finished after its timeout; result dropped",
                    job.topic,
                    job.id,
                    job.attempt,
                    extra=_log_context(job, lateness_ms, started),
                )
            else:
                telemetry.count("Failed", job.topic)
                log.warning(
                    "%s/%s attempt %d failed: %s",
                    job.topic,
                    job.id,
                    job.attempt,
                    error,
                    extra=_log_context(job, lateness_ms, started) | {"error": error, "permanent": kind == PERMANENT},
                )
        finally:
            # Set only if unset: what this worker did is visible to the pass that follows the loop's clear.
            if not self._wake.is_set():
                self._wake.set()

    def _expire(self, now: float) -> None:
        """Handlers past their timeout are failed attempts now; their threads are left to finish."""
        with self._lock:
            for delivery in self._running:
                if not delivery.settled and delivery.deadline <= now:
                    delivery.settled = True
                    error = f"timed out after {delivery.timeout_s:g}s"
                    delivery.lane.fails += [delivery.job.id, delivery.token, error, RETRY]
                    self.counts["timed_out"] += 1
                    job = delivery.job
                    self.queue.telemetry.count("TimedOut", job.topic)
                    context = {"topic": job.topic, "id": job.id, "attempt": job.attempt, "error": error}
                    log.warning("%s/%s attempt %d %s", job.topic, job.id, job.attempt, error, extra=context)

    # --------------------------------------------------------------------------------- settle

    def _unsettled(self) -> bool:
        with self._lock:
            return any(not delivery.settled for delivery in self._running)

    def _pending(self) -> bool:
        with self._lock:
            return any(lane.acks or lane.fails or lane.untakes for lane in self._lanes)

    def _settlements(self) -> list[tuple[tuple[_Lane, str, list[str]], Call]]:
        """The ack and fail calls for what finished since the last pass, and the untake calls for takes
        whose reply never came (taken off the lanes)."""
        calls = []
        with self._lock:
            for lane in self._lanes:
                keys = lane.partition.topic_keys(lane.topic.name)
                if lane.untakes:
                    untakes, lane.untakes = lane.untakes, []
                    calls.append(
                        ((lane, "untake", untakes), Call(Scripts.untake, [*keys, lane.partition.untaken], untakes))
                    )
                acks, lane.acks = lane.acks, []
                fails, lane.fails = lane.fails, []
                for start in range(0, len(acks), 2 * SETTLE_CHUNK):
                    chunk = acks[start : start + 2 * SETTLE_CHUNK]
                    calls.append(((lane, "ack", chunk), Call(Scripts.ack, keys, chunk)))
                config = lane.topic.config
                for start in range(0, len(fails), 4 * SETTLE_CHUNK):
                    chunk = fails[start : start + 4 * SETTLE_CHUNK]
                    args: list[Any] = [config.retries, config.backoff_csv, *chunk]
                    calls.append(((lane, "fail", chunk), Call(Scripts.fail, keys, args)))
        return calls

    def _settled(self, what: tuple[_Lane, str, list[str]], call: Call, reply: Any) -> None:
        lane, kind, items = what
        if isinstance(reply, Exception):
            self._redis_error(kind, lane, reply)
            with self._lock:  # keep them for the next pass; a lease that expires meanwhile is retried
                if kind == "ack":
                    lane.acks = items + lane.acks
                elif kind == "fail":
                    lane.fails = items + lane.fails
                else:
                    lane.undo_later(items)
            return
        if kind == "ack":
            self.counts["acked"] += int(reply)
        elif kind == "untake":
            self.counts["untaken"] += int(reply)
            if int(reply):
                log.warning(
                    "%s (partition %d): %d jobs of takes whose reply was lost are back in the ready list",
                    lane.topic.name,
                    lane.partition.index,
                    int(reply),
                    extra={"topic": lane.topic.name, "untaken": int(reply)},
                )
        else:
            retried, dead = int(reply[0]), int(reply[1])
            self.counts.update(retried=retried, dead=dead)
            self.queue.telemetry.count("Retried", lane.topic.name, retried)
            self.queue.telemetry.count("Dead", lane.topic.name, dead)

    def _redis_error(self, what: str, lane: _Lane, exc: Exception) -> None:
        self.counts["redis_errors"] += 1
        self.queue.telemetry.count("RedisErrors", lane.topic.name)
        message = exc.message if isinstance(exc, DelayqError) else f"{type(exc).__name__}: {exc}"
        log.warning("%s on %s (partition %d) failed: %s", what, lane.topic.name, lane.partition.index, message)
        if not isinstance(exc, (RedisError, DelayqError)):
            raise exc
