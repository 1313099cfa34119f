"""The loops' Prometheus counters (delayq.surfaces.metrics.LoopMetrics): what Telemetry counts lands in the
right counter, at most the limit of topics are named and the rest summed under "_other", and every
series only grows from one scrape to the next, whoever gets a name when."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from delayq.core.observability import Telemetry
from delayq.surfaces.metrics import REASONS, LoopMetrics


def scrape(metrics: LoopMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_telemetry_counts_into_the_counters_and_the_histogram() -> None:
    metrics = LoopMetrics(limit=10)
    telemetry = Telemetry.disabled(sink=metrics)
    for _ in range(3):
        telemetry.count("Delivered", "orders")
    telemetry.count("Failed", "orders")
    telemetry.count("TimedOut", "orders")
    telemetry.count("LeaseExpired", "orders", 2)
    telemetry.count("Dead", "orders", 2)
    telemetry.count("Retried", "orders", 2)
    telemetry.count("Enqueued", "orders", 50)
    telemetry.count("Moved", "orders", 9)  # CloudWatch's only
    telemetry.count("RedisErrors", None)
    telemetry.count("RedisErrors", "orders")
    for ms in (0.4, 3, 7, 70, 4000):
        telemetry.lateness("orders", ms)
    for ms in (2, 20):
        telemetry.handled("orders", ms)
    samples = scrape(metrics)
    assert value(samples, "delayq_enqueued_total", topic="orders") == 50
    assert value(samples, "delayq_delivered_total", topic="orders") == 3
    failed = {reason: value(samples, "delayq_failed_total", topic="orders", reason=reason) for reason in REASONS}
    assert failed == {"error": 1, "timeout": 1, "lease_expired": 2}
    assert value(samples, "delayq_retried_total", topic="orders") == 2
    assert value(samples, "delayq_dead_total", topic="orders") == 2
    assert value(samples, "delayq_redis_errors_total") == 2
    assert value(samples, "delayq_lateness_seconds_count", topic="orders") == 5
    assert value(samples, "delayq_lateness_seconds_sum", topic="orders") == 4.0804
    assert value(samples, "delayq_lateness_seconds_bucket", topic="orders", le="0.0005") == 1  # resolves 0.5 ms
    assert value(samples, "delayq_lateness_seconds_bucket", topic="orders", le="0.005") == 2
    assert value(samples, "delayq_handler_seconds_count", topic="orders") == 2
    assert value(samples, "delayq_handler_seconds_bucket", topic="orders", le="0.0025") == 1
    assert not [name for name, _ in samples if name.startswith("delayq_moved")]
    assert value(samples, "delayq_lateness_seconds_bucket", topic="orders", le="0.1") == 4
    assert value(samples, "delayq_lateness_seconds_bucket", topic="orders", le="5.0") == 5
    assert value(samples, "delayq_lateness_seconds_bucket", topic="orders", le="+Inf") == 5
    assert not any(labels == (("topic", "_other"),) for _, labels in samples)  # nothing to fold


def test_beyond_the_limit_the_busiest_are_named_and_the_rest_summed() -> None:
    metrics = LoopMetrics(limit=2)
    for topic, deliveries in {"a": 5, "b": 50, "c": 20, "d": 1}.items():
        metrics.count("Delivered", topic, deliveries)
        metrics.lateness(topic, 10)
    samples = scrape(metrics)
    topics = {dict(labels)["topic"] for name, labels in samples if name == "delayq_delivered_total"}
    assert topics == {"b", "c", "_other"}
    assert value(samples, "delayq_delivered_total", topic="b") == 50
    assert value(samples, "delayq_delivered_total", topic="_other") == 6
    assert value(samples, "delayq_lateness_seconds_count", topic="_other") == 2


def test_every_series_only_grows_whoever_is_named_when() -> None:
    metrics = LoopMetrics(limit=3)
    metrics.count("Delivered", "a", 10)
    first = scrape(metrics)  # a is named; two names are left
    metrics.count("Delivered", "b", 7)
    metrics.count("Delivered", "c", 3)
    metrics.count("Delivered", "d", 1000)  # the busiest, but the names are given out busiest first at a scrape
    second = scrape(metrics)
    assert value(second, "delayq_delivered_total", topic="d") == 1000
    assert value(second, "delayq_delivered_total", topic="b") == 7
    assert value(second, "delayq_delivered_total", topic="_other") == 3  # c: no name left
    metrics.count("Delivered", "c", 1)
    metrics.count("Delivered", "e", 2)
    third = scrape(metrics)
    assert value(third, "delayq_delivered_total", topic="_other") == 6
    for before, after in ((first, second), (second, third)):
        for key, sample in before.items():
            if key[0].endswith("_total") and key in after:
                assert after[key] >= sample, key
