"""take, ack and fail: leasing jobs to a consumer and settling them."""

from __future__ import annotations

import time

import pytest

from delayq.core.job import Meta
from delayq.store import calls
from delayq.store.calls import Failure

from support.scripts import BACKOFF, Lua, Rules, dump, server_ms, sleep_until_server_ms

T = "orders"


# ------------------------------------------------------------------------------------- take


def test_take_leases_ready_jobs_in_order(lua: Lua) -> None:
    for job_id in ("a", "b", "c"):
        lua.enqueue(T, job_id, f'"{job_id}"', value=0)
    taken = lua.take(T, count=10, timeout_ms=5000, grace_ms=700)
    assert taken.ids == ["a", "b", "c"]
    k = lua.k(T)
    assert lua.r.llen(k.ready) == 0
    for job, token, timeout_ms in taken.leases:
        assert job.body == job.id
        assert job.attempt == 1
        assert timeout_ms == 5000
        assert lua.leases(T).get(job.id) == taken.now_ms + 5000 + 700
        meta = lua.meta(T, job.id)
        assert meta is not None
        assert (meta.state, meta.attempts, meta.lease) == ("l", 1, token)
    assert len(set(taken.tokens)) == 3


def test_take_promotes_due_delayed_jobs(lua: Lua) -> None:
    _, soon_at = lua.enqueue(T, "soon", value=500)  # half a second: room for a slow machine's next call
    lua.enqueue(T, "later", value=60_000)
    assert lua.take(T).ids == []
    sleep_until_server_ms(lua.r, soon_at)
    taken = lua.take(T)
    assert taken.ids == ["soon"]
    assert lua.r.zrange(lua.k(T).delayed, 0, -1) == ["later"]


def test_take_uses_the_per_job_timeout_over_the_topics(lua: Lua) -> None:
    lua.enqueue(T, "own", value=0, timeout="1234")
    lua.enqueue(T, "topic", value=0)
    taken = lua.take(T, timeout_ms=9000, grace_ms=100)
    timeouts = dict(zip(taken.ids, taken.timeouts_ms, strict=True))
    assert timeouts["own"] == 1234
    assert timeouts["topic"] == 9000
    leased = lua.leases(T)
    assert leased["own"] == taken.now_ms + 1234 + 100
    assert leased["topic"] == taken.now_ms + 9000 + 100


def test_lease_tokens_are_unique_across_calls_and_topics(lua: Lua) -> None:
    tokens = []
    for i in range(4):
        lua.enqueue(T, f"o{i}", value=0)
        lua.enqueue("reminders", f"r{i}", value=0)
    for _ in range(2):
        tokens += lua.take(T, count=2).tokens
        tokens += lua.take("reminders", count=2).tokens
    assert len(tokens) == 8
    assert len(set(tokens)) == 8


def test_take_never_returns_a_job_whose_run_at_is_ahead(lua: Lua) -> None:
    k = lua.k(T)
    code, run_at = lua.enqueue(T, "a", value=60_000)
    assert code == 1
    lua.r.zrem(k.delayed, "a")
    lua.r.rpush(k.ready, "a")  # in the ready list by mistake
    taken = lua.take(T)
    assert taken.ids == []
    assert lua.r.llen(k.ready) == 0
    assert lua.r.zscore(k.delayed, "a") == run_at
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.state, meta.attempts) == ("q", 0)
    assert taken.next_in_ms is not None
    assert 59_000 <= taken.next_in_ms <= 60_000


def test_a_take_ahead_brings_the_jobs_due_within_it_each_leased_from_its_run_at(lua: Lua) -> None:
    """With ``ahead_ms``, jobs due within it are taken too, each leased as if taken at its run-at (the
    consumer starts it then); a job due beyond it stays delayed and is the next one reported."""
    _, soon_at = lua.enqueue(T, "soon", value=5_000)
    lua.enqueue(T, "beyond", value=60_000)
    lua.enqueue(T, "now", value=0)
    taken = lua.take(T, timeout_ms=1000, grace_ms=100, ahead_ms=10_000)
    assert taken.ids == ["now", "soon"]
    k = lua.k(T)
    assert lua.leases(T).get("now") == taken.now_ms + 1000 + 100
    assert lua.leases(T).get("soon") == soon_at + 1000 + 100
    assert taken.jobs[1].run_at_ms == soon_at > taken.now_ms  # the consumer waits for it
    assert lua.r.zrange(k.delayed, 0, -1) == ["beyond"]
    assert taken.next_in_ms is not None
    assert 50_000 <= taken.next_in_ms <= 60_000
    assert lua.take(T, ahead_ms=0).ids == []  # without it, nothing not due


def test_a_take_ahead_counts_the_wait_against_the_time_left(lua: Lua) -> None:
    """A job taken ahead starts at its run-at: its wait and its timeout must both fit the time the
    consumer has left, else it stays delayed (not in the ready list, where it would be due early)."""
    _, soon_at = lua.enqueue(T, "soon", value=5_000)
    taken = lua.take(T, timeout_ms=3000, grace_ms=0, longest_ms=6000, ahead_ms=10_000)
    assert taken.ids == []
    k = lua.k(T)
    assert lua.r.zscore(k.delayed, "soon") == soon_at
    assert lua.r.llen(k.ready) == 0
    assert lua.take(T, timeout_ms=3000, grace_ms=0, longest_ms=9000, ahead_ms=10_000).ids == ["soon"]


def test_a_topic_with_a_rate_takes_nothing_ahead(lua: Lua) -> None:
    """Its bucket counts a start when the job is taken: a job taken ahead would start later than
    counted, and the rate could be exceeded."""
    lua.enqueue(T, "soon", value=5_000)
    assert lua.take(T, ahead_ms=10_000, rate=(1000, 0)).ids == []
    assert lua.take(T, ahead_ms=10_000).ids == ["soon"]


def test_take_skips_ids_that_are_gone_or_not_queued(lua: Lua) -> None:
    k = lua.k(T)
    leased = lua.make_leased(T, "leased")
    lua.make_dead(T, "dead")
    lua.enqueue(T, "ok", value=0)
    lua.r.rpush(k.ready, "ghost", "leased", "dead")  # cancelled / stale entries
    lua.r.lmove(k.ready, k.ready, "LEFT", "RIGHT")  # "ok" to the end: stale entries first
    taken = lua.take(T)
    assert taken.ids == ["ok"]
    assert lua.r.llen(k.ready) == 0
    meta = lua.meta(T, "leased")
    assert meta is not None
    assert (meta.state, meta.lease, meta.attempts) == ("l", leased.token, 1)
    assert lua.meta(T, "ghost") is None
    assert "ghost" not in lua.leases(T)
    assert lua.r.zscore(k.dead, "dead") is not None


def test_take_count_bounds_the_batch(lua: Lua) -> None:
    for i in range(5):
        lua.enqueue(T, f"j{i}", value=0)
    assert lua.take(T, count=2).ids == ["j0", "j1"]
    assert lua.r.lrange(lua.k(T).ready, 0, -1) == ["j2", "j3", "j4"]
    assert lua.take(T, count=1).ids == ["j2"]
    assert lua.take(T, count=10).ids == ["j3", "j4"]


def test_take_count_bounds_promotion_too(lua: Lua) -> None:
    now = server_ms(lua.r)
    for i in range(5):
        lua.enqueue(T, f"j{i}", when="a", value=now + 30 + i)
    time.sleep(0.08)
    assert lua.take(T, count=2).ids == ["j0", "j1"]
    k = lua.k(T)
    assert lua.r.zcard(k.delayed) + lua.r.llen(k.ready) == 3


def test_take_serves_the_ready_list_first_then_due_delayed_jobs_directly(lua: Lua) -> None:
    """Ready jobs fell due first; due jobs still in the delayed set (the sweeper is late) are leased
    straight from it, earliest first, and no more of them than the batch is touched."""
    now = server_ms(lua.r)
    lua.enqueue(T, "d1", when="a", value=now + 31)
    lua.enqueue(T, "d0", when="a", value=now + 30)
    lua.enqueue(T, "r0", value=0)
    time.sleep(0.08)
    assert lua.take(T, count=2).ids == ["r0", "d0"]
    k = lua.k(T)
    assert lua.r.zrange(k.delayed, 0, -1) == ["d1"]
    assert lua.r.llen(k.ready) == 0
    assert lua.take(T, count=2).ids == ["d1"]


def test_take_count_zero_leases_nothing(lua: Lua) -> None:
    """``count`` 0 is a batch of none; LRANGE 0 -1 would be the whole list."""
    for i in range(3):
        lua.enqueue(T, f"j{i}", value=0)
    assert lua.take(T, count=0).ids == []
    assert lua.r.llen(lua.k(T).ready) == 3


def test_take_reports_the_next_delayed_job(lua: Lua) -> None:
    assert lua.take(T).next_in_ms is None
    lua.enqueue(T, "a", value=40_000)
    before = server_ms(lua.r)
    lua.enqueue(T, "b", value=20_000)
    next_in = lua.take(T).next_in_ms
    after = server_ms(lua.r)
    assert next_in is not None
    assert 20_000 - (after - before) - 1 <= next_in <= 20_000  # b's run-at, less what passed since


def test_take_on_an_empty_topic_does_nothing(lua: Lua, namespace: str) -> None:
    before = server_ms(lua.r)
    taken = lua.take(T)
    assert taken.jobs == []
    assert before <= taken.now_ms <= server_ms(lua.r)
    assert dump(lua.r, namespace) == {}


def test_take_sends_a_job_no_run_could_finish_to_the_dead_letters(lua: Lua) -> None:
    """ARGV[5]: the longest timeout a whole run of the consumer can finish. A job whose own timeout is
    longer is dead at once (a permanent failure that says why), not put back at every take."""
    lua.enqueue(T, "a", value=0)
    lua.enqueue(T, "too-long", value=0, timeout="900000")
    lua.enqueue(T, "odd", value=0, timeout="61500")
    lua.enqueue(T, "fits", value=0, timeout="60000")
    taken = lua.take(T, timeout_ms=5000, grace_ms=0, longest_ms=60_000, run_ms=60_999)
    assert taken.dead == ["too-long", "odd"]
    assert taken.ids == ["a", "fits"]
    k = lua.k(T)
    assert lua.r.llen(k.ready) == 0
    now_ms = taken.now_ms
    for job_id in taken.dead:
        assert lua.where(T, job_id) == {"dead", "meta", "bodies", "errors"}
        assert lua.r.zscore(k.dead, job_id) == now_ms
        meta = lua.meta(T, job_id)
        assert meta is not None
        assert (meta.state, meta.attempts, meta.lease) == ("x", 0, "")
    advice = "enqueue it again with a shorter timeout, or raise the consume function's timeout"
    assert lua.last_error(T, "too-long") == f"timeout 900s is longer than a consume run can last (60s): {advice}"
    assert lua.last_error(T, "odd") == f"timeout 61.5s is longer than a consume run can last (60s): {advice}"


def test_take_puts_back_what_fits_a_run_but_not_the_time_left(lua: Lua) -> None:
    lua.enqueue(T, "own", value=0, timeout="20000")
    lua.enqueue(T, "topic", value=0)
    taken = lua.take(T, timeout_ms=30_000, grace_ms=0, longest_ms=10_000, run_ms=60_000)
    assert (taken.ids, taken.dead) == ([], [])
    assert lua.r.lrange(lua.k(T).ready, 0, -1) == ["own", "topic"]  # in their order, at the head


def test_take_without_a_run_limit_sends_nothing_to_the_dead_letters(lua: Lua) -> None:
    lua.enqueue(T, "long", value=0, timeout="900000")
    taken = lua.take(T, timeout_ms=5000, grace_ms=0, longest_ms=-1, run_ms=-1)
    assert (taken.ids, taken.dead) == (["long"], [])
    assert lua.r.zcard(lua.k(T).dead) == 0


# ------------------------------------------------------------------------------------- untake


def test_a_take_with_an_id_leases_its_jobs_under_it(lua: Lua) -> None:
    """The consumer's take id is the lease token of each job it takes (a job is taken at most once per
    take): no counter is used, and an ack needs that id."""
    for job_id in ("a", "b"):
        lua.enqueue(T, job_id, value=0)
    taken = lua.take(T, take_id="t1")
    assert taken.ids == ["a", "b"]
    assert taken.tokens == ["t1", "t1"]
    assert lua.r.get(lua.p.seq) is None
    assert lua.ack(T, "a", "t2") == 0
    assert lua.ack(T, "a", "t1") == 1
    assert lua.ack(T, "b", "t1") == 1


def test_untake_puts_the_takes_jobs_back_at_the_head_as_never_taken(lua: Lua, namespace: str) -> None:
    """A take whose reply was lost: its jobs go back to the head of the ready list, queued, with the
    attempt the take counted taken back; other leases stay."""
    for job_id in ("a", "b", "c", "d", "e"):
        lua.enqueue(T, job_id, value=0)
    other = lua.take(T, count=1, take_id="other")
    lost = lua.take(T, count=2, take_id="lost")
    assert (other.ids, lost.ids) == (["a"], ["b", "c"])
    assert lua.untake(T, "lost") == 2
    k = lua.k(T)
    assert lua.r.lrange(k.ready, 0, -1) == ["b", "c", "d", "e"]
    assert list(lua.leases(T)) == ["a"]
    for job_id in ("b", "c"):
        meta = lua.meta(T, job_id)
        assert meta is not None
        assert (meta.state, meta.attempts, meta.lease) == ("q", 0, "")
    assert lua.ack(T, "b", lost.tokens[0]) == 0  # the lost lease is void
    assert lua.r.exists(lua.p.untaken) == 0  # it had run: nothing to remember
    again = lua.take(T, count=2)
    assert [(job.id, job.attempt) for job in again.jobs] == [("b", 1), ("c", 1)]


def test_untake_puts_a_job_taken_ahead_back_in_the_delayed_set(lua: Lua) -> None:
    """Back in the ready list it could be taken by another consumer before its run-at."""
    lua.enqueue(T, "now", value=0)
    _, soon_at = lua.enqueue(T, "soon", value=60_000)
    assert lua.take(T, take_id="lost", ahead_ms=120_000).ids == ["now", "soon"]
    assert lua.untake(T, "lost") == 2
    k = lua.k(T)
    assert lua.r.lrange(k.ready, 0, -1) == ["now"]
    assert lua.r.zscore(k.delayed, "soon") == soon_at
    assert lua.leases(T) == {}
    meta = lua.meta(T, "soon")
    assert meta is not None
    assert (meta.state, meta.attempts, meta.lease) == ("q", 0, "")
    assert lua.take(T).ids == ["now"]


def test_untake_keeps_earlier_attempts_and_errors(lua: Lua) -> None:
    first = lua.make_leased(T, "a", backoff="0")
    assert lua.fail(T, "a", first.token, "try again", backoff="0") == (1, 0)
    taken = lua.take(T, take_id="lost")
    assert [job.attempt for job in taken.jobs] == [2]
    assert lua.untake(T, "lost") == 1
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.state, meta.attempts) == ("q", 1)
    assert lua.last_error(T, "a") == "try again"


def test_a_take_that_reaches_redis_after_its_untake_leases_nothing(lua: Lua) -> None:
    """The untake may run first (the take was still on its way): it is remembered, and the take, when
    it runs, leases nothing and forgets it; other takes are not touched."""
    lua.enqueue(T, "a", value=0)
    lua.enqueue(T, "b", value=0)
    assert lua.untake(T, "late", "never-sent") == 0
    assert set(lua.r.zrange(lua.p.untaken, 0, -1)) == {"late", "never-sent"}
    assert lua.take(T, take_id="late").ids == []
    assert lua.r.lrange(lua.k(T).ready, 0, -1) == ["a", "b"]
    assert lua.r.zrange(lua.p.untaken, 0, -1) == ["never-sent"]
    assert lua.take(T, take_id="next").ids == ["a", "b"]
    assert lua.take(T, take_id="late").ids == []  # nothing left, and nothing remembered


def test_untake_changes_nothing_it_did_not_take(lua: Lua, namespace: str) -> None:
    """Jobs settled since (acked, failed, cancelled) or leased by other takes are left alone."""
    for job_id in ("a", "b", "c"):
        lua.enqueue(T, job_id, value=0)
    taken = lua.take(T, take_id="t1")
    assert lua.ack(T, "a", taken.tokens[0]) == 1
    assert lua.fail(T, "b", taken.tokens[1], "boom", backoff="60000") == (1, 0)
    assert lua.cancel(T, "c") > 0
    lua.enqueue(T, "d", value=0)
    kept = lua.take(T, take_id="t2")
    before = dump(lua.r, namespace)
    assert lua.untake(T, "t1") == 0
    after = dump(lua.r, namespace)
    control = lua.k(T).control
    mark = after[control][1].pop("untaken")  # the topic's takes look for undone ones till then: a day
    assert int(mark) >= server_ms(lua.r) + 86_400_000 - 60_000
    assert {key: value for key, value in after.items() if key != lua.p.untaken} == before
    assert lua.meta(T, "d") is not None
    assert list(lua.leases(T)) == kept.ids


def test_untake_forgets_takes_undone_more_than_a_day_ago(lua: Lua) -> None:
    now = server_ms(lua.r)
    lua.r.zadd(lua.p.untaken, {"old": now - 86_400_000 - 1000, "recent": now - 60_000})
    assert lua.untake(T, "new") == 0
    assert set(lua.r.zrange(lua.p.untaken, 0, -1)) == {"recent", "new"}


def test_untake_reads_a_large_leased_set_in_chunks(lua: Lua) -> None:
    """More leases than one HMGET (or unpack) should carry at once."""
    jobs = [lua.write(T, f"j{i:05d}", "1", value=0) for i in range(2500)]
    for start in range(0, len(jobs), 500):
        lua.enqueue_many(jobs[start : start + 500])
    assert len(lua.take(T, count=2400, take_id="many").jobs) == 2400
    assert len(lua.take(T, count=100, take_id="lost").jobs) == 100
    assert lua.untake(T, "lost") == 100
    assert lua.r.llen(lua.k(T).ready) == 100
    assert len(lua.leases(T)) == 2400


# ------------------------------------------------------------------------------------- ack


def test_ack_with_the_token_removes_the_job(lua: Lua) -> None:
    lease = lua.make_leased(T, "a")
    lua.r.hset(lua.k(T).errors, "a", "earlier failure")
    assert lua.ack(T, "a", lease.token) == 1
    assert lua.where(T, "a") == set()


def test_ack_with_a_wrong_token_changes_nothing(lua: Lua, namespace: str) -> None:
    lease = lua.make_leased(T, "a")
    before = dump(lua.r, namespace)
    assert lua.ack(T, "a", lease.token + "0") == 0
    assert lua.ack(T, "a", "") == 0
    assert lua.ack(T, "missing", lease.token) == 0
    assert dump(lua.r, namespace) == before


def test_ack_of_a_queued_job_changes_nothing(lua: Lua, namespace: str) -> None:
    lua.enqueue(T, "a", value=0)
    before = dump(lua.r, namespace)
    assert lua.ack(T, "a", "") == 0  # a queued job's lease field is empty
    assert dump(lua.r, namespace) == before


def test_ack_with_the_token_of_an_earlier_lease_changes_nothing(lua: Lua, namespace: str) -> None:
    first = lua.make_leased(T, "a", backoff="0")
    assert lua.fail(T, "a", first.token, "try again", backoff="0") == (1, 0)
    second = lua.take(T)
    assert second.ids == ["a"]
    assert second.jobs[0].attempt == 2
    before = dump(lua.r, namespace)
    assert lua.ack(T, "a", first.token) == 0
    assert dump(lua.r, namespace) == before
    assert lua.ack(T, "a", second.tokens[0]) == 1
    assert lua.where(T, "a") == set()


def test_ack_after_cancel_and_recreate_changes_nothing(lua: Lua, namespace: str) -> None:
    old = lua.make_leased(T, "a")
    assert lua.cancel(T, "a") == 3
    new = lua.make_leased(T, "a", body='"new"')
    assert new.token != old.token
    before = dump(lua.r, namespace)
    assert lua.ack(T, "a", old.token) == 0
    assert lua.fail(T, "a", old.token, "late") == (0, 0)
    assert dump(lua.r, namespace) == before


def test_ack_of_several_jobs_counts_only_the_matching(lua: Lua) -> None:
    for job_id in ("a", "b", "c"):
        lua.enqueue(T, job_id, value=0)
    taken = lua.take(T)
    tokens = dict(zip(taken.ids, taken.tokens, strict=True))
    leases = [("a", tokens["a"], 0), ("b", "nope", 0), ("c", tokens["c"], 0)]
    assert lua.ack_many(T, leases, keep_ms=0) == 2
    assert lua.where(T, "a") == set()
    assert lua.where(T, "c") == set()
    assert lua.where(T, "b") == {"leased", "meta", "bodies"}


# ------------------------------------------------------------------------------------- fail


def test_fail_retries_after_the_nth_backoff(lua: Lua) -> None:
    k = lua.k(T)
    lease = lua.make_leased(T, "a")
    expected = [int(ms) for ms in BACKOFF.split(",")] + [60000, 60000]  # the last entry repeated
    assert expected == [1000, 5000, 60000, 60000, 60000]
    for attempt in range(1, 6):
        before = server_ms(lua.r)
        assert lua.fail(T, "a", lease.token, f"err {attempt}", retries=10) == (1, 0)
        after = server_ms(lua.r)
        run_at = lua.r.zscore(k.delayed, "a")
        assert before + expected[attempt - 1] <= run_at <= after + expected[attempt - 1]
        assert lua.last_error(T, "a") == f"err {attempt}"
        assert "a" not in lua.leases(T)
        meta = lua.meta(T, "a")
        assert meta is not None
        assert (meta.state, meta.attempts, meta.lease, meta.run_at_ms) == ("q", attempt, "", int(run_at))
        # due again now, and leased again
        lua.make_due(T, "a")
        taken = lua.take(T)
        assert taken.ids == ["a"]
        assert taken.jobs[0].attempt == attempt + 1
        lease = taken.leases[0]


def test_fail_goes_dead_once_retries_are_spent(lua: Lua) -> None:
    k = lua.k(T)
    lease = lua.make_leased(T, "a", body='"keep me"')
    assert lua.fail(T, "a", lease.token, "first", retries=1, backoff="0") == (1, 0)
    lease = lua.take(T).leases[0]
    assert lease.job.attempt == 2
    before = server_ms(lua.r)
    assert lua.fail(T, "a", lease.token, "second", retries=1, backoff="0") == (0, 1)
    after = server_ms(lua.r)
    assert lua.where(T, "a") == {"dead", "meta", "bodies", "errors"}
    assert before <= lua.r.zscore(k.dead, "a") <= after
    assert lua.last_error(T, "a") == "second"
    assert lua.body(T, "a") == '"keep me"'
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.state, meta.attempts, meta.lease) == ("x", 2, "")


def test_fail_with_zero_retries_is_dead_at_once(lua: Lua) -> None:
    lease = lua.make_leased(T, "a")
    assert lua.fail(T, "a", lease.token, "no", retries=0) == (0, 1)
    assert "dead" in lua.where(T, "a")


def test_fail_per_job_overrides_win_over_the_arguments(lua: Lua) -> None:
    k = lua.k(T)
    lease = lua.make_leased(T, "a", retries="1", backoff="200,300")
    before = server_ms(lua.r)
    assert lua.fail(T, "a", lease.token, "x", retries=0, backoff="99999") == (1, 0)  # topic says dead
    after = server_ms(lua.r)
    assert before + 200 <= lua.r.zscore(k.delayed, "a") <= after + 200
    lua.make_due(T, "a")
    lease = lua.take(T).leases[0]
    assert lua.fail(T, "a", lease.token, "y", retries=9, backoff="0") == (0, 1)  # the job's 1 retry is spent


def test_fail_per_job_zero_retries_wins(lua: Lua) -> None:
    lease = lua.make_leased(T, "a", retries="0")
    assert lua.fail(T, "a", lease.token, "x", retries=5) == (0, 1)


def test_fail_with_a_wrong_token_changes_nothing(lua: Lua, namespace: str) -> None:
    lease = lua.make_leased(T, "a")
    lua.enqueue(T, "q", value=0)
    before = dump(lua.r, namespace)
    assert lua.fail(T, "a", lease.token + "9", "x") == (0, 0)
    assert lua.fail(T, "q", "", "x") == (0, 0)  # queued, not leased
    assert lua.fail(T, "missing", lease.token, "x") == (0, 0)
    assert dump(lua.r, namespace) == before


def test_fail_of_several_jobs(lua: Lua) -> None:
    lua.enqueue(T, "a", value=0)
    lua.enqueue(T, "b", value=0, retries="0")
    taken = lua.take(T)
    tokens = dict(zip(taken.ids, taken.tokens, strict=True))
    failures = [Failure("a", tokens["a"], "e1"), Failure("b", tokens["b"], "e2")]
    assert calls.fail(lua.p, T, Rules(2, BACKOFF), failures).run(lua.r)[:2] == (1, 1)
    assert Meta.decode(lua.raw_meta(T, "a")).state == "q"
    assert Meta.decode(lua.raw_meta(T, "b")).state == "x"


def test_fail_permanent_goes_dead_with_retries_left(lua: Lua) -> None:
    lua.enqueue(T, "a", value=0, retries="10")
    lease = lua.take(T, 1).leases[0]
    assert lua.fail(T, "a", lease.token, "no way", retries=10, permanent=True) == (0, 1)
    k = lua.k(T)
    assert lua.r.zscore(k.dead, "a") is not None
    assert lua.last_error(T, "a") == "no way"
    assert lua.r.zcard(k.delayed) == 0


@pytest.mark.parametrize(
    ("backoff", "retry_after_ms", "waited_ms"), [("1000", 30_000, 30_000), ("60000", 30_000, 60_000), ("1000", 0, 1000)]
)
def test_fail_with_a_retry_after_waits_the_longer_of_it_and_the_backoff(
    lua: Lua, backoff: str, retry_after_ms: int, waited_ms: int
) -> None:
    lease = lua.make_leased(T, "a")
    before = server_ms(lua.r)
    assert lua.fail(T, "a", lease.token, "busy", backoff=backoff, retry_after_ms=retry_after_ms) == (1, 0)
    after = server_ms(lua.r)
    assert before + waited_ms <= lua.r.zscore(lua.k(T).delayed, "a") <= after + waited_ms


def test_a_retry_after_does_not_hold_back_a_job_with_no_retry_left(lua: Lua) -> None:
    lease = lua.make_leased(T, "a", retries="0")
    assert lua.fail(T, "a", lease.token, "busy", retry_after_ms=30_000) == (0, 1)


def test_an_undone_take_marks_its_topic_for_a_day_and_a_take_after_that_clears_the_mark(lua: Lua) -> None:
    """The topic's takes look for undone takes only while its control says some may be: a mark that
    untake sets for as long as it keeps its records, and that a take clears once it is past."""
    lua.enqueue(T, "a", value=0)
    assert lua.untake(T, "lost") == 0
    control = lua.k(T).control
    assert int(lua.r.hget(control, "untaken")) >= server_ms(lua.r) + 86_400_000 - 60_000
    lua.r.hset(control, "untaken", server_ms(lua.r) - 1)  # a day later (the set expired with it)
    lua.r.delete(lua.p.untaken)
    assert lua.take(T, take_id="next").ids == ["a"]
    assert lua.r.hget(control, "untaken") is None


def test_a_topic_emptied_keeps_its_control_while_a_take_of_it_may_be_undone(lua: Lua) -> None:
    """A take undone before it ran must still find its record if it runs after the topic emptied and
    filled again: the mark outlives the topic."""
    lua.enqueue(T, "a", value=0)
    assert lua.untake(T, "late") == 0
    assert lua.cancel(T, "a") > 0
    assert T not in lua.r.smembers(lua.p.topics)
    assert lua.r.hget(lua.k(T).control, "untaken") is not None
    lua.enqueue(T, "b", value=0)
    assert lua.take(T, take_id="late").ids == []
    assert lua.r.lrange(lua.k(T).ready, 0, -1) == ["b"]


# ------------------------------------------------------------------------------------ acks riding with a take

KEEP = Rules(keep_done_ms=60_000)


def test_acks_ride_with_a_take_done_first_then_the_take_leases(lua: Lua) -> None:
    """A take carrying acks acknowledges them (receipts kept as ack.lua keeps them) and leases what is
    due, in one call."""
    first = lua.make_leased(T, "a")
    lua.enqueue(T, "b", value=0)
    taken = lua.take(T, count=5, acks=[("a", first.token, 7)], keeping=KEEP)
    assert (taken.acked, taken.ids) == (1, ["b"])
    meta = lua.meta(T, "a")
    assert meta is not None
    assert meta.state == "d"
    assert lua.r.lrange(lua.k(T).done, 0, -1) == ["a"]
    assert lua.body(T, "a") is None
    assert list(lua.leases(T)) == ["b"]


def test_acks_riding_with_a_take_keep_the_token_check(lua: Lua) -> None:
    """An ack whose token is not the job's lease (a late answer) changes nothing, with a take or not."""
    lease = lua.make_leased(T, "a")
    taken = lua.take(T, count=5, acks=[("a", "t0000000000000000", 7), ("gone", lease.token, 7)], keeping=KEEP)
    assert (taken.acked, taken.ids) == (0, [])
    meta = lua.meta(T, "a")
    assert meta is not None
    assert meta.state == "l"


def test_acks_ride_with_the_take_of_a_paused_topic_and_it_takes_nothing(lua: Lua) -> None:
    lease = lua.make_leased(T, "a")
    lua.enqueue(T, "b", value=0)
    lua.pause(T)
    taken = lua.take(T, count=5, acks=[("a", lease.token, 7)], keeping=KEEP)
    assert (taken.paused, taken.acked, taken.ids) == (True, 1, [])
    assert lua.leases(T) == {}  # nothing leased now


def test_a_take_whose_acks_empty_a_topic_that_keeps_no_receipts_forgets_it(lua: Lua) -> None:
    lease = lua.make_leased(T, "a")
    taken = lua.take(T, count=5, acks=[("a", lease.token, 7)], keeping=Rules(keep_done_ms=0))
    assert (taken.acked, taken.ids) == (1, [])
    assert T not in lua.r.smembers(lua.p.topics)
    assert (lua.meta_ids(T), lua.r.exists(lua.k(T).control)) == ([], 0)
    assert lua.leases(T) == {}


def test_a_take_without_acks_leaves_the_receipts_alone(lua: Lua) -> None:
    """No acks, no forgetting: a take's receipts settings are those of its acks only."""
    lease = lua.make_leased(T, "a")
    assert lua.ack(T, "a", lease.token, keep_ms=60_000) == 1
    lua.enqueue(T, "b", value=0)
    assert lua.take(T, count=5).ids == ["b"]
    assert lua.r.lrange(lua.k(T).done, 0, -1) == ["a"]


# ------------------------------------------------------------------------------------ several lanes in one call


def test_one_call_takes_from_several_topics_each_by_its_own_arguments(lua: Lua) -> None:
    """A take call of several lanes: each topic's jobs by its own count, timeout and take id, a reply
    each in their order; a paused topic in the middle takes nothing and holds up no other."""
    for topic, job_ids in (("a", ["a1", "a2", "a3"]), ("b", ["b1"]), ("c", ["c1", "c2"])):
        for job_id in job_ids:
            lua.enqueue(topic, job_id, value=0)
    lua.pause("b")
    parts = [
        calls.lane_take(lua.p, "a", count=2, timeout_ms=5000, grace_ms=0, take_id="ta"),
        calls.lane_take(lua.p, "b", count=5, timeout_ms=5000, grace_ms=0),
        calls.lane_take(lua.p, "c", count=5, timeout_ms=9000, grace_ms=0, take_id="tc"),
    ]
    a, b, c = calls.takes(lua.p, parts).run(lua.r)
    assert (a.ids, b.ids, b.paused, c.ids) == (["a1", "a2"], [], True, ["c1", "c2"])
    assert (set(a.tokens), set(c.tokens), set(c.timeouts_ms)) == ({"ta"}, {"tc"}, {9000})
    assert lua.leases("c").get("c1") == c.now_ms + 9000
    assert lua.r.lrange(lua.k("a").ready, 0, -1) == ["a3"]
    assert lua.untake("c", "tc") == 2  # each lane's take is undone by its own id
    assert lua.r.lrange(lua.k("c").ready, 0, -1) == ["c1", "c2"]


def test_acks_of_a_lane_ride_alone_in_another_lanes_take(lua: Lua) -> None:
    """A lane with acks and nothing to take (``lane_acks``) rides in another topic's take: its jobs are
    done as ack.lua does them (receipts, the lease index), and nothing of it is taken though due."""
    lease = lua.make_leased("x", "x1")
    lua.enqueue("x", "x2", value=0)
    lua.enqueue("y", "y1", value=0)
    parts = [
        calls.lane_take(lua.p, "y", count=5, timeout_ms=5000, grace_ms=0),
        calls.lane_acks(lua.p, "x", KEEP, [("x1", lease.token, 7), ("x9", lease.token, 7)]),
    ]
    y, x = calls.takes(lua.p, parts).run(lua.r)
    assert (y.ids, y.acked, x.ids, x.acked) == (["y1"], 0, [], 1)
    meta = lua.meta("x", "x1")
    assert meta is not None
    assert meta.state == "d"
    assert lua.r.lrange(lua.k("x").done, 0, -1) == ["x1"]
    assert lua.r.lrange(lua.k("x").ready, 0, -1) == ["x2"]
    assert lua.leases("x") == {}


def test_a_lane_of_acks_that_empties_its_topic_forgets_it(lua: Lua) -> None:
    lease = lua.make_leased("x", "x1")
    lua.enqueue("y", "y1", value=0)
    parts = [
        calls.lane_acks(lua.p, "x", Rules(keep_done_ms=0), [("x1", lease.token, 7)]),
        calls.lane_take(lua.p, "y", count=5, timeout_ms=5000, grace_ms=0),
    ]
    x, y = calls.takes(lua.p, parts).run(lua.r)
    assert (x.acked, y.ids) == (1, ["y1"])
    assert lua.r.smembers(lua.p.topics) == {"y"}
    assert (lua.meta_ids("x"), lua.r.exists(lua.k("x").control)) == ([], 0)
    assert lua.leases("x") == {}


def test_lanes_of_one_pool_take_what_the_lanes_before_them_left(lua: Lua) -> None:
    """The lanes of a pool bring no more jobs in all than the pool holds, each taking what the lanes
    before it left; a lane of no pool takes by its count alone."""
    for topic in ("a", "b", "c"):
        for n in range(3):
            lua.enqueue(topic, f"{topic}{n}", value=0)
    parts = [
        calls.lane_take(lua.p, "a", count=4, timeout_ms=5000, grace_ms=0, pool=1),
        calls.lane_take(lua.p, "b", count=4, timeout_ms=5000, grace_ms=0, pool=1),
        calls.lane_take(lua.p, "c", count=4, timeout_ms=5000, grace_ms=0),
    ]
    a, b, c = calls.takes(lua.p, parts, pools=[4]).run(lua.r)
    assert (a.ids, b.ids, c.ids) == (["a0", "a1", "a2"], ["b0"], ["c0", "c1", "c2"])
    assert lua.r.lrange(lua.k("b").ready, 0, -1) == ["b1", "b2"]


# ------------------------------------------------------------------------------------ a job's history


def test_each_failed_attempt_joins_the_history_in_the_call_that_settles_it(lua: Lua) -> None:
    """A failure's outcome, start and end are kept, oldest first; the success that follows is its
    receipt's (its meta), and the history stays with the receipt."""
    lease = lua.make_leased(T, "a")
    before = server_ms(lua.r)
    assert lua.fail(T, "a", lease.token, "ValueError: no", backoff="0", started_at_ms=before - 5) == (1, 0)
    lease = lua.take(T).leases[0]
    lua.fail(T, "a", lease.token, "timed out after 1s", backoff="0", started_at_ms=before, outcome="timeout")
    lease = lua.take(T).leases[0]
    assert lua.ack(T, "a", lease.token, started_at_ms=before + 1, keep_ms=60_000) == 1
    after = server_ms(lua.r)
    history = lua.history(T, "a")
    assert [(a.attempt, a.outcome, a.error) for a in history] == [
        (1, "error", "ValueError: no"),
        (2, "timeout", "timed out after 1s"),
        (3, "ok", None),
    ]
    assert [a.started_at_ms for a in history] == [before - 5, before, before + 1]
    assert all(a.ended_at_ms is not None and before <= a.ended_at_ms <= after for a in history)
    assert lua.last_error(T, "a") is None


def test_a_history_keeps_the_last_ten_attempts_and_the_separator_never_inside_one(lua: Lua) -> None:
    lua.enqueue(T, "a", value=0, retries="25")
    for attempt in range(1, 14):
        lease = lua.take(T).leases[0]
        assert lua.fail(T, "a", lease.token, f"err {attempt}\x1eend", retries=25, backoff="0") == (1, 0)
    history = lua.history(T, "a")
    assert [a.attempt for a in history] == list(range(4, 14))
    assert history[-1].error == "err 13 end"
    assert len(lua.r.hget(lua.k(T).errors, "a") or "") < 10 * 60  # ten entries, not thirteen


def test_a_dead_jobs_history_and_its_receipts_go_with_it(lua: Lua) -> None:
    lua.make_dead(T, "x", "boom")
    assert [(a.attempt, a.outcome, a.error) for a in lua.history(T, "x")] == [(1, "error", "boom")]
    assert lua.cancel(T, "x") > 0
    assert lua.r.hget(lua.k(T).errors, "x") is None
    lease = lua.make_leased(T, "r")
    lua.r.hset(lua.k(T).errors, "r", "1||1|error|earlier")
    assert lua.ack(T, "r", lease.token, keep_ms=60_000, keep_max=1) == 1
    lease = lua.make_leased(T, "s")
    assert lua.ack(T, "s", lease.token, keep_ms=60_000, keep_max=1) == 1  # r's receipt is forgotten
    assert lua.meta(T, "r") is None
    assert lua.r.hget(lua.k(T).errors, "r") is None
