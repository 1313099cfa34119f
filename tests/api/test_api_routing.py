"""Routing, exact and alike for both payload formats: control characters match no route, a known path
with another method is a 405, OPTIONS and HEAD, a base path, the stage of an HTTP API, events that
routing cannot read, and requests resolved at once by several threads (the local stack's server)."""

from __future__ import annotations

import json
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import enqueue
from delayq import Queue
from delayq.surfaces.api import create_app

from support.api import Api, check_reply
from support.events import FakeContext, api_event, http_api_event

# Every route, with the seeded job and topic in its path.
ROUTES = [
    ("POST", "/jobs"),
    ("POST", "/jobs/batch"),
    ("POST", "/topics/orders/jobs"),
    ("PUT", "/jobs/orders/seed"),
    ("GET", "/jobs/orders/seed"),
    ("PATCH", "/jobs/orders/seed"),
    ("DELETE", "/jobs/orders/seed"),
    ("GET", "/topics/orders"),
    ("GET", "/topics/orders/dead"),
    ("POST", "/topics/orders/dead/replay"),
    ("DELETE", "/topics/orders/dead"),
    ("GET", "/health"),
    ("GET", "/openapi.json"),
]
CONTROL = [chr(code) for code in (*range(0x20), 0x7F)]
Make = Callable[..., dict[str, Any]]  # api_event or http_api_event
FORMATS = pytest.mark.parametrize("make", [api_event, http_api_event], ids=["1.0", "2.0"])


@pytest.fixture
def seeded(seeded: Api) -> Api:
    """The tier's ``seeded`` (a delayed job, ``seed``) and a dead job: a purge or a replay would be seen."""
    seeded.kill("orders", "dead-one")
    return seeded


def body_for(method: str, path: str) -> Any:
    if path == "/jobs/batch":
        return {"jobs": [{"topic": "orders", "id": "new"}]}
    if path.endswith("/replay"):
        return {"ids": ["dead-one"]}
    if method == "POST":
        return {"topic": "orders", "id": "new"}
    return {"delay": 5} if method in ("PUT", "PATCH") else None


def send(api: Api, event: dict[str, Any]) -> Any:
    """``event`` through the handler, and its answer checked (the 2.0 answers have no multi-value headers)."""
    response = enqueue.lambda_handler(event, FakeContext())
    if event.get("version") == "2.0":
        assert "multiValueHeaders" not in response, response
    method = event["requestContext"]["http"]["method"] if event.get("version") == "2.0" else event["httpMethod"]
    return check_reply(response, head=method == "HEAD")


# ------------------------------------------------------------------------------------------ exact


@FORMATS
@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_a_control_character_in_a_path_matches_no_route(seeded: Api, make: Make, method: str, path: str):
    """Was: ``$`` ends Powertools' route patterns, and it matches before a trailing newline, so
    ``DELETE /topics/t/dead%0a`` purged. Now a control character anywhere in a path is a 404, and
    nothing changes."""
    body = body_for(method, path)
    for bad in (f"{path}\n", f"{path}\r\n", f"{path}\x00", f"{path}/\n", path.replace("/", "/\x7f", 1)):
        before = seeded.snapshot()
        reply = send(seeded, make(method, bad, body))
        assert (reply.status, reply.json["error"]) == (404, "not_found"), (bad, reply)
        assert seeded.snapshot() == before, bad
    for char in CONTROL:  # every one, inside the last segment
        before = seeded.snapshot()
        reply = send(seeded, make(method, f"{path[:-1]}{char}{path[-1]}", body))
        assert reply.status == 404, (repr(char), reply)
        assert seeded.snapshot() == before


def test_a_purge_with_a_trailing_newline_purges_nothing(seeded: Api):
    """The reproduction of the issue, as the local stack decodes ``DELETE /topics/orders/dead%0a``."""
    reply = seeded.delete("/topics/orders/dead\n")
    assert reply.status == 404, reply
    assert seeded.stats("orders")["dead"] == 1
    assert seeded.delete("/topics/orders/dead").json == {"purged": 1}


def test_a_trailing_slash_is_still_the_route(seeded: Api):
    assert seeded.get("/topics/orders/").json["delayed"] == 1
    assert seeded.get("/health/").json == {"status": "ok"}


# ------------------------------------------------------------------------------------------ methods


@FORMATS
def test_head_is_get_without_the_body(seeded: Api, make: Make):
    for path, status in (("/jobs/orders/seed", 200), ("/jobs/orders/nope", 404), ("/nope", 404), ("/jobs", 405)):
        get = send(seeded, make("GET", path))
        head = send(seeded, make("HEAD", path))
        assert (head.status, head.text) == (get.status, ""), (path, head)
        assert head.status == status, (path, head)
        assert head.headers.get("Content-Type") == "application/json", head.headers


@FORMATS
@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/jobs", "OPTIONS, POST"),
        ("/jobs/orders/seed", "DELETE, GET, HEAD, OPTIONS, PATCH, PUT"),
        ("/topics/orders", "GET, HEAD, OPTIONS"),
        ("/topics/orders/jobs", "DELETE, GET, HEAD, OPTIONS, POST"),
        ("/topics", "GET, HEAD, OPTIONS"),
        ("/topics/orders/resume", "OPTIONS, POST"),
        ("/topics/orders/dead", "DELETE, GET, HEAD, OPTIONS"),
        ("/openapi.json", "GET, HEAD, OPTIONS"),
    ],
)
def test_options_names_the_methods_of_a_path(seeded: Api, make: Make, path: str, allow: str):
    before = seeded.snapshot()
    reply = send(seeded, make("OPTIONS", path))
    assert (reply.status, reply.text) == (204, None), reply
    assert reply.headers["Allow"] == allow, reply.headers
    assert seeded.snapshot() == before


@FORMATS
def test_another_method_is_405_in_either_format(seeded: Api, make: Make):
    reply = send(seeded, make("PUT", "/topics/orders/dead", {"ids": []}))
    assert (reply.status, reply.json["error"]) == (405, "method_not_allowed"), reply
    assert reply.headers["Allow"] == "DELETE, GET, HEAD, OPTIONS"
    assert seeded.stats("orders")["dead"] == 1


def test_a_method_is_quoted_back_safely(seeded: Api):
    reply = seeded.refused(405, None, "\ud800" * 3 + "X" * 1000, "/jobs", error="method_not_allowed")
    assert len(reply.json["message"]) < 600, reply
    json.dumps(reply.json).encode("utf-8")  # no lone surrogate in the answer


# ------------------------------------------------------------------------------------------ payload 2.0


def test_an_http_api_event_runs_every_route(api: Api):
    """The routes through payload 2.0 events: answered in 2.0 (headers, no multi-value ones)."""
    assert send(api, http_api_event("POST", "/jobs", {"topic": "orders", "id": "a", "delay": 600})).status == 201
    assert send(api, http_api_event("POST", "/topics/orders/jobs", {"id": "b", "delay": 0})).status == 201
    batch = send(api, http_api_event("POST", "/jobs/batch", {"jobs": [{"topic": "orders", "id": "c"}, {"x": 1}]}))
    assert [item["status"] for item in batch.json["results"]] == [201, 422], batch
    assert send(api, http_api_event("PUT", "/jobs/orders/d", {"delay": 60})).status == 201
    assert send(api, http_api_event("PATCH", "/jobs/orders/d", {"delay": 120})).status == 200
    assert send(api, http_api_event("GET", "/jobs/orders/a")).json["state"] == "delayed"
    assert send(api, http_api_event("DELETE", "/jobs/orders/d")).status == 204
    api.kill("payments", "e")
    assert send(api, http_api_event("GET", "/topics/payments/dead", query={"limit": "5"})).json["jobs"][0]["id"] == "e"
    assert send(api, http_api_event("GET", "/topics/payments/dead", query={"limit": "0"})).field == "limit"
    assert send(api, http_api_event("POST", "/topics/payments/dead/replay", {"ids": ["e"]})).json == {"replayed": 1}
    assert send(api, http_api_event("DELETE", "/topics/payments/dead")).json == {"purged": 0}
    stats = send(api, http_api_event("GET", "/topics/orders")).json
    assert (stats["delayed"], stats["ready"]) == (1, 2), stats
    assert send(api, http_api_event("GET", "/health")).json == {"status": "ok"}
    assert send(api, http_api_event("GET", "/openapi.json")).json["openapi"].startswith("3.")


def test_an_http_api_event_with_cookies_and_a_base64_body(api: Api):
    event = http_api_event("POST", "/jobs", None, headers={"content-type": "text/plain"})
    event["cookies"] = ["session=abc", "theme=dark"]
    event["body"] = "eyJ0b3BpYyI6ICJvcmRlcnMiLCAiaWQiOiAiYjY0In0="  # {"topic": "orders", "id": "b64"}
    event["isBase64Encoded"] = True
    assert send(api, event).status == 201
    assert api.job("orders", "b64")["state"] == "ready"


@pytest.mark.parametrize(("stage", "raw_path"), [("prod", "/prod/jobs/orders/seed"), ("$default", "/jobs/orders/seed")])
def test_the_stage_in_an_http_apis_path_is_not_routed(seeded: Api, stage: str, raw_path: str):
    event = http_api_event("GET", "/jobs/orders/seed", stage=stage)
    assert event["rawPath"] == raw_path
    assert send(seeded, event).json["id"] == "seed"


def test_behind_a_custom_domain_the_stage_is_not_in_the_path(seeded: Api):
    """A custom domain maps to a stage, and its path does not hold it, even where the path starts
    like the stage's name (Powertools' own 2.0 event dropped the stage's length from any path)."""
    event = http_api_event("GET", "/jobs/orders/seed", stage="jobs")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/jobs/orders/seed"
    event["requestContext"]["domainName"] = "queue.example.com"
    assert send(seeded, event).json["id"] == "seed"


# ------------------------------------------------------------------------------------------ base path


@pytest.fixture
def based(handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str):
    """The API behind a custom domain's mapping ``/delayq``."""
    monkeypatch.setenv("DELAYQ_API_BASE_PATH", "/delayq")
    api = Api.start(redis_client, namespace)
    api.create("orders", "seed", delay=600)
    return api


@FORMATS
def test_the_base_path_is_stripped_before_routing(based: Api, make: Make):
    assert send(based, make("GET", "/delayq/jobs/orders/seed")).json["id"] == "seed"
    assert send(based, make("POST", "/delayq/topics/orders/jobs", {"id": "via-mapping"})).status == 201
    assert send(based, make("GET", "/delayq/health")).json == {"status": "ok"}
    assert send(based, make("GET", "/jobs/orders/seed")).json["id"] == "seed"  # the API's own URL too
    assert send(based, make("GET", "/delayq")).status == 404
    assert send(based, make("GET", "/delayqx/jobs/orders/seed")).status == 404  # not the mapping


def test_the_base_path_with_the_stage_of_an_http_api(based: Api):
    event = http_api_event("GET", "/delayq/jobs/orders/seed", stage="prod")
    assert event["rawPath"] == "/prod/delayq/jobs/orders/seed"
    assert send(based, event).json["id"] == "seed"


def test_a_base_path_the_settings_refuse_is_a_500_naming_it(
    handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str
):
    monkeypatch.setenv("DELAYQ_API_BASE_PATH", "/has space")
    reply = Api.start(redis_client, namespace).get("/health")
    assert (reply.status, reply.json["error"]) == (500, "config"), reply
    assert "DELAYQ_API_BASE_PATH" in reply.json["message"], reply


# ------------------------------------------------------------------------------------------ malformed events


def _without(event: dict[str, Any], *path: str) -> dict[str, Any]:
    inner = event
    for key in path[:-1]:
        inner = inner[key]
    inner.pop(path[-1])
    return event


def _with(event: dict[str, Any], value: Any, *path: str) -> dict[str, Any]:
    inner = event
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return event


def rest() -> dict[str, Any]:
    return api_event("POST", "/jobs", {"topic": "orders", "id": "m"})


def http() -> dict[str, Any]:
    return http_api_event("POST", "/jobs", {"topic": "orders", "id": "m"})


MALFORMED: list[tuple[str, Callable[[], dict[str, Any]], str]] = [
    ("method None", lambda: _with(rest(), None, "httpMethod"), "httpMethod"),
    ("method missing", lambda: _without(rest(), "httpMethod"), "httpMethod"),
    ("method a number", lambda: _with(rest(), 5, "httpMethod"), "httpMethod"),
    ("path None", lambda: _with(rest(), None, "path"), "path"),
    ("path missing", lambda: _without(rest(), "path"), "path"),
    ("body a dict", lambda: _with(rest(), {"topic": "orders"}, "body"), "body"),
    ("body a list", lambda: _with(rest(), [1], "body"), "body"),
    ("headers a list", lambda: _with(rest(), ["a"], "headers"), "headers"),
    ("a header None", lambda: _with(rest(), {"Accept": None}, "headers"), "headers"),
    ("multi-value header a string", lambda: _with(rest(), {"Accept": "x"}, "multiValueHeaders"), "multiValueHeaders"),
    ("query a list", lambda: _with(rest(), ["limit"], "queryStringParameters"), "queryStringParameters"),
    (
        "multi-value query of numbers",
        lambda: _with(rest(), {"limit": [5]}, "multiValueQueryStringParameters"),
        "multiValueQueryStringParameters",
    ),
    ("2.0 without requestContext", lambda: _without(http(), "requestContext"), "requestContext.http.method"),
    ("2.0 requestContext a string", lambda: _with(http(), "x", "requestContext"), "requestContext.http.method"),
    ("2.0 without http", lambda: _without(http(), "requestContext", "http"), "requestContext.http.method"),
    ("2.0 method None", lambda: _with(http(), None, "requestContext", "http", "method"), "requestContext.http.method"),
    ("2.0 rawPath None", lambda: _with(http(), None, "rawPath"), "rawPath"),
    ("2.0 rawPath missing", lambda: _without(http(), "rawPath"), "rawPath"),
    ("2.0 body a dict", lambda: _with(http(), {"topic": "orders"}, "body"), "body"),
    ("2.0 cookies a string", lambda: _with(http(), "a=b", "cookies"), "cookies"),
    ("2.0 a header a number", lambda: _with(http(), {"accept": 5}, "headers"), "headers"),
]


@pytest.mark.parametrize(("case", "make", "field"), MALFORMED, ids=[case for case, *_ in MALFORMED])
def test_an_event_routing_cannot_read_is_400_naming_its_field(
    seeded: Api, case: str, make: Callable[[], dict[str, Any]], field: str
):
    """Was a 500 (or a Lambda error): synthetic events with parts missing or of another type."""
    event = make()
    before = seeded.snapshot()
    response = enqueue.lambda_handler(event, FakeContext())
    reply = check_reply(response)
    assert (reply.status, reply.json["error"], reply.field) == (400, "malformed", field), reply
    assert "not an API Gateway proxy event" in reply.json["message"], reply
    assert seeded.snapshot() == before
    if event.get("version") == "2.0":
        assert "multiValueHeaders" not in response, response


@pytest.mark.parametrize("event", [None, [], "GET /health", 5])
def test_an_event_that_is_not_an_object_is_400(seeded: Api, event: Any):
    reply = check_reply(enqueue.lambda_handler(event, FakeContext()))
    assert (reply.status, reply.json["error"]) == (400, "malformed"), reply


def test_a_rest_event_without_request_context_is_still_routed(seeded: Api):
    """Payload 1.0 carries all routing needs outside it: a synthetic event may leave it out."""
    reply = send(seeded, _without(api_event("GET", "/jobs/orders/seed"), "requestContext"))
    assert reply.json["id"] == "seed", reply


# ------------------------------------------------------------------------------------------ threads


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    """Threads switch as often as the interpreter allows: a race shows at once, if there is one."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_requests_resolved_by_threads_at_once_each_get_their_own_answer(
    make_queue: Callable[..., Queue], tiny_switch_interval: None
):
    """The local stack's server resolves each connection in a thread of its own. Powertools keeps the
    request being resolved in shared attributes: unserialised, requests read each other's path and
    body (a GET answered with another job, a create with another's id, KeyErrors as 500s)."""
    queue = make_queue()
    for n in range(4):
        queue.enqueue("orders", {"n": n}, id=f"job-{n}", delay=600)
    resolve = create_app(queue).resolve
    wrong: list[Any] = []

    def client(n: int) -> None:
        for i in range(150):
            got = json.loads(resolve(api_event("GET", f"/jobs/orders/job-{n}"), None)["body"])
            if got.get("id") != f"job-{n}":
                wrong.append((n, got))
            job_id = f"t{n}-{i}-{uuid.uuid4().hex[:4]}"
            made = json.loads(resolve(api_event("POST", "/jobs", {"topic": "orders", "id": job_id}), None)["body"])
            if made.get("id") != job_id:
                wrong.append((job_id, made))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not wrong, wrong[:3]
    assert queue.stats("orders").ready == 4 * 150
