"""The schedule routes through the real handler: ``PUT``/``GET``/``DELETE /schedules/{topic}/{name}``
and ``GET /schedules?topic=``; the answers the contract describes, and a 422 naming the field, with
nothing written, for every wrong field."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from delayq.core.calendar import CronCalendar
from delayq.core.recurring import occurrence_id
from delayq.core.schedule import iso_utc
from delayq.surfaces.api import ScheduleListOut, ScheduleOut

from support.api import Api, assert_model

DAILY = {"cron": "0 8 * * 1-5", "timezone": "Europe/Paris", "body": {"report": "daily"}, "retries": 3}


def test_put_creates_then_replaces_and_answers_the_definition_with_its_next_runs(api: Api) -> None:
    before = api.server_ms()
    created = api.put("/schedules/reports/daily-report", DAILY)
    assert created.status == 201, created
    assert_model(ScheduleOut, created.json)
    data = created.json
    assert {key: data[key] for key in DAILY} == DAILY
    assert (data["topic"], data["name"], data["every"], data["start_at"]) == ("reports", "daily-report", None, None)
    assert before <= data["created_at_ms"] <= api.server_ms()
    runs = CronCalendar.of(DAILY["cron"], DAILY["timezone"]).next_runs(data["created_at_ms"] - 1, 5)
    assert data["next_runs"] == [iso_utc(ms) for ms in runs]
    assert (data["next_run_at"], data["next_run_at_ms"]) == (iso_utc(runs[0]), runs[0])
    job = api.job("reports", occurrence_id("daily-report", runs[0]))
    assert (job["state"], job["body"], job["retries"], job["run_at_ms"]) == ("delayed", {"report": "daily"}, 3, runs[0])

    replaced = api.put("/schedules/reports/daily-report", {"every": 300})
    assert replaced.status == 200, replaced
    assert_model(ScheduleOut, replaced.json)
    assert (replaced.json["cron"], replaced.json["every"], replaced.json["timezone"]) == (None, 300, "UTC")
    assert api.get(f"/jobs/reports/{occurrence_id('daily-report', runs[0])}").status == 404  # cancelled
    assert api.get("/schedules/reports/daily-report").json == replaced.json


def test_get_list_and_delete(api: Api) -> None:
    for topic, name in [("reports", "b"), ("reports", "a"), ("orders", "z")]:
        assert api.put(f"/schedules/{topic}/{name}", {"every": 60, "body": name}).status == 201
    listed = api.get("/schedules")
    assert listed.status == 200, listed
    assert_model(ScheduleListOut, listed.json)
    assert [(s["topic"], s["name"]) for s in listed.json["schedules"]] == [
        ("orders", "z"),
        ("reports", "a"),
        ("reports", "b"),
    ]
    only = api.get("/schedules", query={"topic": "reports"})
    assert [s["name"] for s in only.json["schedules"]] == ["a", "b"]
    assert api.get("/schedules", query={"topic": "none"}).json == {"schedules": []}

    shown = api.get("/schedules/reports/a")
    assert shown.status == 200
    assert shown.json == only.json["schedules"][0]
    pending = occurrence_id("a", shown.json["next_run_at_ms"])
    assert api.job("reports", pending)["body"] == "a"

    deleted = api.delete("/schedules/reports/a")
    assert (deleted.status, deleted.json) == (204, None)
    assert api.get(f"/jobs/reports/{pending}").status == 404  # its pending occurrence is cancelled too
    for method in ("GET", "DELETE"):
        gone = api.call(method, "/schedules/reports/a")
        assert (gone.status, gone.json["error"], gone.field) == (404, "not_found", "name")


def test_a_schedule_past_its_end_answers_null_next_run(api: Api) -> None:
    reply = api.put(
        "/schedules/reports/over", {"every": 60, "start_at": 1_500_000_000, "end_at": "2020-01-01T00:00:00Z"}
    )
    assert reply.status == 201, reply
    assert (reply.json["next_run_at"], reply.json["next_run_at_ms"], reply.json["next_runs"]) == (None, None, [])
    assert (reply.json["start_at"], reply.json["end_at"]) == (1_500_000_000, "2020-01-01T00:00:00Z")  # as given


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/schedules/reports/s", {}, "cron"),
        ("/schedules/reports/s", {"cron": "* * * * *", "every": 60}, "cron"),
        ("/schedules/reports/s", {"cron": "0 0 31 2 *"}, "cron"),
        ("/schedules/reports/s", {"cron": "0 8 * *"}, "cron"),
        ("/schedules/reports/s", {"cron": "@reboot"}, "cron"),
        ("/schedules/reports/s", {"every": 0}, "every"),
        ("/schedules/reports/s", {"every": 31_622_401}, "every"),
        ("/schedules/reports/s", {"every": "60"}, "every"),
        ("/schedules/reports/s", {"every": 60, "timezone": "europe/paris"}, "timezone"),
        ("/schedules/reports/s", {"every": 60, "timezone": "+02:00"}, "timezone"),
        ("/schedules/reports/s", {"every": 60, "start_at": "2026-11-26T08:00:00"}, "start_at"),
        ("/schedules/reports/s", {"every": 60, "start_at": 20, "end_at": 10}, "end_at"),
        ("/schedules/reports/s", {"every": 60, "retries": 26}, "retries"),
        ("/schedules/reports/s", {"every": 60, "timeout": 0}, "timeout"),
        ("/schedules/reports/s", {"every": 60, "backoff": []}, "backoff"),
        ("/schedules/reports/s", {"every": 60, "topic": "reports"}, "topic"),
        ("/schedules/reports/s", {"every": 60, "delay": 5}, "delay"),
        ("/schedules/reports/daily%20report", {"every": 60}, "name"),
        ("/schedules/-bad/s", {"every": 60}, "topic"),
    ],
)
def test_a_wrong_field_is_a_422_naming_it_and_writes_nothing(api: Api, path: str, body: Any, field: str) -> None:
    assert api.put("/schedules/reports/seed", {"every": 3600}).status == 201
    api.refused(422, field, "PUT", path, body)


def test_a_body_too_large_is_a_413_and_writes_nothing(api: Api) -> None:
    assert api.put("/schedules/reports/seed", {"every": 3600}).status == 201
    api.refused(413, "body", "PUT", "/schedules/reports/s", {"every": 60, "body": "x" * (256 * 1024)})


def test_a_topic_nobody_configured_is_a_422_naming_topic(
    api: Api, monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str
) -> None:
    monkeypatch.setenv("DELAYQ_TOPICS", '{"orders": {"target": "python:support.recorder:deliver"}}')
    api = Api.start(redis_client, namespace)
    assert api.put("/schedules/orders/seed", {"every": 3600}).status == 201
    reply = api.refused(422, "topic", "PUT", "/schedules/elsewhere/s", {"every": 60})
    assert "elsewhere" in reply.json["message"]


@pytest.mark.parametrize(
    ("method", "path", "query", "field"),
    [
        ("GET", "/schedules/reports/a@b", None, "name"),
        ("DELETE", "/schedules/_x/a", None, "topic"),
        ("GET", "/schedules", {"topic": "-x"}, "topic"),
    ],
)
def test_reads_of_a_wrong_name_are_422s(
    api: Api, method: str, path: str, query: dict[str, str] | None, field: str
) -> None:
    assert api.put("/schedules/reports/seed", {"every": 3600}).status == 201
    api.refused(422, field, method, path, query=query)
