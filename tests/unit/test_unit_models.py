"""Request models of ``delayq.core.models``: what callers may send, and how errors name the field."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from delayq.core.errors import InvalidField, TooLarge
from delayq.core.job import new_id, new_ids
from delayq.core.models import (
    ID_PATTERN,
    MAX_BATCH,
    MAX_BODY_BYTES,
    MAX_BODY_DEPTH,
    MAX_DELAY_S,
    TOPIC_PATTERN,
    Batch,
    NewJob,
    PutJob,
    Replay,
    Reschedule,
    TopicJob,
    When,
    body_json,
    check_id,
    check_topic,
    describe,
    field_name,
    invalid,
    plain_job,
    validate_new_job,
)

DAY_S = 86_400
T0_S = 1795372200  # 2026-11-22T18:30:00Z


def iso_in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def first_error(model: type, data: Any) -> tuple[str, str]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    error = invalid(info.value)
    assert isinstance(error, InvalidField)
    assert error.status == 422
    assert (error.field, error.message) == describe(info.value.errors(include_url=False)[0])
    return error.field or "", error.message


def test_limits():
    assert TOPIC_PATTERN == r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
    assert ID_PATTERN == r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
    assert MAX_BODY_BYTES == 256 * 1024
    assert MAX_BATCH == 1000
    assert MAX_DELAY_S == 366 * DAY_S


# ----------------------------------------------------------------------------- NewJob: good

GOOD_NEW_JOBS: list[dict[str, Any]] = [
    {"topic": "orders"},
    {"topic": "orders", "body": None},
    {"topic": "orders", "body": {"a": [1, 2, {"b": None}]}},
    {"topic": "orders", "body": "text"},
    {"topic": "orders", "body": 42},
    {"topic": "orders", "body": [1, "two", 3.0, True]},
    {"topic": "o", "id": "x"},
    {"topic": "O9_.-x", "id": "A9_.:@-x"},
    {"topic": "t" * 64, "id": "i" * 128},
    {"topic": "orders", "id": "order-1042", "delay": 0},
    {"topic": "orders", "delay": 0.0},
    {"topic": "orders", "delay": 1.5},
    {"topic": "orders", "delay": 30},
    {"topic": "orders", "delay": 366 * DAY_S},
    {"topic": "orders", "run_at": 0},
    {"topic": "orders", "run_at": 1},
    {"topic": "orders", "run_at": 1_600_000_000.5},
    {"topic": "orders", "run_at": "2020-01-01T00:00:00Z"},
    {"topic": "orders", "run_at": "2020-01-01T00:00:00+02:00"},
    {"topic": "orders", "run_at": "2020-01-01T00:00:00z"},
    {"topic": "orders", "delay": None, "run_at": None},
    {"topic": "orders", "delay": 5, "run_at": None},
    {"topic": "orders", "retries": 0},
    {"topic": "orders", "retries": 25},
    {"topic": "orders", "timeout": 1},
    {"topic": "orders", "timeout": 900},
    {"topic": "orders", "timeout": 2.5},
    {"topic": "orders", "backoff": [0]},
    {"topic": "orders", "backoff": [1, 2.5, 366 * DAY_S]},
    {"topic": "orders", "backoff": [15] * 64},
    {"topic": "orders", "retries": None, "timeout": None, "backoff": None},
]


@pytest.mark.parametrize("data", GOOD_NEW_JOBS)
def test_new_job_good(data):
    job = NewJob.model_validate(data)
    for name, value in data.items():
        assert getattr(job, name) == value
    assert validate_new_job(dict(data)) == job


def test_new_job_defaults():
    job = NewJob.model_validate({"topic": "orders"})
    assert job.id is None
    assert job.body is None
    assert job.delay is None
    assert job.run_at is None
    assert job.retries is None
    assert job.timeout is None
    assert job.backoff is None
    assert job.when() == ("d", 0)


def test_run_at_near_the_limit_is_accepted():
    assert NewJob.model_validate({"topic": "orders", "run_at": time.time() + 365 * DAY_S}).run_at is not None
    assert NewJob.model_validate({"topic": "orders", "run_at": iso_in(365 * DAY_S)}).run_at is not None


# ----------------------------------------------------------------------------- NewJob: bad

FAR = T0_S + 10 * 366 * DAY_S

BAD_NEW_JOBS: list[tuple[dict[str, Any], str, str]] = [
    # (data, field, a piece of the message)
    ({}, "topic", "required"),
    ({"id": "x"}, "topic", "required"),
    ({"topic": ""}, "topic", "pattern"),
    ({"topic": "_private"}, "topic", "pattern"),
    ({"topic": "-dash"}, "topic", "pattern"),
    ({"topic": "has space"}, "topic", "pattern"),
    ({"topic": "a:b"}, "topic", "pattern"),
    ({"topic": "a{b}"}, "topic", "pattern"),
    ({"topic": "*"}, "topic", "pattern"),
    ({"topic": "t" * 65}, "topic", "pattern"),
    ({"topic": 5}, "topic", "valid string"),
    ({"topic": None}, "topic", "valid string"),
    ({"topic": "orders", "id": ""}, "id", "pattern"),
    ({"topic": "orders", "id": "_x"}, "id", "pattern"),
    ({"topic": "orders", "id": "a b"}, "id", "pattern"),
    ({"topic": "orders", "id": "a/b"}, "id", "pattern"),
    ({"topic": "orders", "id": "a{b}"}, "id", "pattern"),
    ({"topic": "orders", "id": "a|b"}, "id", "pattern"),
    ({"topic": "orders", "id": "i" * 129}, "id", "pattern"),
    ({"topic": "orders", "id": 42}, "id", "valid string"),
    ({"topic": "orders", "delay": -1}, "delay", "greater than or equal to 0"),
    ({"topic": "orders", "delay": -0.001}, "delay", "greater than or equal to 0"),
    ({"topic": "orders", "delay": 366 * DAY_S + 1}, "delay", "less than or equal to"),
    ({"topic": "orders", "delay": 10**12}, "delay", "less than or equal to"),
    ({"topic": "orders", "delay": "5"}, "delay", "valid number"),
    ({"topic": "orders", "delay": True}, "delay", "valid number"),
    ({"topic": "orders", "delay": [5]}, "delay", "valid number"),
    ({"topic": "orders", "delay": math.nan}, "delay", "finite"),
    ({"topic": "orders", "delay": math.inf}, "delay", "finite"),
    ({"topic": "orders", "run_at": "2026-11-22T18:30:00"}, "run_at", "zone"),
    ({"topic": "orders", "run_at": "2026-11-22"}, "run_at", "zone"),
    ({"topic": "orders", "run_at": "tomorrow"}, "run_at", "ISO-8601"),
    ({"topic": "orders", "run_at": ""}, "run_at", "ISO-8601"),
    ({"topic": "orders", "run_at": -1}, "run_at", ">= 0"),
    ({"topic": "orders", "run_at": FAR}, "run_at", "366 days"),
    ({"topic": "orders", "run_at": "2099-01-01T00:00:00Z"}, "run_at", "366 days"),
    ({"topic": "orders", "delay": 5, "run_at": T0_S}, "run_at", "either delay or run_at"),
    ({"topic": "orders", "delay": 0, "run_at": "2020-01-01T00:00:00Z"}, "run_at", "either delay or run_at"),
    ({"topic": "orders", "retries": 26}, "retries", "less than or equal to 25"),
    ({"topic": "orders", "retries": -1}, "retries", "greater than or equal to 0"),
    ({"topic": "orders", "retries": 2.5}, "retries", "valid integer"),
    ({"topic": "orders", "retries": 2.0}, "retries", "valid integer"),
    ({"topic": "orders", "retries": "2"}, "retries", "valid integer"),
    ({"topic": "orders", "retries": True}, "retries", "valid integer"),
    ({"topic": "orders", "timeout": 0}, "timeout", "greater than or equal to 1"),
    ({"topic": "orders", "timeout": 0.5}, "timeout", "greater than or equal to 1"),
    ({"topic": "orders", "timeout": 901}, "timeout", "less than or equal to 900"),
    ({"topic": "orders", "timeout": "30"}, "timeout", "valid number"),
    ({"topic": "orders", "backoff": []}, "backoff", "at least 1 item"),
    ({"topic": "orders", "backoff": [15] * 65}, "backoff", "at most 64 items"),
    ({"topic": "orders", "backoff": 15}, "backoff", "valid list"),
    ({"topic": "orders", "backoff": [-1]}, "backoff[0]", "greater than or equal to 0"),
    ({"topic": "orders", "backoff": ["x"]}, "backoff[0]", "valid number"),
    ({"topic": "orders", "backoff": [1, 2, "3"]}, "backoff[2]", "valid number"),
    ({"topic": "orders", "backoff": [1, True]}, "backoff[1]", "valid number"),
    ({"topic": "orders", "backoff": [1, 366 * DAY_S + 1]}, "backoff[1]", "less than or equal to"),
    ({"topic": "orders", "delay_s": 5}, "delay_s", "unknown field"),
    ({"topic": "orders", "runAt": T0_S}, "runAt", "unknown field"),
    ({"topic": "orders", "state": "ready"}, "state", "unknown field"),
]


@pytest.mark.parametrize(("data", "field", "message"), BAD_NEW_JOBS)
def test_new_job_bad(data, field, message):
    got_field, got_message = first_error(NewJob, data)
    assert got_field == field
    assert message in got_message
    assert not got_message.startswith("Value error")
    with pytest.raises(InvalidField) as info:
        validate_new_job(data)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("ahead_s", "accepted"),
    [(-DAY_S, True), (MAX_DELAY_S - 5, True), (MAX_DELAY_S - 0.5, True), (MAX_DELAY_S + 5, False)],
    ids=["past", "well-within", "within-its-last-second", "beyond"],
)
@pytest.mark.parametrize("kind", [float, int, str], ids=["float", "int", "iso"])
def test_run_at_is_at_most_366_days_ahead_to_the_second(ahead_s, accepted, kind):
    """Numbers well within range take a quick path; near the limit the exact one decides."""
    at = time.time() + ahead_s
    run_at: float | int | str = {
        float: at,
        int: math.floor(at) if accepted else math.ceil(at),
        str: datetime.fromtimestamp(math.floor(at), UTC).isoformat(),
    }[kind]
    if accepted:
        assert NewJob.model_validate({"topic": "orders", "run_at": run_at}).run_at == run_at
    else:
        assert first_error(NewJob, {"topic": "orders", "run_at": run_at}) == (
            "run_at",
            "must be at most 366 days from now",
        )


def test_unknown_field_message_is_exactly_unknown_field():
    assert first_error(NewJob, {"topic": "orders", "delay_s": 5}) == ("delay_s", "unknown field")


@pytest.mark.parametrize(
    "run_at",
    [True, [T0_S], math.nan],
    ids=["true", "list", "nan"],
)
def test_run_at_of_a_wrong_type_names_the_field_run_at(run_at):
    """The contract: errors name the offending field, the one the caller sent.

    ``run_at`` is a union (number or string), so pydantic reports one error per member with
    locations ``("run_at", "float")`` and ``("run_at", "str")``; ``describe`` turns these into
    ``run_at.float``, a field no caller sent.
    """
    field, _ = first_error(NewJob, {"topic": "orders", "run_at": run_at})
    assert field == "run_at"


@pytest.mark.parametrize("item", [None, [], "job", 42, ["topic", "orders"]])
def test_validate_new_job_refuses_non_objects(item):
    with pytest.raises(InvalidField) as info:
        validate_new_job(item)
    assert info.value.field == "job"
    assert "JSON object" in info.value.message


# ----------------------------------------------------------------------------- PutJob


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"body": {"x": 1}},
        {"topic": "orders", "id": "o-1", "delay": 5},
        {"run_at": "2020-01-01T00:00:00Z", "retries": 3, "timeout": 10, "backoff": [1]},
    ],
)
def test_put_job_good(data):
    job = PutJob.model_validate(data)
    for name, value in data.items():
        assert getattr(job, name) == value


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"topic": "bad topic"}, "topic"),
        ({"id": "i" * 129}, "id"),
        ({"delay": -1}, "delay"),
        ({"delay": 5, "run_at": T0_S}, "run_at"),
        ({"run_at": "2026-11-22T18:30:00"}, "run_at"),
        ({"retries": 26}, "retries"),
        ({"timeout": 901}, "timeout"),
        ({"backoff": [-1]}, "backoff[0]"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_put_job_bad(data, field):
    assert first_error(PutJob, data)[0] == field


# ----------------------------------------------------------------------------- Reschedule


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"delay": 0}, ("d", 0)),
        ({"delay": 1.5}, ("d", 1500)),
        ({"delay": 0.0001}, ("d", 1)),
        ({"delay": 366 * DAY_S}, ("d", 366 * DAY_S * 1000)),
        ({"run_at": 0}, ("a", 0)),
        ({"run_at": T0_S - 366 * DAY_S}, ("a", (T0_S - 366 * DAY_S) * 1000)),
        ({"run_at": "2020-01-01T00:00:00Z"}, ("a", 1_577_836_800_000)),
        ({"run_at": "2020-01-01T02:00:00.250+02:00"}, ("a", 1_577_836_800_250)),
        ({"delay": 5, "run_at": None}, ("d", 5000)),
    ],
)
def test_reschedule_good(data, expected):
    assert Reschedule.model_validate(data).when() == expected


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({}, "delay", "give delay or run_at"),
        ({"delay": None, "run_at": None}, "delay", "give delay or run_at"),
        ({"delay": 5, "run_at": T0_S}, "run_at", "either delay or run_at"),
        ({"delay": -1}, "delay", "greater than or equal to 0"),
        ({"delay": "5"}, "delay", "valid number"),
        ({"run_at": "2026-11-22T18:30:00"}, "run_at", "zone"),
        ({"run_at": FAR}, "run_at", "366 days"),
        ({"body": {}}, "body", "unknown field"),
        ({"delay": 5, "retries": 1}, "retries", "unknown field"),
    ],
)
def test_reschedule_bad(data, field, message):
    got_field, got_message = first_error(Reschedule, data)
    assert got_field == field
    assert message in got_message


# ----------------------------------------------------------------------------- When


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, ("d", 0)),
        ({"delay": None}, ("d", 0)),
        ({"delay": 0}, ("d", 0)),
        ({"delay": 2}, ("d", 2000)),
        ({"delay": 0.25}, ("d", 250)),
        ({"delay": 0.0005}, ("d", 1)),
        ({"run_at": 1}, ("a", 1000)),
        ({"run_at": 1_600_000_000.5}, ("a", 1_600_000_000_500)),
        ({"run_at": "2020-01-01T00:00:00Z"}, ("a", 1_577_836_800_000)),
        ({"run_at": "2020-01-01T00:00:00z"}, ("a", 1_577_836_800_000)),
        ({"run_at": "2020-01-01T01:00:00+01:00"}, ("a", 1_577_836_800_000)),
    ],
)
def test_when(data, expected):
    kind, ms = When.model_validate(data).when()
    assert (kind, ms) == expected
    assert type(ms) is int


def test_when_run_at_in_the_future():
    at = time.time() + DAY_S
    kind, ms = NewJob.model_validate({"topic": "orders", "run_at": at}).when()
    assert kind == "a"
    assert ms == math.ceil(at * 1000)


# ----------------------------------------------------------------------------- Batch, Replay


@pytest.mark.parametrize(
    "data",
    [
        {"jobs": []},
        {"jobs": [{"topic": "orders"}]},
        {"jobs": [{"topic": "bad topic"}, {"whatever": 1}]},  # items are validated one by one, later
        {"jobs": ["orders"]},  # an item that is not an object is that item's 422, not the batch's
        {"jobs": [{"topic": "orders"}, 5]},
    ],
)
def test_batch_good(data):
    assert Batch.model_validate(data).jobs == data["jobs"]


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({}, "jobs", "required"),
        ({"jobs": None}, "jobs", "valid list"),
        ({"jobs": {"topic": "orders"}}, "jobs", "valid list"),
        ({"jobs": [], "extra": 1}, "extra", "unknown field"),
    ],
)
def test_batch_bad(data, field, message):
    got_field, got_message = first_error(Batch, data)
    assert got_field == field
    assert message in got_message


def test_replay():
    assert Replay.model_validate({}).ids is None
    assert Replay.model_validate({"ids": ["a", "b"]}).ids == ["a", "b"]
    assert first_error(Replay, {"ids": ["ok", "bad id"]})[0] == "ids[1]"
    assert first_error(Replay, {"ids": ["x"] * (MAX_BATCH + 1)})[0] == "ids"


# ----------------------------------------------------------------------------- field_name, describe


@pytest.mark.parametrize(
    ("loc", "expected"),
    [
        ((), ""),
        (("delay",), "delay"),
        (("backoff", 0), "backoff[0]"),
        (("backoff", 12), "backoff[12]"),
        (("jobs", 3, "topic"), "jobs[3].topic"),
        (("jobs", 3, "backoff", 1), "jobs[3].backoff[1]"),
        (("a", "b", "c"), "a.b.c"),
        ((0,), "[0]"),
        ((0, "topic"), "[0].topic"),
        ((1, 2), "[1][2]"),
    ],
)
def test_field_name(loc, expected):
    assert field_name(loc) == expected


@pytest.mark.parametrize(
    ("error", "skip", "expected"),
    [
        ({"type": "missing", "loc": ("topic",), "msg": "Field required"}, 0, ("topic", "Field required")),
        ({"type": "missing", "loc": ("body", "topic"), "msg": "Field required"}, 1, ("topic", "Field required")),
        ({"type": "extra_forbidden", "loc": ("x",), "msg": "Extra inputs"}, 0, ("x", "unknown field")),
        ({"type": "value_error", "loc": ("run_at",), "msg": "Value error, bad"}, 0, ("run_at", "bad")),
        ({"type": "conflict", "loc": (), "msg": "both", "ctx": {"field": "run_at"}}, 0, ("run_at", "both")),
        ({"type": "conflict", "loc": ("body",), "msg": "both", "ctx": {"field": "run_at"}}, 1, ("run_at", "both")),
        ({"type": "whatever", "loc": (), "msg": "no field"}, 0, ("", "no field")),
        ({"type": "whatever", "loc": (), "msg": "m", "ctx": None}, 0, ("", "m")),
    ],
)
def test_describe(error, skip, expected):
    assert describe(error, skip) == expected


# ----------------------------------------------------------------------------- queue: names and ids


def test_new_id_matches_the_id_pattern_and_is_unique():
    ids = [new_id() for _ in range(5_000)] + new_ids(5_000) + new_ids(1)
    pattern = re.compile(ID_PATTERN)
    assert all(pattern.match(job_id) for job_id in ids)
    assert all(re.fullmatch(r"[0-9a-f]{24}", job_id) for job_id in ids)
    assert len(set(ids)) == len(ids)
    assert new_ids(0) == []


@pytest.mark.parametrize("topic", ["o", "orders", "O9_.-x", "t" * 64])
def test_check_topic_good(topic):
    assert check_topic(topic) == topic


@pytest.mark.parametrize("topic", ["", "_x", "-x", ".x", "a b", "a:b", "a/b", "a{b}", "*", "t" * 65, "é", None, 5])
def test_check_topic_bad(topic):
    with pytest.raises(InvalidField) as info:
        check_topic(topic)
    assert info.value.field == "topic"
    assert info.value.status == 422
    assert TOPIC_PATTERN in info.value.message


@pytest.mark.parametrize("job_id", ["x", "order-1042", "A9_.:@-x", "i" * 128, "user@example.com", "a:b:c"])
def test_check_id_good(job_id):
    assert check_id(job_id) == job_id


@pytest.mark.parametrize("job_id", ["", "_x", "@x", "a b", "a/b", "a|b", "a{b}", "i" * 129, "é", None, 42])
def test_check_id_bad(job_id):
    with pytest.raises(InvalidField) as info:
        check_id(job_id)
    assert info.value.field == "id"
    assert info.value.status == 422
    assert ID_PATTERN in info.value.message


@pytest.mark.parametrize(("check", "name", "field"), [(check_topic, "orders\n", "topic"), (check_id, "o-1\n", "id")])
def test_check_refuses_a_trailing_newline(check, name, field):
    """The patterns end in ``$``, which Python's ``re.match`` also matches just before a final newline.

    The pydantic models (Rust regex) refuse ``"orders\\n"``; ``check_topic``/``check_id`` let it through,
    so ``Queue.put("orders\\n", ...)`` (and ``get``, ``cancel``, ``stats``) use a topic
    name the contract's pattern forbids: ``put`` creates keys such as ``ns:{tag}:orders\\n:delayed``.
    """
    with pytest.raises(InvalidField) as info:
        check(name)
    assert info.value.field == field


def test_models_refuse_a_trailing_newline():
    assert first_error(NewJob, {"topic": "orders\n"})[0] == "topic"
    assert first_error(NewJob, {"topic": "orders", "id": "o-1\n"})[0] == "id"


# ----------------------------------------------------------------------------- body_json


def _nested(depth: int) -> object:
    body: object = "leaf"
    for _ in range(depth):
        body = [body]
    return body


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (_nested(MAX_BODY_DEPTH), None),
        (_nested(MAX_BODY_DEPTH + 1), "levels deep"),
        (_nested(100_000), "levels deep"),  # deeper than the encoder recurses
        ({"k": "[" * 1000}, None),  # brackets in strings are not nesting
        ({"\ud800": 1}, "lone surrogate"),
        (["ok", "\udfff"], "lone surrogate"),
        (float("nan"), "must be JSON"),
        ({1, 2}, "must be JSON"),
        ("é" * 10, None),
    ],
)
def test_body_json_refuses_what_is_not_storable_json(body, problem):
    if problem is None:
        assert json.loads(body_json(body)) == body
    else:
        with pytest.raises(InvalidField, match=problem) as caught:
            body_json(body)
        assert caught.value.field == "body"


def test_body_json_counts_utf8_bytes_for_the_size_limit():
    assert body_json("x" * (MAX_BODY_BYTES - 2))  # the quotes make it exactly the limit
    with pytest.raises(TooLarge, match="body"):
        body_json("é" * (MAX_BODY_BYTES // 2))  # two bytes each in UTF-8


# ----------------------------------------------------------------------------- TopicJob


def test_a_topic_job_becomes_a_job_in_the_paths_topic():
    job = TopicJob.model_validate({"id": "a", "delay": 5, "body": {"k": [1]}, "retries": 3}).in_topic("orders")
    assert isinstance(job, NewJob)
    assert (job.topic, job.id, job.delay, job.body, job.retries, job.when()) == (
        "orders",
        "a",
        5,
        {"k": [1]},
        3,
        ("d", 5000),
    )
    assert TopicJob.model_validate({"topic": "orders"}).in_topic("orders").topic == "orders"


def test_a_topic_job_naming_another_topic_is_refused_naming_topic():
    with pytest.raises(InvalidField, match="differs from the path") as caught:
        TopicJob.model_validate({"topic": "payments"}).in_topic("orders")
    assert caught.value.field == "topic"


# ---------------------------------------------------------------------- plain_job: the fast path


def _by_the_model(item: Any) -> tuple[str, str | None, str, int, str]:
    job = validate_new_job(item)
    return (job.topic, job.id, *job.when(), job.key or "")


@pytest.mark.parametrize(
    "item",
    [
        {"topic": "orders"},
        {"topic": "orders", "id": "o-1", "body": {"n": 1}},
        {"topic": "orders", "id": None, "body": None},
        {"topic": "orders", "delay": None, "run_at": None},
        {"topic": "orders", "delay": 0},
        {"topic": "orders", "delay": 2.007},
        {"topic": "orders", "delay": MAX_DELAY_S},
        {"topic": "orders", "run_at": T0_S},
        {"topic": "orders", "run_at": 1795372200.1234},
        {"topic": "orders", "run_at": 0},
        {"topic": "a" * 64, "id": "A" + "b" * 127, "run_at": 1.5},
        {"topic": "orders", "key": "tenant-7", "delay": 5},
        {"topic": "orders", "key": None},
        {"topic": "orders", "key": "K" + "k" * 127},
    ],
)
def test_plain_job_is_what_the_model_makes_of_the_common_shape(item):
    assert plain_job(item, time.time()) == _by_the_model(item)


@pytest.mark.parametrize(
    "item",
    [
        {"id": "a"},  # no topic
        {"topic": "orders", "retries": 1},  # overrides: the model
        {"topic": "orders", "delay_s": 5},  # unknown field
        {"topic": "orders\n"},
        {"topic": "_orders"},
        {"topic": 5},
        {"topic": "orders", "id": "a b"},
        {"topic": "orders", "id": 7},
        {"topic": "orders", "key": ""},
        {"topic": "orders", "key": "a|b"},
        {"topic": "orders", "key": "-lead"},
        {"topic": "orders", "key": 7},
        {"topic": "orders", "key": "k" * 129},
        {"topic": "orders", "delay": True},
        {"topic": "orders", "delay": "5"},
        {"topic": "orders", "delay": -1},
        {"topic": "orders", "delay": math.nan},
        {"topic": "orders", "delay": math.inf},
        {"topic": "orders", "delay": MAX_DELAY_S + 0.001},
        {"topic": "orders", "run_at": "2026-11-22T18:30:00Z"},  # valid, but a string: the model
        {"topic": "orders", "run_at": False},
        {"topic": "orders", "run_at": -1},
        {"topic": "orders", "run_at": math.nan},
        {"topic": "orders", "run_at": 10**400},
        {"topic": "orders", "run_at": time.time() + MAX_DELAY_S + 86_400},  # past the limit however late it runs
        {"topic": "orders", "delay": 1, "run_at": T0_S},
        ["orders"],
        None,
    ],
)
def test_plain_job_leaves_every_other_item_to_the_model(item):
    assert plain_job(item, time.time()) is None


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["orders", "o-1", "a.b:c@d", "", " x", "x\n", "_x", "2026-11-22T18:30:00Z", "é"]),
    st.floats(min_value=0, max_value=MAX_DELAY_S * 1.01),
    st.floats(min_value=T0_S - DAY_S, max_value=T0_S + 400 * DAY_S),
)
_FIELDS = st.sampled_from(["topic", "id", "body", "delay", "run_at", "retries", "timeout"])


@given(
    item=st.dictionaries(_FIELDS, _VALUES, max_size=5)
    | st.fixed_dictionaries({"topic": st.just("orders")}, optional={"id": _VALUES, "delay": _VALUES, "run_at": _VALUES})
)
@settings(max_examples=500, deadline=None)
def test_plain_job_accepts_only_what_the_model_accepts_and_means_the_same(item):
    plain = plain_job(item, time.time())
    if plain is not None:
        assert plain == _by_the_model(item)
