"""Prometheus metrics where no Lambda runs, scraped over HTTP as Prometheus does and read with
prometheus_client's own parser: the local stack with jobs flowing, the folding of topics beyond
DELAYQ_METRICS_TOPICS under "_other", the sweep and consume loops' --metrics-port (Redis errors
included), and ``delayq ui``'s gauge."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from delayq.version import VERSION

from support.local import CLOSED, Stack, base_env, eventually, local_stack, running_process, send, start_module
from support.servers import free_port

pytestmark = pytest.mark.timeout(180)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    answer = send(port, "GET", "/metrics")
    assert answer.status == 200, answer
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4"), answer.headers
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.raw.decode())
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def gauge(port: int, *expected: tuple[str, str, float]) -> Samples | None:
    """A scrape whose ``delayq_jobs`` reads as ``expected`` (topic, state, jobs), or None."""
    samples = scrape(port)
    ok = all(value(samples, "delayq_jobs", topic=topic, state=state) == jobs for topic, state, jobs in expected)
    return samples if ok else None


def topics_of(samples: Samples, name: str) -> set[str]:
    return {dict(labels)["topic"] for sample, labels in samples if sample == name}


def test_the_local_stack_serves_its_metrics_while_jobs_flow(redis_url: str, namespace: str) -> None:
    with local_stack(base_env(namespace, redis_url)) as stack:
        jobs = [{"topic": "example", "delay": 0, "body": n} for n in range(20)]
        jobs += [{"topic": "example", "delay": 3600, "body": n} for n in range(5)]
        jobs += [{"topic": "example-fails", "id": f"f{n}", "delay": 0} for n in range(2)]
        assert stack.request("POST", "/jobs/batch", {"jobs": jobs}).status == 200

        def settled() -> Samples | None:
            samples = scrape(stack.port)
            delivered = value(samples, "delayq_delivered_total", topic="example")
            dead = value(samples, "delayq_dead_total", topic="example-fails")
            return samples if delivered == 20 and dead == 2 else None

        samples = eventually(settled, "20 delivered, 2 dead", timeout=60)
        failed = value(samples, "delayq_failed_total", topic="example-fails", reason="error")
        assert failed == 4  # 1 retry each, then dead
        assert value(samples, "delayq_failed_total", topic="example-fails", reason="timeout") == 0
        assert value(samples, "delayq_retried_total", topic="example-fails") == 2
        assert value(samples, "delayq_failed_total", topic="example", reason="error") == 0
        assert value(samples, "delayq_enqueued_total", topic="example") == 25
        assert value(samples, "delayq_lateness_seconds_count", topic="example") == 20
        assert value(samples, "delayq_lateness_seconds_bucket", topic="example", le="+Inf") == 20
        assert value(samples, "delayq_handler_seconds_count", topic="example") == 20
        assert value(samples, "delayq_build_info", version=VERSION) == 1
        # The gauge is read from Redis at most every 2 s: the next reads see every job settled.
        samples = eventually(lambda: gauge(stack.port, ("example-fails", "dead", 2)), "2 dead in Redis")
        assert value(samples, "delayq_jobs", topic="example", state="delayed") == 5
        assert value(samples, "delayq_jobs", topic="example", state="ready") == 0
        assert value(samples, "delayq_oldest_ready_seconds", topic="example") == 0  # none due
        assert value(samples, "delayq_paused", topic="example") == 0
        assert value(samples, "delayq_redis_errors_total") == 0
        assert value(samples, "process_cpu_seconds_total") is not None
        assert "_other" not in topics_of(samples, "delayq_jobs")

        assert send(stack.port, "POST", "/metrics", "{}", {"Content-Type": "application/json"}).status == 405


def test_topics_beyond_the_limit_are_summed_under_other(redis_url: str, namespace: str) -> None:
    """Six topics holding 1..6 delayed jobs, and two delivering, with DELAYQ_METRICS_TOPICS=3."""
    env = base_env(namespace, redis_url, DELAYQ_METRICS_TOPICS="3")
    with local_stack(env) as stack:
        jobs = [{"topic": f"held-{n}", "delay": 3600} for n in range(1, 7) for _ in range(n)]
        jobs += [{"topic": f"busy-{n}", "delay": 0} for n in range(1, 6) for _ in range(n * 2)]
        assert stack.request("POST", "/jobs/batch", {"jobs": jobs}).status == 200

        def delivered() -> Samples | None:
            samples = scrape(stack.port)
            counted = [v for (name, _), v in samples.items() if name == "delayq_delivered_total"]
            return samples if sum(counted) == 30 else None

        eventually(delivered, "30 delivered", timeout=60)
        samples = eventually(lambda: gauge(stack.port, ("_other", "ready", 0), ("_other", "reserved", 0)), "none due")
        # The gauge: the three topics holding the most jobs still to run by name (receipts are history,
        # not load: busy-5's 10 receipts do not name it), the rest summed.
        assert topics_of(samples, "delayq_jobs") == {"held-6", "held-5", "held-4", "_other"}
        assert value(samples, "delayq_jobs", topic="_other", state="delayed") == 1 + 2 + 3
        assert value(samples, "delayq_jobs", topic="_other", state="done") == 2 + 4 + 6 + 8 + 10
        # The counters: at most three names, whatever else was counted; the sums hold every delivery.
        counted = topics_of(samples, "delayq_delivered_total")
        assert len(counted - {"_other"}) <= 3
        assert len(counted) <= 4
        assert len(topics_of(samples, "delayq_lateness_seconds_count")) <= 4


@contextmanager
def loop(command: str, env: dict[str, str], *args: str) -> Iterator[tuple[Stack, int]]:
    """``python -m delayq <command> --metrics-port <free>``, its output watched, until the block ends."""
    port = free_port()
    process = start_module("delayq", env, command, "--metrics-port", str(port), *args)
    with running_process(process, port, "Prometheus metrics at") as stack:
        yield stack, port


TOPICS = json.dumps({"*": {"target": "python:delayq.local:log_delivery"}})


def test_the_consume_loop_serves_its_own_counts(redis_url: str, namespace: str, queue: Any) -> None:
    env = base_env(namespace, redis_url, DELAYQ_TOPICS=TOPICS)
    with loop("consume", env) as (_, port):
        queue.enqueue_many({"topic": "orders", "delay": 0} for _ in range(12))

        def delivered() -> Samples | None:
            samples = scrape(port)
            return samples if value(samples, "delayq_delivered_total", topic="orders") == 12 else None

        samples = eventually(delivered, "12 delivered", timeout=60)
        assert value(samples, "delayq_lateness_seconds_count", topic="orders") == 12
        eventually(lambda: gauge(port, ("orders", "ready", 0), ("orders", "reserved", 0)), "all gone from Redis")
        assert send(port, "GET", "/").status == 404  # /metrics, and nothing else
        assert send(port, "GET", "/topics").status == 404


def test_the_sweep_loop_serves_metrics_too(redis_url: str, namespace: str, queue: Any) -> None:
    env = base_env(namespace, redis_url, DELAYQ_TOPICS=TOPICS)
    queue.enqueue("orders", {"n": 1}, delay=0.2)
    with loop("sweep", env) as (_, port):
        samples = eventually(lambda: gauge(port, ("orders", "ready", 1)), "the due job moved to ready")
        assert value(samples, "delayq_redis_errors_total") == 0


def test_a_loop_without_redis_counts_its_errors(namespace: str) -> None:
    env = base_env(
        namespace, CLOSED, DELAYQ_TOPICS=json.dumps({"orders": {"target": "python:delayq.local:log_delivery"}})
    )
    with loop("consume", env) as (process, port):
        samples = eventually(
            lambda: (s := scrape(port)) and (value(s, "delayq_redis_errors_total") or 0) >= 2 and s,
            "Redis errors counted",
        )
        assert not topics_of(samples, "delayq_jobs")  # not read: no number beats a wrong one
        assert "delayq_jobs not read" in process.output()


def test_delayq_ui_serves_the_gauge_and_says_it_has_no_counters(redis_url: str, namespace: str, queue: Any) -> None:
    queue.enqueue("orders", {"n": 1}, delay=600)
    port = free_port()
    env = base_env(namespace, redis_url, DELAYQ_TOPICS=TOPICS)
    process = start_module("delayq", env, "ui", "--port", str(port))
    with running_process(process, port, "/metrics serves delayq_jobs") as ui:
        assert "runs no loop" in ui.seen[-1]
        samples = scrape(port)
        assert value(samples, "delayq_jobs", topic="orders", state="delayed") == 1
        assert not topics_of(samples, "delayq_delivered_total")
        assert ("delayq_redis_errors_total", ()) not in samples
