"""One job by its path: ``PUT``, ``GET``, ``PATCH`` and ``DELETE /jobs/{topic}/{id}``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from delayq.core.models import MAX_BODY_BYTES
from delayq.surfaces.api import JobOut, ScheduledOut

from support.api import ANY_FIELD, NO_BODY, Api, assert_model, b64_event

DAY_S = 86_400
BAD_IDS = ["-dash", "has space", "i" * 129, "_under"]
BAD_TOPICS = ["_private", "has space", "a" * 65, "-dash"]


def path(job_id: str, topic: str = "orders") -> str:
    return f"/jobs/{topic}/{job_id}"


# ------------------------------------------------------------------------------------------ PUT


def test_put_creates_with_201(api: Api):
    before = api.server_ms()
    reply = api.put(path("p1"), {"delay": 30, "body": {"v": 1}, "retries": 4})
    assert reply.status == 201, reply
    assert_model(ScheduledOut, reply.json)
    assert (reply.json["topic"], reply.json["id"]) == ("orders", "p1")
    assert reply.json["run_at_ms"] >= before + 30_000
    job = api.job("orders", "p1")
    assert (job["state"], job["body"], job["retries"], job["attempts"]) == ("delayed", {"v": 1}, 4, 0)


def test_put_replaces_with_200_and_starts_afresh(api: Api):
    api.put(path("p1"), {"delay": 0, "body": {"v": 1}})
    token = api.lease("orders", "p1")
    assert api.fail("orders", "p1", token, "first try failed", retries=2) == "retried"
    failed = api.job("orders", "p1")
    assert (failed["state"], failed["attempts"], failed["last_error"]) == ("delayed", 1, "first try failed")

    run_at = datetime.fromtimestamp(api.server_ms() / 1000 + DAY_S, tz=UTC).replace(microsecond=0)
    reply = api.put(path("p1"), {"run_at": run_at.isoformat(), "body": ["v", 2]})
    assert reply.status == 200, reply
    assert_model(ScheduledOut, reply.json)
    assert reply.json["run_at_ms"] == int(run_at.timestamp() * 1000)
    job = api.job("orders", "p1")
    assert job["state"] == "delayed"
    assert job["body"] == ["v", 2]
    assert job["run_at_ms"] == int(run_at.timestamp() * 1000)
    assert job["attempts"] == 0
    assert job["last_error"] is None
    stats = api.stats("orders")
    assert (stats["delayed"], stats["ready"], stats["reserved"], stats["dead"]) == (1, 0, 0, 0)


def test_put_replace_moves_a_ready_job_back_to_delayed(api: Api):
    api.put(path("p1"), {"delay": 0})
    assert api.job("orders", "p1")["state"] == "ready"
    assert api.put(path("p1"), {"delay": 60, "body": "later"}).status == 200
    assert api.job("orders", "p1")["state"] == "delayed"
    stats = api.stats("orders")
    assert (stats["delayed"], stats["ready"]) == (1, 0)


def test_put_replace_of_a_delayed_job_to_now_makes_it_ready(api: Api):
    api.put(path("p1"), {"delay": 600})
    assert api.put(path("p1"), {"run_at": 0}).status == 200
    assert api.job("orders", "p1")["state"] == "ready"
    stats = api.stats("orders")
    assert (stats["delayed"], stats["ready"]) == (0, 1)


def test_put_with_topic_and_id_repeated_alike_is_fine(api: Api):
    reply = api.put(path("p1"), {"topic": "orders", "id": "p1", "delay": 5})
    assert reply.status == 201, reply


def test_put_base64_body(api: Api):
    reply = api.send(b64_event("PUT", path("p64"), {"delay": 5, "body": {"b": "ß"}}))
    assert reply.status == 201, reply
    assert api.job("orders", "p64")["body"] == {"b": "ß"}


@pytest.mark.parametrize(("fields", "field"), [({"topic": "payments"}, "topic"), ({"id": "other"}, "id")])
def test_put_with_topic_or_id_differing_from_the_path_is_422(seeded: Api, fields: dict[str, Any], field: str):
    seeded.refused(422, field, "PUT", path("seed"), {"delay": 5, "body": "new", **fields})
    seeded.refused(422, field, "PUT", path("fresh"), {"delay": 5, **fields})
    assert seeded.get(path("fresh")).status == 404


def test_put_of_a_dead_job_replaces_it_with_200(seeded: Api):
    """PUT is "create or replace", whatever the job is: a dead job is replaced by a new one (new body
    and run-at, attempts afresh, no last error), as if it had been cancelled first."""
    seeded.kill("orders", "d1", error="it broke")
    assert seeded.stats("orders")["dead"] == 1
    reply = seeded.put(path("d1"), {"delay": 60, "body": {"v": "new"}})
    assert reply.status == 200, reply
    job = seeded.job("orders", "d1")
    assert (job["state"], job["attempts"], job["last_error"]) == ("delayed", 0, None), job
    assert (job["body"], job["run_at_ms"]) == ({"v": "new"}, reply.json["run_at_ms"])
    assert seeded.get("/topics/orders/dead").json == {"jobs": []}
    assert seeded.stats("orders")["dead"] == 0


def test_put_of_a_reserved_job_is_409(seeded: Api):
    seeded.put(path("r1"), {"delay": 0, "body": "original"})
    seeded.lease("orders", "r1")
    seeded.refused(409, "id", "PUT", path("r1"), {"delay": 5, "body": "new"}, error="reserved")
    job = seeded.job("orders", "r1")
    assert (job["state"], job["body"]) == ("reserved", "original")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"delay": -1}, "delay"),
        ({"delay": 366 * DAY_S + 1}, "delay"),
        ({"run_at": "2026-01-31T09:00:00"}, "run_at"),
        ({"delay": 1, "run_at": 1}, "run_at"),
        ({"retries": 26}, "retries"),
        ({"timeout": 0}, "timeout"),
        ({"backoff": [1, -1]}, "backoff[1]"),
        ({"topic": "_bad"}, "topic"),
        ({"id": "-bad"}, "id"),
        ({"priority": 1}, "priority"),
    ],
    ids=repr,
)
def test_put_invalid_field_is_422(seeded: Api, fields: dict[str, Any], field: str):
    seeded.refused(422, field, "PUT", path("seed"), {"body": "new", **fields})
    seeded.refused(422, field, "PUT", path("fresh"), fields)


def test_put_body_too_large_is_413(seeded: Api):
    body = "x" * MAX_BODY_BYTES
    seeded.refused(413, "body", "PUT", path("seed"), {"body": body})
    seeded.refused(413, "body", "PUT", path("fresh"), {"body": body})


def test_put_malformed_json_is_400(seeded: Api):
    seeded.refused(400, ANY_FIELD, "PUT", path("seed"), raw_body='{"delay": 5', error="malformed")


# ------------------------------------------------------------------------------------------ GET


def test_get_shows_every_documented_field(api: Api):
    api.create("orders", "g1", delay=10, retries=3, body={"k": [1, 2]})
    job = api.job("orders", "g1")
    assert_model(JobOut, job)
    assert job["topic"] == "orders"
    assert job["id"] == "g1"
    assert job["state"] == "delayed"
    assert job["retries"] == 3
    assert job["body"] == {"k": [1, 2]}
    assert job["last_error"] is None
    assert job["run_at"] == datetime.fromtimestamp(job["run_at_ms"] / 1000, tz=UTC).isoformat(
        timespec="milliseconds"
    ).replace("+00:00", "Z")


def test_get_shows_the_states(api: Api):
    api.create("orders", "leased", delay=0)
    api.lease("orders", "leased")
    api.kill("orders", "dead", error="it broke")
    api.create("orders", "ready", delay=0)
    api.create("orders", "delayed", delay=60)
    for job_id in ("leased", "dead", "ready", "delayed"):
        job = api.job("orders", job_id)
        assert_model(JobOut, job)
        assert job["state"] == {"leased": "reserved"}.get(job_id, job_id)
    dead = api.job("orders", "dead")
    assert (dead["attempts"], dead["last_error"], dead["body"]) == (1, "it broke", {"dead": "dead"})
    assert api.job("orders", "leased")["attempts"] == 1


def test_get_with_trailing_slash_finds_the_job(seeded: Api):
    reply = seeded.get("/jobs/orders/seed/")
    assert reply.status in (200, 404), reply
    if reply.status == 200:
        assert reply.json["id"] == "seed"


def test_get_missing_job_is_404_naming_id(seeded: Api):
    reply = seeded.refused(404, "id", "GET", path("missing"), error="not_found")
    assert "missing" in reply.json["message"]
    seeded.refused(404, "id", "GET", path("seed", "payments"))


# ------------------------------------------------------------------------------------------ PATCH


def test_patch_reschedules_a_delayed_job(api: Api):
    api.create("orders", "d", delay=60, body={"keep": 1}, retries=4)
    before = api.server_ms()
    reply = api.patch(path("d"), {"delay": 1200})
    after = api.server_ms()
    assert reply.status == 200, reply
    assert_model(ScheduledOut, reply.json)
    assert before + 1_200_000 <= reply.json["run_at_ms"] <= after + 1_200_000
    job = api.job("orders", "d")
    assert (job["state"], job["run_at_ms"], job["body"], job["retries"], job["attempts"]) == (
        "delayed",
        reply.json["run_at_ms"],
        {"keep": 1},
        4,
        0,
    )
    assert api.stats("orders")["delayed"] == 1


def test_patch_reschedules_a_ready_job_into_the_future(api: Api):
    api.create("orders", "r", delay=0)
    assert api.patch(path("r"), {"delay": 600}).status == 200
    assert api.job("orders", "r")["state"] == "delayed"
    stats = api.stats("orders")
    assert (stats["delayed"], stats["ready"]) == (1, 0)


def test_patch_to_the_past_makes_a_delayed_job_ready(api: Api):
    api.create("orders", "d", delay=600)
    before = api.server_ms()
    reply = api.patch(path("d"), {"run_at": "2001-01-01T00:00:00Z"})
    assert reply.status == 200, reply
    assert reply.json["run_at_ms"] >= before
    assert api.job("orders", "d")["state"] == "ready"
    stats = api.stats("orders")
    assert (stats["delayed"], stats["ready"]) == (0, 1)


def test_patch_with_run_at_iso_and_epoch(api: Api):
    api.create("orders", "d", delay=600)
    when = datetime.fromtimestamp(api.server_ms() / 1000 + 2 * DAY_S, tz=UTC).replace(microsecond=0)
    reply = api.patch(path("d"), {"run_at": when.isoformat()})
    assert reply.json["run_at_ms"] == int(when.timestamp() * 1000)
    reply = api.patch(path("d"), {"run_at": when.timestamp() + 1})
    assert reply.json["run_at_ms"] == int(when.timestamp() * 1000) + 1000
    assert api.job("orders", "d")["run_at_ms"] == reply.json["run_at_ms"]


def test_patch_of_a_reserved_job_is_409(seeded: Api):
    seeded.create("orders", "r", delay=0)
    seeded.lease("orders", "r")
    seeded.refused(409, "id", "PATCH", path("r"), {"delay": 5}, error="reserved")
    assert seeded.job("orders", "r")["state"] == "reserved"


def test_patch_of_a_dead_job_is_409(seeded: Api):
    seeded.kill("orders", "x")
    seeded.refused(409, "id", "PATCH", path("x"), {"delay": 5}, error="dead")
    assert seeded.job("orders", "x")["state"] == "dead"


def test_patch_of_a_missing_job_is_404(seeded: Api):
    seeded.refused(404, "id", "PATCH", path("missing"), {"delay": 5}, error="not_found")
    seeded.refused(404, "id", "PATCH", path("seed", "never-used"), {"delay": 5})


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, {"delay", "run_at"}),
        ({"delay": None, "run_at": None}, {"delay", "run_at"}),
        ({"delay": 5, "run_at": 1}, {"delay", "run_at"}),
        ({"delay": -5}, {"delay"}),
        ({"delay": 366 * DAY_S + 1}, {"delay"}),
        ({"delay": "5"}, {"delay"}),
        ({"run_at": "2026-01-31T09:00:00"}, {"run_at"}),
        ({"run_at": "soon"}, {"run_at"}),
        ({"delay": 5, "body": "new"}, {"body"}),
        ({"delay": 5, "retries": 1}, {"retries"}),
    ],
    ids=repr,
)
def test_patch_invalid_is_422(seeded: Api, body: dict[str, Any], fields: set[str]):
    reply = seeded.refused(422, ANY_FIELD, "PATCH", path("seed"), body, error="invalid")
    assert reply.field in fields, reply


def test_patch_malformed_json_is_400(seeded: Api):
    seeded.refused(400, ANY_FIELD, "PATCH", path("seed"), raw_body="{delay: 5}", error="malformed")


# ------------------------------------------------------------------------------------------ run now


def test_run_makes_a_delayed_job_due_now(api: Api):
    api.create("orders", "d", delay=3600, body={"keep": 1})
    before = api.server_ms()
    reply = api.post(path("d") + "/run")
    after = api.server_ms()
    assert reply.status == 200, reply
    assert_model(ScheduledOut, reply.json)
    assert before <= reply.json["run_at_ms"] <= after
    job = api.job("orders", "d")
    assert (job["state"], job["run_at_ms"], job["body"]) == ("ready", reply.json["run_at_ms"], {"keep": 1})


def test_run_of_a_ready_job_keeps_its_run_at_and_its_place(api: Api):
    first = api.create("orders", "r1", delay=0)
    api.create("orders", "r2", delay=0)
    reply = api.post(path("r1") + "/run")
    assert (reply.status, reply.json["run_at_ms"]) == (200, first["run_at_ms"])
    ready = api.get("/topics/orders/jobs", query={"state": "ready"}).json["jobs"]
    assert [job["id"] for job in ready] == ["r1", "r2"]


@pytest.mark.parametrize(("make", "error"), [("lease", "reserved"), ("kill", "dead")])
def test_run_of_a_reserved_or_dead_job_is_409(seeded: Api, make: str, error: str):
    if make == "lease":
        seeded.create("orders", "j", delay=0)
        seeded.lease("orders", "j")
    else:
        seeded.kill("orders", "j")
    seeded.refused(409, "id", "POST", path("j") + "/run", error=error)
    assert seeded.job("orders", "j")["state"] == error


def test_run_of_a_missing_job_is_404(seeded: Api):
    seeded.refused(404, "id", "POST", path("missing") + "/run", error="not_found")


# ------------------------------------------------------------------------------------------ DELETE


def test_delete_cancels_in_every_state_then_404(api: Api):
    api.create("orders", "leased", delay=0, body="l")
    api.lease("orders", "leased")
    api.kill("orders", "dead")
    api.create("orders", "ready", delay=0, body="r")
    api.create("orders", "delayed", delay=60, body="d")
    api.create("orders", "keep", delay=60, body="k")
    for job_id in ("leased", "dead", "ready", "delayed"):
        reply = api.delete(path(job_id))
        assert (reply.status, reply.text) == (204, None) or (reply.status, reply.text) == (204, ""), reply
        assert api.get(path(job_id)).status == 404
        assert api.delete(path(job_id)).status == 404
    stats = api.stats("orders")
    assert (stats["delayed"], stats["ready"], stats["reserved"], stats["dead"]) == (1, 0, 0, 0)
    # nothing of the cancelled jobs is left anywhere in Redis
    dump = repr(api.snapshot())
    for job_id in ("leased", "dead", "ready", "delayed"):
        assert f"'{job_id}'" not in dump, dump
    assert "'keep'" in dump


def test_delete_missing_is_404_and_writes_nothing(seeded: Api):
    seeded.refused(404, "id", "DELETE", path("missing"), error="not_found")
    seeded.refused(404, "id", "DELETE", path("seed", "never-used"))


# ------------------------------------------------------------------------------------------ bad paths

METHODS = [("PUT", {"delay": 5}), ("GET", None), ("PATCH", {"delay": 5}), ("DELETE", None)]


@pytest.mark.parametrize(("method", "body"), METHODS, ids=[m for m, _ in METHODS])
def test_bad_topic_in_the_path_is_422_naming_topic(seeded: Api, method: str, body: Any):
    for topic in BAD_TOPICS:
        seeded.refused(422, "topic", method, path("seed", topic), NO_BODY if body is None else body, error="invalid")


@pytest.mark.parametrize(("method", "body"), METHODS, ids=[m for m, _ in METHODS])
def test_bad_id_in_the_path_is_422_naming_id(seeded: Api, method: str, body: Any):
    """The contract's path is ``/jobs/{topic}/{id}``: the field is ``id`` (not the handler's ``job_id``)."""
    for job_id in BAD_IDS:
        seeded.refused(422, "id", method, path(job_id), NO_BODY if body is None else body, error="invalid")
