"""A topic's flow keys through the HTTP API: ``PUT``, ``GET`` and ``DELETE /topics/{topic}/keys/{key}``,
``GET /topics/{topic}/keys``; their refusals (422 naming the field, 404 for a topic nobody knows, 405
for another method, 503 with Redis down), each leaving Redis as it was; and a paused key's jobs left
ready while the other keys' are taken."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from delayq.core.errors import InvalidField
from delayq.core.flows import KeyLimits
from delayq.store import calls
from delayq.store.listing import encode_cursor
from delayq.store.queue import Queue
from delayq.surfaces.api.schemas import KeyOut, KeyPageOut

from support.api import NO_BODY, Api, assert_model
from support.recorder import RECORDER

DOWN_URL = "redis://127.0.0.1:1/0"  # no Redis answers there
KEY = "/topics/orders/keys/acme"
NOTHING = {"delayed": 0, "ready": 0, "reserved": 0, "held_until_ms": None}
UNLIMITED = {"concurrency": None, "rate": None, "burst": None, "paused": False}


def walk(api: Api, path: str, **query: str) -> list[dict[str, Any]]:
    keys: list[dict[str, Any]] = []
    cursor = None
    while True:
        reply = api.get(path, query=query | ({"cursor": cursor} if cursor else {}))
        assert reply.status == 200, reply
        assert_model(KeyPageOut, reply.json)
        keys += reply.json["keys"]
        cursor = reply.json["next"]
        if cursor is None:
            return keys


def taken(api: Api, topic: str) -> list[str]:
    """The ids a consumer takes of ``topic`` now, as the consume loop does (``calls.take``)."""
    return [
        job.id
        for p in api.keys.partitions
        for job in calls.take(p, topic, count=10, timeout_ms=30_000, grace_ms=0).run(api.r).jobs
    ]


# ------------------------------------------------------------------------------------------ set, get, reset


def test_a_key_nobody_set_shows_the_topics_defaults(seeded: Api):
    reply = seeded.get(KEY)
    assert (reply.status, reply.json) == (200, {"key": "acme", **NOTHING, **UNLIMITED})
    assert_model(KeyOut, reply.json)
    assert seeded.get("/topics/orders/keys").json == {"keys": [], "next": None}  # it holds nothing


def test_put_sets_field_by_field_get_shows_it_delete_goes_back(seeded: Api):
    reply = seeded.put(KEY, {"concurrency": 2, "rate": 5})
    assert reply.status == 200, reply
    assert_model(KeyOut, reply.json)
    assert reply.json == {"key": "acme", **NOTHING, **UNLIMITED, "concurrency": 2, "rate": 5.0}
    assert seeded.get(KEY).json == reply.json

    reply = seeded.put(KEY, {"paused": True, "burst": 3})  # the others kept
    assert reply.json == {"key": "acme", **NOTHING, "concurrency": 2, "rate": 5.0, "burst": 3, "paused": True}
    reply = seeded.put(KEY, {"rate": None, "paused": False})  # null: the topic's again
    assert reply.json == {"key": "acme", **NOTHING, **UNLIMITED, "concurrency": 2, "burst": 3}
    assert seeded.put(KEY, {}).json == reply.json  # nothing given: nothing changed
    assert seeded.get(KEY).json == reply.json
    assert [key["key"] for key in seeded.get("/topics/orders/keys").json["keys"]] == ["acme"]  # a key with settings

    reply = seeded.delete(KEY)
    assert (reply.status, reply.text) == (204, None)
    assert seeded.get(KEY).json == {"key": "acme", **NOTHING, **UNLIMITED}
    assert seeded.get("/topics/orders/keys").json == {"keys": [], "next": None}
    assert seeded.delete(KEY).status == 204  # idempotent
    assert seeded.get("/topics/payments/keys").json == {"keys": [], "next": None}


def test_a_key_shows_its_jobs_by_state(seeded: Api):
    for n in range(3):
        seeded.create("orders", f"later-{n}", delay=600, key="acme")
    seeded.create("orders", "due", delay=0, key="acme")
    seeded.create("orders", "other", delay=600, key="globex")
    seeded.create("orders", "keyless", delay=0)
    assert seeded.get(KEY).json == {"key": "acme", **NOTHING, **UNLIMITED, "delayed": 3, "ready": 1}
    assert sorted(taken(seeded, "orders")) == ["due", "keyless"]
    assert seeded.get(KEY).json == {"key": "acme", **NOTHING, **UNLIMITED, "delayed": 3, "reserved": 1}
    listed = {
        key["key"]: (key["delayed"], key["ready"], key["reserved"]) for key in walk(seeded, "/topics/orders/keys")
    }
    assert listed == {"acme": (3, 0, 1), "globex": (1, 0, 0)}  # jobs without a key are no key of the list
    seeded.delete(KEY)
    assert seeded.get(KEY).json["delayed"] == 3  # its jobs stay


@pytest.fixture
def keyed(handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str):
    """``orders`` with every key limited by the topic's config."""
    topics = {"orders": {"target": RECORDER, "key_concurrency": 4, "key_rate": 10, "key_burst": 20}}
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps(topics))
    api = Api.start(redis_client, namespace)
    api.create("orders", "seed", delay=600)
    return api


def test_the_topics_key_limits_are_in_force_until_a_key_has_its_own(keyed: Api):
    defaults = {"concurrency": 4, "rate": 10.0, "burst": 20, "paused": False}
    assert keyed.get(KEY).json == {"key": "acme", **NOTHING, **defaults}
    assert keyed.put(KEY, {"concurrency": 1}).json == {"key": "acme", **NOTHING, **defaults, "concurrency": 1}
    assert keyed.put(KEY, {"rate": 2}).json == {"key": "acme", **NOTHING, **defaults, "concurrency": 1, "rate": 2.0,
                                                 "burst": None}  # fmt: skip
    assert keyed.put(KEY, {"concurrency": None}).json["concurrency"] == 4
    assert keyed.delete(KEY).status == 204
    assert keyed.get(KEY).json == {"key": "acme", **NOTHING, **defaults}


def test_head_and_options_as_on_every_route(seeded: Api):
    seeded.put(KEY, {"paused": True})
    head = seeded.call("HEAD", KEY)
    assert (head.status, head.text) == (200, "")
    reply = seeded.call("OPTIONS", KEY)
    assert (reply.status, reply.headers["Allow"]) == (204, "DELETE, GET, HEAD, OPTIONS, PUT")
    reply = seeded.call("OPTIONS", "/topics/orders/keys")
    assert (reply.status, reply.headers["Allow"]) == (204, "GET, HEAD, OPTIONS")


# ------------------------------------------------------------------------------------------ a paused key


def test_a_paused_keys_jobs_stay_ready_while_the_other_keys_are_taken(api: Api):
    api.create("orders", "a1", delay=0, key="acme")
    api.create("orders", "g1", delay=0, key="globex")
    assert api.put(KEY, {"paused": True}).json["paused"] is True
    assert api.get(KEY).json["paused"] is True
    assert taken(api, "orders") == ["g1"]
    assert taken(api, "orders") == []
    assert api.job("orders", "a1")["state"] == "ready"
    assert api.get(KEY).json["ready"] == 1

    assert api.put(KEY, {"paused": False}).json["paused"] is False
    assert taken(api, "orders") == ["a1"]
    assert api.get(KEY).json == {"key": "acme", **NOTHING, **UNLIMITED, "reserved": 1}


def test_a_reset_key_is_taken_again(api: Api):
    api.create("orders", "a1", delay=0, key="acme")
    api.put(KEY, {"paused": True})
    assert taken(api, "orders") == []
    assert api.delete(KEY).status == 204
    assert taken(api, "orders") == ["a1"]


# ------------------------------------------------------------------------------------------ the list


def test_keys_by_name_a_page_at_a_time(seeded: Api):
    for n in (4, 0, 6, 2, 5, 1, 3):
        seeded.create("orders", f"j{n}", delay=600, key=f"k{n}")
    seeded.put("/topics/orders/keys/k9", {"concurrency": 1})  # settings, no job: listed too
    reply = seeded.get("/topics/orders/keys", query={"limit": "3"})
    assert reply.status == 200, reply
    assert_model(KeyPageOut, reply.json)
    assert [key["key"] for key in reply.json["keys"]] == ["k0", "k1", "k2"]
    assert reply.json["next"] is not None
    for key in reply.json["keys"]:
        assert_model(KeyOut, key)
        assert key == seeded.get(f"/topics/orders/keys/{key['key']}").json  # as the single key's route
    walked = walk(seeded, "/topics/orders/keys", limit="3")
    assert [key["key"] for key in walked] == ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k9"]
    assert walked[-1]["concurrency"] == 1
    assert [key["key"] for key in walk(seeded, "/topics/orders/keys")] == [key["key"] for key in walked]  # 100
    last = seeded.get("/topics/orders/keys", query={"limit": "8"})
    assert (len(last.json["keys"]), last.json["next"]) == (8, None)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"cursor": "nonsense"}, "cursor"),
        ({"cursor": encode_cursor("delayed", 1, "a")}, "cursor"),
        ({"cursor": encode_cursor("topics", "orders")}, "cursor"),
        ({"cursor": "x" * 20_000}, "cursor"),
    ],
)
def test_the_list_refuses_bad_queries_naming_the_field(seeded: Api, query: dict[str, str], field: str):
    seeded.refused(422, field, "GET", "/topics/orders/keys", query=query, error="invalid")


# ------------------------------------------------------------------------------------------ refusals


BAD_SETTINGS = [
    ({"concurrency": 0}, "concurrency"),
    ({"concurrency": 100_001}, "concurrency"),
    ({"concurrency": 1.5}, "concurrency"),
    ({"concurrency": 2.0}, "concurrency"),
    ({"concurrency": "2"}, "concurrency"),
    ({"concurrency": True}, "concurrency"),
    ({"rate": 0}, "rate"),
    ({"rate": -1}, "rate"),
    ({"rate": 100_000.5}, "rate"),
    ({"rate": "5"}, "rate"),
    ({"rate": False}, "rate"),
    ({"burst": 0}, "burst"),
    ({"burst": 1.5}, "burst"),
    ({"burst": [3]}, "burst"),
    ({"paused": "yes"}, "paused"),
    ({"paused": 1}, "paused"),
    ({"paused": None}, "paused"),
    ({"speed": 3}, "speed"),
    ({"concurrency": 2, "key": "other"}, "key"),
]


@pytest.mark.parametrize(("body", "field"), BAD_SETTINGS, ids=[json.dumps(body) for body, _ in BAD_SETTINGS])
def test_bad_settings_are_422_naming_the_field_as_the_queue_refuses_them(seeded: Api, body: dict[str, Any], field: str):
    seeded.put(KEY, {"concurrency": 3})  # settings a refusal must leave alone
    seeded.refused(422, field, "PUT", KEY, body, error="invalid")
    with pytest.raises(InvalidField) as caught:  # the queue's rules (Queue.set_key) refuse it alike
        KeyLimits.parse(body)
    assert caught.value.field == field
    assert seeded.get(KEY).json["concurrency"] == 3


GOOD_SETTINGS = [
    {"concurrency": 100_000},
    {"rate": 0.5},
    {"rate": 100_000},
    {"burst": 1, "rate": 3},
    {"concurrency": None, "rate": None, "burst": None, "paused": False},
]


@pytest.mark.parametrize("body", GOOD_SETTINGS, ids=[json.dumps(body) for body in GOOD_SETTINGS])
def test_what_the_api_takes_the_queue_takes(seeded: Api, make_queue: Any, body: dict[str, Any]):
    reply = seeded.put(KEY, body)
    assert reply.status == 200, reply
    assert make_queue().set_key("orders", "acme", **body).to_dict() == reply.json


def test_a_body_that_is_not_a_settings_object_is_refused(seeded: Api):
    for body in ([{"paused": True}], "paused", 3, None):
        seeded.refused(422, None, "PUT", KEY, body, error="invalid")  # as on every route: JSON, not an object
    seeded.refused(400, None, "PUT", KEY, raw_body='{"paused": tru', error="malformed")
    seeded.refused(400, None, "PUT", KEY, NO_BODY, error="malformed")  # a PUT needs its body, as PUT /jobs/...


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/topics/orders/keys/_lead", "key"),
        ("/topics/orders/keys/a%7Cb", "key"),
        (f"/topics/orders/keys/{'k' * 129}", "key"),
        ("/topics/_orders/keys/acme", "topic"),
    ],
)
def test_a_bad_key_or_topic_in_the_path_is_422_naming_it(seeded: Api, path: str, field: str):
    for method, body in (("GET", NO_BODY), ("PUT", {"paused": True}), ("DELETE", NO_BODY)):
        seeded.refused(422, field, method, path, body, error="invalid")
    if field == "topic":
        seeded.refused(422, "topic", "GET", path.rsplit("/", 1)[0])


@pytest.fixture
def named_only(handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str):
    """``orders`` only: no ``*`` entry."""
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps({"orders": {"target": RECORDER}}))
    api = Api.start(redis_client, namespace)
    api.create("orders", "seed", delay=600)
    return api


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/topics/nope/keys/acme", NO_BODY),
        ("PUT", "/topics/nope/keys/acme", {"paused": True}),
        ("DELETE", "/topics/nope/keys/acme", NO_BODY),
        ("GET", "/topics/nope/keys", NO_BODY),
    ],
)
def test_a_topic_neither_configured_nor_holding_jobs_is_404(named_only: Api, method: str, path: str, body: Any):
    reply = named_only.refused(404, "topic", method, path, body, error="not_found")
    assert "nope" in reply.json["message"]


def test_a_topic_no_longer_configured_but_holding_jobs_has_keys(named_only: Api, handler_env: dict[str, str]):
    Queue.from_env(topics={"*": {"target": RECORDER}}).enqueue("retired", {}, id="left", delay=60, key="acme")
    assert [key["key"] for key in named_only.get("/topics/retired/keys").json["keys"]] == ["acme"]
    assert named_only.put("/topics/retired/keys/acme", {"paused": True}).json["paused"] is True


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", KEY, "DELETE, GET, HEAD, OPTIONS, PUT"),
        ("PATCH", KEY, "DELETE, GET, HEAD, OPTIONS, PUT"),
        ("PUT", "/topics/orders/keys", "GET, HEAD, OPTIONS"),
        ("POST", "/topics/orders/keys", "GET, HEAD, OPTIONS"),
        ("DELETE", "/topics/orders/keys", "GET, HEAD, OPTIONS"),
    ],
)
def test_another_method_is_405_naming_the_allowed(seeded: Api, method: str, path: str, allow: str):
    body = {"paused": True} if method in ("POST", "PUT", "PATCH") else NO_BODY
    reply = seeded.refused(405, None, method, path, body, error="method_not_allowed")
    assert reply.headers["Allow"] == allow, reply.headers


@pytest.mark.parametrize(
    "path", ["/topics/orders/keys/acme/more", "/topics/orders/key/acme", "/topics/orders/keys/a/b"]
)
def test_paths_beyond_the_routes_are_404(seeded: Api, path: str):
    reply = seeded.refused(404, None, "GET", path, error="not_found")
    assert "Allow" not in reply.headers


# ------------------------------------------------------------------------------------------ Redis down


@pytest.fixture
def down(handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str):
    monkeypatch.setenv("DELAYQ_REDIS_URL", DOWN_URL)
    return Api.start(redis_client, namespace)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", KEY, {"paused": True}),
        ("GET", KEY, NO_BODY),
        ("DELETE", KEY, NO_BODY),
        ("GET", "/topics/orders/keys", NO_BODY),
    ],
)
def test_redis_down_is_503_at_the_first_refused_connection(
    down: Api, method: str, path: str, body: Any, *, connection_attempts: list[tuple[str, int]]
):
    reply = down.call(method, path, body)
    assert (reply.status, reply.json["error"]) == (503, "unavailable"), reply
    assert {name.lower(): value for name, value in reply.headers.items()}["retry-after"] == "1", reply.headers
    assert connection_attempts == [("127.0.0.1", 1)]


# ------------------------------------------------------------------------------------------ the document


def test_the_document_shows_the_routes_their_body_and_answers(api: Api):
    doc = api.get("/openapi.json").json
    schemas = doc["components"]["schemas"]
    one = doc["paths"]["/topics/{topic}/keys/{key}"]
    assert {method: op["operationId"] for method, op in one.items()} == {
        "get": "get_key", "put": "put_key", "delete": "reset_key"
    }  # fmt: skip
    for method in ("get", "put"):
        assert one[method]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/KeyOut")
    assert set(one["put"]["responses"]) == {"200", "400", "404", "422", "503"}
    assert "content" not in one["delete"]["responses"]["204"]
    body = one["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    settings = schemas[body]
    assert set(settings["properties"]) == {"concurrency", "rate", "burst", "paused"}
    assert settings["additionalProperties"] is False
    assert not settings.get("required")
    assert all("default" not in field for field in settings["properties"].values())  # left out: kept as it is
    assert set(schemas["KeyOut"]["required"]) == set(KeyOut.model_fields) == {
        "key", "delayed", "ready", "reserved", "concurrency", "rate", "burst", "paused", "held_until_ms"
    }  # fmt: skip
    listing = doc["paths"]["/topics/{topic}/keys"]["get"]
    assert listing["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/KeyPageOut")
    params = {p["name"]: p for p in listing["parameters"]}
    assert set(params) == {"topic", "limit", "cursor"}
    assert (params["limit"]["schema"]["minimum"], params["limit"]["schema"]["maximum"]) == (1, 1000)
    assert params["limit"]["schema"]["default"] == 100


# ------------------------------------------------------------------------------------------ ?key=


def test_a_topics_jobs_narrowed_to_a_key(api: Api):
    for n in range(12):
        api.create("orders", f"j{n:02}", delay=600, key="acme" if n % 3 == 0 else "globex")
    api.create("orders", "plain", delay=600)
    listed, cursor = [], None
    while True:
        query = {"state": "delayed", "key": "acme", "limit": "2"} | ({"cursor": cursor} if cursor else {})
        reply = api.get("/topics/orders/jobs", query=query)
        assert reply.status == 200, reply
        assert len(reply.json["jobs"]) == 2 or reply.json["next"] is None  # full pages
        listed += [(job["id"], job["key"]) for job in reply.json["jobs"]]
        cursor = reply.json["next"]
        if cursor is None:
            break
    assert listed == [("j00", "acme"), ("j03", "acme"), ("j06", "acme"), ("j09", "acme")]
    bad = api.get("/topics/orders/jobs", query={"state": "delayed", "key": "not a key"})
    assert bad.status == 422
    assert bad.json["field"] == "key"


def test_a_bulk_cancel_narrowed_to_a_key(api: Api):
    for n in range(6):
        api.create("orders", f"j{n}", delay=600, key="acme" if n % 2 == 0 else "globex")
    reply = api.delete("/topics/orders/jobs", query={"state": "delayed", "key": "acme"})
    assert (reply.status, reply.json) == (200, {"cancelled": 3})
    assert api.get("/topics/orders/keys/acme").json["delayed"] == 0
    assert api.get("/topics/orders/keys/globex").json["delayed"] == 3
