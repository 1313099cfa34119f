"""cancel, reschedule, replay, purge, inspect, stats and dead: the scripts behind the API's other routes."""

from __future__ import annotations

import pytest

from delayq.core.job import TopicStats

from support.scripts import Lua, dump, server_ms

T = "orders"


def make(lua: Lua, state: str, job_id: str = "a", **options: object) -> None:
    if state == "delayed":
        assert lua.enqueue(T, job_id, **options)[0] == 1
    elif state == "ready":
        assert lua.enqueue(T, job_id, value=0, **options)[0] == 1
    elif state == "reserved":
        lua.make_leased(T, job_id, **options)
    else:
        lua.make_dead(T, job_id, **options)


STATES = ["delayed", "ready", "reserved", "dead"]


# ------------------------------------------------------------------------------------- cancel


@pytest.mark.parametrize("state", STATES)
def test_cancel_removes_a_job_in_any_state(lua: Lua, state: str) -> None:
    make(lua, state)
    lua.enqueue(T, "before", value=0)
    lua.enqueue(T, "after", value=0)
    assert lua.where(T, "a")
    assert lua.cancel(T, "a") == 3
    assert lua.where(T, "a") == set()
    assert lua.where(T, "before") == {"ready", "meta", "bodies"}
    assert lua.where(T, "after") == {"ready", "meta", "bodies"}
    assert lua.cancel(T, "a") == -2


def test_cancel_of_a_missing_job_changes_nothing(lua: Lua, namespace: str) -> None:
    lua.enqueue(T, "b")
    before = dump(lua.r, namespace)
    assert lua.cancel(T, "a") == -2
    assert dump(lua.r, namespace) == before


def test_cancelled_reserved_job_is_not_retried(lua: Lua) -> None:
    lease = lua.make_leased(T, "a")
    assert lua.cancel(T, "a") == 3
    assert lua.fail(T, "a", lease.token, "late") == (0, 0)
    assert lua.where(T, "a") == set()


# ------------------------------------------------------------------------------------- reschedule


def test_reschedule_a_delayed_job_later(lua: Lua) -> None:
    lua.enqueue(T, "a", value=60_000)
    before = server_ms(lua.r)
    code, run_at = lua.reschedule(T, "a", "d", 120_000)
    after = server_ms(lua.r)
    assert code == 3
    assert before + 120_000 <= run_at <= after + 120_000
    assert lua.r.zscore(lua.k(T).delayed, "a") == run_at
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.state, meta.run_at_ms) == ("q", run_at)


def test_reschedule_a_ready_job_back_to_delayed(lua: Lua) -> None:
    lua.enqueue(T, "x", value=0)
    lua.enqueue(T, "a", value=0)
    at = server_ms(lua.r) + 30_000
    assert lua.reschedule(T, "a", "a", at) == (3, at)
    k = lua.k(T)
    assert lua.ready_ids(T) == ["x", ""]  # "a" left a hole, so that "x" keeps its position
    assert lua.stats(T).ready == 1
    assert lua.r.zscore(k.delayed, "a") == at
    assert lua.inspect(T, "a")[0] == "delayed"


@pytest.mark.parametrize(("when", "value"), [("a", 1_000), ("d", 0)])
def test_reschedule_to_the_past_makes_the_job_ready(lua: Lua, when: str, value: int) -> None:
    lua.enqueue(T, "a", value=60_000)
    before = server_ms(lua.r)
    code, run_at = lua.reschedule(T, "a", when, value)
    after = server_ms(lua.r)
    assert code == 3
    assert before <= run_at <= after
    k = lua.k(T)
    assert lua.r.lrange(k.ready, 0, -1) == ["a"]
    assert lua.r.zcard(k.delayed) == 0
    assert lua.take(T).ids == ["a"]


def test_reschedule_keeps_attempts_and_overrides(lua: Lua) -> None:
    lease = lua.make_leased(T, "a", retries="4", backoff="60000")
    assert lua.fail(T, "a", lease.token, "x") == (1, 0)
    assert lua.reschedule(T, "a", "d", 0)[0] == 3
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.attempts, meta.retries, meta.backoff_ms) == (1, 4, (60000,))
    assert lua.take(T).jobs[0].attempt == 2


@pytest.mark.parametrize(("state", "code"), [("reserved", -3), ("dead", -4), ("missing", -2)])
def test_reschedule_is_refused(lua: Lua, namespace: str, state: str, code: int) -> None:
    if state != "missing":
        make(lua, state)
    before = dump(lua.r, namespace)
    assert lua.reschedule(T, "a", "d", 0) == (code, 0)
    assert dump(lua.r, namespace) == before


# ------------------------------------------------------------------------------------- replay


def test_replay_ids_skips_jobs_that_are_not_dead(lua: Lua) -> None:
    make(lua, "dead", "d1", error="err1", body='"one"')
    make(lua, "dead", "d2")
    make(lua, "reserved", "r")
    make(lua, "delayed", "q")
    snapshot = {job_id: lua.meta(T, job_id) for job_id in ("r", "q")}
    before = server_ms(lua.r)
    assert lua.replay(T, "d1", "r", "q", "missing", "d1") == 1
    after = server_ms(lua.r)
    k = lua.k(T)
    assert lua.r.lrange(k.ready, 0, -1) == ["d1"]
    meta = lua.meta(T, "d1")
    assert meta is not None
    assert meta.state == "q"
    assert meta.attempts == 0
    assert before <= meta.run_at_ms <= after
    assert lua.last_error(T, "d1") == "err1"  # kept until it succeeds
    assert lua.body(T, "d1") == '"one"'
    assert lua.r.zrange(k.dead, 0, -1) == ["d2"]
    assert {job_id: lua.meta(T, job_id) for job_id in ("r", "q")} == snapshot
    assert lua.meta(T, "missing") is None
    taken = lua.take(T)
    assert taken.ids == ["d1"]
    assert taken.jobs[0].attempt == 1


def test_replay_oldest_with_a_limit(lua: Lua) -> None:
    for job_id in ("a", "b", "c"):
        make(lua, "dead", job_id)
    k = lua.k(T)
    lua.r.zadd(k.dead, {"c": 1000, "a": 2000, "b": 3000})  # deaths: c, then a, then b
    assert lua.replay_oldest(T, 2) == 2
    assert lua.r.lrange(k.ready, 0, -1) == ["c", "a"]
    assert lua.r.zrange(k.dead, 0, -1) == ["b"]
    assert lua.replay_oldest(T, 2) == 1
    assert lua.replay_oldest(T, 2) == 0
    assert lua.r.lrange(k.ready, 0, -1) == ["c", "a", "b"]


# ------------------------------------------------------------------------------------- purge


def test_purge_is_bounded_by_its_limit(lua: Lua) -> None:
    for i in range(5):
        make(lua, "dead", f"d{i}")
    make(lua, "delayed", "alive")
    k = lua.k(T)
    lua.r.zadd(k.dead, {f"d{i}": 1000 + i for i in range(5)})
    assert lua.purge(T, 2) == 2
    assert lua.r.zrange(k.dead, 0, -1) == ["d2", "d3", "d4"]  # the oldest went first
    for job_id in ("d0", "d1"):
        assert lua.where(T, job_id) == set()
    assert lua.where(T, "d2") == {"dead", "meta", "bodies", "errors"}
    assert lua.purge(T, 2) == 2
    assert lua.purge(T, 2) == 1
    assert lua.purge(T, 2) == 0
    assert lua.meta_ids(T) == ["alive"]
    assert lua.r.hkeys(k.errors) == []


# ------------------------------------------------------------------------------------- inspect


@pytest.mark.parametrize("state", STATES)
def test_inspect_names_the_state(lua: Lua, state: str) -> None:
    make(lua, state, body='{"k":"v"}')
    found = lua.inspect(T, "a")
    assert found is not None
    assert found.state == state
    assert found.meta == lua.meta(T, "a")
    assert found.body == {"k": "v"}
    assert lua.last_error(T, "a") == ("boom" if state == "dead" else None)
    if state == "dead":
        assert found.dead_at_ms == lua.r.zscore(lua.k(T).dead, "a")
        assert [(a.attempt, a.outcome, a.error) for a in lua.history(T, "a")] == [(1, "error", "boom")]
    else:
        assert found.dead_at_ms is None


def test_inspect_of_a_missing_job_is_nil(lua: Lua) -> None:
    assert lua.inspect(T, "a") is None


# ------------------------------------------------------------------------------------- stats


def test_stats_counts_each_state(lua: Lua) -> None:
    assert lua.stats(T) == TopicStats(T, 0, 0, 0, 0, None)
    make(lua, "reserved", "r1")
    make(lua, "dead", "x1")
    make(lua, "dead", "x2")
    _, run_at = lua.enqueue(T, "d1", value=50_000)
    lua.enqueue(T, "d2", value=90_000)
    lua.enqueue(T, "d3", value=70_000)
    for i in range(4):
        make(lua, "ready", f"q{i}")
    stats = lua.stats(T)
    assert stats == TopicStats(T, 3, 4, 1, 2, run_at, oldest_ready_ms=stats.oldest_ready_ms)
    assert lua.stats("reminders") == TopicStats("reminders", 0, 0, 0, 0, None)


def test_stats_says_how_long_the_oldest_due_job_has_waited(lua: Lua) -> None:
    for job_id, ago_ms in (("late", 60_000), ("later", 5_000)):
        lua.enqueue(T, job_id, value=60_000)
        lua.make_due(T, job_id, ago_ms)
    lua.r.set(lua.p.lock, "me", px=10_000)
    assert lua.sweep([T], "me").per_topic == [(2, 0, 0, ())]  # to the ready list
    assert 60_000 <= lua.stats(T).oldest_ready_ms < 70_000
    lua.cancel(T, "late")  # the head: popped, not a hole
    assert lua.ready_ids(T) == ["later"]
    assert 5_000 <= lua.stats(T).oldest_ready_ms < 15_000
    lua.enqueue(T, "due", value=60_000)
    lua.make_due(T, "due")  # due, still in the delayed set (the sweeper has not moved it)
    assert lua.stats(T).oldest_ready_ms >= 5_000
    lua.cancel(T, "later")
    assert 0 <= lua.stats(T).oldest_ready_ms < 10_000
    lua.cancel(T, "due")
    assert lua.stats(T).oldest_ready_ms == 0


def test_stats_skips_holes_in_the_ready_list(lua: Lua) -> None:
    for job_id in ("a", "b", "c", "d"):
        lua.enqueue(T, job_id, value=0)
    assert lua.cancel(T, "b") == 3
    assert lua.cancel(T, "c") == 3
    assert lua.ready_ids(T) == ["a", "", "", "d"]
    assert lua.stats(T).ready == 2
    assert lua.take(T, count=2).ids == ["a", "d"]  # the take reads on past the holes
    assert lua.ready_ids(T) == []
    assert lua.stats(T).ready == 0
    assert lua.r.hget(lua.k(T).control, "holes") == "0"


# ------------------------------------------------------------------------------------- dead


def test_dead_lists_newest_first_with_a_limit(lua: Lua) -> None:
    for job_id in ("a", "b", "c"):
        make(lua, "dead", job_id, error=f"error {job_id}", body=f'"{job_id}"')
    k = lua.k(T)
    lua.r.zadd(k.dead, {"a": 3000, "b": 1000, "c": 2000})
    jobs = lua.dead(T, 2)
    assert [(job.id, job.died_at_ms, job.body, job.last_error) for job in jobs] == [
        ("a", 3000, "a", "error a"),
        ("c", 2000, "c", "error c"),
    ]
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (jobs[0].attempts, jobs[0].run_at_ms, jobs[0].enqueued_at_ms) == (
        meta.attempts,
        meta.run_at_ms,
        meta.enqueued_at_ms,
    )
    assert [job.id for job in lua.dead(T, 10)] == ["a", "c", "b"]


def test_dead_without_an_error_gives_an_empty_string(lua: Lua) -> None:
    make(lua, "dead", "a")
    lua.r.hdel(lua.k(T).errors, "a")
    assert lua.dead(T, 1)[0].last_error == ""
