"""The enqueue script, the meta codec shared by Lua and Python, and how scripts are called (NOSCRIPT)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from delayq.core.job import Meta, TopicStats
from delayq.store import calls
from delayq.store.calls import Inspected
from delayq.store.scripts import Call, Scripts, run_many, stream

from support.scripts import Lua, dump, server_ms

T = "orders"


# ------------------------------------------------------------------------------------- enqueue


def test_enqueue_creates_a_delayed_job(lua: Lua) -> None:
    before = server_ms(lua.r)
    code, run_at = lua.enqueue(T, "a", '{"x":1}', value=60_000)
    after = server_ms(lua.r)
    assert code == 1
    assert before + 60_000 <= run_at <= after + 60_000
    k = lua.k(T)
    assert lua.r.zscore(k.delayed, "a") == run_at
    assert lua.r.llen(k.ready) == 0
    assert lua.body(T, "a") == '{"x":1}'
    meta = lua.meta(T, "a")
    assert meta is not None
    assert meta.state == "q"
    assert meta.attempts == 0
    assert meta.run_at_ms == run_at
    assert before <= meta.enqueued_at_ms <= after
    assert meta.lease == ""
    assert (meta.retries, meta.timeout_ms, meta.backoff_ms) == (None, None, None)
    assert lua.r.smembers(lua.p.topics) == {T}


def test_enqueue_keeps_per_job_overrides(lua: Lua) -> None:
    lua.enqueue(T, "a", retries="5", timeout="7000", backoff="100,200")
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.retries, meta.timeout_ms, meta.backoff_ms) == (5, 7000, (100, 200))


@pytest.mark.parametrize(("when", "value"), [("d", 0), ("a", 1_000), ("a", 0)])
def test_enqueue_due_now_goes_to_ready_with_run_at_clamped(lua: Lua, when: str, value: int) -> None:
    before = server_ms(lua.r)
    code, run_at = lua.enqueue(T, "a", when=when, value=value)
    after = server_ms(lua.r)
    assert code == 1
    assert before <= run_at <= after
    k = lua.k(T)
    assert lua.r.lrange(k.ready, 0, -1) == ["a"]
    assert lua.r.zcard(k.delayed) == 0
    meta = lua.meta(T, "a")
    assert meta is not None
    assert meta.run_at_ms == run_at


def test_enqueue_absolute_future_run_at_is_kept(lua: Lua) -> None:
    at = server_ms(lua.r) + 3_600_000
    code, run_at = lua.enqueue(T, "a", when="a", value=at)
    assert (code, run_at) == (1, at)
    assert lua.r.zscore(lua.k(T).delayed, "a") == at


@pytest.mark.parametrize("state", ["delayed", "ready", "reserved", "dead"])
def test_create_of_an_existing_job_is_refused_and_changes_nothing(lua: Lua, namespace: str, state: str) -> None:
    if state == "delayed":
        lua.enqueue(T, "a")
    elif state == "ready":
        lua.enqueue(T, "a", value=0)
    elif state == "reserved":
        lua.make_leased(T, "a")
    else:
        lua.make_dead(T, "a")
    before = dump(lua.r, namespace)
    assert lua.enqueue(T, "a", '{"other":2}', value=0) == (-1, 0)
    assert dump(lua.r, namespace) == before


@pytest.mark.parametrize("state", ["delayed", "ready", "dead"])
def test_replace_moves_the_job_and_starts_it_afresh(lua: Lua, state: str) -> None:
    k = lua.k(T)
    if state == "delayed":
        lua.enqueue(T, "a", value=60_000)
    elif state == "ready":
        lua.enqueue(T, "a", value=0)
    else:
        lua.make_dead(T, "a", error="it broke")
        assert lua.last_error(T, "a") == "it broke"
        meta = lua.meta(T, "a")
        assert meta is not None
        assert meta.attempts == 1
    code, run_at = lua.enqueue(T, "a", '{"v":2}', replace=True, value=120_000, retries="4")
    assert code == 2
    assert lua.where(T, "a") == {"delayed", "meta", "bodies"}
    assert lua.r.zscore(k.delayed, "a") == run_at
    assert lua.r.lrange(k.ready, 0, -1) == []
    assert lua.r.zcard(k.dead) == 0
    assert lua.body(T, "a") == '{"v":2}'
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.state, meta.attempts, meta.run_at_ms, meta.retries) == ("q", 0, run_at, 4)


def test_replace_to_now_puts_the_job_once_in_ready(lua: Lua) -> None:
    lua.enqueue(T, "a", value=0)
    assert lua.enqueue(T, "a", replace=True, value=0)[0] == 2
    assert lua.r.lrange(lua.k(T).ready, 0, -1) == ["a"]


def test_replace_of_a_missing_job_creates_it(lua: Lua) -> None:
    code, run_at = lua.enqueue(T, "a", replace=True)
    assert code == 1
    assert lua.r.zscore(lua.k(T).delayed, "a") == run_at


def test_replace_of_a_leased_job_is_refused_and_changes_nothing(lua: Lua, namespace: str) -> None:
    lua.make_leased(T, "a")
    before = dump(lua.r, namespace)
    assert lua.enqueue(T, "a", '{"v":2}', replace=True, value=0) == (-3, 0)
    assert dump(lua.r, namespace) == before


def test_batch_over_several_topics_with_a_repeated_id(lua: Lua) -> None:
    jobs = [
        lua.write("orders", "a", '"o1"'),
        lua.write("reminders", "a", '"r1"', value=0),
        lua.write("orders", "b", '"o2"', value=0),
        lua.write("orders", "a", '"o3"'),
        lua.write("reminders", "c", '"r2"'),
    ]
    codes, run_at = lua.enqueue_many(jobs)
    assert codes == [1, 1, 1, -1, 1]
    assert run_at[3] == 0  # the refused job has run_at 0
    assert lua.r.smembers(lua.p.topics) == {"orders", "reminders"}
    orders, reminders = lua.k("orders"), lua.k("reminders")
    assert lua.body("orders", "a") == '"o1"'  # the first "a" won, the repeat changed nothing
    assert lua.body("reminders", "a") == '"r1"'
    assert lua.r.lrange(orders.ready, 0, -1) == ["b"]
    assert lua.r.lrange(reminders.ready, 0, -1) == ["a"]
    assert set(lua.r.zrange(orders.delayed, 0, -1)) == {"a"}
    assert set(lua.r.zrange(reminders.delayed, 0, -1)) == {"c"}


# ------------------------------------------------------------------------------------- meta codec


def test_meta_written_by_lua_decodes_in_python(lua: Lua) -> None:
    code, run_at = lua.enqueue(T, "a", value=0, retries="0", timeout="1500", backoff="10,20,30")
    assert code == 1
    lease = lua.take(T).leases[0]
    raw = lua.raw_meta(T, "a")
    meta = Meta.decode(raw)
    assert meta.state == "l"
    assert meta.attempts == 1
    assert meta.run_at_ms == run_at
    assert meta.lease == lease.token
    assert meta.retries == 0
    assert meta.timeout_ms == 1500
    assert meta.backoff_ms == (10, 20, 30)
    assert meta.encode() == raw  # the two codecs agree byte for byte


def test_meta_encoded_by_python_is_read_by_the_scripts(lua: Lua) -> None:
    k = lua.k(T)
    now = server_ms(lua.r)
    meta = Meta(
        state="q",
        attempts=3,
        run_at_ms=now - 10,
        enqueued_at_ms=now - 5000,
        retries=5,
        timeout_ms=4000,
        backoff_ms=(250, 750),
    )
    lua.set_meta(T, "a", meta.encode())
    lua.set_body(T, "a", '"hello"')
    lua.r.rpush(k.ready, "a")
    assert lua.inspect(T, "a") == Inspected("ready", meta, "hello", None, None)

    taken = lua.take(T, timeout_ms=99_000, grace_ms=0)
    job, token, timeout_ms = taken.leases[0]
    assert (job.id, job.body, job.attempt) == ("a", "hello", 4)
    assert (job.run_at_ms, job.enqueued_at_ms, timeout_ms) == (now - 10, now - 5000, 4000)
    assert lua.leases(T).get("a") == taken.now_ms + 4000  # the per-job timeout was read

    # 4th failure, 5 retries (the meta's, not the topic's 0): retried after 750 ms (the last entry, repeated)
    before = server_ms(lua.r)
    assert lua.fail(T, "a", token, "x", retries=0, backoff="99") == (1, 0)
    after = server_ms(lua.r)
    run_at = lua.r.zscore(k.delayed, "a")
    assert before + 750 <= run_at <= after + 750
    assert lua.meta(T, "a") == Meta("q", 4, int(run_at), now - 5000, "", 5, 4000, (250, 750))


def test_meta_roundtrip_in_python() -> None:
    meta = Meta("x", 12, 1_795_000_000_123, 1_794_000_000_000, "77", 0, 900_000, (1, 2, 3))
    assert Meta.decode(meta.encode()) == meta
    bare = Meta("q", 0, 1, 2)
    assert bare.encode() == "q|0|1|2||||"
    assert Meta.decode("q|0|1|2||||") == bare


# ------------------------------------------------------------------------------------- NOSCRIPT


def test_script_call_falls_back_to_eval_after_script_flush(lua: Lua) -> None:
    lua.enqueue(T, "a")
    lua.r.script_flush()
    assert lua.r.script_exists(Scripts.stats.sha) == [False]
    assert lua.stats(T).delayed == 1  # EVALSHA answered NOSCRIPT, EVAL ran it
    assert lua.r.script_exists(Scripts.stats.sha) == [True]  # and EVAL cached it under the same sha
    lua.r.script_flush()
    assert lua.enqueue(T, "b")[0] == 1
    assert lua.stats(T).delayed == 2


def test_run_many_falls_back_to_eval_after_script_flush(lua: Lua) -> None:
    lua.enqueue(T, "a")
    lua.enqueue("reminders", "b", value=0)
    lua.r.script_flush()
    sent = [calls.stats(lua.p, T), calls.stats(lua.p, "reminders"), calls.inspect(lua.p, T, "a")]
    replies = run_many(lua.r, sent)
    counts = [(stats.delayed, stats.ready, stats.reserved, stats.dead) for stats in replies[:2]]
    assert counts == [(1, 0, 0, 0), (0, 1, 0, 0)]
    assert replies[2].state == "delayed"
    lua.r.script_flush()
    assert run_many(lua.r, [calls.cancel(lua.p, T, "a")]) == [3]  # one call: Call.run


def test_run_many_returns_or_raises_other_errors(lua: Lua) -> None:
    good = calls.stats(lua.p, T)
    run_many(lua.r, [good, good])  # both scripts cached
    bad = Call(Scripts.stats, [])  # KEYS[1] is nil: the script errors
    replies = run_many(lua.r, [bad, good], return_exceptions=True)
    assert isinstance(replies[0], redis.ResponseError)
    assert replies[1] == TopicStats(T, 0, 0, 0, 0, None)
    with pytest.raises(redis.ResponseError):
        run_many(lua.r, [good, bad])


def test_run_many_returns_errors_in_place_after_noscript_too(lua: Lua) -> None:
    """``return_exceptions`` holds for a call repeated as EVAL after NOSCRIPT, as for any other call:
    the other calls of the batch have run (a take has leased its jobs), so their replies must not be lost."""
    lua.enqueue(T, "a", value=0)
    lua.r.script_flush()
    bad = Call(Scripts.stats, [])
    take = calls.take(lua.p, T, count=10, timeout_ms=30_000, grace_ms=0)
    replies = run_many(lua.r, [bad, take], return_exceptions=True)
    assert isinstance(replies[0], redis.ResponseError)
    assert replies[1].ids == ["a"]


# ------------------------------------------------------------------------------------- stream


def test_stream_sends_each_batch_before_reading_the_one_before(lua: Lua) -> None:
    """Batch n+1 is built and sent before the replies of batch n are read: Redis runs one while the
    caller builds the next. Replies come per batch, in order, an empty batch's empty; a call answered
    NOSCRIPT is run again as EVAL; the connection goes back to the pool clean."""
    lua.enqueue(T, "a")
    lua.r.script_flush()
    events: list[str] = []

    def batches() -> Iterator[list[Call[Any]]]:
        for n, batch in enumerate(
            [[calls.stats(lua.p, T)], [], [calls.inspect(lua.p, T, "a"), calls.stats(lua.p, "x")]]
        ):
            events.append(f"built {n}")
            yield batch

    for n, replies in enumerate(stream(lambda: lua.r, batches())):
        events.append(f"read {n}")
        if n == 0:
            assert [stats.delayed for stats in replies] == [1]
        elif n == 1:
            assert replies == []
        else:
            assert [replies[0].state, replies[1].delayed] == ["delayed", 0]
    assert events == ["built 0", "built 1", "read 0", "built 2", "read 1", "read 2"]
    assert lua.r.ping() is True
    assert lua.stats(T).delayed == 1


def test_a_stream_that_stops_with_replies_unread_closes_its_connection(lua: Lua) -> None:
    """An error raised while batch n is read leaves batch n+1's reply on the connection: the stream
    closes it rather than hand it back, so the next command does not read that reply as its own."""
    lua.enqueue(T, "a")
    good = calls.stats(lua.p, T)
    run_many(lua.r, [good, good])  # the script is cached
    bad = Call(Scripts.stats, [])  # KEYS[1] is nil: the script errors
    with pytest.raises(redis.ResponseError):
        for _ in stream(lambda: lua.r, iter([[bad], [good]])):
            pass
    assert lua.r.get("no such key") is None  # not the stats reply left behind
    assert lua.stats(T).delayed == 1
