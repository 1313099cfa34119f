"""Every sample event of ``events/api/`` (REST, payload 1.0) and ``events/api/v2/`` (HTTP API, payload
2.0) through ``enqueue.lambda_handler``, in an order where the job each one needs exists; each answers
its documented success status and model, in its own payload format."""

from __future__ import annotations

import json

import pytest

import enqueue
from delayq.surfaces.api import (
    BatchOut,
    CancelledOut,
    DeadListOut,
    ForecastOut,
    HealthOut,
    JobOut,
    JobPageOut,
    PausedOut,
    PurgedOut,
    ReplayedOut,
    ScheduledOut,
    ScheduleListOut,
    ScheduleOut,
    TopicOut,
    TopicPageOut,
)
from delayq.surfaces.api.schemas import KeyOut, KeyPageOut

from support.api import Api, assert_model, check_reply
from support.events import EVENTS, FakeContext, load_event

SAMPLES = {
    "delete_dead",
    "delete_topic_jobs",
    "delete_job",
    "delete_schedule",
    "delete_topic_key",
    "get_dead",
    "get_health",
    "get_job",
    "get_openapi",
    "get_schedule",
    "get_schedules",
    "get_topic",
    "get_topic_forecast",
    "get_topic_jobs",
    "get_topic_key",
    "get_topic_keys",
    "get_topics",
    "patch_job",
    "post_dead_replay",
    "post_jobs",
    "post_jobs_batch",
    "post_topic_jobs",
    "post_topic_pause",
    "post_topic_resume",
    "put_job",
    "put_schedule",
    "put_topic_key",
}
FORMATS = ["api", "api/v2"]  # the sample directories: payload 1.0, payload 2.0


@pytest.mark.parametrize("where", FORMATS)
def test_every_sample_is_covered_here(where: str):
    assert {path.stem for path in (EVENTS / where).glob("*.json")} == SAMPLES


@pytest.mark.parametrize("where", FORMATS)
def test_samples_in_order_answer_their_success_status(api: Api, where: str):
    def sample(name: str) -> tuple[int, object]:
        event = load_event(f"{where}/{name}")
        response = enqueue.lambda_handler(event, FakeContext())
        if event.get("version") == "2.0":  # answered in 2.0: headers, never multi-value ones
            assert "multiValueHeaders" not in response, response
            if response.get("body"):
                assert response["headers"]["Content-Type"] == "application/json", response
        reply = check_reply(response)
        return reply.status, reply.json

    post_body = json.loads(load_event(f"{where}/post_jobs")["body"])
    put_body = json.loads(load_event(f"{where}/put_job")["body"])

    # PUT creates (201), then replaces (200)
    status, data = sample("put_job")
    assert status == 201, data
    assert_model(ScheduledOut, data)
    assert (data["topic"], data["id"]) == ("orders", "close-1042")
    assert api.job("orders", "close-1042")["body"] == put_body["body"]
    status, data = sample("put_job")
    assert status == 200, data
    assert_model(ScheduledOut, data)

    # DELETE cancels it (204, no body), so POST can create it (201)
    status, data = sample("delete_job")
    assert (status, data) == (204, None)
    status, data = sample("post_jobs")
    assert status == 201, data
    assert_model(ScheduledOut, data)
    assert (data["topic"], data["id"]) == ("orders", "close-1042")

    # GET shows it as POST made it
    status, data = sample("get_job")
    assert status == 200, data
    assert_model(JobOut, data)
    assert data["state"] == "delayed"
    assert data["body"] == post_body["body"]
    assert data["run_at_ms"] - data["enqueued_at_ms"] == post_body["delay"] * 1000
    assert data["attempts"] == 0

    # PATCH reschedules it by its delay
    before = api.server_ms()
    status, data = sample("patch_job")
    after = api.server_ms()
    assert status == 200, data
    assert_model(ScheduledOut, data)
    delay_ms = json.loads(load_event(f"{where}/patch_job")["body"])["delay"] * 1000
    assert before + delay_ms <= data["run_at_ms"] <= after + delay_ms
    assert api.job("orders", "close-1042")["run_at_ms"] == data["run_at_ms"]

    # the batch creates its three jobs, in order
    status, data = sample("post_jobs_batch")
    assert status == 200, data
    assert_model(BatchOut, data)
    batch = json.loads(load_event(f"{where}/post_jobs_batch")["body"])["jobs"]
    assert [(r["status"], r["id"]) for r in data["results"]] == [(201, job["id"]) for job in batch]
    for job in batch:
        assert api.job(job["topic"], job["id"])["body"] == job["body"]

    status, data = sample("get_topic")
    assert status == 200, data
    assert_model(TopicOut, data)
    assert (data["topic"], data["delayed"], data["ready"], data["reserved"], data["dead"]) == ("orders", 2, 0, 0, 0)

    # POST /topics/orders/jobs creates in the path's topic
    status, data = sample("post_topic_jobs")
    assert status == 201, data
    assert_model(ScheduledOut, data)
    topic_job = json.loads(load_event(f"{where}/post_topic_jobs")["body"])
    assert (data["topic"], data["id"]) == ("orders", topic_job["id"])
    assert api.job("orders", topic_job["id"])["body"] == topic_job["body"]
    assert api.stats("orders")["delayed"] == 3

    # the topic's delayed jobs, two a page, soonest first; the topics; the forecast
    status, data = sample("get_topic_jobs")
    assert status == 200, data
    assert_model(JobPageOut, data)
    delayed = sorted((api.job("orders", job_id) for job_id in ("close-1042", "close-1043", topic_job["id"])),
                     key=lambda job: (job["run_at_ms"], job["id"]))  # fmt: skip
    assert data["jobs"] == delayed[:2]
    assert data["next"] is not None
    status, data = sample("get_topics")
    assert status == 200, data
    assert_model(TopicPageOut, data)
    assert [topic["topic"] for topic in data["topics"]] == ["orders", "payments", "reminders"]
    assert data["next"] is None
    status, data = sample("get_topic_forecast")
    assert status == 200, data
    assert_model(ForecastOut, data)
    assert len(data["buckets"]) == 6  # an hour in buckets of ten minutes
    assert sum(bucket["count"] for bucket in data["buckets"]) == sum(
        job["run_at_ms"] < data["buckets"][-1]["to_ms"] for job in delayed
    )

    # pause and resume
    status, data = sample("post_topic_pause")
    assert (status, data) == (200, {"paused": True})
    assert_model(PausedOut, data)
    assert api.stats("orders")["paused"] is True
    status, data = sample("post_topic_resume")
    assert (status, data) == (200, {"paused": False})
    assert api.stats("orders")["paused"] is False

    # a flow key's settings: PUT, GET, the topic's keys, DELETE (back to the topic's defaults)
    status, data = sample("put_topic_key")
    assert status == 200, data
    assert_model(KeyOut, data)
    settings = json.loads(load_event(f"{where}/put_topic_key")["body"])
    assert (data["key"], data["concurrency"], data["rate"], data["paused"]) == (
        "tenant-42", settings["concurrency"], settings["rate"], False
    )  # fmt: skip
    assert (data["delayed"], data["ready"], data["reserved"], data["held_until_ms"]) == (0, 0, 0, None)
    status, shown = sample("get_topic_key")
    assert (status, shown) == (200, data)
    status, listed = sample("get_topic_keys")
    assert (status, listed) == (200, {"keys": [data], "next": None})
    assert_model(KeyPageOut, listed)
    status, data = sample("delete_topic_key")
    assert (status, data) == (204, None)
    assert sample("get_topic_keys") == (200, {"keys": [], "next": None})
    assert sample("get_topic_key")[1]["concurrency"] is None

    # close-1042 falls due, is taken and fails for good: the dead list shows it
    status, data = sample("get_dead")
    assert (status, data) == (200, {"jobs": []})
    assert api.patch("/jobs/orders/close-1042", {"delay": 0}).status == 200
    token = api.lease("orders", "close-1042")
    assert api.fail("orders", "close-1042", token, "payment service said no", retries=0) == "dead"
    status, data = sample("get_dead")
    assert status == 200, data
    assert_model(DeadListOut, data)
    assert [(job["id"], job["last_error"]) for job in data["jobs"]] == [("close-1042", "payment service said no")]

    # replay brings it back
    status, data = sample("post_dead_replay")
    assert (status, data) == (200, {"replayed": 1})
    assert_model(ReplayedOut, data)
    assert api.job("orders", "close-1042")["state"] == "ready"

    # DELETE: 204, then 404
    status, data = sample("delete_job")
    assert (status, data) == (204, None)
    status, data = sample("delete_job")
    assert status == 404, data
    assert data["field"] == "id"

    # purge a dead job
    api.kill("orders", "close-1044")
    status, data = sample("delete_dead")
    assert (status, data) == (200, {"purged": 1})
    assert_model(PurgedOut, data)
    assert api.get("/jobs/orders/close-1044").status == 404

    # cancel every delayed job of the topic
    delayed_before = api.stats("orders")["delayed"]
    assert delayed_before > 0
    status, data = sample("delete_topic_jobs")
    assert (status, data) == (200, {"cancelled": delayed_before})
    assert_model(CancelledOut, data)
    assert api.stats("orders")["delayed"] == 0

    # a schedule: PUT creates (201) with its first occurrence, then replaces (200); GET, the list, DELETE
    schedule_body = json.loads(load_event(f"{where}/put_schedule")["body"])
    status, data = sample("put_schedule")
    assert status == 201, data
    assert_model(ScheduleOut, data)
    assert (data["topic"], data["name"], data["cron"]) == ("reports", "daily-report", schedule_body["cron"])
    first = f"daily-report@{data['next_run_at'][:19]}Z"
    assert api.job("reports", first)["body"] == schedule_body["body"]
    status, data = sample("put_schedule")
    assert status == 200, data
    status, shown = sample("get_schedule")
    assert status == 200, shown
    assert_model(ScheduleOut, shown)
    assert shown == data
    status, listed = sample("get_schedules")
    assert (status, listed) == (200, {"schedules": [shown]})
    assert_model(ScheduleListOut, listed)
    status, data = sample("delete_schedule")
    assert (status, data) == (204, None)
    assert api.get(f"/jobs/reports/{first}").status == 404  # its pending occurrence, cancelled
    status, data = sample("delete_schedule")
    assert (status, data["field"]) == (404, "name")

    status, data = sample("get_health")
    assert (status, data) == (200, {"status": "ok"})
    assert_model(HealthOut, data)

    status, data = sample("get_openapi")
    assert status == 200
    assert str(data["openapi"]).startswith("3.")
