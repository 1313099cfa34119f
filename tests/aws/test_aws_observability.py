"""Observability in Lambda: metrics per topic as EMF (Powertools), JSON log lines with the API's
request id as correlation id, and topic, id and attempt on every delivery line."""

from __future__ import annotations

import importlib
import io
import json
import re
import time
from types import ModuleType
from typing import Any

import pytest

import consume
import enqueue
from delayq import Queue
from delayq.core.loop import Budget
from delayq.core.observability import Telemetry, route_logs_to
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper

from support.events import FakeContext, load_event
from support.recorder import RECORDER
from support.scripts import server_ms

METRICS = {"Enqueued", "Moved", "Delivered", "Failed", "TimedOut", "Retried", "Dead", "LeaseExpired", "RedisErrors"}
DEAD_REDIS = "redis://127.0.0.1:1/0"


def emf_documents(text: str) -> list[dict[str, Any]]:
    docs = []
    for line in text.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            docs.append(json.loads(line))
    return docs


def json_lines(text: str) -> list[dict[str, Any]]:
    lines = []
    for line in text.splitlines():
        if line.startswith("{") and '"_aws"' not in line:
            lines.append(json.loads(line))
    return lines


def log_stream(handler_module: ModuleType) -> io.StringIO:
    """Where the handler's Powertools logger (and the delayq loggers it configured) write, from now."""
    stream = io.StringIO()
    handler_module.logger.registered_handler.setStream(stream)
    return stream


def values(doc: dict[str, Any], metric: str) -> list[float]:
    value = doc.get(metric, [])
    return value if isinstance(value, list) else [value]


def test_telemetry_publishes_per_topic_and_totals(capfd: pytest.CaptureFixture[str]) -> None:
    telemetry = Telemetry(namespace="delayq-test", service="svc")
    telemetry.count("Delivered", "orders", 2)
    telemetry.count("Delivered", "payments")
    telemetry.count("Dead", "payments")
    telemetry.lateness("orders", 3.5)
    telemetry.lateness("payments", -1)  # clock noise is never negative lateness
    telemetry.flush()
    docs = emf_documents(capfd.readouterr().out)
    by_topic = {doc.get("topic"): doc for doc in docs}
    assert set(by_topic) == {"orders", "payments", None}
    assert values(by_topic["orders"], "Delivered") == [2.0]
    assert values(by_topic["orders"], "Lateness") == [3.5]
    assert values(by_topic["payments"], "Lateness") == [0.0]
    assert values(by_topic[None], "Delivered") == [3.0]
    assert values(by_topic[None], "Dead") == [1.0]
    assert sorted(values(by_topic[None], "Lateness")) == [0.0, 3.5]
    for doc in docs:
        (directive,) = doc["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "delayq-test"
        assert doc["service"] == "svc"
        expected = [["topic", "service"]] if "topic" in doc else [["service"]]
        assert directive["Dimensions"] == expected
        units = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
        assert units.get("Lateness", "Milliseconds") == "Milliseconds"
    telemetry.flush()
    assert emf_documents(capfd.readouterr().out) == []  # nothing counted since: nothing published


def test_a_count_without_a_topic_goes_to_the_totals_only(capfd: pytest.CaptureFixture[str]) -> None:
    telemetry = Telemetry(namespace="delayq-test", service="svc")
    telemetry.count("RedisErrors", None, 2)
    telemetry.count("RedisErrors", "orders")
    telemetry.flush()
    docs = {doc.get("topic"): doc for doc in emf_documents(capfd.readouterr().out)}
    assert set(docs) == {"orders", None}
    assert values(docs["orders"], "RedisErrors") == [1.0]
    assert values(docs[None], "RedisErrors") == [3.0]
    assert docs[None]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]
    units = {m["Name"]: m["Unit"] for m in docs[None]["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units == {"RedisErrors": "Count"}


def test_both_loops_count_redis_errors(make_queue: Any, capfd: pytest.CaptureFixture[str]) -> None:
    """A Redis outage raises no Lambda error (the loops log it and carry on), so it must show as a
    metric: service-level for the consumer's reads of the topic index and for the sweeper's calls (one
    per partition); with Redis away from the start, no topic is named, so no call is a topic's."""
    queue: Queue = make_queue(redis_url=DEAD_REDIS, topics={"orders": {"target": RECORDER}}, tick=0.05)
    queue.telemetry = Telemetry(namespace="delayq-test", service="svc")
    consumed = Consumer(queue).run(Budget.of(0.2))
    assert consumed["redis_errors"] > 0
    docs = {doc.get("topic"): doc for doc in emf_documents(capfd.readouterr().out)}
    assert set(docs) == {None}
    assert values(docs[None], "RedisErrors") == [float(consumed["redis_errors"])]

    swept = Sweeper(queue).run(Budget.of(0.2))
    assert swept["redis_errors"] > 0
    docs = {doc.get("topic"): doc for doc in emf_documents(capfd.readouterr().out)}
    assert set(docs) == {None}
    assert values(docs[None], "RedisErrors") == [float(swept["redis_errors"])]


def test_disabled_telemetry_publishes_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    telemetry = Telemetry.disabled()
    telemetry.count("Delivered", "orders")
    telemetry.lateness("orders", 1)
    telemetry.flush()
    assert emf_documents(capfd.readouterr().out) == []


def test_the_consume_loop_counts_deliveries_failures_and_lateness(
    make_queue: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    queue: Queue = make_queue(topics={"*": {"target": RECORDER, "retries": 0}}, tick=0.1)
    queue.telemetry = Telemetry(namespace="delayq-test", service="svc")
    first_run_at_ms = queue.enqueue("ok", {}, id="a").run_at_ms
    queue.enqueue("ok", {}, id="b")
    queue.enqueue("bad", {"fail": True}, id="c")
    started = time.monotonic()
    summary = Consumer(queue).run(Budget.of(0))
    # no job can be later than the time from its run-at to the end of the run (Redis' clock, then ours)
    latest_ms = server_ms(queue.redis) - first_run_at_ms + (time.monotonic() - started) * 1000
    assert summary["succeeded"] == 2
    docs = {doc.get("topic"): doc for doc in emf_documents(capfd.readouterr().out)}
    assert values(docs["ok"], "Delivered") == [2.0]
    assert len(values(docs["ok"], "Lateness")) == 2
    assert all(0 <= ms <= latest_ms for ms in values(docs["ok"], "Lateness")), latest_ms
    assert values(docs["bad"], "Failed") == [1.0]
    assert values(docs["bad"], "Dead") == [1.0]
    assert set(docs[None]) >= {"Delivered", "Failed", "Dead", "Lateness"}


def test_api_requests_log_json_with_the_request_id_and_publish_enqueued(
    handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    importlib.reload(enqueue)
    event = load_event("api/post_jobs")
    response = enqueue.lambda_handler(event, FakeContext())
    assert response["statusCode"] == 201
    docs = emf_documents(capfd.readouterr().out)
    assert [values(doc, "Enqueued") for doc in docs if doc.get("topic") == "orders"] == [[1.0]]

    monkeypatch.setenv("DELAYQ_REDIS_URL", "redis://127.0.0.1:1/0")
    importlib.reload(enqueue)
    logs = log_stream(enqueue)
    response = enqueue.lambda_handler(load_event("api/get_health"), FakeContext())
    assert response["statusCode"] == 503
    lines = json_lines(logs.getvalue())
    warning = next(line for line in lines if "answering 503" in line["message"])
    assert warning["level"] == "WARNING"
    assert warning["correlation_id"] == load_event("api/get_health")["requestContext"]["requestId"]
    assert warning["function_name"] == FakeContext.function_name


def test_delivery_lines_carry_topic_id_and_attempt(
    handler_env: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    importlib.reload(consume)
    consume.logger.setLevel("DEBUG")  # as POWERTOOLS_LOG_LEVEL=DEBUG would in a fresh container
    route_logs_to(consume.logger)
    logs = log_stream(consume)
    consume.queue.enqueue("orders", {"fail": True}, id="o-1")
    consume.queue.enqueue("orders", {}, id="o-2")
    event = load_event("consume") | {"seconds": 0}
    summary = consume.lambda_handler(event, FakeContext())
    assert summary["taken"] == 2
    out = capfd.readouterr().out
    lines = [line for line in json_lines(logs.getvalue()) if line.get("topic") == "orders"]
    by_id = {line["id"]: line for line in lines}
    assert by_id["o-1"]["attempt"] == 1
    assert by_id["o-1"]["level"] == "WARNING"
    assert "planned failure" in by_id["o-1"]["error"]
    assert by_id["o-2"]["attempt"] == 1
    assert by_id["o-2"]["level"] == "DEBUG"
    assert by_id["o-2"]["lateness_ms"] >= 0
    assert {doc.get("topic") for doc in emf_documents(out)} >= {"orders", None}


def test_a_job_too_long_for_any_consume_run_is_dead_and_counted(
    handler_env: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    """In Lambda (a deadline: 60 s here), a job whose own timeout no consume run can last goes dead
    at its first take, with an error line and the Dead metric (what the dead-jobs alarm watches)."""
    importlib.reload(consume)
    logs = log_stream(consume)
    consume.queue.enqueue("orders", {}, id="o-900", timeout=900)
    summary = consume.lambda_handler(load_event("consume") | {"seconds": 0}, FakeContext(60_000))
    assert (summary["taken"], summary["dead"]) == (0, 1)
    docs = {doc.get("topic"): doc for doc in emf_documents(capfd.readouterr().out)}
    assert values(docs["orders"], "Dead") == [1.0]
    assert values(docs[None], "Dead") == [1.0]
    line = next(line for line in json_lines(logs.getvalue()) if line.get("id") == "o-900")
    assert line["level"] == "ERROR"
    assert "longer than a consume run can last" in line["message"]
    info = consume.queue.get("orders", "o-900")
    assert info.state == "dead"
    assert info.last_error is not None
    assert re.fullmatch(r"timeout 900s is longer than a consume run can last \(5[78]s\): .+", info.last_error)
