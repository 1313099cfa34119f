"""The jobs being handed over: each started on the worker pool at its run-at, given the topic's
timeout, and judged once (the handler's answer, or its timeout, whichever comes first). A verdict
goes into its lane's pending settlements, which the consumer's next pass sends."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from delayq.core.activity import Tally
from delayq.core.errors import PermanentFailure, RetryAfter
from delayq.core.job import Job, encode_result
from delayq.core.loop import pause
from delayq.core.observability import Telemetry
from delayq.store.calls import Ack, Failure

from .lanes import Lane, Topic
from .workers import Workers

log = logging.getLogger("delayq.consume")

MAX_ERROR_CHARS = 2000  # of a failure, as the job's last error
_NO_VERDICT = "the consumer failed before the handler answered (see its log)"


@dataclass(eq=False)
class Delivery:
    job: Job
    token: str
    lane: Lane
    timeout_s: float
    late_at_take_ms: int  # Redis' time at take minus the job's run-at (negative if taken ahead)
    taken: float  # monotonic time the take was answered
    start_at: float  # monotonic time it may start: by then Redis' clock has reached its run-at
    deadline: float = 0.0
    settled: bool = False  # the first verdict wins: the handler's result or the timeout
    started_at_ms: int | None = None  # when its handler started, by Redis' clock (None: not yet)

    def __str__(self) -> str:
        return f"the delivery of {self.job.topic}/{self.job.id}"


def describe(exc: BaseException) -> str:
    """A failure as a job's last error: ``Type: message``, cut to ``MAX_ERROR_CHARS``."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - an exception whose message cannot be read is still a failure
        text = f"{type(exc).__name__} (its message could not be read)"
    return text[:MAX_ERROR_CHARS]


def started_at_ms(job: Job, lateness_ms: float) -> int:
    """When a job's handler started, by Redis' clock: its run-at plus its lateness, which is Redis'
    time at the take (not this machine's clock) plus what passed here since."""
    return job.run_at_ms + round(lateness_ms)


def _log_context(job: Job, lateness_ms: float, started: float) -> dict[str, Any]:
    """The fields of a delivery's log line."""
    return {
        "topic": job.topic,
        "id": job.id,
        "attempt": job.attempt,
        "lateness_ms": round(lateness_ms, 1),
        "duration_ms": round((time.monotonic() - started) * 1000, 1),
    }


class Deliveries:
    """The deliveries in flight, on a pool of ``size`` worker threads. ``wake`` is set when a handler
    finishes (the loop's cue for a pass), ``idle`` while none runs."""

    def __init__(
        self, lock: threading.Lock, counts: Counter[str], telemetry: Telemetry, *, tally: Tally, size: int
    ) -> None:
        self.lock = lock
        self.counts = counts
        self.telemetry = telemetry
        self.tally = tally
        self.running: set[Delivery] = set()
        self.workers = Workers("delayq-worker", size, self._deliver)
        self.wake = threading.Event()
        self.idle = threading.Event()
        self.idle.set()
        self._reporting = 0  # settled deliveries whose metrics and log lines are still being written
        self._reported = threading.Event()  # set while none is
        self._reported.set()

    def start(self, topic: Topic, deliveries: list[Delivery]) -> None:
        """Hands ``deliveries``, all of one lane, to the workers; each has its timeout from its start.
        Those taken ahead go first, each with a thread of its own, which waits for its start: they are
        not run in turn behind the others, and the others not behind them. A topic whose target waits
        on the network gives each a thread at once: one would only wait behind another's answer."""
        now = time.monotonic()
        waiting = [delivery for delivery in deliveries if delivery.start_at > now]
        if waiting:
            deliveries = waiting + [delivery for delivery in deliveries if delivery.start_at <= now]
        with self.lock:
            for delivery in deliveries:
                delivery.deadline = max(now, delivery.start_at) + delivery.timeout_s
            topic.running += len(deliveries)
            topic.share.running += len(deliveries)
            deliveries[0].lane.running += len(deliveries)
            self.running.update(deliveries)
            self.idle.clear()
        threads = len(deliveries) if topic.waits else len(waiting) + (len(deliveries) > len(waiting))
        self.workers.submit(deliveries, threads=threads)

    def deadlines(self) -> list[float]:
        """When each delivery not yet judged times out."""
        with self.lock:
            return [delivery.deadline for delivery in self.running if not delivery.settled]

    def unsettled(self) -> bool:
        with self.lock:
            return any(not delivery.settled for delivery in self.running)

    def expire(self, now: float) -> None:
        """Handlers past their timeout are failed attempts now; their threads are left to finish."""
        with self.lock:
            for delivery in self.running:
                if not delivery.settled and delivery.deadline <= now:
                    delivery.settled = True
                    error = f"timed out after {delivery.timeout_s:g}s"
                    job = delivery.job
                    failure = Failure(
                        job.id, delivery.token, error, started_at_ms=delivery.started_at_ms, outcome="timeout"
                    )
                    delivery.lane.pending.fails.append(failure)
                    self.counts["timed_out"] += 1
                    self.telemetry.count("TimedOut", job.topic)
                    context = {"topic": job.topic, "id": job.id, "attempt": job.attempt, "error": error}
                    log.warning("%s/%s attempt %d %s", job.topic, job.id, job.attempt, error, extra=context)

    def shutdown(self, report_wait_s: float) -> None:
        """Stops the workers, and waits up to ``report_wait_s`` for the last verdicts' metrics and logs."""
        self.workers.shutdown()
        self._reported.wait(report_wait_s)

    def _deliver(self, delivery: Delivery) -> None:
        """In a worker thread: run the target, then report. Whatever happens here, the job gets a
        verdict and its worker is counted free again (``finally``): a slot never leaks, and the loop is
        always woken."""
        job = delivery.job
        started = time.monotonic()
        while started < delivery.start_at:  # taken ahead of its run-at
            pause(delivery.start_at - started)
            started = time.monotonic()
        lateness_ms = delivery.late_at_take_ms + (started - delivery.taken) * 1000
        delivery.started_at_ms = started_at_ms(job, lateness_ms)
        error: str | None = _NO_VERDICT  # until the target has answered
        result = ""
        permanent = False
        retry_after_ms = 0
        try:
            try:
                result = encode_result(delivery.lane.topic.target(job, delivery.timeout_s))
                error = None
            except BaseException as exc:  # noqa: BLE001 - any failure of a handler is a failed attempt
                permanent = isinstance(exc, PermanentFailure)
                retry_after_ms = exc.wait_ms if isinstance(exc, RetryAfter) else 0
                error = describe(exc)
        finally:
            late = self._judged(
                delivery, lateness_ms, error=error, result=result, permanent=permanent, retry_after_ms=retry_after_ms
            )
        try:
            # After the bookkeeping: a failing telemetry or log handler cannot hold a worker or a job.
            self.telemetry.lateness(job.topic, lateness_ms)
            self.telemetry.handled(job.topic, (time.monotonic() - started) * 1000)
            if error is None and not late:  # the common case: a line only when DEBUG is on
                self.telemetry.count("Delivered", job.topic)
                if log.isEnabledFor(logging.DEBUG):
                    context = _log_context(job, lateness_ms, started)
                    log.debug("%s/%s attempt %d delivered", job.topic, job.id, job.attempt, extra=context)
            else:
                self._report(job, _log_context(job, lateness_ms, started), error, permanent=permanent, late=late)
        finally:
            self._reported_one()

    def _judged(
        self,
        delivery: Delivery,
        lateness_ms: float,
        *,
        error: str | None,
        result: str,
        permanent: bool,
        retry_after_ms: int,
    ) -> bool:
        """The handler answered: its worker is free, and its verdict goes to the lane's settlements
        unless its timeout came first (then True: a late result, dropped). ``result``: a success's, as
        its receipt keeps it (``encode_result``)."""
        job, started = delivery.job, started_at_ms(delivery.job, lateness_ms)
        self.tally.started(job.topic, lateness_ms, started)
        with self.lock:
            self._not_running(delivery)
            late = delivery.settled
            delivery.settled = True
            self._reporting += 1
            self._reported.clear()
            if late:
                self.counts["late_results"] += 1
            elif error is None:
                self.counts["succeeded"] += 1
                delivery.lane.pending.ack(Ack(job.id, delivery.token, started, result))
            else:
                self.counts["failed"] += 1
                failure = Failure(job.id, delivery.token, error, permanent, retry_after_ms, started)
                delivery.lane.pending.fails.append(failure)
        return late

    def _not_running(self, delivery: Delivery) -> None:
        """With the lock held: the delivery's worker is free again."""
        delivery.lane.topic.running -= 1
        delivery.lane.topic.share.running -= 1
        delivery.lane.running -= 1
        self.running.discard(delivery)
        if not self.running:
            self.idle.set()

    def _reported_one(self) -> None:
        """A delivery's metrics and log lines are written: the end of a run may flush them now, and the
        loop is woken."""
        with self.lock:
            self._reporting -= 1
            if not self._reporting:
                self._reported.set()
        # Set only if unset: what this worker did is visible to the pass that follows the loop's clear.
        if not self.wake.is_set():
            self.wake.set()

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
        self.telemetry.count("Failed", job.topic)
        extra = context | {"error": error, "permanent": permanent}
        log.warning("%s/%s attempt %d failed: %s", job.topic, job.id, job.attempt, error, extra=extra)
