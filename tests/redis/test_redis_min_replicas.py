"""``DELAYQ_MIN_REPLICAS``: a create is answered only once Redis ``WAIT``, on the connection that wrote
it, says that many replicas hold it; else 503 ``not_replicated``. On private servers: a primary whose
replica lags 100 ms behind (so a create answered early would not be on the replica yet), and a primary
without a replica.

Every kind of create waits: ``POST /jobs``, ``PUT``, ``POST /jobs/batch``, ``enqueue_many`` (a ``WAIT``
per chunk), a schedule's occurrences, and a create sent again as EVAL after NOSCRIPT.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from delayq import NotReplicated, Queue, Settings, Topics
from delayq.core.errors import ConfigError

from support.api import Api
from support.recorder import RECORDER
from support.servers import RedisServer, ReplicaPair, Twemproxy

TOPIC = "orders"
TOPICS: dict[str, Any] = {TOPIC: {"target": RECORDER}}
LAG_S = 0.1  # the replica's link holds every byte this long: a create answered before WAIT is not there yet
WAIT_MS = 300
QUICK_SYNC = ("--repl-diskless-sync-delay", "0")


@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicaPair]:
    with ReplicaPair(*QUICK_SYNC, link_delay_s=LAG_S) as started:
        yield started


@pytest.fixture(scope="module")
def alone() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def settings(url: str, **changes: Any) -> Settings:
    values: dict[str, Any] = {"partitions": 3, "min_replicas_wait_ms": WAIT_MS, **changes}
    return Settings(redis_url=url, namespace=f"mr-{uuid.uuid4().hex[:10]}", topics=Topics.parse(TOPICS), **values)


def on_replica(pair: ReplicaPair, queue: Queue, job_id: str) -> bool:
    """Whether the replica holds the job's body: what a promoted replica would have."""
    bodies = queue.keys.for_job(TOPIC, job_id).bodies
    with pair.replica.client() as client:
        return bool(client.hexists(bodies, f"{TOPIC}/{job_id}"))


def test_every_create_is_on_the_replica_when_it_is_answered(pair: ReplicaPair) -> None:
    queue = Queue(settings(pair.primary.url, min_replicas=1))
    queue.enqueue(TOPIC, {"n": 1}, id="one")
    assert on_replica(pair, queue, "one")
    queue.put(TOPIC, "put", {"n": 2}, delay=60)
    assert on_replica(pair, queue, "put")
    results = queue.enqueue_many({"topic": TOPIC, "id": f"m{i}", "delay": 60} for i in range(600))  # 3 chunks
    assert [result.status for result in results] == [201] * 600
    assert all(on_replica(pair, queue, f"m{i}") for i in range(600))
    batch = queue.enqueue_many([{"topic": TOPIC, "id": f"b{i}"} for i in range(20)], chunk=1000)
    assert [result.status for result in batch] == [201] * 20
    assert all(on_replica(pair, queue, f"b{i}") for i in range(20))


def test_without_min_replicas_a_create_is_answered_before_the_replica_has_it(pair: ReplicaPair) -> None:
    """The same lagging link without the setting: what the setting is for (the replica is 100 ms behind)."""
    queue = Queue(settings(pair.primary.url))
    queue.enqueue(TOPIC, {"n": 1}, id="early")
    assert not on_replica(pair, queue, "early")


def test_a_create_sent_again_as_eval_after_noscript_waits_too(pair: ReplicaPair) -> None:
    queue = Queue(settings(pair.primary.url, min_replicas=1))
    queue.enqueue(TOPIC, {}, id="warm")
    with pair.primary.client() as client:
        client.script_flush()
    queue.enqueue(TOPIC, {}, id="after-flush")
    assert on_replica(pair, queue, "after-flush")


def test_a_schedules_first_occurrence_is_on_the_replica_when_its_put_is_answered(pair: ReplicaPair) -> None:
    queue = Queue(settings(pair.primary.url, min_replicas=1))
    info = queue.schedule(TOPIC, "tick", every=3600)
    occurrence = f"tick@{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(info.next_run_at_ms / 1000))}"
    assert on_replica(pair, queue, occurrence)


def test_too_few_replicas_is_503_not_replicated_and_the_job_is_written(alone: RedisServer) -> None:
    queue = Queue(settings(alone.url, min_replicas=1))
    began = time.monotonic()
    with pytest.raises(NotReplicated) as short:
        queue.enqueue(TOPIC, {}, id="lonely")
    assert time.monotonic() - began >= WAIT_MS / 1000  # it waited for WAIT's timeout
    assert (short.value.status, short.value.replicas, short.value.wanted) == (503, 0, 1)
    assert queue.get(TOPIC, "lonely").state == "ready"  # on the primary: creating it again is a 409
    with pytest.raises(NotReplicated):
        queue.enqueue_many([{"topic": TOPIC, "id": "x"}, {"topic": TOPIC, "id": "y"}])


def test_the_api_answers_503_not_replicated_with_the_counts(
    alone: RedisServer, monkeypatch: pytest.MonkeyPatch, handler_env: dict[str, str]
) -> None:
    namespace = f"mr-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("DELAYQ_REDIS_URL", alone.url)
    monkeypatch.setenv("DELAYQ_NAMESPACE", namespace)
    monkeypatch.setenv("DELAYQ_MIN_REPLICAS", "2")
    monkeypatch.setenv("DELAYQ_MIN_REPLICAS_WAIT_MS", "50")
    api = Api.start(redis.Redis(port=alone.port), namespace)
    for reply in (
        api.post("/jobs", {"topic": "orders", "id": "a"}),
        api.put("/jobs/orders/b", {"delay": 5}),
        api.post("/jobs/batch", {"jobs": [{"topic": "orders", "id": "c"}, {"topic": "orders", "id": "d"}]}),
    ):
        assert reply.status == 503, reply
        assert {key: reply.json[key] for key in ("error", "replicas", "wanted")} == {
            "error": "not_replicated",
            "replicas": 0,
            "wanted": 2,
        }, reply
        assert {name.lower(): value for name, value in reply.headers.items()}["retry-after"] == "1"
    assert api.post("/jobs", {"topic": "orders", "id": "a"}).json["error"] == "exists"  # it was written


def test_a_server_that_refuses_wait_is_refused_at_start(alone: RedisServer) -> None:
    with Twemproxy([alone]) as proxy:
        queue = Queue(settings(proxy.url, min_replicas=1, partitions=1))
        with pytest.raises(ConfigError, match=r"DELAYQ_MIN_REPLICAS is 1, but .* refuses WAIT"):
            queue.enqueue(TOPIC, {}, id="never")
        plain = Queue(settings(proxy.url, partitions=1))
        assert plain.enqueue(TOPIC, {}, id="fine").created  # without the setting, nothing is asked of it
