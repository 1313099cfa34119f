"""Unknown routes, unknown topics, ``GET /health`` and Redis being down: always JSON, never a trace."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from delayq.store.queue import Queue
from delayq.surfaces.api import HealthOut

from support.api import ANY_FIELD, ERROR_KEYS, NO_BODY, Api, assert_model, check_reply
from support.events import EVENTS, load_event
from support.recorder import RECORDER

DOWN_URL = "redis://127.0.0.1:1/0"


@pytest.fixture
def named_only(handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str):
    """Topics ``orders`` and ``payments`` only: no ``*`` entry."""
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps({"orders": {"target": RECORDER}, "payments": {"target": RECORDER}}))
    api = Api.start(redis_client, namespace)
    api.create("orders", "seed", delay=600)
    return api


@pytest.fixture
def down(handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str):
    """The handler pointed at a port where no Redis answers."""
    monkeypatch.setenv("DELAYQ_REDIS_URL", DOWN_URL)
    return Api.start(redis_client, namespace)


# ------------------------------------------------------------------------------------------ routes


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/nope"),
        ("GET", "/jobs/orders"),
        ("POST", "/jobs/orders"),
        ("GET", "/jobs/orders/a/b"),
        ("GET", "/topic"),
        ("OPTIONS", "/nope"),
    ],
)
def test_unknown_path_is_404_json(api: Api, method: str, path: str):
    api.create("orders", "seed", delay=60)
    body = {"topic": "orders", "delay": 1} if method in ("POST", "PUT") else None
    reply = api.refused(404, ANY_FIELD, method, path, NO_BODY if body is None else body, error="not_found")
    assert reply.field is None
    assert "Allow" not in reply.headers


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/jobs", "OPTIONS, POST"),
        ("DELETE", "/jobs", "OPTIONS, POST"),
        ("POST", "/jobs/orders/a", "DELETE, GET, HEAD, OPTIONS, PATCH, PUT"),
        ("PUT", "/topics/orders", "GET, HEAD, OPTIONS"),
        ("POST", "/health", "GET, HEAD, OPTIONS"),
        ("GET", "/topics/orders/dead/replay", "OPTIONS, POST"),
        ("PUT", "/topics/orders/jobs", "DELETE, GET, HEAD, OPTIONS, POST"),
        ("GET", "/topics/orders/pause", "OPTIONS, POST"),
        ("DELETE", "/topics", "GET, HEAD, OPTIONS"),
        ("PATCH", "/topics/orders/dead", "DELETE, GET, HEAD, OPTIONS"),
    ],
)
def test_a_known_path_with_another_method_is_405_naming_the_allowed(api: Api, method: str, path: str, allow: str):
    api.create("orders", "seed", delay=60)
    body = {"topic": "orders", "delay": 1} if method in ("POST", "PUT") else None
    reply = api.refused(405, None, method, path, NO_BODY if body is None else body, error="method_not_allowed")
    assert reply.headers["Allow"] == allow, reply.headers
    assert allow in reply.json["message"], reply


# ------------------------------------------------------------------------------------------ unknown topics


def test_unknown_topic_without_a_wildcard_is_422_naming_topic(named_only: Api):
    api = named_only
    api.refused(422, "topic", "POST", "/jobs", {"topic": "nope", "id": "a", "delay": 5}, error="invalid")
    api.refused(422, "topic", "PUT", "/jobs/nope/a", {"delay": 5}, error="invalid")
    assert api.create("payments", "fine")["id"] == "fine"


def test_unknown_topic_in_a_batch_is_a_422_item(named_only: Api):
    reply = named_only.post("/jobs/batch", {"jobs": [{"topic": "nope", "id": "a"}, {"topic": "orders", "id": "b"}]})
    assert reply.status == 200, reply
    results = reply.json["results"]
    assert [r["status"] for r in results] == [422, 201]
    assert results[0]["error"]["field"] == "topic"
    assert named_only.get("/jobs/nope/a").status == 404
    assert named_only.job("orders", "b")["state"] == "ready"


def test_unknown_topic_refused_in_an_empty_namespace_writes_nothing(
    handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str
):
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps({"orders": {"target": RECORDER}}))
    api = Api.start(redis_client, namespace)
    assert api.post("/jobs", {"topic": "nope"}).status == 422
    assert api.post("/jobs/batch", {"jobs": [{"topic": "nope"}]}).json["results"][0]["status"] == 422
    assert api.snapshot() == {}


# ------------------------------------------------------------------------------------------ health


def test_health_ok(api: Api):
    reply = api.get("/health")
    assert (reply.status, reply.json) == (200, {"status": "ok"})
    assert_model(HealthOut, reply.json)


def test_health_is_503_when_redis_does_not_answer(down: Api):
    reply = down.get("/health", error_shape=False)
    assert reply.status == 503, reply
    assert isinstance(reply.json, dict)
    assert reply.json.get("status") in ("unavailable", 503), reply


def test_another_partition_count_than_the_namespaces_is_a_500_naming_it(
    handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str
):
    """A deployment whose DELAYQ_PARTITIONS differs from the count the namespace was made with would
    write jobs nobody consumes: every route that touches Redis refuses, naming the setting, and
    writes nothing (the fault is the deployment's, not the caller's: a 500, with no trace)."""
    Queue.from_env().enqueue("orders", {"n": 1}, id="seed", delay=600)  # the namespace: 1 partition
    monkeypatch.setenv("DELAYQ_PARTITIONS", "3")
    api = Api.start(redis_client, namespace)
    for method, path, body in (
        ("POST", "/jobs", {"topic": "orders", "id": "b", "delay": 1}),
        ("GET", "/jobs/orders/seed", NO_BODY),
        ("GET", "/health", NO_BODY),
    ):
        reply = api.refused(500, None, method, path, body, error="config")
        assert "DELAYQ_PARTITIONS is 3, but namespace" in reply.json["message"], reply
        assert "Traceback" not in json.dumps(reply.json)


def test_health_503_body_is_what_the_openapi_document_says(down: Api):
    """The document's 503 for ``/health`` is ``UnavailableOut``, and so must the answer be (or the document
    must say ``HealthOut``): a client generated from the document must be able to read it."""
    doc = down.get("/openapi.json").json
    ref = doc["paths"]["/health"]["get"]["responses"]["503"]["content"]["application/json"]["schema"]["$ref"]
    schema = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    reply = down.get("/health", error_shape=False)
    assert reply.status == 503
    assert set(schema["required"]) <= set(reply.json), (ref, reply)
    assert set(reply.json) <= set(schema["properties"]), (ref, reply)
    for name, value in reply.json.items():
        expected = schema["properties"][name].get("type")
        kinds = {"integer": int, "string": str, "null": type(None)}
        if isinstance(expected, str):
            assert isinstance(value, kinds[expected]), (name, value, expected)


# ------------------------------------------------------------------------------------------ Redis down

DOWN_REQUESTS: list[tuple[str, str, Any, dict[str, str] | None]] = [
    ("POST", "/jobs", {"topic": "orders", "id": "a", "delay": 5}, None),
    ("POST", "/jobs/batch", {"jobs": [{"topic": "orders", "id": "a"}]}, None),
    ("PUT", "/jobs/orders/a", {"delay": 5}, None),
    ("GET", "/jobs/orders/a", None, None),
    ("PATCH", "/jobs/orders/a", {"delay": 5}, None),
    ("DELETE", "/jobs/orders/a", None, None),
    ("GET", "/topics/orders", None, None),
    ("GET", "/topics/orders/dead", None, {"limit": "5"}),
    ("POST", "/topics/orders/dead/replay", {"ids": ["a"]}, None),
    ("POST", "/topics/orders/dead/replay", None, None),
    ("DELETE", "/topics/orders/dead", None, None),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "query"), DOWN_REQUESTS, ids=[f"{m} {p}" for m, p, *_ in DOWN_REQUESTS]
)
def test_every_route_answers_503_json_quickly_when_redis_is_down(
    down: Api,
    method: str,
    path: str,
    body: Any,
    query: dict[str, str] | None,
    *,
    connection_attempts: list[tuple[str, int]],
):
    """Quickly: at the first refused connection, with no retry (and so no backoff): counted, not timed."""
    reply = down.call(method, path, NO_BODY if body is None else body, query=query)
    if path == "/jobs/batch" and reply.status == 200:
        pytest.fail(f"a batch with Redis down answered 200: {reply}")
    assert reply.status == 503, reply
    assert reply.json["error"] == "unavailable"
    assert {name.lower(): value for name, value in reply.headers.items()}["retry-after"] == "1", reply.headers
    assert connection_attempts == [("127.0.0.1", 1)]


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("redis://127.0.0.1:1/0", "127.0.0.1:1"),
        ("redis://:hunter2-Secret@127.0.0.1:1/0", "127.0.0.1:1"),
        ("redis://delayq:hunter2-Secret@localhost:1/3", "localhost:1"),
    ],
)
def test_redis_down_names_host_and_port_never_the_password(
    handler_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    redis_client: redis.Redis,
    namespace: str,
    *,
    url: str,
    address: str,
):
    monkeypatch.setenv("DELAYQ_REDIS_URL", url)
    api = Api.start(redis_client, namespace)
    reply = api.post("/jobs", {"topic": "orders", "id": "a"})
    assert (reply.status, reply.json["error"]) == (503, "unavailable"), reply
    assert reply.json["message"] == f"Redis at {address} is unavailable: ConnectionError", reply
    assert "hunter2" not in (reply.text or "")


def test_every_sample_answers_json_without_a_trace_when_redis_is_down(
    down: Api, connection_attempts: list[tuple[str, int]]
):
    for path in sorted((EVENTS / "api").rglob("*.json")):  # payload 1.0, and 2.0 in v2/
        name = path.stem
        connection_attempts.clear()
        reply = down.send(load_event(str(path.relative_to(EVENTS).with_suffix(""))), error_shape=name != "get_health")
        expected = 200 if name == "get_openapi" else 503
        assert reply.status == expected, (path, reply)
        assert len(connection_attempts) == (0 if name == "get_openapi" else 1), (path, connection_attempts)


def test_validation_still_answers_when_redis_is_down(down: Api):
    assert down.post("/jobs", raw_body="{").status == 400
    assert down.post("/jobs", {"topic": "orders", "delay": -1}).field == "delay"
    assert down.get("/nope").status == 404


# ------------------------------------------------------------------------------------------ no traces


def test_a_failing_queue_answers_500_json_without_a_trace(api: Api, monkeypatch: pytest.MonkeyPatch):
    """An unexpected exception is logged, and the caller sees JSON only."""

    def explode(self: Queue, topic: str) -> Any:
        raise RuntimeError('secret internals File "x.py", line 1')

    monkeypatch.setattr(Queue, "stats", explode)
    reply = api.get("/topics/orders")
    assert reply.status == 500
    assert set(reply.json) == ERROR_KEYS
    assert "secret" not in (reply.text or "")


def test_check_reply_catches_a_trace():
    """The check applied to every reply of this tier can fail."""
    with pytest.raises(AssertionError, match="traceback"):
        check_reply(
            {"statusCode": 500, "body": json.dumps({"detail": 'Traceback (most recent call last):\n File "x"'})}
        )
    with pytest.raises(AssertionError, match="error keys"):
        check_reply(
            {"statusCode": 422, "body": json.dumps({"detail": []}), "headers": {"Content-Type": "application/json"}}
        )
