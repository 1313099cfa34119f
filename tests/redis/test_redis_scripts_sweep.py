"""sweep and unlock: the sweeper's pass under the partition's lock."""

from __future__ import annotations

import time

import pytest

from delayq.store import calls
from delayq.store.calls import Swept, SweptTopic

from support.scripts import Lua, Rules, dump, server_ms

T = "orders"
TOKEN = "sweeper-1"
LEASE_EXPIRED = "lease expired: no answer from the consumer within the timeout"


def hold(lua: Lua, token: str = TOKEN, ttl_ms: int = 10_000) -> None:
    assert lua.r.set(lua.p.lock, token, nx=True, px=ttl_ms)


def only(result: Swept) -> SweptTopic:
    """What a sweep of one topic did in it."""
    (topic,) = result.per_topic
    return topic


def expired_lease(lua: Lua, topic: str, job_id: str, **options: object) -> str:
    """A job leased with a lease that is already over; its token."""
    options.setdefault("value", 0)
    assert lua.enqueue(topic, job_id, **options)[0] == 1
    taken = lua.take(topic, count=1, timeout_ms=1, grace_ms=0)
    assert taken.ids == [job_id]
    time.sleep(0.005)
    return taken.tokens[0]


# ------------------------------------------------------------------------------------- the lock


@pytest.mark.parametrize("holder", [None, "someone-else"])
def test_sweep_without_the_lock_does_nothing(lua: Lua, namespace: str, holder: str | None) -> None:
    if holder is not None:
        hold(lua, holder, ttl_ms=60_000)
    expired_lease(lua, T, "expired")
    lua.enqueue(T, "due", value=0)
    lua.enqueue(T, "soon", value=1)
    time.sleep(0.01)
    before = dump(lua.r, namespace)
    result = lua.sweep([T], TOKEN, ttl_ms=5000)
    assert not result.held
    assert result.per_topic == []
    assert dump(lua.r, namespace) == before
    if holder is not None:
        assert lua.r.pttl(lua.p.lock) > 50_000  # not renewed with our TTL


def test_sweep_renews_the_lock(lua: Lua) -> None:
    hold(lua, ttl_ms=1000)
    before = server_ms(lua.r)
    result = lua.sweep([T], TOKEN, ttl_ms=30_000)
    left = lua.r.pttl(lua.p.lock)
    after = server_ms(lua.r)
    assert result.held
    assert 30_000 - (after - before) - 1 <= left <= 30_000  # 30 s from the sweep, less what passed since
    assert lua.r.get(lua.p.lock) == TOKEN


def test_sweep_with_no_topics_renews_the_lock(lua: Lua) -> None:
    hold(lua, ttl_ms=1000)
    swept = calls.sweep(lua.p, [], token=TOKEN, ttl_ms=20_000, limit=100).run(lua.r)
    assert swept == Swept(held=True, next_in_ms=None, indexed=False, due=[], per_topic=[], now_ms=swept.now_ms)
    assert swept.now_ms > 0
    assert lua.r.pttl(lua.p.lock) > 19_000


def test_unlock_only_with_the_token(lua: Lua) -> None:
    assert lua.unlock(TOKEN) == 0  # not held
    hold(lua)
    assert lua.unlock("someone-else") == 0
    assert lua.r.get(lua.p.lock) == TOKEN
    assert lua.unlock(TOKEN) == 1
    assert lua.r.exists(lua.p.lock) == 0
    assert lua.unlock(TOKEN) == 0


# ------------------------------------------------------------------------------------- the work


def test_sweep_moves_due_jobs_to_ready(lua: Lua) -> None:
    hold(lua)
    lua.enqueue(T, "a", value=30)
    lua.enqueue(T, "b", value=40)
    lua.enqueue(T, "later", value=60_000)
    time.sleep(0.06)
    result = lua.sweep([T], TOKEN)
    assert result.held
    assert only(result).moved == 2
    assert result.due == []
    k = lua.k(T)
    assert lua.r.lrange(k.ready, 0, -1) == ["a", "b"]  # in the order they fell due
    assert lua.r.zrange(k.delayed, 0, -1) == ["later"]
    assert 59_000 <= result.next_in_ms <= 60_000


def test_sweep_takes_back_an_expired_lease_as_a_failed_attempt(lua: Lua) -> None:
    hold(lua)
    k = lua.k(T)
    token = expired_lease(lua, T, "a")
    before = server_ms(lua.r)
    result = lua.sweep([T], TOKEN, retries=2, backoff="7000,8000")
    after = server_ms(lua.r)
    assert (result.held, only(result).retried, only(result).dead) == (True, 1, 0)
    assert "a" not in lua.leases(T)
    run_at = lua.r.zscore(k.delayed, "a")
    assert before + 7000 <= run_at <= after + 7000
    (attempt,) = lua.history(T, "a")
    assert (attempt.attempt, attempt.outcome, attempt.error, attempt.started_at_ms) == (
        1,
        "lease_expired",
        LEASE_EXPIRED,
        None,
    )
    assert attempt.ended_at_ms is not None
    assert before <= attempt.ended_at_ms <= after
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.state, meta.attempts, meta.lease) == ("q", 1, "")
    # the consumer's late answer changes nothing
    assert lua.ack(T, "a", token) == 0


def test_sweep_sends_an_expired_lease_with_no_retries_left_to_dead(lua: Lua) -> None:
    hold(lua)
    expired_lease(lua, T, "a", body='"b"')
    result = lua.sweep([T], TOKEN, retries=0)
    assert (only(result).retried, only(result).dead) == (0, 1)
    assert lua.where(T, "a") == {"dead", "meta", "bodies", "errors"}
    assert lua.last_error(T, "a") == LEASE_EXPIRED


def test_sweep_uses_per_job_retries_for_expired_leases(lua: Lua) -> None:
    hold(lua)
    expired_lease(lua, T, "a", retries="3")
    assert only(lua.sweep([T], TOKEN, retries=0)).retried == 1


def test_sweep_leaves_live_leases_alone(lua: Lua) -> None:
    hold(lua)
    lua.enqueue(T, "a", value=0)
    lease = lua.take(T, timeout_ms=5000, grace_ms=0).leases[0]
    result = lua.sweep([T], TOKEN)
    assert only(result) == (0, 0, 0, ())
    assert 4000 <= result.next_in_ms <= 5000  # the lease deadline counts as the next event
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.state, meta.lease) == ("l", lease.token)


def test_sweep_drops_a_lease_whose_job_is_gone(lua: Lua) -> None:
    hold(lua)
    lua.set_lease(T, "ghost", 1)
    result = lua.sweep([T], TOKEN)
    assert (only(result).retried, only(result).dead) == (0, 0)
    assert lua.leases(T) == {}
    assert lua.meta(T, "ghost") is None


def test_sweep_respects_the_limit(lua: Lua) -> None:
    hold(lua)
    now = server_ms(lua.r)
    for i in range(5):
        lua.enqueue(T, f"j{i}", when="a", value=now + 20)
    time.sleep(0.04)
    k = lua.k(T)
    first = lua.sweep([T], TOKEN, limit=2)
    assert (only(first).moved, first.due) == (2, [T])
    assert lua.r.llen(k.ready) == 2
    second = lua.sweep([T], TOKEN, limit=2)
    assert (only(second).moved, second.due) == (2, [T])
    third = lua.sweep([T], TOKEN, limit=2)
    assert (only(third).moved, third.due) == (1, [])
    assert lua.r.llen(k.ready) == 5
    assert lua.r.zcard(k.delayed) == 0


def test_sweep_limit_counts_leases_taken_back(lua: Lua) -> None:
    hold(lua)
    for job_id in ("x", "y"):
        expired_lease(lua, T, job_id)
    now = server_ms(lua.r)
    lua.enqueue(T, "d1", when="a", value=now + 10)
    lua.enqueue(T, "d2", when="a", value=now + 10)
    time.sleep(0.03)
    first = lua.sweep([T], TOKEN, limit=3)
    assert (only(first).moved, only(first).retried, first.due) == (2, 1, [T])
    assert len(lua.leases(T)) == 1
    second = lua.sweep([T], TOKEN, limit=3)
    assert (only(second).moved, only(second).retried, second.due) == (0, 1, [])
    assert lua.leases(T) == {}


def test_sweep_over_several_topics_uses_each_topics_config(lua: Lua) -> None:
    hold(lua)
    expired_lease(lua, "orders", "a")
    expired_lease(lua, "reminders", "a")
    lua.enqueue("payments", "p", value=60_000)
    rules = [("orders", Rules(0, "1000")), ("reminders", Rules(3, "1000"))]
    swept = calls.sweep(lua.p, rules, token=TOKEN, ttl_ms=10_000, limit=100).run(lua.r)
    assert (swept.held, swept.due) == (True, [])
    # moved, retried, dead (and their ids): orders' lease dead, reminders' retried
    assert swept.per_topic == [(0, 0, 1, ("a",)), (0, 1, 0, ())]
    assert "dead" in lua.where("orders", "a")
    assert "delayed" in lua.where("reminders", "a")
    assert 0 <= swept.next_in_ms <= 1000  # the retried job: the partition's next work, swept or not


def test_sweep_reports_the_next_event_or_none(lua: Lua) -> None:
    hold(lua)
    assert lua.sweep([T], TOKEN).next_in_ms is None
    lua.enqueue(T, "a", value=40_000)
    assert 39_000 <= lua.sweep([T], TOKEN).next_in_ms <= 40_000
    lua.enqueue(T, "b", value=0)
    lua.take(T, timeout_ms=9_000, grace_ms=1_000)
    assert 9_000 <= lua.sweep([T], TOKEN).next_in_ms <= 10_000


def test_sweep_names_the_topics_due_after_its_lag_and_expired_leases(lua: Lua) -> None:
    hold(lua)
    lua.enqueue("fresh", "a", value=0)  # ready at once: not the sweep's
    now = server_ms(lua.r)
    lua.enqueue("old", "a", when="a", value=now + 10)
    lua.enqueue("young", "a", when="a", value=now + 10)
    lua.enqueue("later", "a", value=60_000)
    expired_lease(lua, "leased", "a")
    time.sleep(0.03)
    lua.r.zadd(lua.p.delayed_index, {"old": now - 5000})  # due long ago
    swept = calls.sweep(lua.p, [], token=TOKEN, ttl_ms=10_000, limit=100, lag_ms=1000).run(lua.r)
    assert swept.due == ["old", "leased"]  # young is due for less than the lag
    assert swept.next_in_ms == 0  # work now
    assert calls.sweep(lua.p, [], token=TOKEN, ttl_ms=10_000, limit=100, due_limit=1).run(lua.r).due == ["old"]


def test_sweep_marks_the_index_built_at_the_end_of_a_walk(lua: Lua) -> None:
    hold(lua)
    assert not lua.sweep([T], TOKEN).indexed
    rules = [(T, Rules(2, "1000"))]
    assert calls.sweep(lua.p, rules, token=TOKEN, ttl_ms=10_000, limit=100, walked=True).run(lua.r).indexed
    assert lua.sweep([], TOKEN).indexed


def old_lease(lua: Lua, topic: str, job_id: str, deadline_ms: float) -> None:
    """A lease as a version before the partition's lease sets kept it: in the topic's own leased set,
    the topic in the _leases index."""
    lua.r.zadd(lua.p.old_leased(topic), {job_id: deadline_ms})
    lua.r.zadd(lua.p.old_lease_index, {topic: deadline_ms})


def test_leases_an_older_version_kept_are_named_by_the_sweep_and_moved(lua: Lua) -> None:
    """The sweep names the topics of the old _leases index; move_leases puts their leases in the
    partition's sets, keeping a lease already there (its job was leased again since), and they are
    acknowledged as any other."""
    hold(lua)
    moved = lua.make_leased(T, "a")
    lua.make_leased(T, "b")
    deadline, b_now = lua.leases(T)["a"], lua.leases(T)["b"]
    lua.r.zrem(lua.p.leases, f"{T}/a")
    lua.r.zrem(lua.p.leases_lex, f"{T}/a")
    old_lease(lua, T, "a", deadline)
    old_lease(lua, T, "b", b_now - 5000)  # its older lease, before it was taken back and leased again
    old_lease(lua, "other", "gone", 1)  # a job cancelled since: moved, then dropped when it expires
    result = lua.sweep([], TOKEN)
    assert sorted(result.old) == [T, "other"]
    assert calls.move_leases(lua.p, result.old).run(lua.r) == 3
    assert lua.leases(T) == {"a": deadline, "b": b_now}
    assert lua.r.exists(lua.p.old_leased(T), lua.p.old_leased("other"), lua.p.old_lease_index) == 0
    assert lua.sweep([], TOKEN).old == []
    assert lua.ack(T, "a", moved.token) == 1
    assert list(lua.leases(T)) == ["b"]
    swept = lua.sweep(["other"], TOKEN)
    assert (only(swept).retried, only(swept).dead) == (0, 0)
    assert lua.leases("other") == {}


def test_an_expired_lease_of_a_job_settled_meanwhile_is_dropped_not_retried(lua: Lua) -> None:
    """A lease an older version's ack left behind (its job done, kept as a receipt) is dropped when it
    expires: only a job still reserved is a failed attempt."""
    hold(lua)
    lease = lua.make_leased(T, "a")
    assert lua.ack(T, "a", lease.token, keep_ms=60_000) == 1
    lua.set_lease(T, "a", 1)
    result = lua.sweep([T], TOKEN)
    assert (only(result).retried, only(result).dead) == (0, 0)
    assert lua.leases(T) == {}
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.state, meta.attempts) == ("d", 1)
