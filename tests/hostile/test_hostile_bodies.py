"""Hostile request bodies against the real enqueue handler: hypothesis-made JSON of every shape, jobs
with fields of the wrong type or range, numbers no float holds, lone surrogates, nesting thousands
deep, bare ``NaN``/``Infinity``, mangled text and bytes that are not UTF-8.

Whatever is sent: never a 5xx, always JSON, the error shape on every 4xx, no traceback; a refusal
leaves the namespace exactly as it was, an acceptance writes exactly what the response says
(``support.hostile.Hostile.send``)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from delayq.core.models import MAX_BODY_DEPTH, MAX_DELAY_S

from support.events import api_event
from support.hostile import (
    DEPTHS,
    HOSTILE,
    SEED_IDS,
    SEED_TOPIC,
    Hostile,
    clean_options,
    deep,
    dumps,
    json_values,
    materialize,
    near_valid_jobs,
    raw_texts,
    reschedules,
    valid_ids,
    valid_topics,
)


def _post(api: Hostile, path: str, raw: str | None, method: str = "POST") -> int:
    return api.send(api_event(method, path, None, raw_body=raw)).status


# ------------------------------------------------------------------------------------------ POST /jobs


@pytest.mark.answers(422)
@HOSTILE
@given(document=json_values)
def test_any_json_value_as_a_create(api: Hostile, document: Any):
    """Any JSON value at all: only an object can be a job (and none of these nests deep enough to be
    unreadable, a 400)."""
    status = _post(api, "/jobs", dumps(document))
    if not isinstance(document, dict):
        assert status == 422, status


@pytest.mark.answers(201, 400, 409, 422)
@HOSTILE
@given(job=near_valid_jobs(), data=st.data())
def test_near_valid_jobs(api: Hostile, job: dict[str, Any], data: st.DataObject):
    """Jobs whose fields are mostly right: each is created exactly as answered, or refused whole."""
    document = materialize(job, api.server_ms())
    _post(api, "/jobs", data.draw(raw_texts(document)))


@pytest.mark.answers(201, 409)
@HOSTILE
@given(data=st.data())
def test_near_valid_jobs_mostly_accepted(api: Hostile, data: st.DataObject):
    """The same, with the noise turned down, so that the accepted path is walked as often as the refused."""
    job: dict[str, Any] = {"topic": data.draw(valid_topics), "body": data.draw(json_values)}
    if data.draw(st.booleans()):
        job["id"] = data.draw(valid_ids)
    when = data.draw(st.sampled_from(["delay", "run_at", "neither"]))
    if when == "delay":
        job["delay"] = data.draw(st.floats(0, MAX_DELAY_S) | st.integers(0, 3600))
    elif when == "run_at":
        job["run_at"] = data.draw(st.floats(0, 2e9) | st.integers(0, 2_000_000_000))
    for name, strategy in (("retries", st.integers(0, 25)), ("timeout", st.floats(1, 900))):
        if data.draw(st.booleans()):
            job[name] = data.draw(strategy)
    _post(api, "/jobs", dumps(job))


# ------------------------------------------------------------------------------------------ other writes


@pytest.mark.answers(200, 400, 413, 422)
@HOSTILE
@given(jobs=st.lists(near_valid_jobs() | json_values, max_size=8), data=st.data())
def test_batches(api: Hostile, jobs: list[Any], data: st.DataObject):
    """A batch of anything: one result per item, in order; the valid ones written, the rest not."""
    document = materialize({"jobs": jobs}, api.server_ms())
    if data.draw(st.integers(0, 9)) == 0:
        document = data.draw(json_values)  # not even a batch
    elif data.draw(st.integers(0, 30)) == 0:
        document = {"jobs": [{"topic": "orders"}] * 1001}  # one too many: 413, none written
    _post(api, "/jobs/batch", data.draw(raw_texts(document)))


@pytest.mark.answers(200, 201, 400, 409, 422)
@HOSTILE
@given(
    topic=st.just(SEED_TOPIC) | valid_topics,
    job_id=st.sampled_from(SEED_IDS) | valid_ids,
    job=clean_options | near_valid_jobs(with_topic=False),
    data=st.data(),
)
def test_put(api: Hostile, topic: str, job_id: str, job: dict[str, Any], data: st.DataObject):
    """Create or replace: of a seeded job too (a dead one is replaced, as the contract allows)."""
    if data.draw(st.integers(0, 4)) == 0:
        job["topic"] = data.draw(st.just(topic) | valid_topics)
    if data.draw(st.integers(0, 4)) == 0:
        job["id"] = data.draw(st.just(job_id) | valid_ids)
    document = materialize(job, api.server_ms())
    _post(api, f"/jobs/{topic}/{job_id}", data.draw(raw_texts(document)), method="PUT")


@pytest.mark.answers(200, 400, 404, 409, 422)
@HOSTILE
@given(
    job_id=st.sampled_from(SEED_IDS) | valid_ids, job=reschedules | near_valid_jobs(with_topic=False), data=st.data()
)
def test_patch(api: Hostile, job_id: str, job: dict[str, Any], data: st.DataObject):
    """Reschedule with anything: the seeded delayed and ready jobs move, the dead one is a 409."""
    document = materialize(job, api.server_ms())
    _post(api, f"/jobs/{SEED_TOPIC}/{job_id}", data.draw(raw_texts(document)), method="PATCH")


@pytest.mark.answers(200, 422)
@HOSTILE
@given(ids=st.none() | st.lists(valid_ids | json_values, max_size=5) | json_values, data=st.data())
def test_replay(api: Hostile, ids: Any, data: st.DataObject):
    """Replay with ids of any type, or any document, or none."""
    choice = data.draw(st.sampled_from(["ids", "document", "empty", "none"]))
    raw = {"ids": dumps({"ids": ids}), "document": dumps(ids), "empty": "{}", "none": None}[choice]
    _post(api, f"/topics/{SEED_TOPIC}/dead/replay", raw)
    if data.draw(st.integers(0, 5)) == 0:
        api.kill_again()


# ------------------------------------------------------------------------------------------ raw text and bytes


@pytest.mark.answers(200, 201, 400, 422)
@HOSTILE
@given(depth=DEPTHS, where=st.sampled_from(["body", "document", "id", "batch", "replay"]))
def test_deep_nesting(api: Hostile, depth: int, where: str):
    """Arrays and objects nested up to thousands deep: never a RecursionError, in the parser, the
    validator or the answer. Bodies up to MAX_BODY_DEPTH deep are accepted."""
    path, raw = {
        "body": ("/jobs", f'{{"topic": "orders", "body": {deep(depth)}}}'),
        "document": ("/jobs", deep(depth)),
        "id": ("/jobs", f'{{"topic": "orders", "id": {deep(depth)}}}'),
        "batch": ("/jobs/batch", f'{{"jobs": [{{"topic": "orders", "id": {deep(depth)}}}]}}'),
        "replay": (f"/topics/{SEED_TOPIC}/dead/replay", f'{{"ids": {deep(depth)}}}'),
    }[where]
    status = _post(api, path, raw)
    if where == "body":
        assert (status == 201) == (depth <= MAX_BODY_DEPTH), (depth, status)


@pytest.mark.answers(400, 422)
@HOSTILE
@given(
    text=st.text(st.characters(exclude_categories=()), max_size=40)
    | st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    prefix=st.sampled_from(["", "{", '{"topic": ', '{"topic": "orders", "body": ', "[", '"']),
)
# Random text is almost never JSON: the 422 it answers (JSON, not an object) must not hang on luck.
@example(text="1]", prefix="[")
def test_arbitrary_text(api: Hostile, text: str, prefix: str):
    """Any text at all as the body, often after a plausible start."""
    _post(api, "/jobs", prefix + text)


@pytest.mark.answers(201, 400, 409, 422)
@HOSTILE
@given(
    payload=st.binary(max_size=64)
    | near_valid_jobs()
    | st.sampled_from(
        [b'{"topic": "orders", "body": "\xff"}', b'{"topic": "\xed\xa0\x80"}', b"\xef\xbb\xbf{}", b"{\x00}"]
    ),
    mangle=st.sampled_from(["none", "none", "not_base64", "strip_padding", "whitespace"]),
)
def test_base64_bodies(api: Hostile, payload: bytes | dict[str, Any], mangle: str):
    """Bodies API Gateway passes base64-encoded: invalid UTF-8, a UTF-8-encoded surrogate, a BOM,
    broken base64; and valid jobs in raw UTF-8."""
    if isinstance(payload, dict):
        payload = dumps(materialize(payload, api.server_ms()), ascii_only=False).encode("utf-8", "surrogatepass")
    encoded = base64.b64encode(payload).decode()
    encoded = {
        "none": encoded,
        "not_base64": encoded + "!*",
        "strip_padding": encoded.rstrip("=") if encoded.endswith("=") else encoded + "=",
        "whitespace": " " + encoded,
    }[mangle]
    event = api_event("POST", "/jobs", None, raw_body=encoded)
    event["isBase64Encoded"] = True
    reply = api.send(event)
    if mangle in ("not_base64", "whitespace"):  # extra padding is tolerated, as by most decoders
        assert reply.status == 400, reply
    try:
        json.loads(payload.decode("utf-8"))
    except ValueError:
        assert reply.status == 400, reply


# ------------------------------------------------------------------------------------------ the bugs found


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ("[" * 100_000 + "]" * 100_000, 400),  # RecursionError escaped the handler: Lambda crash, a 502
        ('{"topic": "orders", "body": ' + deep(5000) + "}", 400),  # RecursionError: 500
        ('{"topic": "orders", "body": ' + deep(MAX_BODY_DEPTH) + "}", 201),
        ('{"topic": "orders", "body": ' + deep(MAX_BODY_DEPTH + 1) + "}", 422),
        ('{"topic": "orders", "body": "\\ud800"}', 422),  # UnicodeEncodeError while sizing the body: 500
        ('{"topic": "orders", "body": {"\\udfff": 1}}', 422),
        ('{"topic": "orders", "body": "\\ud83d\\ude00"}', 201),  # a surrogate pair is a character
        ('{"topic": "orders", "run_at": 1' + "0" * 400 + "}", 422),  # OverflowError in the validator: 500
        ('{"topic": "orders", "run_at": -1' + "0" * 400 + "}", 422),
        ('{"topic": "orders", "run_at": 1e308}', 422),  # inf ms: OverflowError
        ('{"topic": "orders", "delay": 1' + "0" * 5000 + "}", 400),  # int over 4300 digits: ValueError, 500
        ('{"topic": "orders", "body": NaN}', 422),
        ('{"topic": "orders", "delay": -Infinity}', 422),
    ],
    ids=lambda value: str(value)[:40],
)
def test_bodies_that_were_server_errors(api: Hostile, raw: str, status: int):
    reply = api.send(api_event("POST", "/jobs", None, raw_body=raw))
    assert reply.status == status, reply


@pytest.mark.parametrize(
    ("path", "raw", "field"),
    [
        ("/jobs", '{"topic": "orders", "body": "\\ud800"}', "body"),
        ("/jobs", '{"topic": "orders", "body": {"a": [1, "x\\udfffy"]}}', "body.a[1]"),
        ("/jobs", '{"topic": "orders", "body": {"\\udfff": 1}}', "body.\\udfff"),  # escaped: the answer is text
        ("/jobs", '{"topic": "\\ud800"}', "topic"),
        ("/jobs", '{"\\ud800": 1}', "\\ud800"),
        ("/jobs/batch", '{"jobs": [{"topic": "orders"}, {"topic": "orders", "id": "\\ud83d"}]}', "jobs[1].id"),
        (f"/topics/{SEED_TOPIC}/dead/replay", '{"ids": ["seed-dead", "\\ude00"]}', "ids[1]"),
    ],
)
def test_a_lone_surrogate_is_a_422_naming_where(api: Hostile, path: str, raw: str, field: str):
    """JSON that is read but is no Unicode text: refused whole (a batch too), naming where it is."""
    reply = api.send(api_event("POST", path, None, raw_body=raw))
    assert (reply.status, reply.json["error"], reply.field) == (422, "invalid", field), reply
    assert "lone surrogate" in reply.json["message"], reply


@pytest.mark.parametrize("content_type", ["text/plain", "multipart/form-data", "application/xml", "x"])
@pytest.mark.parametrize(
    ("method", "path"), [("PUT", "/jobs/orders/a"), ("PATCH", "/jobs/orders/seed-delayed"), ("POST", "/jobs")]
)
def test_no_body_with_a_foreign_content_type(api: Hostile, content_type: str, method: str, path: str):
    """Was a 500 (Powertools' unsupported content type, or a multipart body without a boundary)."""
    reply = api.send(api_event(method, path, None, headers={"Content-Type": content_type}))
    assert reply.status == 400, reply


def test_replay_without_a_body_whatever_the_content_type(api: Hostile):
    reply = api.send(
        api_event("POST", f"/topics/{SEED_TOPIC}/dead/replay", None, headers={"Content-Type": "text/plain"})
    )
    assert reply.json == {"replayed": 1}, reply


def test_a_batch_never_echoes_nan(api: Hostile):
    """A batch item's id is echoed as given: a NaN must not make the answer invalid JSON."""
    reply = api.send(
        api_event("POST", "/jobs/batch", None, raw_body='{"jobs": [{"topic": "orders", "id": NaN}, {"id": Infinity}]}')
    )
    assert reply.status == 200, reply
    assert [item["status"] for item in reply.json["results"]] == [422, 422], reply


def test_seeded_state_is_what_the_tests_assume(api: Hostile):
    jobs = api.jobs()
    places = ("delayed", "ready", "dead", "leased")
    assert {key[1]: job.place for key, job in jobs.items()} == dict(zip(SEED_IDS, places, strict=True))
