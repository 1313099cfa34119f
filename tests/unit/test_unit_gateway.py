"""``delayq.surfaces.gateway``: what routing reads from an event of either payload format, and how a request
body is read; tables of events and bodies, no handler, no Redis."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from delayq.core.errors import InvalidField, MalformedRequest, NotAnObject
from delayq.core.models import lone_surrogate_at
from delayq.surfaces.gateway import MAX_REQUEST_DEPTH, HttpApiEvent, RestEvent, proxy_event, read_json


def rest(method: Any = "GET", path: Any = "/health", **more: Any) -> dict[str, Any]:
    return {"httpMethod": method, "path": path, **more}


def http(method: Any = "GET", raw_path: Any = "/health", stage: str = "$default", **more: Any) -> dict[str, Any]:
    context = {"http": {"method": method}, "stage": stage, "apiId": "a1", "domainName": "a1.execute-api.x"}
    return {"version": "2.0", "rawPath": raw_path, "requestContext": context, **more}


@pytest.mark.parametrize(
    ("event", "base", "kind", "method", "path"),
    [
        (rest(), "", RestEvent, "GET", "/health"),
        (rest("post", "/jobs"), "", RestEvent, "POST", "/jobs"),
        (rest("HEAD", "/health"), "", RestEvent, "GET", "/health"),  # answered as GET, without the body
        (rest("GET", "/delayq/health"), "/delayq", RestEvent, "GET", "/health"),
        (rest("GET", "/delayq"), "/delayq", RestEvent, "GET", "/"),
        (rest("GET", "/delayqx/health"), "/delayq", RestEvent, "GET", "/delayqx/health"),
        (rest("GET", "/health"), "/delayq", RestEvent, "GET", "/health"),
        (http(), "", HttpApiEvent, "GET", "/health"),
        (http("DELETE", "/prod/jobs/a/b", "prod"), "", HttpApiEvent, "DELETE", "/jobs/a/b"),
        (http("GET", "/prod", "prod"), "", HttpApiEvent, "GET", "/"),
        (http("GET", "/production/x", "prod"), "", HttpApiEvent, "GET", "/production/x"),
        (http("GET", "/prod/delayq/health", "prod"), "/delayq", HttpApiEvent, "GET", "/health"),
        (http("head", "/health"), "", HttpApiEvent, "GET", "/health"),
    ],
)
def test_what_routing_reads(event: dict[str, Any], base: str, kind: type, method: str, path: str):
    proxy = proxy_event(event, base)
    assert type(proxy) is kind
    assert proxy.problem() is None
    assert (proxy.http_method, proxy.path) == (method, path)


@pytest.mark.parametrize(
    ("event", "head"), [(rest("HEAD"), True), (http("head"), True), (rest(), False), (http(), False)]
)
def test_a_head_is_routed_as_get_and_remembered(event: dict[str, Any], head: bool):
    proxy = proxy_event(event)
    assert (proxy.http_method, proxy.is_head) == ("GET", head)


def test_behind_a_custom_domain_a_stage_like_segment_stays():
    event = http("GET", "/prod/x", "prod")
    event["requestContext"]["domainName"] = "queue.example.com"
    assert proxy_event(event).path == "/prod/x"


def test_the_body_is_json_whatever_the_content_type():
    proxy = proxy_event(rest("POST", "/jobs", headers={"Content-Type": "text/plain", "Accept": "*/*"}))
    assert proxy.headers["content-type"] == "application/json"
    assert proxy.headers["accept"] == "*/*"


@pytest.mark.parametrize(
    ("body", "is_base64", "error", "message"),
    [
        ("{", False, MalformedRequest, "not valid JSON"),
        ("!!", True, MalformedRequest, "not valid base64"),
        (base64.b64encode(b"\xff{}").decode(), True, MalformedRequest, "not valid UTF-8"),
        ("[" * 100_000 + "]" * 100_000, False, MalformedRequest, "levels deep"),
        ("[" * (MAX_REQUEST_DEPTH + 1) + "]" * (MAX_REQUEST_DEPTH + 1), False, MalformedRequest, "levels deep"),
        ('{"n": 1' + "0" * 5000 + "}", False, MalformedRequest, "number too long"),
        ("[1]", False, NotAnObject, "must be a JSON object"),
        ('"\\ud800"', False, NotAnObject, "must be a JSON object"),
        ('{"a": "\\ud800"}', False, InvalidField, "lone surrogate"),
    ],
)
def test_an_unreadable_body_is_refused_saying_why(body: str, is_base64: bool, error: type, message: str):
    with pytest.raises(error, match=message):
        read_json(body, is_base64)


@pytest.mark.parametrize(
    ("body", "document"),
    [
        (None, None),
        ("", None),
        ('{"topic": "orders"}', {"topic": "orders"}),
        (base64.b64encode('{"é": "✓"}'.encode()).decode(), {"é": "✓"}),
        ('{"s": "\\ud83d\\ude00"}', {"s": "😀"}),  # a surrogate pair is one character
    ],
)
def test_a_readable_body(body: str | None, document: Any):
    assert read_json(body, bool(body) and not body.startswith("{")) == document


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"a": "ok"}, None),
        ({"a": "\ud800"}, "a"),
        ({"a": {"b": [1, "x\udfff"]}}, "a.b[1]"),
        ({"\udfff": 1}, "\\udfff"),
        ({"a": {"k\ud800": 1}}, "a.k\\ud800"),
        ({"jobs": [{"id": "a"}, {"id": "\ud83d"}]}, "jobs[1].id"),
    ],
)
def test_where_a_lone_surrogate_is(value: Any, field: str | None):
    assert lone_surrogate_at(value) == field
