"""A job's flow key through the HTTP API: accepted by every create, shown by ``GET``, refused naming
``key`` when it is not a valid key."""

from __future__ import annotations

import pytest

from delayq.surfaces.api import JobOut

from support.api import Api, assert_model


def test_every_create_route_takes_a_key_and_get_shows_it(api: Api) -> None:
    api.create("orders", "post", delay=60, key="tenant-1")
    assert api.post("/topics/orders/jobs", {"id": "topic-post", "delay": 60, "key": "tenant-2"}).status == 201
    assert api.put("/jobs/orders/put", {"delay": 60, "key": "tenant-3"}).status == 201
    batch = api.post("/jobs/batch", {"jobs": [{"topic": "orders", "id": "batch", "key": "tenant-4"}]})
    assert [item["status"] for item in batch.json["results"]] == [201]
    api.create("orders", "plain", delay=60)
    keys = {job_id: api.job("orders", job_id)["key"] for job_id in ("post", "topic-post", "put", "batch", "plain")}
    assert keys == {"post": "tenant-1", "topic-post": "tenant-2", "put": "tenant-3", "batch": "tenant-4", "plain": None}
    assert_model(JobOut, api.job("orders", "post"))
    listed = api.get("/topics/orders/jobs", query={"state": "delayed"}).json["jobs"]
    assert {job["id"]: job["key"] for job in listed}["put"] == "tenant-3"


@pytest.mark.parametrize("key", ["", "a b", "a|b", "_lead", "k" * 129, 7, ["k"]])
def test_a_bad_key_is_422_naming_it(seeded: Api, key: object) -> None:
    api = seeded
    api.refused(422, "key", "POST", "/jobs", {"topic": "orders", "id": "bad", "key": key}, error="invalid")
    reply = api.post("/jobs/batch", {"jobs": [{"topic": "orders", "id": "bad", "key": key}]})
    (item,) = reply.json["results"]
    assert (item["status"], item["error"]["field"]) == (422, "key")
