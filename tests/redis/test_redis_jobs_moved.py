"""Jobs a version before the partitions' job hashes kept in each topic's own ``meta`` and ``bodies``
hashes: found, refused again, taken and settled where they are until the sweeper moves them
(``move_jobs.lua``), and moved without losing a job or bringing back an older copy; a new namespace
is marked at once, an older one once the sweeper's walk is over (``lua/includes/jobs.lua``)."""

from __future__ import annotations

import redis

from delayq import Queue
from delayq.loops.sweeper import Sweeper
from delayq.store import calls
from delayq.store.keys import Keyspace

from support.invariants import check_redis
from support.scripts import Lua, job_field, to_older_layout

T = "orders"


def older(lua: Lua) -> Lua:
    """The same namespace as a process sees it that does not know its jobs moved."""
    return Lua(lua.r, lua.keyspace.namespace, moved=False)


def move_all(lua: Lua, topics: list[str], limit: int = 1000) -> int:
    """Runs the sweeper's walk to its end under the partition's lock; the calls it took."""
    assert calls.lock(lua.p, "mover", ttl_ms=10_000).run(lua.r)
    walks, steps = dict.fromkeys(topics, "m0"), 0
    while walks:
        moved = calls.move_jobs(lua.p, "mover", walks, limit).run(lua.r)
        assert moved is not None
        walks = {topic: at for topic, at in moved.items() if at}
        steps += 1
    return steps


def test_an_older_versions_jobs_are_found_taken_settled_and_moved(lua: Lua) -> None:
    lua.enqueue(T, "due", '{"n":1}', value=0)
    lua.enqueue(T, "later", '{"n":2}', value=60_000)
    lua.enqueue(T, "settled", '{"n":3}', value=0)
    assert to_older_layout(lua.r, lua.p) == 3
    old = older(lua)
    assert old.inspect(T, "later").state == "delayed"  # found where the older version kept it
    assert old.enqueue(T, "later", '"again"')[0] == -1  # and a create of it is refused, as any
    taken = old.take(T, count=1)
    assert taken.ids == ["due"]
    assert taken.jobs[0].body == {"n": 1}
    assert old.raw_meta(T, "due") is not None  # written here once taken, gone from the topic's hash
    assert not lua.r.hexists(lua.p.topic_key(T, "meta"), "due")
    assert old.ack(T, "due", taken.tokens[0], keep_ms=0) == 1
    assert old.where(T, "due") == set()
    assert not lua.r.hexists(lua.p.topic_key(T, "bodies"), "due")  # its body too: no older copy left

    # A job found in both (written here since, as a take would): the job hashes' copy wins.
    old.set_meta(T, "settled", lua.r.hget(lua.p.topic_key(T, "meta"), "settled"))
    old.set_body(T, "settled", '"newer"')
    assert move_all(old, [T]) == 1
    assert lua.r.exists(lua.p.topic_key(T, "meta"), lua.p.topic_key(T, "bodies")) == 0
    assert lua.body(T, "settled") == '"newer"'
    assert (lua.body(T, "later"), lua.inspect(T, "later").state) == ('{"n":2}', "delayed")
    check_redis(lua.r, lua.keyspace.namespace)


def test_a_walk_is_bounded_per_call_and_moves_a_body_left_behind(lua: Lua) -> None:
    lua.enqueue_many([lua.write(T, f"j{n}", value=60_000) for n in range(1200)])  # beyond a listpack's size
    lua.enqueue("other", "x", value=0)
    to_older_layout(lua.r, lua.p)
    old = older(lua)
    # A take of the older version's job writes its meta here and leaves its body in the topic's hash.
    assert old.take("other", count=1).ids == ["x"]
    assert lua.r.hexists(lua.p.topic_key("other", "bodies"), "x")
    assert move_all(old, [T, "other"], limit=100) >= 6  # 1,201 jobs, about 100 a call
    assert lua.body("other", "x") == '{"n":1}'
    assert len(lua.meta_ids(T)) == 1200
    check_redis(lua.r, lua.keyspace.namespace)


def test_a_new_namespace_is_marked_at_its_first_use(make_queue) -> None:  # type: ignore[no-untyped-def]
    queue: Queue = make_queue()
    queue.enqueue(T, {"n": 1})
    assert all(partition.moved.known for partition in queue.keys.partitions)
    for partition in queue.keys.partitions:
        assert calls.jobs_moved(partition).run(queue.redis)


def test_the_sweeper_moves_an_older_namespace_and_every_process_learns_it(
    make_queue,  # type: ignore[no-untyped-def]
    redis_client: redis.Redis,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    queue: Queue = make_queue(partitions=2)
    jobs = [{"topic": T, "id": f"j{n}", "delay": 60} for n in range(40)]
    assert [r.status for r in queue.enqueue_many(jobs)] == [201] * 40
    moved = sum(to_older_layout(redis_client, partition) for partition in queue.keys.partitions)
    assert moved == 40
    namespace = queue.settings.namespace
    monkeypatch.setattr("delayq.store.namespace.MOVED_CHECK_S", 0.0)
    # A process started before the walk: its scripts look in both places, and find every job.
    later = Queue(queue.settings)
    assert not any(partition.moved.known for partition in later.keys.partitions)
    assert later.redis is not None  # connected, checked: the namespace is not new
    assert not any(partition.moved.known for partition in later.keys.partitions)
    listed = later.jobs(T, "delayed", limit=100).jobs
    assert len(listed) == 40
    sweeper = Sweeper(Queue(queue.settings))
    try:
        sweeper.sweep_once()
    finally:
        sweeper.release()
    assert all(partition.moved.known for partition in sweeper.namespace.keys.partitions)
    assert later.redis is not None  # asks again: learns it
    assert all(partition.moved.known for partition in later.keys.partitions)
    keyspace = Keyspace(namespace, 2)
    assert sum(redis_client.hlen(p.metas) for p in keyspace.partitions) == 40
    assert not any(redis_client.exists(p.topic_key(T, "meta")) for p in keyspace.partitions)
    check_redis(redis_client, namespace, 2)


def test_the_job_hashes_field(lua: Lua) -> None:
    lua.enqueue(T, "a", '"x"')
    assert lua.r.hget(lua.p.metas, job_field(T, "a")) is not None
    assert lua.r.hget(lua.p.bodies, job_field(T, "a")) == '"x"'
