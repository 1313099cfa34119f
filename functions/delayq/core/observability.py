"""Observability: the one place the loops count, for CloudWatch EMF in Lambda and for Prometheus
outside it (``delayq.surfaces.metrics``); and the core's logs as Powertools JSON lines.

The core logs through the standard ``logging`` module (``delayq.*`` loggers: plain text in the local
stack); ``route_logs_to(logger)`` hands them to a Powertools ``Logger``, so in Lambda every line is
JSON with the request's correlation id, and delivery lines carry ``topic``, ``id`` and ``attempt``.

Each flush prints one EMF document per topic (dimensions ``service`` and ``topic``) and one for the
totals (dimension ``service`` only: what the alarms watch). A count made without a topic (``None``)
goes into the totals only. Metrics, in namespace ``POWERTOOLS_METRICS_NAMESPACE`` (default ``delayq``):

    Enqueued, Moved, Delivered, Failed, TimedOut, Retried, Dead, LeaseExpired   Count
    RedisErrors                                                                  Count
    Lateness                                                                     Milliseconds

``RedisErrors`` counts the Redis calls of the sweep and consume loops that failed: the loops log them
and carry on (the next pass retries), so without it a Redis outage would raise no Lambda error, and
produce no dead letters and no lateness data either. Per topic where the call was for one topic (a
consumer's take, ack or fail); service-level only for the sweeper's calls (one per partition, for all
its topics) and the consumer's topic listing.

``Lateness`` is, per delivery, the handler's start minus the job's run-at, measured on Redis' clock
(the server time at take plus the time until the handler started), so machines' clocks do not enter.

A ``Queue`` carries a ``Telemetry`` with EMF disabled unless given one: only the Lambda handlers
publish EMF. Outside Lambda, a ``Telemetry`` given a Prometheus sink (``delayq.surfaces.metrics.LoopMetrics``)
feeds it every count and lateness sample as they happen.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_NAMESPACE = "delayq"
FLUSH_EVERY_S = 10.0
_COUNT = MetricUnit.Count
_MS = MetricUnit.Milliseconds


class Sink(Protocol):
    """Where a ``Telemetry`` also sends each count and lateness sample as it happens (Prometheus)."""

    def count(self, metric: str, topic: str | None, value: float) -> None: ...

    def lateness(self, topic: str, ms: float) -> None: ...

    def handled(self, topic: str, ms: float) -> None: ...


class Telemetry:
    """Counters and lateness samples per topic, until ``flush`` (EMF, when ``enabled``), and as they
    happen to ``sink``. Thread-safe."""

    def __init__(
        self,
        *,
        namespace: str | None = None,
        service: str | None = None,
        enabled: bool = True,
        sink: Sink | None = None,
    ) -> None:
        self.enabled = enabled
        self.sink = sink
        self.namespace = namespace or os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or DEFAULT_NAMESPACE
        self.service = service or os.environ.get("POWERTOOLS_SERVICE_NAME") or "delayq"
        self._counts: defaultdict[str | None, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._lateness: defaultdict[str, list[float]] = defaultdict(list)
        self._lock = threading.Lock()
        self._flushed = time.monotonic()

    @classmethod
    def disabled(cls, sink: Sink | None = None) -> Telemetry:
        """No EMF (outside Lambda); ``sink`` still gets every count."""
        return cls(enabled=False, sink=sink)

    def count(self, metric: str, topic: str | None, value: float = 1) -> None:
        """Adds ``value`` to ``metric`` of ``topic`` (and so to the totals); ``None``: the totals only."""
        if not value:
            return
        if self.enabled:
            with self._lock:
                self._counts[topic][metric] += value
        if self.sink is not None:
            self.sink.count(metric, topic, value)

    def lateness(self, topic: str, ms: float) -> None:
        """A delivery's lateness: handler start minus run-at, in ms (Redis' clock)."""
        if self.enabled:
            with self._lock:
                self._lateness[topic].append(max(0.0, ms))
        if self.sink is not None:
            self.sink.lateness(topic, max(0.0, ms))

    def handled(self, topic: str, ms: float) -> None:
        """How long a delivery's handler ran until it answered, in ms (one past its timeout too, once it
        answers). The sink's only: CloudWatch has the Lambda's own duration."""
        if self.sink is not None:
            self.sink.handled(topic, max(0.0, ms))

    def flush_due(self, every_s: float = FLUSH_EVERY_S) -> None:
        """Flushes if the last flush is older than ``every_s``: long loops publish as they go."""
        if self.enabled and time.monotonic() - self._flushed >= every_s:
            self.flush()

    def flush(self) -> None:
        """Prints the EMF documents for everything counted since the last flush, and forgets it."""
        if not self.enabled:
            return
        with self._lock:
            counts, self._counts = self._counts, defaultdict(lambda: defaultdict(float))
            lateness, self._lateness = self._lateness, defaultdict(list)
            self._flushed = time.monotonic()
        totals: defaultdict[str, float] = defaultdict(float)
        for topic in sorted(topic for topic in counts.keys() | lateness.keys() if topic is not None):
            self._publish(counts.get(topic, {}), lateness.get(topic, []), topic)
        for per_topic in counts.values():
            for metric, value in per_topic.items():
                totals[metric] += value
        every_lateness = [ms for samples in lateness.values() for ms in samples]
        if totals or every_lateness:
            self._publish(totals, every_lateness, None)

    def _publish(self, counts: dict[str, float], lateness: list[float], topic: str | None) -> None:
        metrics = EphemeralMetrics(namespace=self.namespace, service=self.service)
        if topic is not None:
            metrics.add_dimension("topic", topic)
        for metric, value in sorted(counts.items()):
            metrics.add_metric(name=metric, unit=_COUNT, value=value)
        for ms in lateness:  # Powertools prints a document at every 100 values of one metric
            metrics.add_metric(name="Lateness", unit=_MS, value=round(ms, 3))
        if metrics.metric_set:
            metrics.flush_metrics()

    def flushed(self, handler: F) -> F:
        """Decorates a Lambda handler: whatever it counted is published when it returns or raises."""

        @functools.wraps(handler)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            finally:
                self.flush()

        return wrapper  # type: ignore[return-value]


def route_logs_to(logger: Logger) -> None:
    """Sends the ``delayq.*`` loggers' lines through ``logger``'s handler and JSON formatter."""
    logging.getLogger("delayq")
    copy_config_to_registered_loggers(source_logger=logger, include={"delayq"})
