"""jobs_scored, jobs_ready, forecast and pause: the scripts behind seeing and steering a queue."""

from __future__ import annotations

from delayq.core.job import history_of, last_error_of
from delayq.store.calls import Listed

from support.scripts import Lua, dump, server_ms

T = "orders"


def ids(jobs: list[Listed]) -> list[str]:
    return [job.id for job in jobs]


def walk_scored(lua: Lua, kind: str, limit: int, *, descending: bool = False) -> list[str]:
    """Every page of ``kind``, each asked after the last job of the previous one."""
    seen: list[str] = []
    after = None
    while page := lua.jobs_scored(T, kind, limit, after, descending=descending):
        seen += ids(page)
        after = (page[-1].place, page[-1].id)
    return seen


# ------------------------------------------------------------------------------------- jobs_scored


def test_delayed_jobs_come_soonest_first_ties_by_id_byte_by_byte(lua: Lua) -> None:
    at = server_ms(lua.r) + 60_000
    for job_id in ("b", "a10", "a2", "B", "a1"):  # one run-at: ordered as Redis orders members, by bytes
        lua.enqueue(T, job_id, when="a", value=at)
    lua.enqueue(T, "first", when="a", value=at - 1)
    lua.enqueue(T, "last", when="a", value=at + 1)
    expected = ["first", "B", "a1", "a10", "a2", "b", "last"]
    assert ids(lua.jobs_scored(T, "delayed", 100)) == expected
    for limit in (1, 2, 3):
        assert walk_scored(lua, "delayed", limit) == expected
    page = lua.jobs_scored(T, "delayed", 2)
    assert [(job.id, job.place, job.meta.state, job.body) for job in page] == [
        ("first", at - 1, "q", {"n": 1}),
        ("B", at, "q", {"n": 1}),
    ]


def test_a_page_starts_after_a_cursor_whose_job_has_gone_or_moved(lua: Lua) -> None:
    at = server_ms(lua.r) + 60_000
    for job_id in ("a", "b", "c", "d", "e"):
        lua.enqueue(T, job_id, when="a", value=at)
    assert lua.cancel(T, "b") == 3
    assert ids(lua.jobs_scored(T, "delayed", 10, (at, "b"))) == ["c", "d", "e"]  # where "b" would stand
    assert lua.reschedule(T, "c", "a", at + 5_000).code == 3  # still delayed, elsewhere
    assert ids(lua.jobs_scored(T, "delayed", 10, (at, "c"))) == ["d", "e", "c"]
    assert ids(lua.jobs_scored(T, "delayed", 10, (at, "0"))) == ["a", "d", "e", "c"]  # before every tie
    assert ids(lua.jobs_scored(T, "delayed", 10, (at, "z"))) == ["c"]  # after every tie
    assert ids(lua.jobs_scored(T, "delayed", 10, (at - 1, "zzz"))) == ["a", "d", "e", "c"]
    assert lua.jobs_scored(T, "delayed", 10, (at + 5_000, "c")) == []


def test_dead_jobs_come_newest_first(lua: Lua) -> None:
    for job_id in ("old", "mid", "new"):
        lua.make_dead(T, job_id)
    dead_at = {job.id: job.died_at_ms for job in lua.dead(T, 10)}
    expected = sorted(dead_at, key=lambda job_id: (dead_at[job_id], job_id), reverse=True)
    assert ids(lua.jobs_scored(T, "dead", 10, descending=True)) == expected
    assert walk_scored(lua, "dead", 1, descending=True) == expected
    page = lua.jobs_scored(T, "dead", 1, descending=True)
    assert (page[0].place, page[0].meta.state) == (dead_at[expected[0]], "x")
    assert last_error_of(history_of(page[0].history, page[0].meta)) == "boom"


def test_leased_jobs_come_by_lease_deadline(lua: Lua) -> None:
    lua.enqueue(T, "long", value=0, timeout="60000")
    lua.enqueue(T, "short", value=0, timeout="5000")
    lua.take(T, count=10)
    page = lua.jobs_scored(T, "leased", 10)
    assert ids(page) == ["short", "long"]
    assert page[1].place - page[0].place == 55_000


def test_a_zero_limit_or_an_empty_set_lists_nothing(lua: Lua) -> None:
    lua.enqueue(T, "a")
    assert lua.jobs_scored(T, "delayed", 0) == []
    assert lua.jobs_scored(T, "dead", 5, descending=True) == []
    assert lua.jobs_scored(T, "dead", 5, (0, "a"), descending=True) == []


def test_listing_writes_nothing(lua: Lua, namespace: str) -> None:
    at = server_ms(lua.r) + 60_000
    for job_id in ("a", "b", "c"):
        lua.enqueue(T, job_id, when="a", value=at)
        lua.enqueue(T, f"r{job_id}", value=0)
    before = dump(lua.r, namespace)
    lua.jobs_scored(T, "delayed", 2, (at, "bb"))
    lua.jobs_scored(T, "delayed", 2, (at, "b"), descending=True)
    lua.jobs_ready(T, 2, 5)
    lua.forecast(T, 1000, 120_000)
    assert dump(lua.r, namespace) == before


# ------------------------------------------------------------------------------------- jobs_ready


def walk_ready(lua: Lua, limit: int, after: int | None = None) -> list[str]:
    seen: list[str] = []
    while True:
        page = lua.jobs_ready(T, limit, after)
        seen += ids(page.jobs)
        if not page.more:
            return seen
        after = page.jobs[-1].place


def test_ready_jobs_come_in_the_order_they_will_be_taken(lua: Lua) -> None:
    for i in range(7):
        lua.enqueue(T, f"j{i}", value=0)
    expected = [f"j{i}" for i in range(7)]
    for limit in (1, 3, 7, 100):
        assert walk_ready(lua, limit) == expected
    page = lua.jobs_ready(T, 7)
    assert not page.more
    assert [job.place for job in page.jobs] == list(range(7))  # positions counted from the first push


def test_ready_positions_stay_put_while_jobs_come_and_go(lua: Lua) -> None:
    for i in range(6):
        lua.enqueue(T, f"j{i}", value=0)
    first = lua.jobs_ready(T, 3)
    assert ids(first.jobs) == ["j0", "j1", "j2"]
    assert first.more
    cursor = first.jobs[-1].place
    assert lua.take(T, count=2, take_id="t1").ids == ["j0", "j1"]  # from the head
    assert lua.untake(T, "t1") == 2  # pushed back at the head: behind the cursor
    assert lua.cancel(T, "j4") == 3  # a hole in the middle
    assert lua.cancel(T, "j0") == 3  # the head: popped
    lua.enqueue(T, "j6", value=0)  # at the tail
    assert lua.ready_ids(T) == ["j1", "j2", "j3", "", "j5", "j6"]
    assert walk_ready(lua, 1, cursor) == ["j3", "j5", "j6"]
    assert walk_ready(lua, 100) == ["j1", "j2", "j3", "j5", "j6"]
    assert lua.jobs_ready(T, 10, 10**12).jobs == []  # past the tail


def test_a_ready_page_is_full_while_jobs_remain_past_holes(lua: Lua) -> None:
    for i in range(10):
        lua.enqueue(T, f"j{i}", value=0)
    for i in range(1, 9):
        lua.cancel(T, f"j{i}")
    page = lua.jobs_ready(T, 1)
    assert (ids(page.jobs), page.more) == (["j0"], True)
    page = lua.jobs_ready(T, 1, page.jobs[-1].place)
    assert (ids(page.jobs), page.more) == (["j9"], False)


def test_replayed_and_rescheduled_jobs_join_at_the_tail(lua: Lua) -> None:
    lua.make_dead(T, "x")
    lua.enqueue(T, "a", value=0)
    lua.enqueue(T, "d", value=60_000)
    page = lua.jobs_ready(T, 10)
    assert lua.replay(T, "x") == 1
    assert lua.reschedule(T, "d", "d", 0).code == 3
    assert walk_ready(lua, 1, page.jobs[-1].place) == ["x", "d"]


# ------------------------------------------------------------------------------------- forecast


def test_forecast_counts_delayed_jobs_per_bucket_from_now(lua: Lua) -> None:
    for i, delay_ms in enumerate((500, 1_500, 1_600, 8_000, 35_000, 55_000, 61_000)):
        lua.enqueue(T, f"j{i}", value=delay_ms)
    lua.enqueue(T, "ready", value=0)
    forecast = lua.forecast(T, 10_000, 60_000)
    assert abs(forecast.now_ms - server_ms(lua.r)) < 5_000
    assert forecast.counts == [4, 0, 0, 1, 0, 1]  # 61 s is past the window
    assert lua.forecast(T, 25_000, 60_000).counts == [4, 1, 1]  # the last bucket cut at the window's end
    assert lua.forecast(T, 1_000, 3_000).counts == [1, 2, 0]


# ------------------------------------------------------------------------------------- pause


def test_a_paused_topic_leases_nothing_and_everything_else_goes_on(lua: Lua) -> None:
    held = lua.make_leased(T, "held")
    lease = lua.make_leased("reminders", "other")  # another topic: not paused
    lua.enqueue(T, "due", value=0)
    assert lua.pause(T) is True
    assert lua.pause(T) is True  # idempotent
    taken = lua.take(T)
    assert (taken.paused, taken.ids, taken.next_in_ms) == (True, [], None)
    assert lua.enqueue(T, "new", value=0)[0] == 1  # creates are accepted
    lua.enqueue(T, "soon", value=60_000)
    lua.make_due(T, "soon")
    lua.r.set(lua.p.lock, "me", px=10_000)
    assert lua.sweep([T], "me").per_topic == [(1, 0, 0, ())]  # due jobs keep moving to the ready list
    assert lua.stats(T).ready == 3
    assert lua.stats(T).paused
    assert lua.ack(T, "held", held.token) == 1  # a job leased before the pause finishes
    assert lua.take("reminders").ids == []
    assert lua.ack("reminders", "other", lease.token) == 1
    assert lua.meta(T, "due").attempts == 0  # nothing counted as an attempt
    assert lua.pause(T, False) is False
    assert lua.pause(T, False) is False
    assert not lua.stats(T).paused
    assert lua.take(T).ids == ["due", "new", "soon"]


def test_a_second_pause_keeps_the_time_of_the_first(lua: Lua) -> None:
    lua.pause(T)
    first = lua.r.hget(lua.k(T).control, "paused")
    lua.pause(T)
    assert lua.r.hget(lua.k(T).control, "paused") == first
    assert abs(int(first) - server_ms(lua.r)) < 5_000
