"""Hostile request lines and headers against the real enqueue handler: random paths (percent-escapes,
dots, slashes, very long ids and topics, lone surrogates), any method, query strings, content types
of every kind, duplicate and missing headers, events with parts missing.

The oracle is the same as for bodies (``support.hostile.Hostile.send``): never a 5xx, always JSON
with the error shape on 4xx, nothing changed by a refusal, exactly the answered change otherwise."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from support.events import api_event
from support.hostile import (
    ANY_CHAR,
    HOSTILE,
    SEED_IDS,
    SEED_TOPIC,
    Hostile,
    any_text,
    clean_options,
    dumps,
    valid_ids,
    valid_topics,
)

ROUTE_WORDS = ["jobs", "topics", "dead", "replay", "batch", "health", "openapi.json", SEED_TOPIC, *SEED_IDS]
segments = st.one_of(
    st.sampled_from(ROUTE_WORDS),
    st.sampled_from(ROUTE_WORDS),
    st.sampled_from(["", ".", "..", "%2F", "%2e%2e", "%00", "%zz", "%", "~", "a b", "a?b", "a#b", "é", "\ud800", "*"]),
    valid_topics,
    valid_ids,
    st.text(ANY_CHAR, max_size=16),
    st.text(alphabet="abc.%/-_:@+", max_size=24),
    st.integers(60, 5000).map(lambda n: "a" * n),  # longer than any topic or id
)
paths = st.builds(
    lambda parts, lead, trail: ("/" if lead else "") + "/".join(parts) + ("/" if trail else ""),
    st.lists(segments, max_size=5),
    st.booleans() | st.just(True),
    st.integers(0, 5).map(lambda n: n == 0),
)
methods = st.sampled_from(
    ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "CONNECT", "get", "Delete", "", "FOO"]
) | st.text(max_size=8)
bodies = (
    st.none() | st.builds(lambda job, topic: dumps({"topic": topic, **job}), clean_options, valid_topics) | any_text
)


@pytest.mark.answers(400, 404, 405)
@HOSTILE
@given(method=methods, path=paths, body=bodies)
# The statuses it answers (its mark), whatever the generated examples reach (their mix may vary from run to run).
@example(method="PATCH", path="/health", body=None)  # 405
@example(method="POST", path="/jobs", body="{")  # 400
@example(method="GET", path="/nowhere", body=None)  # 404
def test_paths_and_methods(api: Hostile, method: str, path: str, body: str | None):
    api.send(api_event(method, path, None, raw_body=body))


ROUTES = [
    ("POST", "/jobs"),
    ("POST", "/jobs/batch"),
    ("PUT", "/jobs/{}/{}"),
    ("GET", "/jobs/{}/{}"),
    ("PATCH", "/jobs/{}/{}"),
    ("DELETE", "/jobs/{}/{}"),
    ("GET", "/topics/{}"),
    ("GET", "/topics/{}/dead"),
    ("POST", "/topics/{}/dead/replay"),
    ("DELETE", "/topics/{}/dead"),
    ("GET", "/health"),
    ("GET", "/openapi.json"),
]


@pytest.mark.answers(200, 404, 405, 422)
@HOSTILE
@given(
    route=st.sampled_from(ROUTES),
    method=st.one_of(st.none(), st.none(), st.none(), methods),  # mostly the route's own
    topic=st.one_of(st.just(SEED_TOPIC), st.just(SEED_TOPIC), segments),
    job_id=st.one_of(st.sampled_from(SEED_IDS), st.sampled_from(SEED_IDS), segments),
    body=bodies | st.sampled_from(['{"delay": 5}', '{"run_at": 0}', '{"ids": ["seed-dead"]}', "{}"]),
)
def test_route_shaped_paths(
    api: Hostile, *, route: tuple[str, str], method: str | None, topic: str, job_id: str, body: str | None
):
    """Each route's own shape, with hostile segments in its topic and id: seeded jobs are read,
    replaced, rescheduled, cancelled, replayed and purged along the way."""
    route_method, template = route
    path = template.replace("{}", topic, 1).replace("{}", job_id, 1)
    api.send(api_event(method or route_method, path, None, raw_body=body))
    if not {key for key in api.jobs() if key[0] == SEED_TOPIC}:
        api.seed()  # all cancelled or purged: again, so that the next examples find jobs


@pytest.mark.answers(200, 204, 400, 409, 422)
@HOSTILE
@given(
    method=st.sampled_from(["GET", "PUT", "PATCH", "DELETE"]),
    job_id=st.sampled_from(SEED_IDS),
    body=bodies | st.sampled_from(['{"delay": 5}', '{"run_at": "2026-01-01T00:00:00Z"}', '{"delay": 1, "run_at": 2}']),
)
def test_seeded_jobs(api: Hostile, method: str, job_id: str, body: str | None):
    """The job routes on jobs in every state (delayed, ready, reserved, dead), recreated when gone:
    the conflicts (409 reserved, 409 dead) and the cancels are walked as often as the rest."""
    api.send(api_event(method, f"/jobs/{SEED_TOPIC}/{job_id}", None, raw_body=body))
    if len({key for key in api.jobs() if key[0] == SEED_TOPIC}) < len(SEED_IDS):
        api.reseed()


query_values = st.one_of(
    st.integers(-5, 2000).map(str),
    st.sampled_from(["", " 5", "5 ", "1e3", "0x10", "\uff11", "NaN", "5.0", "9" * 5000]),
    any_text,
)


@pytest.mark.answers(200, 422)
@HOSTILE
@given(
    path=st.sampled_from(["/topics/orders/dead", "/topics/orders", "/jobs/orders/seed-delayed", "/health"]),
    query=st.dictionaries(st.sampled_from(["limit", "Limit", "ids", ""]) | any_text, query_values, max_size=3),
    duplicate=st.lists(query_values, max_size=3),
)
def test_queries(api: Hostile, path: str, query: dict[str, str], duplicate: list[str]):
    """Query strings of any kind, ``limit`` repeated or out of range: the GETs answer 200 or 422."""
    event = api_event("GET", path, None, query=query or None)
    if duplicate:
        event["multiValueQueryStringParameters"] = {
            **(event["multiValueQueryStringParameters"] or {}),
            "limit": duplicate,
        }
        event["queryStringParameters"] = {**(event["queryStringParameters"] or {}), "limit": duplicate[-1]}
    api.send(event)


content_types = (
    st.sampled_from(
        [
            "application/json",
            "application/json; charset=utf-8",
            "APPLICATION/JSON",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
            "multipart/form-data; boundary=xyz",
            "application/xml",
            "application/octet-stream",
            "",
            " ",
            ";",
            "application/json; charset=latin-1",
        ]
    )
    | any_text
)
header_names = st.sampled_from(
    ["Content-Type", "content-type", "CONTENT-TYPE", "Content-Length", "Accept", "Host", "X-A"]
)


@st.composite
def header_sets(draw: st.DrawFn) -> tuple[dict[str, str] | None, dict[str, list[str]] | None]:
    """``headers`` and ``multiValueHeaders`` of an event: missing, empty, or any mix, the two
    disagreeing, a name given twice in different case, values repeated."""
    if draw(st.integers(0, 5)) == 0:
        return None, None
    headers = draw(st.dictionaries(header_names | any_text, content_types, max_size=4))
    multi: dict[str, list[str]] = {name: [value] for name, value in headers.items()}
    for name, values in draw(
        st.dictionaries(header_names, st.lists(content_types, min_size=1, max_size=3), max_size=2)
    ).items():
        multi[name] = values
    return headers, draw(st.sampled_from([multi, None, {}]))


@pytest.mark.answers(200, 201, 400, 409, 422)
@HOSTILE
@given(
    hs=header_sets(),
    body=bodies
    | st.sampled_from(['{"topic": "orders", "id": "seed-delayed"}', "topic=orders", "--xyz\r\n\r\n--xyz--"]),
    route=st.sampled_from([("POST", "/jobs"), ("PUT", "/jobs/orders/x1"), ("PATCH", "/jobs/orders/seed-delayed")]),
    drop=st.lists(
        st.sampled_from(["headers", "multiValueHeaders", "requestContext", "queryStringParameters", "pathParameters"]),
        max_size=3,
    ),
)
def test_headers(
    api: Hostile,
    hs: tuple[dict[str, str] | None, dict[str, list[str]] | None],
    body: str | None,
    route: tuple[str, str],
    drop: list[str],
):
    """Whatever the headers say, the body is read as JSON; and parts of the event may be missing."""
    method, path = route
    event = api_event(method, path, None, raw_body=body)
    event["headers"], event["multiValueHeaders"] = hs
    for name in drop:
        event.pop(name, None)
    reply = api.send(event)
    if body is not None and body.startswith("{") and method == "POST":
        try:
            json.loads(body)
        except ValueError:
            assert reply.status == 400, reply
        else:
            assert reply.status in (201, 409, 422), reply


@pytest.mark.parametrize(
    ("method", "status", "allow"),
    [
        ("HEAD", 200, None),
        ("OPTIONS", 204, "GET, HEAD, OPTIONS"),
        ("TRACE", 405, "GET, HEAD, OPTIONS"),
        ("get", 200, None),
    ],
)
def test_other_methods_on_known_routes(api: Hostile, method: str, status: int, allow: str | None):
    """HEAD is GET without the body, OPTIONS names the path's methods, and any other method is a 405
    naming them (lower-case methods are the same method, as in API Gateway)."""
    reply = api.send(api_event(method, "/health", None))
    assert reply.status == status, reply
    assert reply.headers.get("Allow") == allow, reply.headers


def test_every_seeded_job_is_reachable(api: Hostile):
    for job_id in SEED_IDS:
        assert api.send(api_event("GET", f"/jobs/{SEED_TOPIC}/{job_id}", None)).status == 200
    body: dict[str, Any] = json.loads(api.send(api_event("GET", f"/topics/{SEED_TOPIC}", None)).text or "{}")
    assert (body["delayed"], body["ready"], body["reserved"], body["dead"]) == (1, 1, 1, 1), body


@pytest.mark.parametrize("path", ["/jobs/\ud800/x", "/" + "\udfff" * 3, "/" + "x" * 100_000])
def test_a_404_quotes_the_path_as_unicode_and_short(api: Hostile, path: str):
    """Was an answer holding a lone surrogate (strict JSON readers refuse it), or 100 kB long."""
    reply = api.send(api_event("GET", path, None))
    assert reply.status == 404, reply
    assert len(reply.json["message"]) < 300, reply
