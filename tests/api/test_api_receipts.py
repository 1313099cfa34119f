"""Receipts through the HTTP API: a job that succeeded is ``done`` for its topic's keep_done, a dedupe
window for creates; PUT makes it anew, DELETE forgets it, PATCH refuses it; counted and listed."""

from __future__ import annotations

from delayq.core.job import RESULT_MAX_BYTES, encode_result
from delayq.core.settings import Settings
from delayq.store import calls
from delayq.store.calls import Ack
from delayq.surfaces.api import JobOut, TopicOut

from support.api import Api, assert_model


def test_get_of_a_done_job(api: Api):
    created = api.create("orders", "a", delay=0, body={"big": "body"})
    token = api.lease("orders", "a")
    job = api.job("orders", "a")
    assert job["state"] == "reserved"
    assert (job["started_at_ms"], job["done_at"], job["done_at_ms"]) == (None, None, None)
    started = api.server_ms()
    keeping = Settings.from_env().topics.retrying("orders")
    assert calls.ack(api.keys.partitions[0], "orders", keeping, [("a", token, started)]).run(api.r) == 1
    after = api.server_ms()
    job = api.job("orders", "a")
    assert_model(JobOut, job)
    assert (job["state"], job["attempts"], job["run_at_ms"]) == ("done", 1, created["run_at_ms"])
    assert (job["body"], job["last_error"], job["started_at_ms"]) == (None, None, started)
    assert started <= job["done_at_ms"] <= after
    assert job["done_at"].endswith("Z")


def test_create_of_a_done_job_is_409_exists_while_its_receipt_lasts(api: Api):
    api.finish("orders", "a")
    api.refused(409, "id", "POST", "/jobs", {"topic": "orders", "id": "a"}, error="exists")
    api.refused(409, "id", "POST", "/topics/orders/jobs", {"id": "a"}, error="exists")
    reply = api.post("/jobs/batch", {"jobs": [{"topic": "orders", "id": "a"}, {"topic": "orders", "id": "b"}]})
    assert reply.status == 200, reply
    results = reply.json["results"]
    assert [(r["status"], r["id"]) for r in results] == [(409, "a"), (201, "b")]
    assert results[0]["error"]["error"] == "exists"
    assert api.job("orders", "a")["state"] == "done"


def test_put_of_a_done_job_makes_a_new_job_201(api: Api):
    api.finish("orders", "a")
    reply = api.put("/jobs/orders/a", {"delay": 60, "body": {"v": 2}})
    assert reply.status == 201, reply
    job = api.job("orders", "a")
    assert (job["state"], job["attempts"], job["body"], job["done_at_ms"]) == ("delayed", 0, {"v": 2}, None)
    assert api.stats("orders")["done"] == 0


def test_delete_forgets_a_receipt_204(api: Api):
    api.finish("orders", "a")
    assert api.delete("/jobs/orders/a").status == 204
    assert api.get("/jobs/orders/a").status == 404
    api.create("orders", "a")  # the dedupe window is gone with it


def test_patch_of_a_done_job_is_409_done(api: Api):
    api.finish("orders", "a")
    reply = api.refused(409, "id", "PATCH", "/jobs/orders/a", {"delay": 5}, error="done")
    assert "PUT" in reply.json["message"]


def test_topics_count_receipts_and_list_them_newest_first(api: Api):
    for n in range(5):
        api.finish("orders", f"j{n}")
    api.create("orders", "waiting", delay=60)
    stats = api.stats("orders")
    assert_model(TopicOut, stats)
    assert (stats["delayed"], stats["done"]) == (1, 5)
    topics = api.get("/topics").json["topics"]
    assert [t["done"] for t in topics if t["topic"] == "orders"] == [5]
    seen = []
    query = {"state": "done", "limit": "2"}
    while True:
        page = api.get("/topics/orders/jobs", query=query).json
        assert all(job["state"] == "done" and job["body"] is None for job in page["jobs"])
        seen += page["jobs"]
        if page["next"] is None:
            break
        query = {**query, "cursor": page["next"]}
    assert sorted(job["id"] for job in seen) == [f"j{n}" for n in range(5)]
    done_at = [job["done_at_ms"] for job in seen]
    assert done_at == sorted(done_at, reverse=True)


def test_a_done_job_shows_its_result_and_whether_it_was_cut(api: Api):
    keeping = Settings.from_env().topics.retrying("orders")
    answers = {"a": {"charged": 12}, "b": "x" * (RESULT_MAX_BYTES + 10), "c": None}
    for job_id, answer in answers.items():
        api.create("orders", job_id, delay=0)
        token = api.lease("orders", job_id)
        ack = Ack(job_id, token, api.server_ms(), encode_result(answer))
        assert calls.ack(api.keys.partitions[0], "orders", keeping, [ack]).run(api.r) == 1
    shown = {job_id: api.job("orders", job_id) for job_id in answers}
    for job in shown.values():
        assert_model(JobOut, job)
    assert (shown["a"]["result"], shown["a"]["result_truncated"]) == ({"charged": 12}, False)
    assert (shown["b"]["result"], shown["b"]["result_truncated"]) == ("x" * RESULT_MAX_BYTES, True)
    assert (shown["c"]["result"], shown["c"]["result_truncated"]) == (None, False)
    listed = api.get("/topics/orders/jobs", query={"state": "done"}).json["jobs"]
    assert {job["id"]: job["result"] for job in listed} == {
        "a": {"charged": 12},
        "b": "x" * RESULT_MAX_BYTES,
        "c": None,
    }
    api.create("orders", "d", delay=60)
    assert (api.job("orders", "d")["result"], api.job("orders", "d")["result_truncated"]) == (None, False)
