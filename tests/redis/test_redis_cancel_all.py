"""Cancelling all of a topic's jobs in one state: cancel_all.lua (bounded per call) and
``Queue.cancel_all`` (which calls it until done, on every partition)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from delayq import InvalidField, Queue, TopicNotFound
from delayq.store import calls
from delayq.store import queue as queue_module
from delayq.store.calls import Failure

from support.scripts import Lua, Rules, dump

T = "orders"
MakeQueue = Callable[..., Queue]


def cancel_all(lua: Lua, state: str, limit: int) -> tuple[int, int]:
    return tuple(calls.cancel_all(lua.p, T, state, limit).run(lua.r))  # type: ignore[return-value]


def test_delayed_soonest_first_at_most_limit_per_call(lua: Lua) -> None:
    for n in range(25):
        lua.enqueue(T, f"j{n:02}", value=60_000 + n * 1000)
    assert cancel_all(lua, "delayed", 10) == (10, 15)
    assert lua.r.zrange(lua.k(T).delayed, 0, 0) == ["j10"]
    assert lua.meta(T, "j09") is None
    assert lua.body(T, "j09") is None
    assert cancel_all(lua, "delayed", 10) == (10, 5)
    assert cancel_all(lua, "delayed", 10) == (5, 0)
    assert cancel_all(lua, "delayed", 10) == (0, 0)
    assert len(lua.meta_ids(T)) == 0


def test_ready_from_the_head_dropping_holes_keeping_positions(lua: Lua) -> None:
    for job_id in "abcdef":
        lua.enqueue(T, job_id, value=0)
    assert calls.cancel(lua.p, T, "b").run(lua.r) == 3  # leaves a hole
    k = lua.k(T)
    assert lua.r.hget(k.control, "holes") == "1"
    # Reads a, the hole, c: two cancelled, the hole dropped and uncounted.
    assert cancel_all(lua, "ready", 3) == (2, 3)
    assert lua.r.lrange(k.ready, 0, -1) == ["d", "e", "f"]
    assert lua.r.hget(k.control, "holes") == "0"
    assert lua.r.hget(k.control, "tail") == "6"  # the jobs behind keep their positions
    assert lua.take(T).ids == ["d", "e", "f"]


def test_ready_jobs_that_stay_keep_their_place_for_a_listing_walking_meanwhile(make_queue: MakeQueue) -> None:
    queue = make_queue()
    for n in range(10):
        queue.enqueue(T, {}, id=f"j{n}", delay=0)
    first = queue.jobs(T, "ready", limit=4)
    assert [job.id for job in first.jobs] == ["j0", "j1", "j2", "j3"]
    p = queue.keys.partitions[0]
    assert calls.cancel_all(p, T, "ready", 6).run(queue.redis) == (6, 4)  # j0..j5: past the cursor
    rest = queue.jobs(T, "ready", limit=100, cursor=first.next)
    assert [job.id for job in rest.jobs] == ["j6", "j7", "j8", "j9"]  # none skipped, none twice


def test_dead_oldest_first_and_other_states_untouched(lua: Lua) -> None:
    lua.enqueue(T, "waiting", value=60_000)
    for job_id in ("x1", "x2", "busy"):
        lua.enqueue(T, job_id, value=0)
    taken = lua.take(T, count=3)
    failures = [Failure(job.id, token, "boom") for job, token, _ in taken.leases if job.id != "busy"]
    calls.fail(lua.p, T, Rules(0, "1000"), failures).run(lua.r)
    assert cancel_all(lua, "dead", 1) == (1, 1)
    assert lua.r.zrange(lua.k(T).dead, 0, -1) == ["x2"]
    assert lua.r.hget(lua.k(T).errors, "x1") is None
    assert cancel_all(lua, "dead", 10) == (1, 0)
    assert cancel_all(lua, "ready", 10) == (0, 0)
    assert lua.r.zrange(lua.k(T).delayed, 0, -1) == ["waiting"]
    assert list(lua.leases(T)) == ["busy"]
    meta = lua.meta(T, "busy")
    assert meta is not None
    assert meta.state == "l"


@pytest.mark.parametrize("partitions", [1, 4])
@pytest.mark.parametrize("state", ["delayed", "ready"])
def test_queue_cancel_all_works_through_every_partition_a_chunk_at_a_time(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch, partitions: int, state: str
) -> None:
    queue = make_queue(partitions=partitions)
    delay = 600 if state == "delayed" else 0
    queue.enqueue_many([{"topic": T, "id": f"j{n}", "delay": delay} for n in range(100)])
    queue.enqueue_many([{"topic": T, "id": f"other{n}", "delay": 600 - delay} for n in range(5)])
    queue.enqueue("payments", {}, id="p", delay=delay)
    monkeypatch.setattr(queue_module, "WRITE_CHUNK", 7)  # many calls per partition
    assert queue.cancel_all(T, state) == 100
    stats = queue.stats(T)
    assert (stats.delayed, stats.ready) == ((5, 0) if state == "ready" else (0, 5))
    assert queue.stats("payments").jobs == 1
    assert queue.cancel_all(T, state) == 0


def test_queue_cancel_all_refuses_naming_the_field(queue: Queue, redis_client: redis.Redis, namespace: str) -> None:
    queue.enqueue(T, {}, id="a", delay=60)
    before = dump(redis_client, namespace)
    for state in ("reserved", "all", ""):
        with pytest.raises(InvalidField) as info:
            queue.cancel_all(T, state)
        assert info.value.field == "state"
    with pytest.raises(InvalidField) as info:
        queue.cancel_all("no pe", "ready")
    assert info.value.field == "topic"
    assert dump(redis_client, namespace) == before


def test_queue_cancel_all_of_a_topic_nobody_knows(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"orders": {"target": "python:x:y"}})
    assert queue.cancel_all(T, "dead") == 0  # configured, empty
    with pytest.raises(TopicNotFound):
        queue.cancel_all("nope", "dead")
