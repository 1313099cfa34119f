"""Seeing and steering a queue through the HTTP API: GET /topics, GET /topics/{topic}/jobs, GET
/topics/{topic}/forecast, POST /topics/{topic}/pause and /resume; their refusals (422 naming the
field, 404 for a topic nobody knows), each leaving Redis as it was."""

from __future__ import annotations

import json

import pytest
import redis

from delayq import Queue
from delayq.store.listing import encode_cursor
from delayq.surfaces.api import CancelledOut, ForecastOut, JobOut, JobPageOut, PausedOut, TopicOut, TopicPageOut

from support.api import Api, assert_model
from support.recorder import RECORDER


def walk(api: Api, path: str, key: str, **query: str) -> list[dict]:
    items: list[dict] = []
    cursor = None
    while True:
        reply = api.get(path, query=query | ({"cursor": cursor} if cursor else {}))
        assert reply.status == 200, reply
        items += reply.json[key]
        cursor = reply.json["next"]
        if cursor is None:
            return items


# ------------------------------------------------------------------------------------------ GET /topics


def test_topics_by_name_a_page_at_a_time(seeded: Api):
    seeded.create("zeta", "z", delay=0)  # a "*" topic holding a job
    reply = seeded.get("/topics", query={"limit": "2"})
    assert reply.status == 200, reply
    assert_model(TopicPageOut, reply.json)
    assert [topic["topic"] for topic in reply.json["topics"]] == ["orders", "payments"]
    for topic in reply.json["topics"]:
        assert_model(TopicOut, topic)
    assert [topic["topic"] for topic in walk(seeded, "/topics", "topics", limit="2")] == [
        "orders", "payments", "reminders", "zeta"
    ]  # fmt: skip
    assert seeded.get("/topics").json["topics"][0] == seeded.stats("orders")


# ------------------------------------------------------------------------------------------ GET /topics/{topic}/jobs


def test_jobs_by_state_as_get_shows_each(seeded: Api):
    seeded.kill("orders", "x1", error="it broke")
    for i in range(5):
        seeded.create("orders", f"d{i}", delay=60 + i, body={"i": i})
    seeded.create("orders", "r1", delay=0)
    reply = seeded.get("/topics/orders/jobs", query={"state": "delayed", "limit": "2"})
    assert reply.status == 200, reply
    assert_model(JobPageOut, reply.json)
    assert reply.json["jobs"] == [seeded.job("orders", "d0"), seeded.job("orders", "d1")]
    for job in reply.json["jobs"]:
        assert_model(JobOut, job)
    delayed = walk(seeded, "/topics/orders/jobs", "jobs", state="delayed", limit="2")
    assert [job["id"] for job in delayed] == ["d0", "d1", "d2", "d3", "d4", "seed"]
    assert [job["id"] for job in walk(seeded, "/topics/orders/jobs", "jobs", state="ready")] == ["r1"]
    dead = walk(seeded, "/topics/orders/jobs", "jobs", state="dead")
    assert [(job["id"], job["state"], job["last_error"]) for job in dead] == [("x1", "dead", "it broke")]
    assert seeded.get("/topics/orders/jobs", query={"state": "reserved"}).json == {"jobs": [], "next": None}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({}, "state"),
        ({"state": "waiting"}, "state"),
        ({"state": "delayed", "limit": "0"}, "limit"),
        ({"state": "delayed", "limit": "1001"}, "limit"),
        ({"state": "delayed", "limit": "ten"}, "limit"),
        ({"state": "delayed", "cursor": "nonsense"}, "cursor"),
        ({"state": "delayed", "cursor": encode_cursor("dead", 1, "a")}, "cursor"),
        ({"state": "ready", "cursor": encode_cursor("ready", {"7": 1})}, "cursor"),
        ({"state": "delayed", "cursor": "x" * 20_000}, "cursor"),
    ],
)
def test_job_lists_refuse_bad_queries_naming_the_field(seeded: Api, query: dict[str, str], field: str):
    seeded.refused(422, field, "GET", "/topics/orders/jobs", query=query, error="invalid")


def test_topics_refuse_bad_queries_naming_the_field(seeded: Api):
    seeded.refused(422, "limit", "GET", "/topics", query={"limit": "0"})
    seeded.refused(422, "cursor", "GET", "/topics", query={"cursor": encode_cursor("delayed", 1, "a")})


# ------------------------------------------------------------------------------------------ forecast


def test_forecast_buckets_from_now(seeded: Api):
    for i in range(3):
        seeded.create("orders", f"soon{i}", delay=30)
    reply = seeded.get("/topics/orders/forecast", query={"minutes": "15", "bucket": "300"})
    assert reply.status == 200, reply
    assert_model(ForecastOut, reply.json)
    first = reply.json["buckets"][0]
    seed = (seeded.job("orders", "seed")["run_at_ms"] - first["from_ms"]) // 300_000  # its bucket: in 10 minutes
    assert [bucket["count"] for bucket in reply.json["buckets"]] == [3 + (seed == 0), int(seed == 1), int(seed == 2)]
    assert abs(first["from_ms"] - seeded.server_ms()) < 10_000
    assert reply.json["buckets"][-1]["to_ms"] == first["from_ms"] + 15 * 60_000
    assert len(seeded.get("/topics/orders/forecast").json["buckets"]) == 60


@pytest.mark.parametrize(
    ("query", "field"),
    [({"minutes": "0"}, "minutes"), ({"minutes": "10081"}, "minutes"), ({"minutes": "1.5"}, "minutes"),
     ({"bucket": "0"}, "bucket"), ({"bucket": "86401"}, "bucket"), ({"minutes": "10080", "bucket": "1"}, "bucket")],
)  # fmt: skip
def test_forecast_refuses_bad_windows_naming_the_field(seeded: Api, query: dict[str, str], field: str):
    seeded.refused(422, field, "GET", "/topics/orders/forecast", query=query, error="invalid")


# ------------------------------------------------------------------------------------------ pause, resume


def test_pause_and_resume_are_idempotent_and_shown_in_the_stats(seeded: Api):
    for _ in range(2):
        reply = seeded.post("/topics/orders/pause")
        assert (reply.status, reply.json) == (200, {"paused": True})
        assert_model(PausedOut, reply.json)
        assert seeded.stats("orders")["paused"] is True
    assert seeded.stats("reminders")["paused"] is False
    for _ in range(2):
        reply = seeded.post("/topics/orders/resume")
        assert (reply.status, reply.json) == (200, {"paused": False})
    assert seeded.stats("orders")["paused"] is False


def test_a_body_is_not_needed_but_must_be_json_when_given(seeded: Api):
    assert seeded.post("/topics/orders/pause", {}).status == 200
    seeded.refused(400, None, "POST", "/topics/orders/pause", raw_body="{not json")


# ------------------------------------------------------------------------------------------ topics nobody knows


@pytest.fixture
def named_only(handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str):
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps({"orders": {"target": RECORDER}}))
    api = Api.start(redis_client, namespace)
    api.create("orders", "seed", delay=600)
    return api


@pytest.mark.parametrize(
    ("method", "path", "query"),
    [
        ("GET", "/topics/nope/jobs", {"state": "delayed"}),
        ("GET", "/topics/nope/forecast", None),
        ("POST", "/topics/nope/pause", None),
        ("POST", "/topics/nope/resume", None),
    ],
)
def test_a_topic_neither_configured_nor_holding_jobs_is_404(
    named_only: Api, method: str, path: str, query: dict[str, str] | None
):
    reply = named_only.refused(404, "topic", method, path, query=query, error="not_found")
    assert "nope" in reply.json["message"]


def test_a_topic_no_longer_configured_but_holding_jobs_is_seen_and_steered(
    named_only: Api, handler_env: dict[str, str]
):
    Queue.from_env(topics={"*": {"target": RECORDER}}).enqueue("retired", {}, id="left", delay=60)
    assert [job["id"] for job in named_only.get("/topics/retired/jobs", query={"state": "delayed"}).json["jobs"]] == [
        "left"
    ]
    assert named_only.post("/topics/retired/pause").status == 200
    assert [topic["topic"] for topic in named_only.get("/topics").json["topics"]] == ["orders", "retired"]


# ------------------------------------------------------------------------------------------ DELETE /topics/{topic}/jobs


def test_cancel_all_of_a_state_leaves_the_other_states_and_topics(seeded: Api):
    seeded.kill("orders", "x1")
    for n in range(3):
        seeded.create("orders", f"d{n}", delay=600)
        seeded.create("orders", f"r{n}", delay=0)
    seeded.create("payments", "other", delay=600)
    reply = seeded.delete("/topics/orders/jobs", query={"state": "delayed"})
    assert (reply.status, reply.json) == (200, {"cancelled": 4})  # the seed and d0..d2
    assert_model(CancelledOut, reply.json)
    stats = seeded.stats("orders")
    assert (stats["delayed"], stats["ready"], stats["dead"]) == (0, 3, 1)
    assert seeded.get("/jobs/orders/d1").status == 404
    assert seeded.stats("payments")["delayed"] == 1
    assert seeded.delete("/topics/orders/jobs", query={"state": "ready"}).json == {"cancelled": 3}
    assert seeded.delete("/topics/orders/jobs", query={"state": "dead"}).json == {"cancelled": 1}
    assert seeded.delete("/topics/orders/jobs", query={"state": "dead"}).json == {"cancelled": 0}
    stats = seeded.stats("orders")
    assert (stats["delayed"], stats["ready"], stats["reserved"], stats["dead"]) == (0, 0, 0, 0)
    assert seeded.get("/jobs/orders/r2").status == 404
    assert seeded.get("/jobs/orders/x1").status == 404


def test_cancel_all_leaves_reserved_jobs_alone(seeded: Api):
    seeded.create("orders", "busy", delay=0)
    seeded.lease("orders", "busy")
    assert seeded.delete("/topics/orders/jobs", query={"state": "ready"}).json == {"cancelled": 0}
    assert seeded.job("orders", "busy")["state"] == "reserved"


@pytest.mark.parametrize("query", [{}, {"state": "reserved"}, {"state": "all"}, {"state": ""}, {"state": "READY"}])
def test_cancel_all_needs_a_cancellable_state_naming_state(seeded: Api, query: dict[str, str]):
    seeded.refused(422, "state", "DELETE", "/topics/orders/jobs", query=query)


def test_cancel_all_of_a_bad_topic_is_422_naming_topic(seeded: Api):
    seeded.refused(422, "topic", "DELETE", "/topics/no%20pe/jobs", query={"state": "ready"})


def test_cancel_all_of_a_topic_nobody_knows_is_404(named_only: Api):
    named_only.refused(404, "topic", "DELETE", "/topics/nope/jobs", query={"state": "ready"}, error="not_found")
