"""A take call of many lanes batches their topic index writes (topic_index.lua index_batch), their
lease writes (leases.lua lease_batch) and their jobs' reads and writes (jobs.lua jobs_batch): one
command per index, lease set or job hash and kind of access for all its topics, and every index ends
exactly as the lanes' own sets say, whatever each lane did (took its last job, took one of two,
acknowledged, was paused, put a job back)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from delayq.store import calls
from delayq.store.calls import Ack

from support.scripts import GRACE_MS, TIMEOUT_MS, Lua, Rules
from support.servers import redis_server

LONE = [f"lone-{n}" for n in range(6)]
KEEP = Rules(keep_done_ms=60_000)  # receipts kept, as by default


@pytest.fixture(scope="module")
def alone() -> Iterator[Lua]:
    """The scripts on a server of their own: its command counts are theirs alone."""
    with redis_server() as server, server.client() as client:
        yield Lua(client, "batch")


def command_calls(client: redis.Redis) -> Counter[str]:
    return Counter({name[len("cmdstat_") :]: int(stat["calls"]) for name, stat in client.info("commandstats").items()})


def first_score(client: redis.Redis, key: str) -> float | None:
    first: list[Any] = client.zrange(key, 0, 0, withscores=True)
    return first[0][1] if first else None


def assert_index_exact(lua: Lua, topics: list[str]) -> None:
    """Each topic's entry in the delayed index is its set's first score, or absent (never due, +inf,
    while the topic is known); the partition's two lease sets hold the same leases."""
    for topic in topics:
        k = lua.k(topic)
        first = first_score(lua.r, k.delayed)
        assert lua.r.zscore(lua.p.delayed_index, topic) in ({first} if first else {None, math.inf}), topic
        lua.leases(topic)  # asserts the sets agree


def test_lone_jobs_taken_in_one_call_cost_one_index_write_per_index(alone: Lua) -> None:
    lua = alone
    for topic in LONE:
        lua.enqueue(topic, "j", value=60_000)
        lua.make_due(topic, "j")
    lanes = [calls.lane_take(lua.p, topic, count=1, timeout_ms=TIMEOUT_MS, grace_ms=GRACE_MS) for topic in LONE]
    before = command_calls(lua.r)
    taken = calls.takes(lua.p, lanes).run(lua.r)
    after = command_calls(lua.r)
    assert [t.ids for t in taken] == [["j"]] * len(LONE)
    # Per lane: one read of its delayed set's head (the job and what is left after it) and one removal
    # from it; then for all six, one ZADD of each of the partition's lease sets and one ZADD XX of the
    # delayed index (never due: the topics stay known). It was a ZADD of each lane's own leased set
    # and a ZADD LT of a lease index more.
    assert after["zadd"] - before["zadd"] == 3
    assert after["zrange"] - before["zrange"] == len(LONE)
    assert after["zrangebyscore"] - before["zrangebyscore"] == 0
    assert after["zremrangebyrank"] - before["zremrangebyrank"] == len(LONE)
    assert after["zrem"] - before["zrem"] == 0
    # Their ready lists, all empty: one read of the ready index, none of the lists.
    assert after["zmscore"] - before["zmscore"] == 1
    assert after["lrange"] - before["lrange"] == 0
    # Their jobs: one read of the partition's metas and one of its bodies for all six (the other six
    # HMGETs read each topic's control), one write of the metas. It was three of each lane's own.
    assert after["hmget"] - before["hmget"] == len(LONE) + 2
    assert after["hset"] - before["hset"] == 1
    assert_index_exact(lua, LONE)
    assert dict(lua.r.zrange(lua.p.delayed_index, 0, -1, withscores=True)) == {topic: math.inf for topic in LONE}

    # Their acks riding in one call, receipts kept: one ZREM of each lease set for all (it was one of
    # each lane's leased set, a read of its first score, and one of a lease index).
    acks = [
        calls.lane_acks(lua.p, topic, KEEP, [Ack("j", t.tokens[0], 0, "")])
        for topic, t in zip(LONE, taken, strict=True)
    ]
    before = command_calls(lua.r)
    calls.takes(lua.p, acks).run(lua.r)
    after = command_calls(lua.r)
    assert after["zrem"] - before["zrem"] == 2
    assert after["zrange"] - before["zrange"] == 0
    # And one read of the metas, one write of the receipts and one drop of the bodies for all six.
    assert (after["hmget"] - before["hmget"], after["hset"] - before["hset"]) == (1, 1)
    assert after["hdel"] - before["hdel"] == 1
    assert_index_exact(lua, LONE)
    assert lua.r.zcard(lua.p.leases) == lua.r.zcard(lua.p.leases_lex) == 0


def test_every_kind_of_lane_leaves_the_index_exact(lua: Lua) -> None:
    """In one call: a lane that takes one of two due jobs (its index entry moves on), one that
    acknowledges and takes (its lease entry set from its leased set), a paused one that only
    acknowledges, one whose job is not due yet (nothing taken), acks alone that leave a lease, acks
    alone with no receipt kept (the topic holds nothing: forgotten, out of every index)."""
    for job_id in ("a", "b"):
        lua.enqueue("two", job_id, value=60_000)
        lua.make_due("two", job_id, ago_ms=10 if job_id == "a" else 5)
    acked_and_taking = lua.make_leased("again", "x")
    lua.enqueue("again", "y", value=0)
    paused = lua.make_leased("paused", "p")
    lua.pause("paused")
    lua.enqueue("later", "l", value=60_000)
    first, second = lua.make_leased("half", "h1"), lua.make_leased("half", "h2")
    gone = lua.make_leased("gone", "g")
    topics = ["two", "again", "paused", "later", "half", "gone"]

    def ack(lease: Any) -> list[Ack]:
        return [Ack(lease.job.id, lease.token, 0, "")]

    lanes = [
        calls.lane_take(lua.p, "two", count=1, timeout_ms=TIMEOUT_MS, grace_ms=GRACE_MS),
        calls.lane_take(
            lua.p,
            "again",
            count=1,
            timeout_ms=TIMEOUT_MS,
            grace_ms=GRACE_MS,
            acks=ack(acked_and_taking),
            keeping=Rules(),
        ),
        calls.lane_take(
            lua.p, "paused", count=1, timeout_ms=TIMEOUT_MS, grace_ms=GRACE_MS, acks=ack(paused), keeping=Rules()
        ),
        calls.lane_take(lua.p, "later", count=1, timeout_ms=TIMEOUT_MS, grace_ms=GRACE_MS),
        calls.lane_acks(lua.p, "half", Rules(keep_done_ms=60_000), ack(first)),
        calls.lane_acks(lua.p, "gone", Rules(keep_done_ms=0), ack(gone)),
    ]
    taken = calls.takes(lua.p, lanes).run(lua.r)
    assert [t.ids for t in taken[:4]] == [["a"], ["y"], [], []]
    assert [t.acked for t in taken] == [0, 1, 1, 0, 1, 1]
    assert lua.r.zscore(lua.p.delayed_index, "two") == lua.r.zscore(lua.k("two").delayed, "b")
    assert list(lua.leases("half")) == [second.job.id]
    assert lua.r.zscore(lua.p.receipts_index, "half") is not None
    assert not lua.r.sismember(lua.p.topics, "gone")
    indexes = (lua.p.delayed_index, lua.p.ready_index, lua.p.receipts_index)
    assert all(lua.r.zscore(index, "gone") is None for index in indexes)
    assert_index_exact(lua, topics)
