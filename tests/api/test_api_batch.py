"""``POST /jobs/batch``: per-item results in request order; valid items are written anyway."""

from __future__ import annotations

import re
from typing import Any

import pytest

from delayq.core.models import ID_PATTERN, MAX_BODY_BYTES
from delayq.surfaces.api import BatchItemOut, BatchOut, ErrorOut

from support.api import ANY_FIELD, Api, assert_model

DAY_S = 86_400


def batch(api: Api, jobs: list[Any]) -> list[dict[str, Any]]:
    reply = api.post("/jobs/batch", {"jobs": jobs})
    assert reply.status == 200, reply
    assert_model(BatchOut, reply.json)
    results = reply.json["results"]
    assert len(results) == len(jobs)
    for result in results:
        assert_model(BatchItemOut, result, exact=False)
        assert result["status"] in (201, 409, 422), result
        if result["status"] == 201:
            assert {"status", "id", "run_at", "run_at_ms"} <= set(result), result
            assert result.get("error") is None
        else:
            assert_model(ErrorOut, result["error"])
    return results


def test_results_in_request_order_and_valid_items_written(seeded: Api):
    api = seeded
    jobs = [
        {"topic": "orders", "id": "b1", "delay": 60, "body": 1},
        {"topic": "orders", "id": "seed", "delay": 5, "body": "replaced?"},
        {"topic": "orders", "id": "b2", "delay": -1},
        {"topic": "reminders", "delay": 0, "body": [2]},
        {"topic": "orders", "id": "b3", "colour": "red"},
        {"topic": "payments", "id": "b4", "run_at": "2026-01-31T09:00:00"},
        {"topic": "payments", "id": "b5", "backoff": [1, -2]},
        {"topic": "payments", "id": "b6", "delay": 30, "retries": 7, "body": {"ok": True}},
    ]
    results = batch(api, jobs)
    assert [r["status"] for r in results] == [201, 409, 422, 201, 422, 422, 422, 201]
    ids = [r["id"] for r in results]
    assert ids[:3] + ids[4:] == ["b1", "seed", "b2", "b3", "b4", "b5", "b6"]
    assert [r["error"]["field"] for r in results if r["status"] == 422] == ["delay", "colour", "run_at", "backoff[1]"]
    assert results[1]["error"]["error"] == "exists"
    assert results[1]["error"]["field"] == "id"

    generated = results[3]["id"]
    assert re.match(ID_PATTERN, generated)
    assert api.job("reminders", generated)["body"] == [2]
    assert api.job("reminders", generated)["state"] == "ready"
    assert api.job("orders", "b1")["body"] == 1
    assert api.job("orders", "b1")["run_at_ms"] == results[0]["run_at_ms"]
    assert api.job("payments", "b6")["retries"] == 7
    assert api.job("orders", "seed")["body"] == {"seed": True}  # the 409 changed nothing
    for topic, job_id in (("orders", "b2"), ("orders", "b3"), ("payments", "b4"), ("payments", "b5")):
        assert api.get(f"/jobs/{topic}/{job_id}").status == 404


def test_ids_are_generated_when_absent_and_distinct(api: Api):
    results = batch(api, [{"topic": "orders", "delay": 5}] * 5)
    ids = [r["id"] for r in results]
    assert all(r["status"] == 201 for r in results)
    assert len(set(ids)) == 5
    assert api.stats("orders")["delayed"] == 5


def test_the_same_id_twice_in_one_batch_is_201_then_409(api: Api):
    results = batch(api, [{"topic": "orders", "id": "dup", "body": 1}, {"topic": "orders", "id": "dup", "body": 2}])
    assert [r["status"] for r in results] == [201, 409]
    assert api.job("orders", "dup")["body"] == 1


def test_item_with_a_body_too_large_is_refused_alone(api: Api):
    results = batch(
        api,
        [{"topic": "orders", "id": "big", "body": "x" * MAX_BODY_BYTES}, {"topic": "orders", "id": "small"}],
    )
    assert results[0]["status"] == 422  # the contract's item statuses: 201, 409, 422
    assert results[0]["error"]["field"] == "body"
    assert results[1]["status"] == 201
    assert api.get("/jobs/orders/big").status == 404


def test_items_that_are_not_objects_are_422_items_not_a_refused_batch(seeded: Api):
    """Each item is validated on its own (``models.Batch``, ``validate_new_job``): an item that is not
    a JSON object is a 422 result, and the valid items around it are written."""
    items = [
        {"topic": "orders", "id": "good-1"},
        5,
        "job",
        None,
        ["topic", "orders"],
        {"topic": "orders", "id": "good-2"},
    ]
    results = batch(seeded, items)
    assert [r["status"] for r in results] == [201, 422, 422, 422, 422, 201]
    assert all(r["error"]["status"] == 422 for r in results[1:5])
    assert seeded.job("orders", "good-2")["state"] == "ready"


def test_all_items_invalid_writes_nothing(seeded: Api):
    before = seeded.snapshot()
    results = batch(
        seeded, [{"topic": "_bad"}, {"topic": "orders", "delay": "soon"}, {"topic": "orders", "id": "seed"}]
    )
    assert [r["status"] for r in results] == [422, 422, 409]
    assert [r["error"]["field"] for r in results] == ["topic", "delay", "id"]
    assert seeded.snapshot() == before


def test_empty_batch_is_200_with_no_results(seeded: Api):
    before = seeded.snapshot()
    assert batch(seeded, []) == []
    assert seeded.snapshot() == before


def test_1000_items_are_accepted(api: Api):
    results = batch(api, [{"topic": "orders", "id": f"j{i}", "delay": 60, "body": {"i": i}} for i in range(1000)])
    assert [r["id"] for r in results] == [f"j{i}" for i in range(1000)]
    assert all(r["status"] == 201 for r in results)
    assert api.stats("orders")["delayed"] == 1000
    assert api.job("orders", "j999")["body"] == {"i": 999}


def test_1001_items_are_413_naming_jobs(seeded: Api):
    jobs = [{"topic": "orders", "id": f"j{i}"} for i in range(1001)]
    reply = seeded.refused(413, "jobs", "POST", "/jobs/batch", {"jobs": jobs}, error="too_large")
    assert "1000" in reply.json["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "jobs"),
        ({"jobs": None}, "jobs"),
        ({"jobs": "all"}, "jobs"),
        ({"jobs": {"topic": "orders"}}, "jobs"),
        ({"jobs": [], "extra": 1}, "extra"),
    ],
    ids=repr,
)
def test_bad_batch_is_422_naming_the_field(seeded: Api, body: dict[str, Any], field: str):
    seeded.refused(422, field, "POST", "/jobs/batch", body, error="invalid")


@pytest.mark.parametrize(
    "body", [[{"topic": "orders"}], [{"jobs": [{"topic": "orders", "id": "x"}]}], "jobs", None], ids=repr
)
def test_batch_that_is_not_an_object_is_422(seeded: Api, body: Any):
    seeded.refused(422, ANY_FIELD, "POST", "/jobs/batch", body, error="invalid")


def test_batch_malformed_json_is_400(seeded: Api):
    seeded.refused(400, ANY_FIELD, "POST", "/jobs/batch", raw_body='{"jobs": [', error="malformed")
