"""``GET /topics/{topic}`` counts, and the dead letters: list, replay, purge."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from delayq import Queue, TopicNotFound
from delayq.surfaces.api import DeadJobOut, DeadListOut, PurgedOut, ReplayedOut, TopicOut

from support.api import ANY_FIELD, ANY_STATUS, Api, assert_model
from support.recorder import RECORDER

BAD_TOPICS = ["_private", "has space", "a" * 65]


def kill_several(api: Api, topic: str, ids: list[str]) -> None:
    """Dead jobs, each dying at a later millisecond than the one before."""
    for job_id in ids:
        api.kill(topic, job_id, error=f"{job_id} failed")
        time.sleep(0.003)


def dead_list(api: Api, topic: str, **query: str) -> list[dict[str, Any]]:
    reply = api.get(f"/topics/{topic}/dead", query=query or None)
    assert reply.status == 200, reply
    assert_model(DeadListOut, reply.json)
    for job in reply.json["jobs"]:
        assert_model(DeadJobOut, job)
    return reply.json["jobs"]


# ------------------------------------------------------------------------------------------ stats


def test_stats_of_an_empty_topic(api: Api):
    data = api.stats("orders")
    assert_model(TopicOut, data)
    assert data == {
        "topic": "orders",
        "delayed": 0,
        "ready": 0,
        "reserved": 0,
        "dead": 0,
        "done": 0,
        "next_run_at_ms": None,
        "next_run_at": None,
        "paused": False,
        "oldest_ready_ms": 0,
        "lateness": {"window_s": 300, "deliveries": 0, "p50_ms": None, "p99_ms": None},
    }


def test_stats_count_every_state_and_the_next_run_at(api: Api):
    api.kill("orders", "dead-1")
    api.create("orders", "leased-1", delay=0)
    api.lease("orders", "leased-1")
    api.create("orders", "ready-1", delay=0)
    api.create("orders", "ready-2", run_at=1)
    later = api.create("orders", "delayed-1", delay=600)
    sooner = api.create("orders", "delayed-2", delay=300)
    api.create("orders", "delayed-3", delay=900)
    api.create("reminders", "elsewhere", delay=1)  # another topic: not counted

    data = api.stats("orders")
    assert_model(TopicOut, data)
    assert (data["delayed"], data["ready"], data["reserved"], data["dead"]) == (3, 2, 1, 1)
    assert data["next_run_at_ms"] == sooner["run_at_ms"] < later["run_at_ms"]
    assert data["next_run_at"] == sooner["run_at"]

    other = api.stats("reminders")
    assert (other["delayed"], other["ready"], other["reserved"], other["dead"]) == (1, 0, 0, 0)


def test_stats_of_a_topic_never_used_writes_nothing(seeded: Api):
    """``*`` configures every topic: one never used has zero of everything."""
    before = seeded.snapshot()
    data = seeded.stats("never-used")
    assert (data["delayed"], data["ready"], data["reserved"], data["dead"]) == (0, 0, 0, 0)
    assert seeded.snapshot() == before


def test_stats_bad_topic_is_422_naming_topic(seeded: Api):
    for topic in BAD_TOPICS:
        seeded.refused(422, "topic", "GET", f"/topics/{topic}", error="invalid")


@pytest.fixture
def named_only(handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str):
    """Topics ``orders`` and ``retired`` configured, with a job in each; then ``retired`` dropped from
    the config (no ``*``): it still holds its job."""
    topics = {"orders": {"target": RECORDER}, "retired": {"target": RECORDER}}
    Queue.from_env(topics=topics).enqueue("retired", {"old": True}, id="left-over", delay=600)
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps({"orders": {"target": RECORDER}}))
    api = Api.start(redis_client, namespace)
    api.create("orders", "seed", delay=600)
    return api


def test_stats_of_a_topic_neither_configured_nor_holding_jobs_is_404(named_only: Api):
    reply = named_only.refused(404, "topic", "GET", "/topics/nope", error="not_found")
    assert "nope" in reply.json["message"], reply
    assert named_only.stats("orders")["delayed"] == 1


def test_stats_of_a_topic_no_longer_configured_but_holding_jobs_is_200(named_only: Api):
    data = named_only.stats("retired")
    assert (data["delayed"], data["ready"], data["reserved"], data["dead"]) == (1, 0, 0, 0)


def test_the_client_refuses_a_topic_neither_configured_nor_holding_jobs(named_only: Api):
    queue = Queue.from_env()
    with pytest.raises(TopicNotFound) as refused:
        queue.stats("nope")
    assert (refused.value.status, refused.value.field) == (404, "topic")
    assert queue.stats("retired").delayed == 1


# ------------------------------------------------------------------------------------------ dead list


def test_dead_list_shows_last_error_newest_first(api: Api):
    kill_several(api, "orders", ["x1", "x2", "x3"])
    api.kill("reminders", "other")
    jobs = dead_list(api, "orders")
    assert [job["id"] for job in jobs] == ["x3", "x2", "x1"]
    first = jobs[-1]
    assert first["topic"] == "orders"
    assert first["last_error"] == "x1 failed"
    assert first["body"] == {"dead": "x1"}
    assert first["attempts"] == 1
    assert first["died_at_ms"] >= first["enqueued_at_ms"]
    assert [job["died_at_ms"] for job in jobs] == sorted((job["died_at_ms"] for job in jobs), reverse=True)
    assert api.stats("orders")["dead"] == 3


def test_dead_list_limit(api: Api):
    kill_several(api, "orders", ["x1", "x2", "x3"])
    assert [job["id"] for job in dead_list(api, "orders", limit="1")] == ["x3"]
    assert [job["id"] for job in dead_list(api, "orders", limit="2")] == ["x3", "x2"]
    assert len(dead_list(api, "orders", limit="1000")) == 3


def test_dead_list_of_a_topic_without_dead_jobs_is_empty(seeded: Api):
    assert dead_list(seeded, "orders") == []
    assert dead_list(seeded, "never-used") == []


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "abc", "1.5", ""])
def test_dead_list_limit_out_of_bounds_is_422_naming_limit(seeded: Api, limit: str):
    seeded.refused(422, "limit", "GET", "/topics/orders/dead", query={"limit": limit}, error="invalid")


def test_dead_list_bad_topic_is_422(seeded: Api):
    for topic in BAD_TOPICS:
        seeded.refused(422, "topic", "GET", f"/topics/{topic}/dead")


# ------------------------------------------------------------------------------------------ replay


def test_replay_by_ids(api: Api):
    kill_several(api, "orders", ["x1", "x2", "x3"])
    api.create("orders", "alive", delay=60)
    reply = api.post("/topics/orders/dead/replay", {"ids": ["x1", "x3", "alive", "missing"]})
    assert reply.status == 200, reply
    assert_model(ReplayedOut, reply.json)
    assert reply.json == {"replayed": 2}
    for job_id in ("x1", "x3"):
        job = api.job("orders", job_id)
        assert (job["state"], job["attempts"]) == ("ready", 0)
        assert job["last_error"] == f"{job_id} failed"  # kept until it succeeds
        assert job["body"] == {"dead": job_id}
    assert api.job("orders", "x2")["state"] == "dead"
    assert api.job("orders", "alive")["state"] == "delayed"
    assert [job["id"] for job in dead_list(api, "orders")] == ["x2"]
    stats = api.stats("orders")
    assert (stats["delayed"], stats["ready"], stats["dead"]) == (1, 2, 1)


@pytest.mark.parametrize("body", [None, {}, {"ids": None}], ids=["no body", "empty object", "ids null"])
def test_replay_all(api: Api, body: Any):
    kill_several(api, "orders", ["x1", "x2"])
    api.kill("reminders", "other")
    reply = api.post("/topics/orders/dead/replay") if body is None else api.post("/topics/orders/dead/replay", body)
    assert reply.status == 200, reply
    assert reply.json == {"replayed": 2}
    assert dead_list(api, "orders") == []
    assert api.stats("orders")["ready"] == 2
    assert api.job("reminders", "other")["state"] == "dead"


def test_replay_with_nothing_dead_is_0_and_writes_nothing(seeded: Api):
    before = seeded.snapshot()
    assert seeded.post("/topics/orders/dead/replay", {"ids": ["seed", "missing"]}).json == {"replayed": 0}
    assert seeded.post("/topics/orders/dead/replay", {}).json == {"replayed": 0}
    assert seeded.post("/topics/orders/dead/replay", {"ids": []}).json == {"replayed": 0}
    assert seeded.snapshot() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ids": "x1"}, "ids"),
        ({"ids": ["ok", "-bad"]}, "ids[1]"),
        ({"ids": [5]}, "ids[0]"),
        ({"all": True}, "all"),
    ],
    ids=repr,
)
def test_replay_invalid_is_422_naming_the_field(seeded: Api, body: dict[str, Any], field: str):
    seeded.kill("orders", "x1")
    seeded.refused(422, field, "POST", "/topics/orders/dead/replay", body, error="invalid")


def test_replay_of_more_than_1000_ids_is_refused_naming_ids(seeded: Api):
    seeded.kill("orders", "x1")
    reply = seeded.refused(ANY_STATUS, "ids", "POST", "/topics/orders/dead/replay", {"ids": ["x1"] * 1001})
    assert reply.status in (413, 422), reply


def test_replay_malformed_json_is_400(seeded: Api):
    seeded.kill("orders", "x1")
    seeded.refused(400, ANY_FIELD, "POST", "/topics/orders/dead/replay", raw_body="{ids: [x1]}", error="malformed")


def test_replay_bad_topic_is_422(seeded: Api):
    for topic in BAD_TOPICS:
        seeded.refused(422, "topic", "POST", f"/topics/{topic}/dead/replay", {})


# ------------------------------------------------------------------------------------------ purge


def test_purge_deletes_every_dead_job_of_the_topic(api: Api):
    kill_several(api, "orders", ["x1", "x2", "x3"])
    api.kill("reminders", "other")
    api.create("orders", "alive", delay=60)
    reply = api.delete("/topics/orders/dead")
    assert reply.status == 200, reply
    assert_model(PurgedOut, reply.json)
    assert reply.json == {"purged": 3}
    assert dead_list(api, "orders") == []
    for job_id in ("x1", "x2", "x3"):
        assert api.get(f"/jobs/orders/{job_id}").status == 404
    dump = repr(api.snapshot())
    for job_id in ("x1", "x2", "x3", "x1 failed"):
        assert f"'{job_id}'" not in dump
    assert api.job("orders", "alive")["state"] == "delayed"
    assert api.job("reminders", "other")["state"] == "dead"
    assert api.delete("/topics/orders/dead").json == {"purged": 0}


def test_purge_with_nothing_dead_writes_nothing(seeded: Api):
    before = seeded.snapshot()
    reply = seeded.delete("/topics/orders/dead")
    assert (reply.status, reply.json) == (200, {"purged": 0})
    assert seeded.snapshot() == before


def test_purge_bad_topic_is_422(seeded: Api):
    for topic in BAD_TOPICS:
        seeded.refused(422, "topic", "DELETE", f"/topics/{topic}/dead")
