"""Prometheus metrics where no Lambda runs: served as text at ``/metrics`` by the local stack,
``delayq ui``, and the sweep and consume loops started with ``--metrics-port``.

    delayq_jobs{topic,state}              gauge      jobs in each state (done: receipts), read from Redis at scrape time
    delayq_oldest_ready_seconds{topic}    gauge      how long the job due longest has waited (0: none), the same read
    delayq_paused{topic}                  gauge      1 while the topic is paused, the same read
    delayq_enqueued_total{topic}          counter    jobs created (the API and client of this process)
    delayq_delivered_total{topic}         counter    deliveries whose handler succeeded
    delayq_failed_total{topic,reason}     counter    failed attempts: ``error`` (the handler failed), ``timeout``,
                                                     ``lease_expired`` (a consumer died or stalled; the sweeper's)
    delayq_retried_total{topic}           counter    failed attempts retried after their backoff
    delayq_dead_total{topic}              counter    jobs sent to the dead letters
    delayq_lateness_seconds{topic}        histogram  per delivery: handler start minus run-at (Redis' clock)
    delayq_handler_seconds{topic}         histogram  per delivery: how long its handler ran
    delayq_redis_errors_total             counter    Redis calls of the loops that failed (they carry on)
    delayq_build_info{version}            gauge      1, naming the version that serves the page

The gauges read the queue, so every process that serves them shows the same numbers. The counters and
the histograms are the process's own: ``LoopMetrics`` is the sink of its ``Telemetry``, the one place
the loops and the API count (EMF in Lambda, these here). ``delayq ui`` runs no loop and serves the
gauges only.

At most ``DELAYQ_METRICS_TOPICS`` topics (100) are named; the rest are summed under
``topic="_other"`` (no topic name starts with ``_``), so 10,000 topics do not make 50,000 series. The
gauge names the topics holding the most jobs at each scrape (a gauge may move). The counters name
the busiest topics, by what was counted, when names are given out at a scrape; a name is kept for
the life of the process, and a topic counted under ``_other`` stays there, so that every series only
grows, as a counter must.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import make_wsgi_app
from prometheus_client.process_collector import ProcessCollector

from delayq.core.errors import DelayqError
from delayq.core.job import STATES, TopicStats
from delayq.store.queue import Queue
from delayq.version import VERSION

if TYPE_CHECKING:
    from wsgiref.types import WSGIApplication

log = logging.getLogger("delayq.metrics")

OTHER = "_other"  # the topics beyond the limit, summed: no topic's name starts with "_"
# From 0.5 ms: fine enough for the lateness the README states (p99 of a few ms).
LATENESS_BUCKETS_S = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600
)  # fmt: skip
HANDLER_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
JOBS_MAX_AGE_S = 2.0  # scrapes closer together than this share one read of Redis
# Telemetry's metric -> the counter it adds to, and its reason for failed attempts (the others are
# CloudWatch's only).
COUNTERS = {
    "Enqueued": ("enqueued", None),
    "Delivered": ("delivered", None),
    "Failed": ("failed", "error"),
    "TimedOut": ("failed", "timeout"),
    "LeaseExpired": ("failed", "lease_expired"),
    "Retried": ("retried", None),
    "Dead": ("dead", None),
}
REASONS = ("error", "timeout", "lease_expired")
HELP = {
    "enqueued": "Jobs created, counted by this process",
    "delivered": "Deliveries whose handler succeeded, counted by this process",
    "failed": "Failed attempts by reason (error, timeout, lease_expired), counted by this process",
    "retried": "Failed attempts retried after their backoff, counted by this process",
    "dead": "Jobs sent to the dead letters, counted by this process",
}


# ------------------------------------------------------------------------------------ the loops' counts


@dataclass(slots=True)
class _Histogram:
    """Observations per bucket of ``bounds`` (the last: +Inf), and their sum."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1  # le: a value on a bound is in its bucket
        self.total += seconds

    def add(self, other: _Histogram) -> None:
        self.counts = [mine + theirs for mine, theirs in zip(self.counts, other.counts, strict=True)]
        self.total += other.total

    def cumulative(self) -> list[tuple[str, float]]:
        out, total = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            out.append((_bound(bound), float(total)))
        return out


@dataclass(slots=True)
class _Counted:
    """One topic's counts (or the sum of several): per counter (a failed attempt's as ``failed:reason``),
    lateness and handler time per bucket."""

    counters: dict[str, float] = field(default_factory=dict)
    lateness: _Histogram = field(default_factory=lambda: _Histogram(LATENESS_BUCKETS_S))
    handler: _Histogram = field(default_factory=lambda: _Histogram(HANDLER_BUCKETS_S))

    @property
    def activity(self) -> float:
        return sum(self.counters.values()) + sum(self.lateness.counts)

    def add(self, other: _Counted) -> None:
        for name, value in other.counters.items():
            self.counters[name] = self.counters.get(name, 0.0) + value
        self.lateness.add(other.lateness)
        self.handler.add(other.handler)


class LoopMetrics:
    """The loops' counters and lateness histogram (the ``Telemetry`` sink of a process), folded to at
    most ``limit`` named topics at each scrape. Thread-safe; a count is a dict update under a lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._counted: dict[str, _Counted] = {}
        self._named: set[str] = set()  # topics with a series of their own, for the life of the process
        self._redis_errors = 0.0

    # the Telemetry sink

    def count(self, metric: str, topic: str | None, value: float) -> None:
        if metric == "RedisErrors":
            with self._lock:
                self._redis_errors += value
            return
        counter = COUNTERS.get(metric)
        if counter is None or topic is None:
            return
        name = counter[0] if counter[1] is None else f"{counter[0]}:{counter[1]}"
        with self._lock:
            counters = self._topic(topic).counters
            counters[name] = counters.get(name, 0.0) + value

    def lateness(self, topic: str, ms: float) -> None:
        with self._lock:
            self._topic(topic).lateness.observe(ms / 1000)

    def handled(self, topic: str, ms: float) -> None:
        with self._lock:
            self._topic(topic).handler.observe(ms / 1000)

    def _topic(self, topic: str) -> _Counted:
        counted = self._counted.get(topic)
        if counted is None:
            counted = self._counted[topic] = _Counted()
        return counted

    # the scrape

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            series = self._series()
            errors = self._redis_errors
        for name in ("enqueued", "delivered", "failed", "retried", "dead"):
            if name == "failed":
                family = CounterMetricFamily(f"delayq_{name}", HELP[name], labels=["topic", "reason"])
                for topic, counted in series:
                    for reason in REASONS:
                        family.add_metric([topic, reason], counted.counters.get(f"{name}:{reason}", 0.0))
            else:
                family = CounterMetricFamily(f"delayq_{name}", HELP[name], labels=["topic"])
                for topic, counted in series:
                    family.add_metric([topic], counted.counters.get(name, 0.0))
            yield family
        lateness = HistogramMetricFamily(
            "delayq_lateness_seconds",
            "Per delivery by this process: handler start minus run-at, on Redis' clock",
            labels=["topic"],
        )
        handler = HistogramMetricFamily(
            "delayq_handler_seconds", "Per delivery by this process: how long its handler ran", labels=["topic"]
        )
        for topic, counted in series:
            lateness.add_metric([topic], counted.lateness.cumulative(), counted.lateness.total)
            handler.add_metric([topic], counted.handler.cumulative(), counted.handler.total)
        yield lateness
        yield handler
        yield CounterMetricFamily(
            "delayq_redis_errors", "Redis calls of this process's loops that failed", value=errors
        )

    def _series(self) -> list[tuple[str, _Counted]]:
        """(topic label, counts) of each series now, names given out first (under the lock). Names go
        to the busiest topics waiting while any is left; a topic shown under ``_other`` was shown there
        because none was, and stays there: every series only grows."""
        free = self.limit - len(self._named)
        if free > 0:
            waiting = [topic for topic in self._counted if topic not in self._named]
            self._named.update(sorted(waiting, key=lambda t: (-self._counted[t].activity, t))[:free])
        series = [(topic, counted) for topic, counted in sorted(self._counted.items()) if topic in self._named]
        if len(series) < len(self._counted):
            other = _Counted()
            for topic, counted in self._counted.items():
                if topic not in self._named:
                    other.add(counted)
            series.append((OTHER, other))
        return series


def _bound(seconds: float) -> str:
    return "+Inf" if seconds == float("inf") else repr(float(seconds))


# ------------------------------------------------------------------------------------ jobs, from Redis


class JobsGauge:
    """``delayq_jobs{topic,state}``, read from Redis at scrape time: every topic's counts, in round
    trips of ``queue.STATS_CALLS`` script calls, at most once per ``JOBS_MAX_AGE_S`` however often scraped."""

    def __init__(self, queue: Queue, limit: int) -> None:
        self.queue = queue
        self.limit = limit
        self._lock = threading.Lock()
        self._read_at = -float("inf")
        self._stats: list[TopicStats] | None = None

    def collect(self) -> Iterator[Metric]:
        stats = self._fresh()
        if stats is None:
            return
        family = GaugeMetricFamily(
            "delayq_jobs", "Jobs of each topic in each state, read from Redis", labels=["topic", "state"]
        )
        oldest = GaugeMetricFamily(
            "delayq_oldest_ready_seconds",
            "How long the job of the topic due longest has waited to start (0: none due), read from Redis",
            labels=["topic"],
        )
        paused = GaugeMetricFamily(
            "delayq_paused", "1 while the topic is paused (for _other: how many are), read from Redis", labels=["topic"]
        )
        # The busiest by the jobs still to run: receipts are history, not load.
        ranked = sorted(stats, key=lambda s: (s.done - s.jobs, s.topic))
        for topic in ranked[: self.limit]:
            for state in STATES:
                family.add_metric([topic.topic, state], getattr(topic, state))
            oldest.add_metric([topic.topic], topic.oldest_ready_ms / 1000)
            paused.add_metric([topic.topic], int(topic.paused))
        rest = ranked[self.limit :]
        if rest:
            for state in STATES:
                family.add_metric([OTHER, state], sum(getattr(topic, state) for topic in rest))
            oldest.add_metric([OTHER], max(topic.oldest_ready_ms for topic in rest) / 1000)
            paused.add_metric([OTHER], sum(topic.paused for topic in rest))
        yield family
        yield oldest
        yield paused

    def _fresh(self) -> list[TopicStats] | None:
        """The topics' stats, read again when the last read is older than ``JOBS_MAX_AGE_S``; None
        when Redis does not answer (the scrape then has no ``delayq_jobs``: no number beats a wrong one)."""
        with self._lock:
            if time.monotonic() - self._read_at >= JOBS_MAX_AGE_S:
                try:
                    self._stats = read_stats(self.queue)
                except DelayqError as exc:
                    log.warning("delayq_jobs not read: %s", exc.message)
                    self._stats = None
                self._read_at = time.monotonic()
            return self._stats


def read_stats(queue: Queue) -> list[TopicStats]:
    """Every configured topic and every topic that ever had a job, with its counts: a topic whose jobs
    are all gone reads 0 (its series falls to 0, and does not vanish)."""
    return queue.stats_of(sorted(set(queue.settings.topics.named) | queue.known_topics()))


# ------------------------------------------------------------------------------------ the page


class BuildInfo:
    """``delayq_build_info{version}``: 1, naming the version that serves the page."""

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("delayq_build_info", "The delayq version serving these metrics", labels=["version"])
        info.add_metric([VERSION], 1)
        yield info


class Metrics:
    """The ``/metrics`` of one process: the jobs gauges, and with ``loops`` the loops' counters."""

    def __init__(self, queue: Queue, loops: LoopMetrics | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BuildInfo())
        self.registry.register(JobsGauge(queue, queue.settings.metrics_topics))
        if loops is not None:
            self.registry.register(loops)
        ProcessCollector(registry=self.registry)
        self.app: WSGIApplication = make_wsgi_app(self.registry)


__all__ = ["OTHER", "BuildInfo", "JobsGauge", "LoopMetrics", "Metrics"]
