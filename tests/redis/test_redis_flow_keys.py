"""A job's flow key: written by every create, kept through every state a job goes through, and given
back to its handler, to ``get`` and to the job lists."""

from __future__ import annotations

import pytest
import redis

from delayq import InvalidField, Queue
from delayq.core.job import Meta

from support.answers import created
from support.scripts import Lua, kill_job, lua_for

TOPIC = "orders"


def _meta(lua: Lua, job_id: str) -> Meta:
    raw = lua.raw_meta(TOPIC, job_id)
    assert isinstance(raw, str)
    return Meta.decode(raw)


def test_every_create_writes_the_key(queue: Queue) -> None:
    queue.enqueue(TOPIC, {"n": 1}, id="one", key="tenant-1", delay=60)
    queue.enqueue(TOPIC, {"n": 1}, id="due", key="tenant-1", delay=0)
    queue.put(TOPIC, "put", {"n": 2}, key="tenant-2", delay=60)
    results = queue.enqueue_many(
        [
            {"topic": TOPIC, "id": "plain", "key": "tenant-3", "delay": 60},  # the plain shape's path
            {"topic": TOPIC, "id": "model", "key": "tenant-4", "delay": 60, "retries": 1},  # the model's path
            {"topic": TOPIC, "id": "none", "delay": 60},
        ]
    )
    assert [result.status for result in results] == [201] * 3
    keys = {job_id: queue.get(TOPIC, job_id).key for job_id in ("one", "due", "put", "plain", "model", "none")}
    assert keys == {
        "one": "tenant-1",
        "due": "tenant-1",
        "put": "tenant-2",
        "plain": "tenant-3",
        "model": "tenant-4",
        "none": None,
    }
    assert queue.get(TOPIC, "model").retries == 1  # the key does not hide the overrides before it


def test_a_replace_sets_or_drops_the_key(queue: Queue) -> None:
    queue.put(TOPIC, "j", {}, key="tenant-1", delay=60)
    queue.put(TOPIC, "j", {}, key="tenant-2", delay=60)
    assert queue.get(TOPIC, "j").key == "tenant-2"
    queue.put(TOPIC, "j", {}, delay=60)
    assert queue.get(TOPIC, "j").key is None


@pytest.mark.parametrize("key", ["", "a|b", "-lead", "k" * 129, 7])
def test_a_bad_key_is_refused_naming_it(queue: Queue, key: object) -> None:
    with pytest.raises(InvalidField) as refused:
        queue.enqueue(TOPIC, {}, key=key)  # type: ignore[arg-type]
    assert refused.value.field == "key"
    (result,) = queue.enqueue_many([{"topic": TOPIC, "id": "bad", "key": key}])
    assert result.status == 422
    assert queue.stats(TOPIC).jobs == 0


def test_the_key_goes_with_the_job_to_its_handler_and_through_retries_and_death(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.enqueue(TOPIC, {"n": 1}, id="k", key="tenant-9", delay=0, timeout=5)
    lua = lua_for(redis_client, queue, TOPIC, "k")
    taken = lua.take(TOPIC)
    (job,) = taken.jobs
    assert (job.key, taken.timeouts_ms) == ("tenant-9", [5000])  # its own timeout, beside its key
    assert _meta(lua, "k").key == "tenant-9"  # leased
    assert lua.fail(TOPIC, "k", taken.tokens[0], "boom", retries=1, backoff="0") == (1, 0)
    assert _meta(lua, "k").key == "tenant-9"  # retried
    (retried,) = lua.take(TOPIC).jobs
    assert (retried.attempt, retried.key) == (2, "tenant-9")
    queue.cancel(TOPIC, "k")
    queue.enqueue(TOPIC, {}, id="k", key="tenant-9", delay=0)
    kill_job(redis_client, queue, TOPIC, "k")
    assert (queue.get(TOPIC, "k").state, queue.get(TOPIC, "k").key) == ("dead", "tenant-9")
    assert queue.replay(TOPIC, ["k"]) == 1
    assert queue.get(TOPIC, "k").key == "tenant-9"
    queue.reschedule(TOPIC, "k", delay=60)
    assert (queue.get(TOPIC, "k").state, queue.get(TOPIC, "k").key) == ("delayed", "tenant-9")


def test_an_untaken_job_keeps_its_key(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue(TOPIC, {}, id="k", key="tenant-1", delay=0)
    lua = lua_for(redis_client, queue, TOPIC, "k")
    assert [job.key for job in lua.take(TOPIC, take_id="t-lost").jobs] == ["tenant-1"]
    assert lua.untake(TOPIC, "t-lost") == 1
    assert (queue.get(TOPIC, "k").state, queue.get(TOPIC, "k").key) == ("ready", "tenant-1")


def test_a_receipt_and_the_job_lists_show_the_key(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue(TOPIC, {}, id="done", key="tenant-1", delay=0)
    queue.enqueue(TOPIC, {}, id="later", key="tenant-2", delay=60)
    lua = lua_for(redis_client, queue, TOPIC, "done")
    taken = lua.take(TOPIC)
    assert lua.ack(TOPIC, "done", taken.tokens[0], keep_ms=60_000) == 1
    assert (queue.get(TOPIC, "done").state, queue.get(TOPIC, "done").key) == ("done", "tenant-1")
    assert [(job.id, job.key) for job in queue.jobs(TOPIC, "done").jobs] == [("done", "tenant-1")]
    assert [(job.id, job.key) for job in queue.jobs(TOPIC, "delayed").jobs] == [("later", "tenant-2")]
    assert queue.get(TOPIC, "later").to_dict()["key"] == "tenant-2"


def test_a_schedule_gives_its_occurrences_its_key(queue: Queue) -> None:
    info = queue.schedule(TOPIC, "hourly", every=3600, key="tenant-5")
    assert info.to_dict()["key"] == "tenant-5"
    (occurrence,) = queue.jobs(TOPIC, "delayed").jobs
    assert occurrence.key == "tenant-5"


def test_a_keyless_meta_is_what_it_was(queue: Queue, redis_client: redis.Redis) -> None:
    """Metas written before keys (8 fields) are those of keyless jobs still: nothing to migrate."""
    created(queue.enqueue_many([{"topic": TOPIC, "id": "plain", "delay": 60}])[0])
    raw = lua_for(redis_client, queue, TOPIC, "plain").raw_meta(TOPIC, "plain")
    assert isinstance(raw, str)
    assert raw.count("|") == 7
    assert queue.get(TOPIC, "plain").key is None
