"""``POST /jobs``: what is accepted, how it is stored and read back, and every refusal."""

from __future__ import annotations

import base64
import json
import math
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import redis

from delayq.core.models import ID_PATTERN, MAX_BODY_BYTES
from delayq.surfaces.api import JobOut, ScheduledOut

from support.api import ANY_FIELD, Api, assert_model, b64_event
from support.events import api_event
from support.recorder import RECORDER

DAY_S = 86_400
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def seeded(seeded: Api) -> Api:
    """The tier's ``seeded`` (a delayed job, ``seed``) and a ready job: "nothing written" compares the
    ready list too."""
    seeded.create("orders", "seed-ready", delay=0, body={"n": 2})
    return seeded


def iso_to_ms(text: str) -> int:
    return math.ceil(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


# ------------------------------------------------------------------------------------ accepted


def test_create_answers_201_with_when_it_is_due(api: Api):
    before = api.server_ms()
    reply = api.post("/jobs", {"topic": "orders", "id": "a", "delay": 60, "body": {"x": 1}})
    after = api.server_ms()
    assert reply.status == 201, reply
    assert_model(ScheduledOut, reply.json)
    data = reply.json
    assert (data["topic"], data["id"]) == ("orders", "a")
    assert before + 60_000 <= data["run_at_ms"] <= after + 60_000
    assert ISO_UTC.match(data["run_at"]), data
    assert iso_to_ms(data["run_at"]) == data["run_at_ms"]

    job = api.job("orders", "a")
    assert_model(JobOut, job)
    assert job["state"] == "delayed"
    assert job["run_at_ms"] == data["run_at_ms"]
    assert job["run_at"] == data["run_at"]
    assert job["run_at_ms"] - job["enqueued_at_ms"] == 60_000
    assert (job["attempts"], job["retries"], job["body"], job["last_error"]) == (0, 2, {"x": 1}, None)


def test_id_is_generated_when_absent(api: Api):
    first = api.post("/jobs", {"topic": "orders", "delay": 5})
    second = api.post("/jobs", {"topic": "orders", "delay": 5})
    assert (first.status, second.status) == (201, 201)
    assert re.match(ID_PATTERN, first.json["id"])
    assert first.json["id"] != second.json["id"]
    assert api.job("orders", first.json["id"])["state"] == "delayed"
    assert api.stats("orders")["delayed"] == 2


def test_neither_delay_nor_run_at_means_due_now(api: Api):
    api.create("orders", "now")
    job = api.job("orders", "now")
    assert job["state"] == "ready"
    assert job["run_at_ms"] == job["enqueued_at_ms"]


def test_delay_zero_is_ready_at_once(api: Api):
    data = api.create("orders", "zero", delay=0)
    job = api.job("orders", "zero")
    assert job["state"] == "ready"
    assert job["run_at_ms"] == job["enqueued_at_ms"] == data["run_at_ms"]


def test_fractional_delay_rounds_up_to_the_millisecond(api: Api):
    api.create("orders", "frac", delay=1.0001)
    job = api.job("orders", "frac")
    assert job["run_at_ms"] - job["enqueued_at_ms"] == 1001


def test_delay_of_366_days_is_accepted(api: Api):
    api.create("orders", "far", delay=366 * DAY_S)
    job = api.job("orders", "far")
    assert job["run_at_ms"] - job["enqueued_at_ms"] == 366 * DAY_S * 1000


def test_run_at_epoch_seconds(api: Api):
    run_at = api.server_ms() / 1000 + 3600.25
    data = api.create("orders", "epoch", run_at=run_at)
    assert data["run_at_ms"] == math.ceil(run_at * 1000)
    assert api.job("orders", "epoch")["state"] == "delayed"


@pytest.mark.parametrize(
    "zone",
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))],
    ids=["Z", "plus-0530", "minus-08"],
)
def test_run_at_iso_with_a_zone(api: Api, zone: timezone):
    when = datetime.fromtimestamp(api.server_ms() / 1000 + 2 * DAY_S, tz=UTC).replace(microsecond=250_000)
    text = when.astimezone(zone).isoformat()
    if zone is UTC:
        text = text.replace("+00:00", "Z")
        assert text.endswith("Z")
    data = api.create("orders", "iso", run_at=text)
    assert data["run_at_ms"] == int(when.timestamp() * 1000)
    assert data["run_at"] == when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert api.job("orders", "iso")["state"] == "delayed"


@pytest.mark.parametrize("run_at", [1_000, 0, "2001-01-01T00:00:00Z", "2020-06-01T12:00:00+02:00"])
def test_run_at_in_the_past_is_due_now(api: Api, run_at: Any):
    before = api.server_ms()
    data = api.create("orders", "past", run_at=run_at)
    assert data["run_at_ms"] >= before
    job = api.job("orders", "past")
    assert job["state"] == "ready"
    assert job["run_at_ms"] == job["enqueued_at_ms"]
    assert api.stats("orders")["ready"] == 1


def test_run_at_365_days_ahead_is_accepted(api: Api):
    run_at = api.server_ms() / 1000 + 365 * DAY_S
    assert api.create("orders", "far", run_at=run_at)["run_at_ms"] == math.ceil(run_at * 1000)


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        [1, "two", None, {"three": [3.5]}],
        "a string",
        "",
        0,
        -12.5,
        2**70,
        True,
        False,
        {},
        {"nested": {"deep": [{"a": [1, {"b": None}]}], "unicode": 'héllo ✓ 😀 \u0000 "quoted"'}},
    ],
    ids=repr,
)
def test_body_round_trips_exactly(api: Api, body: Any):
    api.create("orders", "rt", body=body)
    got = api.job("orders", "rt")["body"]
    assert got == body
    assert type(got) is type(body)


def test_absent_body_reads_back_as_null(api: Api):
    reply = api.post("/jobs", {"topic": "orders", "id": "nobody"})
    assert reply.status == 201
    job = api.job("orders", "nobody")
    assert "body" in job
    assert job["body"] is None


def test_per_job_retries_override_the_topics(api: Api):
    api.create("orders", "r5", retries=5, timeout=900, backoff=[1, 2.5])
    assert api.job("orders", "r5")["retries"] == 5
    api.create("payments", "p")  # configured with retries 8
    assert api.job("payments", "p")["retries"] == 8
    api.create("anything-else", "w")  # the "*" entry: the default 2
    assert api.job("anything-else", "w")["retries"] == 2


@pytest.mark.parametrize(
    ("topic", "job_id"),
    [("a", "b"), ("A" * 64, "i" * 128), ("t_1.x-y", "id:1@host_2.x-y"), ("9", "0")],
)
def test_topic_and_id_at_their_limits(api: Api, topic: str, job_id: str):
    api.create(topic, job_id)
    assert api.job(topic, job_id)["id"] == job_id


def test_body_of_exactly_256_kib_is_accepted(api: Api):
    body = "é" * ((MAX_BODY_BYTES - 2) // 2)  # 2 bytes each in UTF-8, plus the quotes
    assert len(json.dumps(body, ensure_ascii=False).encode()) == MAX_BODY_BYTES
    api.create("orders", "big", body=body)
    assert api.job("orders", "big")["body"] == body


def test_base64_encoded_body_is_decoded(api: Api):
    reply = api.send(b64_event("POST", "/jobs", {"topic": "orders", "id": "b64", "delay": 5, "body": {"ü": "✓"}}))
    assert reply.status == 201, reply
    assert api.job("orders", "b64")["body"] == {"ü": "✓"}


def test_json_content_type_with_charset_is_json(api: Api):
    reply = api.post(
        "/jobs", {"topic": "orders", "id": "cs"}, headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert reply.status == 201, reply


# ------------------------------------------------------------------------------------ refused


def test_existing_job_is_409_in_every_live_state(seeded: Api):
    api = seeded
    api.lease("orders", "seed-ready")  # the head of the ready list, out of the way
    api.kill("orders", "dead-1")
    api.create("orders", "leased-1", delay=0)
    api.lease("orders", "leased-1")
    api.create("orders", "ready-1", delay=0)
    states = {"seed": "delayed", "ready-1": "ready", "leased-1": "reserved", "dead-1": "dead"}
    for job_id, state in states.items():
        assert api.job("orders", job_id)["state"] == state
        reply = api.refused(
            409, "id", "POST", "/jobs", {"topic": "orders", "id": job_id, "body": "new"}, error="exists"
        )
        assert job_id in reply.json["message"]
        assert api.job("orders", job_id)["body"] != "new"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"delay": -1}, "delay"),
        ({"delay": -0.001}, "delay"),
        ({"delay": 366 * DAY_S + 1}, "delay"),
        ({"delay": "5"}, "delay"),
        ({"delay": True}, "delay"),
        ({"delay": None, "run_at": "2026-01-31T09:00:00"}, "run_at"),
        ({"run_at": "2026-01-31T09:00:00"}, "run_at"),
        ({"run_at": "2026-01-31 09:00:00"}, "run_at"),
        ({"run_at": "tomorrow"}, "run_at"),
        ({"run_at": ""}, "run_at"),
        ({"run_at": -5}, "run_at"),
        ({"delay": 5, "run_at": 1}, "run_at"),
        ({"retries": -1}, "retries"),
        ({"retries": 26}, "retries"),
        ({"retries": 1.5}, "retries"),
        ({"retries": "2"}, "retries"),
        ({"timeout": 0.5}, "timeout"),
        ({"timeout": 901}, "timeout"),
        ({"backoff": []}, "backoff"),
        ({"backoff": "15,30"}, "backoff"),
        ({"backoff": [15, -1]}, "backoff[1]"),
        ({"backoff": [15, 30, "x"]}, "backoff[2]"),
        ({"backoff": [366 * DAY_S + 1]}, "backoff[0]"),
        ({"backoff": [1] * 65}, "backoff"),
        ({"topic": ""}, "topic"),
        ({"topic": "_private"}, "topic"),
        ({"topic": "has space"}, "topic"),
        ({"topic": "a" * 65}, "topic"),
        ({"topic": 5}, "topic"),
        ({"topic": None}, "topic"),
        ({"id": ""}, "id"),
        ({"id": "-leading-dash"}, "id"),
        ({"id": "a/b"}, "id"),
        ({"id": "i" * 129}, "id"),
        ({"id": 42}, "id"),
        ({"delay_s": 5}, "delay_s"),
        ({"state": "ready"}, "state"),
    ],
    ids=repr,
)
def test_invalid_field_is_422_naming_it(seeded: Api, fields: dict[str, Any], field: str):
    job = {"topic": "orders", "id": "bad", "body": {"x": 1}, **fields}
    reply = seeded.refused(422, field, "POST", "/jobs", job, error="invalid")
    assert reply.json["message"]


def test_missing_topic_is_422(seeded: Api):
    seeded.refused(422, "topic", "POST", "/jobs", {"id": "x", "delay": 1})


def test_run_at_more_than_366_days_ahead_is_422(seeded: Api):
    run_at = seeded.server_ms() / 1000 + 367 * DAY_S
    seeded.refused(422, "run_at", "POST", "/jobs", {"topic": "orders", "run_at": run_at})
    iso = datetime.fromtimestamp(run_at, tz=UTC).isoformat()
    seeded.refused(422, "run_at", "POST", "/jobs", {"topic": "orders", "run_at": iso})


@pytest.mark.parametrize("run_at", [True, [1], {"at": 1}], ids=repr)
def test_run_at_of_a_wrong_type_names_run_at(seeded: Api, run_at: Any):
    """The field is ``run_at``, not pydantic's union branch (``run_at.float``)."""
    seeded.refused(422, "run_at", "POST", "/jobs", {"topic": "orders", "run_at": run_at})


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_run_at_names_run_at(seeded: Api, literal: str):
    seeded.refused(422, "run_at", "POST", "/jobs", raw_body=f'{{"topic": "orders", "run_at": {literal}}}')


@pytest.mark.parametrize("literal", ["NaN", "Infinity"])
def test_non_finite_delay_is_refused(seeded: Api, literal: str):
    seeded.refused(422, "delay", "POST", "/jobs", raw_body=f'{{"topic": "orders", "delay": {literal}}}')


def test_body_with_a_non_json_number_is_refused(seeded: Api):
    """``NaN``/``Infinity`` are not JSON (RFC 8259), though Python's json module reads them: a body
    holding one cannot be handed on as JSON; it is refused (400 malformed, or 422 naming body)."""
    before = seeded.snapshot()
    for literal in ("NaN", "Infinity", "-Infinity"):
        reply = seeded.post("/jobs", raw_body=f'{{"topic": "orders", "id": "nan", "body": {{"x": {literal}}}}}')
        assert reply.status in (400, 422), (literal, reply)
        assert reply.field in (None, "body"), (literal, reply)
    assert seeded.snapshot() == before


def test_body_over_256_kib_is_413_naming_body(seeded: Api):
    body = "é" * ((MAX_BODY_BYTES - 2) // 2) + "x"
    assert len(json.dumps(body, ensure_ascii=False).encode()) == MAX_BODY_BYTES + 1
    reply = seeded.refused(413, "body", "POST", "/jobs", {"topic": "orders", "id": "big", "body": body})
    assert reply.json["error"] == "too_large"
    seeded.refused(413, "body", "POST", "/jobs", {"topic": "orders", "body": {"k": "x" * 300_000}})


@pytest.mark.parametrize(
    "raw", ["{", '{"topic": "orders",}', "{'topic': 'orders'}", "not json", '{"topic": "orders"} x']
)
def test_malformed_json_is_400(seeded: Api, raw: str):
    reply = seeded.refused(400, ANY_FIELD, "POST", "/jobs", raw_body=raw, error="malformed")
    assert reply.json["message"]


@pytest.mark.parametrize("body", [None, [], "orders", 5, True], ids=repr)
def test_request_body_that_is_not_an_object_is_422(seeded: Api, body: Any):
    seeded.refused(422, ANY_FIELD, "POST", "/jobs", body)


def test_a_list_of_jobs_is_not_taken_for_its_first_job(seeded: Api):
    """A JSON array posted to ``/jobs`` (meant for ``/jobs/batch``) is refused whole, not cut down to
    its first item with the others silently dropped."""
    jobs = [{"topic": "orders", "id": "first"}, {"topic": "orders", "id": "second"}]
    seeded.refused(422, ANY_FIELD, "POST", "/jobs", jobs)


def test_no_request_body_is_refused(seeded: Api):
    before = seeded.snapshot()
    for raw in (None, ""):
        event = api_event("POST", "/jobs", None)
        event["body"] = raw
        reply = seeded.send(event)
        assert reply.status in (400, 422), reply
    assert seeded.snapshot() == before


def test_invalid_base64_is_400_not_500(seeded: Api):
    event = b64_event("POST", "/jobs", {"topic": "orders"})
    event["body"] = "!!!not base64!!!="
    before = seeded.snapshot()
    reply = seeded.send(event)
    assert reply.status == 400, reply
    assert seeded.snapshot() == before


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"topic": "orders", "body": "caf\xe9"}', "request body is not valid UTF-8"),  # Latin-1, raw on the wire
        (b"\xff\xfe{}", "request body is not valid UTF-8"),
        (None, "request body is not valid base64"),
    ],
)
def test_an_unreadable_body_says_what_is_wrong(seeded: Api, raw: bytes | None, message: str):
    """Raw bytes that are not UTF-8 reach the handler in base64 (the local stack and API Gateway encode
    them): the answer speaks of UTF-8, not of base64 the caller never sent."""
    event = b64_event("POST", "/jobs", {"topic": "orders"})
    event["body"] = base64.b64encode(raw).decode() if raw is not None else "!!!not base64!!!="
    before = seeded.snapshot()
    reply = seeded.send(event)
    assert (reply.status, reply.json["message"]) == (400, message), reply
    assert seeded.snapshot() == before


def test_base64_of_something_not_json_is_400(seeded: Api):
    event = b64_event("POST", "/jobs", {"topic": "orders"})
    event["body"] = base64.b64encode(b"topic=orders").decode()
    before = seeded.snapshot()
    assert seeded.send(event).status == 400
    assert seeded.snapshot() == before


@pytest.mark.parametrize(
    ("content_type", "raw"),
    [
        ("text/plain", "hello"),
        ("application/xml", "<job><topic>orders</topic></job>"),
        ("application/x-www-form-urlencoded", "topic=orders&delay=5"),
        (
            "multipart/form-data; boundary=xx",
            '--xx\r\nContent-Disposition: form-data; name="topic"\r\n\r\norders\r\n--xx--\r\n',
        ),
    ],
)
def test_non_json_content_is_refused_with_4xx(seeded: Api, content_type: str, raw: str):
    before = seeded.snapshot()
    reply = seeded.post("/jobs", raw_body=raw, headers={"Content-Type": content_type})
    assert 400 <= reply.status < 500, reply
    assert seeded.snapshot() == before


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "application/octet-stream"])
def test_json_body_under_another_content_type_is_never_a_500(seeded: Api, content_type: str):
    """Either read as JSON (the API's choice: curl's default type means JSON) or refused with a 4xx."""
    reply = seeded.post("/jobs", {"topic": "orders", "id": "ct", "delay": 5}, headers={"Content-Type": content_type})
    assert reply.status in (201, 400, 415, 422), reply
    if reply.status == 201:
        assert seeded.job("orders", "ct")["state"] == "delayed"


# ------------------------------------------------------------------------------------ POST /topics/{topic}/jobs


def test_create_in_the_topic_of_the_path(api: Api):
    """The same create as ``POST /jobs``, its topic from the path (so a policy on the path can limit
    a caller to its topics)."""
    reply = api.post("/topics/orders/jobs", {"id": "t1", "delay": 60, "body": {"x": 1}})
    assert reply.status == 201, reply
    assert_model(ScheduledOut, reply.json)
    assert (reply.json["topic"], reply.json["id"]) == ("orders", "t1")
    job = api.job("orders", "t1")
    assert (job["state"], job["body"], job["run_at_ms"]) == ("delayed", {"x": 1}, reply.json["run_at_ms"])


def test_create_in_a_topic_generates_the_id_and_takes_the_overrides(api: Api):
    reply = api.post("/topics/payments/jobs", {"retries": 0, "timeout": 5})
    assert reply.status == 201, reply
    job = api.job("payments", reply.json["id"])
    assert (job["state"], job["retries"]) == ("ready", 0)


def test_create_in_a_topic_that_the_body_repeats_alike(api: Api):
    assert api.post("/topics/orders/jobs", {"topic": "orders", "id": "t2"}).status == 201


def test_create_in_a_topic_the_body_contradicts_is_422_naming_topic(seeded: Api):
    reply = seeded.refused(422, "topic", "POST", "/topics/orders/jobs", {"topic": "payments", "id": "t3"})
    assert "differs from the path" in reply.json["message"], reply


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/topics/orders/jobs", {"id": "seed"}, 409, "id"),
        ("/topics/orders/jobs", {"delay": -1}, 422, "delay"),
        ("/topics/orders/jobs", {"id": "bad id"}, 422, "id"),
        ("/topics/orders/jobs", {"delay_s": 5}, 422, "delay_s"),
        ("/topics/orders/jobs", {"body": "x" * (MAX_BODY_BYTES + 1)}, 413, "body"),
        ("/topics/has space/jobs", {}, 422, "topic"),
    ],
)
def test_create_in_a_topic_refuses_as_post_jobs_does(seeded: Api, path: str, body: Any, status: int, field: str):
    seeded.refused(status, field, "POST", path, body)
    if status != 413:  # the same refusal by POST /jobs
        topic = path.split("/")[2]
        seeded.refused(status, field, "POST", "/jobs", {"topic": topic, **body})


def test_create_in_a_topic_without_a_wildcard_must_be_configured(
    handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis, namespace: str
):
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps({"orders": {"target": RECORDER}}))
    api = Api.start(redis_client, namespace)
    api.create("orders", "seed", delay=60)
    api.refused(422, "topic", "POST", "/topics/nope/jobs", {"id": "a"}, error="invalid")
