"""The partition's topic index (lua/includes/topic_index.lua): every script that changes a topic's
delayed set, ready list or leased set keeps it, so that it never hides work."""

from __future__ import annotations

import math
import time

import pytest

from delayq.store import calls

from support.scripts import Lua, server_ms

T = "orders"


def scores(lua: Lua, key: str) -> dict[str, float]:
    return dict(lua.r.zrange(key, 0, -1, withscores=True))


def test_enqueue_indexes_the_earliest_run_at_of_each_topic(lua: Lua) -> None:
    lua.enqueue_many([lua.write(T, "late", value=90_000), lua.write(T, "soon", value=30_000), lua.write("b", "x")])
    k = lua.k(T)
    assert scores(lua, lua.p.delayed_index)[T] == lua.r.zscore(k.delayed, "soon")
    assert set(scores(lua, lua.p.delayed_index)) == {T, "b"}
    lua.enqueue(T, "later", value=120_000)  # later: the index keeps the earlier one
    assert scores(lua, lua.p.delayed_index)[T] == lua.r.zscore(k.delayed, "soon")
    assert scores(lua, lua.p.ready_index) == {}


def test_a_job_due_now_indexes_its_topic_as_ready_until_the_take_empties_it(lua: Lua) -> None:
    before = server_ms(lua.r)
    lua.enqueue(T, "a", value=0)
    lua.enqueue(T, "b", value=0)
    ready = scores(lua, lua.p.ready_index)
    assert before <= ready[T] <= server_ms(lua.r)
    lua.take(T, count=1)
    assert T in scores(lua, lua.p.ready_index)  # one job left
    lua.take(T, count=1)
    assert T not in scores(lua, lua.p.ready_index)


def test_leases_are_the_partitions_and_ack_and_fail_take_them_out(lua: Lua) -> None:
    first = lua.make_leased(T, "a", timeout="5000")
    second = lua.make_leased(T, "b")  # the topic's timeout: longer
    lua.make_leased("other", "a")
    k = lua.k(T)
    assert list(lua.leases(T)) == ["a", "b"]  # soonest first
    assert set(lua.r.zrange(lua.p.leases, 0, -1)) == {f"{T}/a", f"{T}/b", "other/a"}
    lua.ack(T, "a", first.token)
    assert list(lua.leases(T)) == ["b"]
    lua.fail(T, "b", second.token, "boom")
    assert lua.leases(T) == {}
    assert list(lua.leases("other")) == ["a"]
    assert scores(lua, lua.p.delayed_index)[T] == lua.r.zscore(k.delayed, "b")  # its retry


def test_take_of_due_jobs_sets_the_index_to_the_next_run_at(lua: Lua) -> None:
    lua.enqueue(T, "due", value=60_000)
    lua.enqueue(T, "next", value=90_000)
    lua.make_due(T, "due")
    assert lua.take(T).ids == ["due"]
    assert scores(lua, lua.p.delayed_index)[T] == lua.r.zscore(lua.k(T).delayed, "next")


def test_a_take_of_many_due_jobs_reads_on_and_sets_the_index_to_the_first_left(lua: Lua) -> None:
    """The take reads the delayed set's head a few at a time (queue.lua pop_due): past its first read
    it reads on, takes the due in run-at order, leaves the others as they were, and the index gets the
    first job it left."""
    for n in range(30):
        lua.enqueue(T, f"due-{n:02}", value=60_000)
        lua.make_due(T, f"due-{n:02}", ago_ms=100 - n)
    lua.enqueue(T, "later", value=90_000)
    left = lua.r.zrange(lua.k(T).delayed, 25, -1, withscores=True)
    taken = lua.take(T, count=25)
    assert taken.ids == [f"due-{n:02}" for n in range(25)]
    assert taken.next_in_ms == 0  # five due still
    assert lua.r.zrange(lua.k(T).delayed, 0, -1, withscores=True) == left
    assert scores(lua, lua.p.delayed_index)[T] == lua.r.zscore(lua.k(T).delayed, "due-25")
    taken = lua.take(T, count=25)
    assert taken.ids == [f"due-{n:02}" for n in range(25, 30)]
    later = lua.r.zscore(lua.k(T).delayed, "later")
    assert scores(lua, lua.p.delayed_index)[T] == later
    assert lua.r.zcard(lua.k(T).delayed) == 1
    assert 85_000 < taken.next_in_ms <= 90_000


@pytest.mark.parametrize("count", [1, 2, 3])
def test_a_take_of_a_few_due_jobs_leaves_the_others_and_the_index_gets_the_first_left(lua: Lua, count: int) -> None:
    """A take of fewer due jobs than there are, or of all of them, knows the first job left from its
    read, and leaves the others as they were."""
    for n in range(3):
        lua.enqueue(T, f"due-{n}", value=60_000)
        lua.make_due(T, f"due-{n}", ago_ms=10 - n)
    lua.enqueue(T, "later", value=90_000)
    before = dict(lua.r.zrange(lua.k(T).delayed, 0, -1, withscores=True))
    taken = lua.take(T, count=count)
    assert taken.ids == [f"due-{n}" for n in range(count)]
    left = dict(lua.r.zrange(lua.k(T).delayed, 0, -1, withscores=True))
    assert left == {job_id: at for job_id, at in before.items() if job_id not in taken.ids}
    assert scores(lua, lua.p.delayed_index)[T] == min(left.values())
    assert taken.next_in_ms == 0 if count < 3 else 85_000 < taken.next_in_ms <= 90_000


def test_a_job_put_back_by_the_take_is_the_index_entry_when_first(lua: Lua) -> None:
    """A job taken ahead whose timeout the consumer cannot finish goes back to the delayed set: the
    index learns it, though the take had read the set's head before."""
    lua.enqueue(T, "soon", value=60_000, timeout="50000")
    lua.enqueue(T, "later", value=90_000)
    lua.make_due(T, "soon", ago_ms=-300)  # due in 0.3 s: within the take ahead
    soon_at = lua.r.zscore(lua.k(T).delayed, "soon")
    lane = calls.lane_take(lua.p, T, count=5, timeout_ms=1000, grace_ms=0, ahead_ms=1000)
    (taken,) = calls.takes(lua.p, [lane], longest_ms=10_000).run(lua.r)
    assert taken.ids == []
    assert lua.r.zscore(lua.k(T).delayed, "soon") == soon_at
    assert scores(lua, lua.p.delayed_index)[T] == soon_at
    assert taken.next_in_ms is not None
    assert 0 < taken.next_in_ms <= 300


def test_cancel_and_reschedule_keep_the_index(lua: Lua) -> None:
    lua.enqueue(T, "a", value=30_000)
    lua.enqueue(T, "b", value=60_000)
    lua.cancel(T, "a")
    assert scores(lua, lua.p.delayed_index)[T] == lua.r.zscore(lua.k(T).delayed, "b")
    lua.reschedule(T, "b", "d", 0)  # due now: ready
    assert scores(lua, lua.p.delayed_index)[T] == math.inf  # none delayed; still a known topic
    assert T in scores(lua, lua.p.ready_index)


def test_sweep_sets_the_index_from_the_topics_keys(lua: Lua) -> None:
    lua.enqueue(T, "a", value=60_000)
    lua.r.zadd(lua.p.delayed_index, {T: 1, "gone": 1})  # early, and a topic with nothing: harmless
    lua.r.set(lua.p.lock, "me", px=10_000)
    assert lua.sweep([T, "gone"], "me").held
    assert scores(lua, lua.p.delayed_index) == {T: lua.r.zscore(lua.k(T).delayed, "a")}


def test_replay_and_untake_index_the_ready_jobs(lua: Lua) -> None:
    lua.make_dead(T, "a")
    assert scores(lua, lua.p.ready_index) == {}
    assert lua.replay(T, "a") == 1
    assert T in scores(lua, lua.p.ready_index)
    taken = lua.take(T, take_id="t" + "0" * 16)
    assert taken.ids == ["a"]
    assert T not in scores(lua, lua.p.ready_index)
    assert lua.untake(T, "t" + "0" * 16) == 1
    assert T in scores(lua, lua.p.ready_index)
    assert lua.leases(T) == {}


def test_receipts_index_when_the_first_expires_and_the_sweep_names_the_topic_then(lua: Lua) -> None:
    lease = lua.make_leased(T, "a")
    before = server_ms(lua.r)
    assert lua.ack(T, "a", lease.token, keep_ms=50) == 1
    expires = scores(lua, lua.p.receipts_index)[T]
    assert before + 50 <= expires <= server_ms(lua.r) + 50
    lua.r.set(lua.p.lock, "me", px=10_000)
    assert lua.sweep([], "me").due == []
    time.sleep(0.08)
    assert lua.sweep([], "me").due == [T]  # the sweeper sends forget.lua with the sweep of T
    assert lua.forget([T], keep_ms=50).forgotten == 1
    assert scores(lua, lua.p.receipts_index) == {}
    assert lua.sweep([], "me").due == []


def test_a_topic_that_holds_nothing_leaves_the_topic_set_unless_paused(lua: Lua) -> None:
    lua.enqueue(T, "a", value=0)
    lua.enqueue("kept", "a", value=60_000)
    assert lua.r.smembers(lua.p.topics) == {T, "kept"}
    assert lua.r.exists(lua.k(T).control) == 1  # the ready list's tail counter
    lease = lua.take(T).leases[0]
    assert lua.ack(T, "a", lease.token) == 1  # no receipt kept: the topic holds nothing
    assert lua.r.smembers(lua.p.topics) == {"kept"}
    assert lua.r.exists(lua.k(T).control) == 0
    lua.pause("kept")
    assert lua.cancel("kept", "a") == 3
    assert lua.r.smembers(lua.p.topics) == {"kept"}  # paused: still one of the partition's topics


def test_a_topic_forgotten_leaves_the_index_too_and_comes_back_with_its_next_job(lua: Lua) -> None:
    """A topic joins _topics when an enqueue makes it known to the index; so one forgotten (gone from
    both) is listed again by its next job, delayed or due now."""
    lua.enqueue(T, "a", value=60_000)
    lua.r.zadd(lua.p.receipts_index, {T: 1})  # an early entry, as a forget can leave one
    assert lua.cancel(T, "a") > 0
    assert T not in lua.r.smembers(lua.p.topics)
    for index in (lua.p.delayed_index, lua.p.ready_index, lua.p.receipts_index):
        assert T not in scores(lua, index), index
    lua.enqueue(T, "b", value=60_000)
    assert T in lua.r.smembers(lua.p.topics)
    lua.enqueue("now", "c", value=0)
    assert lua.r.smembers(lua.p.topics) == {T, "now"}


def test_a_second_job_of_an_indexed_topic_writes_no_topic_set(lua: Lua) -> None:
    """The set is written once per topic, not per job: the index already names the topic."""
    lua.enqueue(T, "a", value=60_000)
    lua.enqueue("now", "a", value=0)
    lua.r.srem(lua.p.topics, T, "now")  # were an enqueue to add them again, they would be back
    lua.enqueue(T, "b", value=30_000)
    lua.enqueue("now", "b", value=0)
    assert lua.r.smembers(lua.p.topics) == set()


def test_a_topic_whose_delayed_set_empties_stays_known_and_its_next_job_writes_no_topic_set(lua: Lua) -> None:
    """Jobs alone in their topic: the take that empties the delayed set leaves the topic in the index,
    never due, so its next job (the receipt of the first kept) finds it there."""
    lua.enqueue(T, "a", value=60_000)
    lua.make_due(T, "a")
    lease = lua.take(T).leases[0]
    assert lua.r.zscore(lua.p.delayed_index, T) == math.inf
    assert lua.ack(T, "a", lease.token, keep_ms=60_000) == 1
    assert lua.r.zscore(lua.p.delayed_index, T) == math.inf
    lua.r.srem(lua.p.topics, T)  # were the next enqueue to add it again, it would be back
    lua.enqueue(T, "b", value=30_000)
    assert lua.r.smembers(lua.p.topics) == set()
    assert lua.r.zscore(lua.p.delayed_index, T) == lua.r.zscore(lua.k(T).delayed, "b")
    lua.r.sadd(lua.p.topics, T)
    lua.r.set(lua.p.lock, "me", px=10_000)
    assert lua.cancel(T, "b") > 0
    assert lua.r.zscore(lua.p.delayed_index, T) == math.inf
    swept = lua.sweep([T], "me")
    assert swept.next_in_ms is not None
    assert 0 < swept.next_in_ms <= 60_000


def test_a_forgotten_topic_holds_no_entry_in_any_index(lua: Lua) -> None:
    lua.enqueue(T, "a", value=60_000)
    lua.make_due(T, "a")
    lease = lua.take(T).leases[0]
    assert lua.ack(T, "a", lease.token) == 1  # no receipt kept: the topic holds nothing
    assert T not in lua.r.smembers(lua.p.topics)
    for index in (lua.p.delayed_index, lua.p.ready_index, lua.p.receipts_index):
        assert lua.r.zscore(index, T) is None, index
    assert lua.leases(T) == {}


def test_a_topic_made_known_by_a_job_due_now_is_known_to_the_delayed_index(lua: Lua) -> None:
    """Its next delayed job finds it there, never due, and writes no topic set."""
    lua.enqueue(T, "now", value=0)
    assert lua.r.smembers(lua.p.topics) == {T}
    assert lua.r.zscore(lua.p.delayed_index, T) == math.inf
    lua.r.srem(lua.p.topics, T)  # were the next enqueue to add it again, it would be back
    lua.enqueue(T, "later", value=30_000)
    assert lua.r.smembers(lua.p.topics) == set()
    assert lua.r.zscore(lua.p.delayed_index, T) == lua.r.zscore(lua.k(T).delayed, "later")
