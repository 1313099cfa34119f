"""Fair share across a topic's flow keys, decided in the take: the keys' ready jobs are taken in
rotation, each key's in the order they fell due, and keyless jobs take their turn as one key more;
nothing a key leaves behind costs memory once its jobs are gone."""

from __future__ import annotations

import time
from collections import Counter

import redis

from delayq import Queue

from support.answers import created
from support.invariants import check_redis
from support.scripts import Lua, lua_for

TOPIC = "orders"


def _lua(queue: Queue, redis_client: redis.Redis) -> Lua:
    return lua_for(redis_client, queue, TOPIC, "any")  # one partition: every job is in it


def _backlog(queue: Queue, key: str | None, count: int, prefix: str) -> None:
    jobs = [{"topic": TOPIC, "id": f"{prefix}{n:05}", "delay": 0, "key": key} for n in range(count)]
    for result in queue.enqueue_many(jobs):
        created(result)


def test_a_keys_backlog_does_not_hold_up_another_key(queue: Queue, redis_client: redis.Redis) -> None:
    _backlog(queue, "noisy", 1000, "a")
    queue.enqueue(TOPIC, {}, id="b1", key="quiet", delay=0)
    queue.enqueue(TOPIC, {}, id="plain", delay=0)  # keyless: one key more
    lua = _lua(queue, redis_client)
    taken = [job.id for job in lua.take(TOPIC, count=3).jobs]
    assert sorted(taken) == ["a00000", "b1", "plain"]
    assert [job.id for job in lua.take(TOPIC, count=5).jobs] == ["a00001", "a00002", "a00003", "a00004", "a00005"]
    check_redis(redis_client, queue.settings.namespace)


def test_keys_take_turns_and_each_keys_jobs_go_in_order(queue: Queue, redis_client: redis.Redis) -> None:
    for key in ("k1", "k2", "k3"):
        _backlog(queue, key, 4, f"{key}-")
    lua = _lua(queue, redis_client)
    rounds = [[job.key for job in lua.take(TOPIC, count=3).jobs] for _ in range(4)]
    assert all(sorted(round_) == ["k1", "k2", "k3"] for round_ in rounds), rounds
    taken = [job.id for job in lua.take(TOPIC, count=10).jobs]
    assert taken == []
    assert queue.stats(TOPIC).reserved == 12
    check_redis(redis_client, queue.settings.namespace)


def test_a_job_falling_due_behind_a_backlog_due_before_it_is_taken_next(
    queue: Queue, redis_client: redis.Redis
) -> None:
    """The backlog is still in the delayed set (the sweeper has not moved it): the take moves what is
    due first, so the later job of another key is not behind the backlog's length."""
    _backlog(queue, "noisy", 500, "a")
    queue.enqueue(TOPIC, {}, id="b1", key="quiet", delay=0)
    lua = _lua(queue, redis_client)
    redis_client.delete(lua.k(TOPIC).fair, lua.k(TOPIC).turns)  # as if none had been moved yet:
    pipe = redis_client.pipeline(transaction=False)  # put them all back in the delayed set, due
    for n in range(500):
        pipe.zadd(lua.k(TOPIC).delayed, {f"a{n:05}": 1})
    pipe.zadd(lua.k(TOPIC).delayed, {"b1": 2})
    pipe.execute()
    taken = [job.id for job in lua.take(TOPIC, count=2).jobs]
    assert sorted(taken) == ["a00000", "b1"]


def test_a_key_holding_nothing_costs_nothing(queue: Queue, redis_client: redis.Redis) -> None:
    for n in range(50):
        queue.enqueue(TOPIC, {}, id=f"j{n}", key=f"tenant-{n}", delay=0)
    lua = _lua(queue, redis_client)
    assert len(lua.take(TOPIC, count=100).jobs) == 50
    keys = lua.k(TOPIC)
    assert redis_client.exists(keys.fair, keys.turns) == 0
    assert redis_client.zscore(queue.keys.partitions[0].ready_index, TOPIC) is None


def test_the_turns_of_keys_whose_last_job_went_are_forgotten(queue: Queue, redis_client: redis.Redis) -> None:
    _backlog(queue, "busy", 10, "a")
    queue.enqueue(TOPIC, {}, id="once", key="once", delay=0)
    lua = _lua(queue, redis_client)
    assert sorted(job.key or "" for job in lua.take(TOPIC, count=2).jobs) == ["busy", "once"]
    assert redis_client.hkeys(lua.k(TOPIC).turns) == ["busy"]


def test_stats_cancel_and_cancel_all_see_the_fair_set(queue: Queue, redis_client: redis.Redis) -> None:
    _backlog(queue, "k1", 5, "a")
    _backlog(queue, None, 3, "p")
    assert queue.stats(TOPIC).ready == 8
    queue.cancel(TOPIC, "a00002")
    assert queue.stats(TOPIC).ready == 7
    assert queue.get(TOPIC, "a00003").state == "ready"
    assert queue.cancel_all(TOPIC, "ready") == 7
    assert queue.stats(TOPIC).jobs == 0
    check_redis(redis_client, queue.settings.namespace)


def test_an_untaken_keyed_job_comes_back_first(queue: Queue, redis_client: redis.Redis) -> None:
    _backlog(queue, "k1", 3, "a")
    _backlog(queue, "k2", 3, "b")
    lua = _lua(queue, redis_client)
    lost = [job.id for job in lua.take(TOPIC, count=2, take_id="t-lost").jobs]
    assert lua.untake(TOPIC, "t-lost") == 2
    again = [job.id for job in lua.take(TOPIC, count=2).jobs]
    assert sorted(again) == sorted(lost)
    check_redis(redis_client, queue.settings.namespace)


def test_listing_ready_jobs_walks_the_list_then_the_fair_set_once_each(queue: Queue) -> None:
    _backlog(queue, None, 7, "p")
    for key in ("k1", "k2", "k3"):
        _backlog(queue, key, 5, f"{key}-")
    seen: list[str] = []
    cursor = None
    while True:
        page = queue.jobs(TOPIC, "ready", limit=4, cursor=cursor)
        seen += [job.id for job in page.jobs]
        if page.next is None:
            break
        cursor = page.next
    assert len(seen) == len(set(seen)) == 22
    assert seen[:7] == [f"p{n:05}" for n in range(7)]
    assert Counter(job_id.split("-")[0] for job_id in seen[7:]) == {"k1": 5, "k2": 5, "k3": 5}


def test_a_listing_walk_survives_takes_between_its_pages(queue: Queue, redis_client: redis.Redis) -> None:
    for key in ("k1", "k2"):
        _backlog(queue, key, 6, f"{key}-")
    lua = _lua(queue, redis_client)
    first = queue.jobs(TOPIC, "ready", limit=3)
    taken = {job.id for job in lua.take(TOPIC, count=4).jobs}
    rest = []
    cursor = first.next
    while cursor is not None:
        page = queue.jobs(TOPIC, "ready", limit=3, cursor=cursor)
        rest += [job.id for job in page.jobs]
        cursor = page.next
    listed = [job.id for job in first.jobs] + rest
    assert len(listed) == len(set(listed))
    still_ready = {f"{key}-{n:05}" for key in ("k1", "k2") for n in range(6)} - taken
    assert still_ready <= set(listed)


def test_the_sweep_moves_due_keyed_jobs_to_the_fair_set(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue(TOPIC, {}, id="keyed", key="k1", delay=0.02)
    queue.enqueue(TOPIC, {}, id="plain", delay=0.02)
    lua = _lua(queue, redis_client)
    redis_client.set(lua.p.lock, "tok", px=10_000)
    time.sleep(0.05)
    (moved,) = [counts[0] for counts in lua.sweep([TOPIC], "tok").per_topic]
    assert moved == 2
    assert redis_client.zrange(lua.k(TOPIC).fair, 0, -1) == ["keyed"]
    assert redis_client.lrange(lua.k(TOPIC).ready, 0, -1) == ["plain"]
    check_redis(redis_client, queue.settings.namespace)


def test_due_jobs_that_all_fit_in_a_take_skip_the_fair_set(queue: Queue, redis_client: redis.Redis) -> None:
    """Steady traffic: what falls due fits in the take, so fairness has nothing to decide and the jobs
    are taken straight from the delayed set, as keyless ones are (no turn, no fair set)."""
    for n in range(3):
        queue.enqueue(TOPIC, {}, id=f"j{n}", key=f"tenant-{n}", delay=0.02)
    time.sleep(0.05)
    lua = _lua(queue, redis_client)
    assert sorted(job.id for job in lua.take(TOPIC, count=3).jobs) == ["j0", "j1", "j2"]
    assert redis_client.exists(lua.k(TOPIC).fair, lua.k(TOPIC).turns) == 0
    check_redis(redis_client, queue.settings.namespace)


def test_a_key_with_no_turn_waiting_has_its_next_jobs_taken_ahead_of_a_backlog(
    queue: Queue, redis_client: redis.Redis
) -> None:
    """Behind a backlog's turns, a key with no job waiting has the next turn: its jobs falling due
    within the take ahead are taken first, each to start at its run-at, of the first half a take's
    count to fall due; a key with turns waiting keeps its jobs' order and waits."""
    _backlog(queue, "noisy", 20, "a")
    soon = {"b1": ("quiet", 5), "n1": ("noisy", 5.5), "b2": ("quiet", 6), "b3": ("quiet", 6.5)}
    for job_id, (key, delay) in soon.items():
        queue.enqueue(TOPIC, {}, id=job_id, key=key, delay=delay)
    lua = _lua(queue, redis_client)
    taken = lua.take(TOPIC, count=6, ahead_ms=10_000)  # of the first 3 falling due, those of "quiet"
    assert taken.ids == ["b1", "b2", "a00000", "a00001", "a00002", "a00003"]
    run_at = {job.id: job.run_at_ms for job in taken.jobs}
    assert taken.starts_ms[:2] == [run_at["b1"], run_at["b2"]]  # each starts at its run-at, never early
    assert all(start <= taken.now_ms for start in taken.starts_ms[2:])
    assert taken.next_in_ms == 0  # due jobs wait their turns still: the consumer takes again
    assert queue.get(TOPIC, "n1").state == "delayed"
    assert queue.get(TOPIC, "b3").state == "delayed"
    check_redis(redis_client, queue.settings.namespace)


def test_keyless_jobs_are_taken_ahead_only_while_none_is_ready(queue: Queue, redis_client: redis.Redis) -> None:
    _backlog(queue, "noisy", 20, "a")
    _backlog(queue, None, 3, "p")  # keyless jobs ready: the keyless take their turn
    queue.enqueue(TOPIC, {}, id="plain-soon", delay=5)
    queue.enqueue(TOPIC, {}, id="keyed-soon", key="quiet", delay=5.5)
    lua = _lua(queue, redis_client)
    taken = lua.take(TOPIC, count=4, ahead_ms=10_000)
    assert taken.ids[0] == "keyed-soon"
    assert "plain-soon" not in taken.ids
    assert queue.get(TOPIC, "plain-soon").state == "delayed"
    check_redis(redis_client, queue.settings.namespace)


def test_without_a_take_ahead_nothing_is_taken_before_its_turn(queue: Queue, redis_client: redis.Redis) -> None:
    _backlog(queue, "noisy", 20, "a")
    queue.enqueue(TOPIC, {}, id="b1", key="quiet", delay=0.5)
    lua = _lua(queue, redis_client)
    taken = lua.take(TOPIC, count=4)
    assert taken.ids == ["a00000", "a00001", "a00002", "a00003"]
    assert taken.next_in_ms is not None
    assert taken.next_in_ms > 0
    assert queue.get(TOPIC, "b1").state == "delayed"
