"""take with a rate limit: the token bucket in the topic's control hash (lua/includes/rate.lua).

The bucket is refilled by Redis' clock alone. These tests use slow rates (a start every 100 s) so that
whatever the machine's speed, no start is refilled between two calls, and move the bucket's time
themselves to stand for a quiet spell.
"""

from __future__ import annotations

import time

from delayq.core.settings import TopicConfig

from support.scripts import Lua, sleep_until_server_ms

T = "orders"
SLOW = TopicConfig(target="x", rate=0.01, burst=3)  # a start every 100 s, 3 at once
INTERVAL_US = 100_000_000


def ready_jobs(lua: Lua, *ids: str) -> None:
    for job_id in ids:
        lua.enqueue(T, job_id, value=0)


def take(lua: Lua, count: int = 10, config: TopicConfig = SLOW, **limits: object) -> list[str]:
    return lua.take(T, count=count, rate=config.rate_share(1), **limits).ids


def test_a_full_bucket_gives_the_burst_and_holds_the_rest_back_in_place(lua: Lua) -> None:
    ready_jobs(lua, *"abcdefg")
    k = lua.k(T)
    taken = lua.take(T, count=10, rate=SLOW.rate_share(1))
    assert taken.ids == ["a", "b", "c"]
    # The others are ready, in their places, their attempts not counted.
    assert lua.r.lrange(k.ready, 0, -1) == list("defg")
    assert lua.r.hget(k.control, "tail") == "7"
    for job_id in "defg":
        meta = lua.meta(T, job_id)
        assert meta is not None
        assert (meta.state, meta.attempts) == ("q", 0)
    # The take says when the next start is free: one interval from now (give or take the call's time).
    assert taken.next_in_ms is not None
    assert 90_000 < taken.next_in_ms <= 100_000
    # Empty: nothing more, and the wait is still about an interval.
    again = lua.take(T, count=10, rate=SLOW.rate_share(1))
    assert again.ids == []
    assert again.next_in_ms is not None
    assert 90_000 < again.next_in_ms <= 100_000
    assert lua.r.lrange(k.ready, 0, -1) == list("defg")


def test_the_bucket_refills_by_redis_time(lua: Lua) -> None:
    ready_jobs(lua, *"abcdefgh")
    k = lua.k(T)
    assert take(lua) == ["a", "b", "c"]
    assert take(lua) == []
    # One interval passes: one start.
    lua.r.hincrby(k.control, "rate_at", -INTERVAL_US)
    assert take(lua) == ["d"]
    assert take(lua) == []
    # A long quiet spell fills the bucket, and no more than the burst: 3 starts, not 10.
    lua.r.hincrby(k.control, "rate_at", -10 * INTERVAL_US)
    assert take(lua) == ["e", "f", "g"]
    assert take(lua) == []
    assert lua.r.lrange(k.ready, 0, -1) == ["h"]


def test_a_take_smaller_than_the_bucket_spends_only_what_it_leased(lua: Lua) -> None:
    ready_jobs(lua, *"abcde")
    assert take(lua, count=1) == ["a"]
    assert take(lua, count=1) == ["b"]
    assert take(lua, count=5) == ["c"]  # the third start of the burst
    assert take(lua, count=5) == []


def test_jobs_not_leased_spend_no_start(lua: Lua) -> None:
    """A job put back for a consumer with more time is not a start: the bucket keeps it."""
    lua.enqueue(T, "long", value=0, timeout="60000")
    ready_jobs(lua, "a", "b")
    assert take(lua, timeout_ms=5000, longest_ms=10_000) == ["a", "b"]
    assert lua.r.lrange(lua.k(T).ready, 0, -1) == ["long"]  # put back at the head
    assert take(lua) == ["long"]  # the third start was not spent on the put back
    assert take(lua) == []


def test_due_delayed_jobs_count_against_the_bucket_too(lua: Lua) -> None:
    ready_jobs(lua, "a")
    due_at = 0
    for job_id in ("b", "c", "d"):  # due soon, and not moved by a sweep
        _, due_at = lua.enqueue(T, job_id, value=300)
    sleep_until_server_ms(lua.r, due_at)
    assert take(lua) == ["a", "b", "c"]
    assert lua.r.zrange(lua.k(T).delayed, 0, -1) == ["d"]  # still delayed (due), untouched


def test_a_fast_rate_refills_by_itself(lua: Lua) -> None:
    """No hand on the clock: 20 starts per second, 1 at once. Held back jobs are taken as the
    bucket refills, in order; the waits the takes answer are at most an interval."""
    config = TopicConfig(target="x", rate=20, burst=1)
    ready_jobs(lua, *"abcd")
    taken: list[str] = []
    takes = 0
    while len(taken) < 4:
        answer = lua.take(T, count=10, rate=config.rate_share(1))
        takes += 1
        taken += answer.ids
        if len(taken) < 4:
            assert answer.next_in_ms is not None
            assert 1 <= answer.next_in_ms <= 50
            time.sleep(answer.next_in_ms / 1000)
    assert taken == list("abcd")
    assert takes < 100  # each wait answered was long enough for a start (a slow machine only takes more at once)


def test_a_rate_with_a_take_id_undone_before_it_ran(lua: Lua) -> None:
    ready_jobs(lua, "a")
    assert lua.untake(T, "t1") == 0
    assert take(lua, take_id="t1") == []  # undone: leases nothing, spends nothing
    assert take(lua) == ["a"]


def test_paused_wins_over_the_rate(lua: Lua) -> None:
    ready_jobs(lua, "a")
    lua.r.hset(lua.k(T).control, "paused", 1)
    assert lua.take(T, rate=SLOW.rate_share(1)).paused
    assert lua.r.hget(lua.k(T).control, "rate_at") is None
