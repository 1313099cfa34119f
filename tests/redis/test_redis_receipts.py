"""Receipts: a job that succeeded stays readable as ``done`` for its topic's keep_done, at most
keep_done_max of them; the scripts (ack, forget, and what every other script does with a done job)
and the client's view of them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from delayq import InvalidField, JobDone, JobExists, JobNotFound, Queue
from delayq.core.job import Refused, Scheduled, decode_result, encode_result
from delayq.store import calls
from delayq.store.calls import Ack

from support.scripts import Lua, Rules, server_ms

T = "orders"
HOUR_MS = 3_600_000
MakeQueue = Callable[..., Queue]


def finish(lua: Lua, job_id: str, *, keep_ms: int = HOUR_MS, keep_max: int = 10_000, **options: object) -> int:
    """``job_id`` created due now, leased and acknowledged with a receipt kept; its handler started 5 ms
    after the take (by Redis' clock). Returns when it started."""
    lease = lua.make_leased(T, job_id, **options)
    started = server_ms(lua.r) + 5
    assert lua.ack(T, job_id, lease.token, started_at_ms=started, keep_ms=keep_ms, keep_max=keep_max) == 1
    return started


def receipts(lua: Lua, topic: str = T) -> list[str]:
    """The done list's receipts, oldest first (holes left out)."""
    return [job_id for job_id in lua.r.lrange(lua.k(topic).done, 0, -1) if job_id]


def old_receipts(lua: Lua, ids: list[str], done_at_ms: int) -> None:
    """Receipts of jobs done at ``done_at_ms``, made as the ack makes them (done list, meta)."""
    k = lua.k(T)
    lua.r.rpush(k.done, *ids)
    for job_id in ids:
        lua.set_meta(T, job_id, f"d|1|1|1|1:{done_at_ms}|||")


# ------------------------------------------------------------------------------------- ack


def test_ack_keeps_a_compact_receipt_without_body_but_with_its_history(lua: Lua) -> None:
    lease = lua.make_leased(T, "a", body='{"big": "body"}', retries="5")
    lua.r.hset(lua.k(T).errors, "a", "an earlier failure")
    before = server_ms(lua.r)
    assert lua.ack(T, "a", lease.token, started_at_ms=before - 3, keep_ms=HOUR_MS) == 1
    after = server_ms(lua.r)
    assert lua.where(T, "a") == {"done", "meta", "errors"}
    raw = lua.raw_meta(T, "a")
    job = lease.job
    assert raw is not None
    done_at = int(raw.split("|")[4].split(":")[1])
    assert raw == f"d|1|{job.run_at_ms}|{job.enqueued_at_ms}|{before - 3}:{done_at}|5||"
    assert before <= done_at <= after
    found = lua.inspect(T, "a")
    assert found is not None
    assert (found.state, found.body, found.meta.done_at_ms) == ("done", None, done_at)
    assert (found.meta.attempts, found.meta.started_at_ms, found.meta.retries) == (1, before - 3, 5)
    # The earlier failure (stored before histories were kept: its text alone), then the success.
    assert [(a.attempt, a.outcome, a.error) for a in lua.history(T, "a")] == [
        (1, "error", "an earlier failure"),
        (1, "ok", None),
    ]
    assert lua.last_error(T, "a") is None
    assert lua.history(T, "a")[-1].started_at_ms == before - 3


def test_ack_with_keep_done_zero_keeps_nothing(lua: Lua) -> None:
    lease = lua.make_leased(T, "a")
    assert lua.ack(T, "a", lease.token, keep_ms=0) == 1
    assert lua.where(T, "a") == set()
    assert lua.inspect(T, "a") is None


def test_a_late_ack_of_a_done_job_changes_nothing(lua: Lua) -> None:
    lease = lua.make_leased(T, "a")
    assert lua.ack(T, "a", lease.token, started_at_ms=7, keep_ms=HOUR_MS) == 1
    stored = lua.raw_meta(T, "a")
    assert lua.ack(T, "a", lease.token, started_at_ms=8, keep_ms=HOUR_MS) == 0
    assert lua.raw_meta(T, "a") == stored


def test_the_oldest_receipts_go_first_beyond_keep_done_max(lua: Lua) -> None:
    for job_id in ("a", "b", "c", "d", "e"):
        finish(lua, job_id, keep_max=3)
    assert receipts(lua) == ["c", "d", "e"]
    assert lua.raw_meta(T, "a") is None
    assert lua.raw_meta(T, "b") is None
    assert lua.stats(T).done == 3


def test_ack_forgets_over_the_cap_but_no_more_than_it_adds_and_a_chunk(lua: Lua) -> None:
    old_receipts(lua, [f"old{i:03}" for i in range(200)], server_ms(lua.r))
    finish(lua, "new", keep_max=100)  # one added, 101 too many: forgets 1 + 64 of them, the oldest first
    left = receipts(lua)
    assert left == [f"old{i:03}" for i in range(65, 200)] + ["new"]
    assert len(lua.meta_ids(T)) == len(left)


def test_ack_leaves_expired_receipts_to_the_sweep(lua: Lua) -> None:
    old_receipts(lua, ["old"], server_ms(lua.r) - 20_000)
    finish(lua, "new", keep_ms=10_000)
    assert receipts(lua) == ["old", "new"]
    assert lua.forget([T], keep_ms=10_000) == (1, False)
    assert receipts(lua) == ["new"]
    assert lua.where(T, "old") == set()


def test_ack_over_the_cap_forgets_a_chunk_more(lua: Lua) -> None:
    for n in range(33):
        finish(lua, f"j{n:02}", keep_max=32)
    assert len(receipts(lua)) == 33 - 1 - 2  # 32 // 16 = 2 more than the one too many
    finish(lua, "j33", keep_max=32)
    assert len(receipts(lua)) == 31  # no more than the cap: nothing forgotten
    assert receipts(lua)[-1] == "j33"


# ------------------------------------------------------------------------------------- forget (the sweep's share)


def test_forget_is_bounded_and_says_when_more_is_left(lua: Lua) -> None:
    k = lua.k(T)
    old_receipts(lua, [f"x{i:02}" for i in range(25)], server_ms(lua.r) - 10_000)
    assert lua.forget([T], keep_ms=5_000, limit=10) == (10, True)
    assert lua.forget([T], keep_ms=5_000, limit=10) == (10, True)
    assert lua.forget([T], keep_ms=5_000, limit=10) == (5, False)
    assert lua.where(T, "x00") == set()
    assert (lua.r.exists(k.done), lua.meta_ids(T)) == (0, [])


def test_forget_keeps_receipts_younger_than_keep_done(lua: Lua) -> None:
    finish(lua, "a")
    assert lua.forget([T], keep_ms=HOUR_MS) == (0, False)
    assert receipts(lua) == ["a"]
    assert lua.forget([T], keep_ms=HOUR_MS, keep_max=1) == (0, False)
    assert lua.forget([T], keep_ms=0) == (1, False)  # keep_done now 0: every receipt has expired
    assert lua.where(T, "a") == set()


def test_forget_over_several_topics_uses_each_topics_config(lua: Lua) -> None:
    finish(lua, "a")
    lease = lua.make_leased("reminders", "r")
    lua.ack("reminders", "r", lease.token, keep_ms=HOUR_MS)
    rules = [(T, Rules(keep_done_ms=HOUR_MS)), ("reminders", Rules(keep_done_ms=0))]
    assert calls.forget(lua.p, rules, limit=100).run(lua.r) == (1, False)
    assert receipts(lua) == ["a"]
    assert receipts(lua, "reminders") == []


# ------------------------------------------------------------------------------------- the other scripts


def test_create_of_a_done_job_is_refused_while_its_receipt_lasts(lua: Lua) -> None:
    finish(lua, "a")
    assert lua.enqueue(T, "a", value=0) == (-1, 0)
    assert lua.where(T, "a") == {"done", "meta"}


def test_replace_of_a_done_job_creates_it_anew(lua: Lua) -> None:
    finish(lua, "a")
    code, run_at = lua.enqueue(T, "a", '{"n":2}', replace=True, value=60_000)
    assert code == 1  # created, not replaced: the receipt was no job
    assert lua.where(T, "a") == {"delayed", "meta", "bodies"}
    meta = lua.meta(T, "a")
    assert meta is not None
    assert (meta.state, meta.attempts, meta.run_at_ms) == ("q", 0, run_at)


def test_cancel_forgets_a_receipt(lua: Lua) -> None:
    finish(lua, "a")
    assert lua.cancel(T, "a") == 3
    assert lua.where(T, "a") == set()


def test_reschedule_of_a_done_job_is_refused(lua: Lua) -> None:
    finish(lua, "a")
    assert lua.reschedule(T, "a", "d", 0) == (-8, 0)
    assert lua.where(T, "a") == {"done", "meta"}


def test_replay_and_purge_leave_receipts_alone(lua: Lua) -> None:
    finish(lua, "a")
    assert lua.replay(T, "a") == 0
    assert lua.purge(T, 10) == 0
    assert lua.where(T, "a") == {"done", "meta"}


def test_stats_count_receipts(lua: Lua) -> None:
    finish(lua, "a")
    finish(lua, "b")
    lua.enqueue(T, "c")
    stats = lua.stats(T)
    assert (stats.delayed, stats.ready, stats.reserved, stats.dead, stats.done) == (1, 0, 0, 0, 2)


def test_receipts_are_listed_newest_first_by_position(lua: Lua) -> None:
    for job_id in ("a", "b", "c", "d", "e"):
        finish(lua, job_id)
    page = lua.jobs_done(T, 2)
    assert [(job.id, job.place, job.body) for job in page.jobs] == [("e", 4, None), ("d", 3, None)]
    assert page.more
    assert lua.cancel(T, "c") == 3  # a hole, skipped
    page = lua.jobs_done(T, 2, before=3)
    assert [(job.id, job.place) for job in page.jobs] == [("b", 1), ("a", 0)]
    assert not page.more
    assert lua.forget([T], keep_ms=HOUR_MS, keep_max=2) == (2, False)  # a and b; the hole goes too
    assert lua.jobs_done(T, 5, before=3) == ([], False)
    assert [(job.id, job.place) for job in lua.jobs_done(T, 5).jobs] == [("e", 4), ("d", 3)]  # they stay put
    assert lua.r.lrange(lua.k(T).done, 0, -1) == ["d", "e"]
    finish(lua, "f")
    assert [(job.id, job.place) for job in lua.jobs_done(T, 5).jobs] == [("f", 5), ("e", 4), ("d", 3)]


def test_a_receipt_forgotten_early_leaves_a_hole_that_is_not_counted(lua: Lua) -> None:
    for job_id in ("a", "b", "c"):
        finish(lua, job_id)
    assert lua.cancel(T, "b") == 3
    code, _ = lua.enqueue(T, "a", replace=True)
    assert code == 1
    assert lua.r.lrange(lua.k(T).done, 0, -1) == ["", "c"]  # "a" was the head: popped
    assert lua.r.hget(lua.k(T).control, "done_holes") == "1"
    assert lua.stats(T).done == 1
    assert receipts(lua) == ["c"]
    assert [(job.id, job.place) for job in lua.jobs_done(T, 5).jobs] == [("c", 2)]  # where it was


# ------------------------------------------------------------------------------------- results


def test_a_receipt_keeps_its_result_in_its_bodys_place(lua: Lua) -> None:
    lease = lua.make_leased(T, "a", body='{"big": "body"}')
    assert lua.ack(T, "a", lease.token, keep_ms=HOUR_MS, result=encode_result({"charged": 12})) == 1
    assert lua.where(T, "a") == {"done", "meta", "bodies"}
    assert lua.body(T, "a") == '={"charged":12}'
    found = lua.inspect(T, "a")
    assert found is not None
    assert (found.state, found.body, decode_result(found.result)) == ("done", None, ({"charged": 12}, False))
    listed = lua.jobs_done(T, 5).jobs
    assert [(job.id, job.body, job.result) for job in listed] == [("a", None, '={"charged":12}')]


def test_a_result_goes_with_its_receipt(lua: Lua) -> None:
    for job_id in ("a", "b", "c"):
        lease = lua.make_leased(T, job_id)
        assert lua.ack(T, job_id, lease.token, keep_ms=HOUR_MS, keep_max=2, result=encode_result(job_id)) == 1
    assert lua.body(T, "a") is None  # forgotten beyond keep_done_max: its result too
    assert lua.cancel(T, "b") == 3
    assert lua.body_ids(T) == ["c"]
    code, _ = lua.enqueue(T, "c", '{"n":2}', replace=True, value=60_000)
    assert code == 1
    assert lua.body(T, "c") == '{"n":2}'  # the new life's body, no result
    lease = lua.make_leased(T, "d")
    assert lua.ack(T, "d", lease.token, keep_ms=0, result=encode_result([1, 2])) == 1
    assert lua.where(T, "d") == set()  # no receipt kept, no result either
    old_receipts(lua, ["e"], server_ms(lua.r) - 2 * HOUR_MS)
    lua.set_body(T, "e", encode_result("old"))
    assert lua.forget([T], keep_ms=HOUR_MS) == (1, False)  # expired: its result with it
    assert lua.body(T, "e") is None


def test_a_late_ack_writes_no_result(lua: Lua) -> None:
    lease = lua.make_leased(T, "a", body='{"n": 1}')
    assert lua.ack(T, "a", lease.token + "0", keep_ms=HOUR_MS, result=encode_result("late")) == 0
    assert lua.body(T, "a") == '{"n": 1}'
    assert lua.ack(T, "a", lease.token, keep_ms=HOUR_MS) == 1  # a success without a result: no body left
    assert lua.where(T, "a") == {"done", "meta"}


def test_acks_riding_a_take_keep_their_results(lua: Lua) -> None:
    first = lua.make_leased(T, "a")
    lua.enqueue(T, "b", value=0)
    taken = lua.take(
        T, count=5, acks=[Ack("a", first.token, 7, encode_result("fine"))], keeping=Rules(keep_done_ms=HOUR_MS)
    )
    assert (taken.acked, taken.ids) == (1, ["b"])
    assert lua.body(T, "a") == '"fine'


# ------------------------------------------------------------------------------------- the client


def done_job(queue: Queue, job_id: str, topic: str = T) -> int:
    """Enqueue ``job_id`` due now, lease and acknowledge it with the topic's config; when it started."""
    queue.enqueue(topic, {"n": 1}, id=job_id, delay=0)
    partition = queue.keys.for_job(topic, job_id)
    taken = calls.take(partition, topic, count=100, timeout_ms=30_000, grace_ms=0).run(queue.redis)
    lease = {job.id: token for job, token, _ in taken.leases}
    started = taken.now_ms + 2
    config = queue.topic_config(topic)
    assert calls.ack(partition, topic, config, [(job_id, lease[job_id], started)]).run(queue.redis) == 1
    return started


@pytest.mark.parametrize("partitions", [1, 3])
def test_get_of_a_done_job(make_queue: MakeQueue, partitions: int) -> None:
    queue = make_queue(partitions=partitions)
    started = done_job(queue, "a")
    info = queue.get(T, "a")
    assert (info.state, info.attempts, info.body, info.last_error, info.started_at_ms) == (
        "done",
        1,
        None,
        None,
        started,
    )
    assert info.done_at_ms is not None
    assert info.done_at_ms >= started - 2
    shown = info.to_dict()
    assert (shown["state"], shown["started_at_ms"], shown["done_at_ms"]) == ("done", started, info.done_at_ms)
    assert queue.get(T, queue.enqueue(T, {}).id).to_dict()["done_at_ms"] is None


def test_the_client_treats_a_receipt_as_a_dedupe_window(queue: Queue) -> None:
    done_job(queue, "a")
    with pytest.raises(JobExists):
        queue.enqueue(T, {}, id="a")
    results = queue.enqueue_many([{"topic": T, "id": "a"}, {"topic": T, "id": "b"}])
    assert isinstance(results[0], Refused)
    assert (results[0].status, results[0].error.error) == (409, "exists")
    assert isinstance(results[1], Scheduled)
    with pytest.raises(JobDone) as refused:
        queue.reschedule(T, "a", delay=0)
    assert (refused.value.status, refused.value.error) == (409, "done")
    assert queue.put(T, "a", {"again": True}, delay=60).created
    assert queue.get(T, "a").state == "delayed"


def test_cancel_of_a_done_job_forgets_it(queue: Queue) -> None:
    done_job(queue, "a")
    queue.cancel(T, "a")
    with pytest.raises(JobNotFound):
        queue.get(T, "a")
    queue.enqueue(T, {}, id="a")  # no longer a duplicate


@pytest.mark.parametrize("partitions", [1, 3])
def test_stats_and_the_done_listing(make_queue: MakeQueue, partitions: int) -> None:
    queue = make_queue(partitions=partitions)
    for n in range(7):
        done_job(queue, f"j{n}")
    assert queue.stats(T).done == 7
    assert [t.done for t in queue.topics().topics if t.topic == T] == [7]
    seen: list[str] = []
    page = queue.jobs(T, "done", limit=3)
    while True:
        assert all(job.state == "done" and job.done_at_ms is not None for job in page.jobs)
        seen += [job.id for job in page.jobs]
        if page.next is None:
            break
        page = queue.jobs(T, "done", limit=3, cursor=page.next)
    assert sorted(seen) == [f"j{n}" for n in range(7)]
    done_at = [queue.get(T, job_id).done_at_ms or 0 for job_id in seen]
    assert done_at == sorted(done_at, reverse=True)  # newest first


def test_keep_done_zero_forgets_at_once(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={T: {"target": "python:support.recorder:deliver", "keep_done": 0}})
    done_job(queue, "a")
    with pytest.raises(JobNotFound):
        queue.get(T, "a")
    assert queue.stats(T).done == 0


def test_the_done_listing_takes_only_its_own_cursors(queue: Queue) -> None:
    for n in range(3):
        done_job(queue, f"j{n}")
    for n in range(3):
        queue.enqueue(T, {}, id=f"r{n}", delay=0)
    ready_cursor = queue.jobs(T, "ready", limit=1).next
    done_cursor = queue.jobs(T, "done", limit=1).next
    assert ready_cursor is not None
    assert done_cursor is not None
    with pytest.raises(InvalidField) as refused:
        queue.jobs(T, "done", limit=1, cursor=ready_cursor)
    assert refused.value.field == "cursor"
    with pytest.raises(InvalidField):
        queue.jobs(T, "ready", limit=1, cursor=done_cursor)
    assert [job.id for job in queue.jobs(T, "done", limit=5, cursor=done_cursor).jobs] == ["j1", "j0"]
