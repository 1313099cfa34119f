"""Limits per flow key, decided in the take: a key's concurrency (a lease counts until it is settled
or taken back), its rate, a pause and a receiver's Retry-After hold. Jobs held back stay ready,
parked aside, and come back in run-at order once their key has room; a key at its limit does not
hold up the others."""

from __future__ import annotations

import redis

from delayq import Queue

from support.invariants import check_redis
from support.scripts import Lua, lua_for, sleep_until_server_ms

TOPIC = "orders"
ONE_AT_A_TIME = (1, "", "")


def _lua(queue: Queue, redis_client: redis.Redis) -> Lua:
    return lua_for(redis_client, queue, TOPIC, "any")


def _jobs(queue: Queue, key: str | None, count: int, prefix: str) -> None:
    queue.enqueue_many([{"topic": TOPIC, "id": f"{prefix}{n:03}", "delay": 0, "key": key} for n in range(count)])


def test_a_key_at_its_concurrency_waits_and_the_others_go(queue: Queue, redis_client: redis.Redis) -> None:
    _jobs(queue, "a", 5, "a")
    _jobs(queue, "b", 2, "b")
    queue.enqueue(TOPIC, {}, id="plain", delay=0)
    lua = _lua(queue, redis_client)
    taken = lua.take(TOPIC, count=10, key_limits=ONE_AT_A_TIME)
    assert sorted(job.id for job in taken.jobs) == ["a000", "b000", "plain"]
    assert queue.stats(TOPIC).ready == 5  # parked jobs are ready still
    check_redis(redis_client, queue.settings.namespace)
    assert lua.take(TOPIC, count=10, key_limits=ONE_AT_A_TIME).jobs == []
    token = dict(zip([job.id for job in taken.jobs], taken.tokens, strict=True))
    assert lua.ack(TOPIC, "a000", token["a000"]) == 1
    again = lua.take(TOPIC, count=10, key_limits=ONE_AT_A_TIME)
    assert [job.id for job in again.jobs] == ["a001"]  # the next of the key, in run-at order
    check_redis(redis_client, queue.settings.namespace)


def test_every_settle_gives_the_room_back(queue: Queue, redis_client: redis.Redis) -> None:
    _jobs(queue, "a", 6, "a")
    lua = _lua(queue, redis_client)

    def take_one() -> tuple[str, str]:
        taken = lua.take(TOPIC, count=10, key_limits=ONE_AT_A_TIME)
        assert len(taken.jobs) == 1, [job.id for job in taken.jobs]
        return taken.jobs[0].id, taken.tokens[0]

    job_id, token = take_one()
    lua.fail(TOPIC, job_id, token, "boom", backoff="60000")  # a failed attempt
    job_id, token = take_one()
    assert lua.cancel(TOPIC, job_id) == 3  # a cancel of the reserved job
    job_id, token = take_one()
    lua.set_lease(TOPIC, job_id, 1)  # its lease expires
    redis_client.set(lua.p.lock, "sweeper", px=10_000)
    assert lua.sweep([TOPIC], "sweeper", backoff="60000").per_topic == [(0, 1, 0, ())]
    job_id, token = take_one()
    assert lua.ack(TOPIC, job_id, token) == 1
    take_one()
    assert redis_client.hget(lua.k(TOPIC).busy, "a") == "1"
    check_redis(redis_client, queue.settings.namespace)


def test_an_untaken_take_gives_the_room_back(queue: Queue, redis_client: redis.Redis) -> None:
    _jobs(queue, "a", 3, "a")
    lua = _lua(queue, redis_client)
    first = lua.take(TOPIC, count=10, key_limits=ONE_AT_A_TIME, take_id="t1")
    assert [job.id for job in first.jobs] == ["a000"]
    assert lua.untake(TOPIC, "t1") == 1
    again = lua.take(TOPIC, count=10, key_limits=ONE_AT_A_TIME, take_id="t2")
    assert [job.id for job in again.jobs] == ["a000"]
    assert redis_client.hget(lua.k(TOPIC).busy, "a") == "1"


def test_a_keys_rate_spaces_its_starts(queue: Queue, redis_client: redis.Redis) -> None:
    _jobs(queue, "a", 5, "a")
    _jobs(queue, "b", 1, "b")
    lua = _lua(queue, redis_client)
    limits = ("", 200_000, 200_000)  # 5 a second, no burst beyond one
    first = lua.take(TOPIC, count=10, key_limits=limits)
    assert sorted(job.id for job in first.jobs) == ["a000", "b000"]
    assert first.next_in_ms is not None
    assert 0 < first.next_in_ms <= 201  # the key's next start (rounded up to the ms)
    sleep_until_server_ms(redis_client, first.now_ms + 201)
    assert [job.id for job in lua.take(TOPIC, count=10, key_limits=limits).jobs] == ["a001"]
    check_redis(redis_client, queue.settings.namespace)


def test_a_retry_after_holds_the_whole_key(queue: Queue, redis_client: redis.Redis) -> None:
    _jobs(queue, "dest", 3, "d")
    _jobs(queue, "other", 1, "o")
    lua = _lua(queue, redis_client)
    first = lua.take(TOPIC, count=1)
    assert first.jobs[0].id == "d000"
    lua.fail(TOPIC, "d000", first.tokens[0], "429", retry_after_ms=300)
    held = lua.take(TOPIC, count=10)
    assert [job.id for job in held.jobs] == ["o000"]  # the key's other jobs wait, ready
    until = redis_client.zscore(lua.k(TOPIC).held, "dest")
    assert until is not None
    assert queue.stats(TOPIC).ready == 2
    sleep_until_server_ms(redis_client, int(until) + 1)
    assert [job.id for job in lua.take(TOPIC, count=10).jobs] == ["d001", "d002"]
    assert redis_client.exists(lua.k(TOPIC).held, lua.k(TOPIC).wake, lua.k(TOPIC).parked) == 0
    check_redis(redis_client, queue.settings.namespace)


def test_a_parked_job_can_be_cancelled(queue: Queue, redis_client: redis.Redis) -> None:
    _jobs(queue, "a", 3, "a")
    lua = _lua(queue, redis_client)
    lua.take(TOPIC, count=10, key_limits=ONE_AT_A_TIME)
    assert lua.cancel(TOPIC, "a001") == 3
    assert lua.cancel(TOPIC, "a002") == 3
    keys = lua.k(TOPIC)
    assert redis_client.exists(keys.parked, keys.wake) == 0
    assert queue.stats(TOPIC).ready == 0
    check_redis(redis_client, queue.settings.namespace)


def test_keys_with_no_limit_left_cost_nothing(queue: Queue, redis_client: redis.Redis) -> None:
    for n in range(20):
        queue.enqueue(TOPIC, {}, id=f"j{n}", key=f"tenant-{n}", delay=0)
    lua = _lua(queue, redis_client)
    taken = lua.take(TOPIC, count=100, key_limits=(1, 1_000_000, 1_000_000))
    assert len(taken.jobs) == 20
    for job, token in zip(taken.jobs, taken.tokens, strict=True):
        lua.ack(TOPIC, job.id, token)
    keys = lua.k(TOPIC)
    assert redis_client.exists(keys.busy, keys.parked, keys.wake, keys.held) == 0
    sleep_until_server_ms(redis_client, taken.now_ms + 1100)
    lua.take(TOPIC, count=1, key_limits=(1, 1_000_000, 1_000_000))
    assert redis_client.exists(keys.pace) == 0


def test_parked_jobs_are_listed_as_ready_last_and_cancelled_with_them(queue: Queue, redis_client: redis.Redis) -> None:
    _jobs(queue, "a", 6, "a")
    _jobs(queue, "b", 2, "b")
    lua = _lua(queue, redis_client)
    assert [job.id for job in lua.take(TOPIC, count=1, key_limits=ONE_AT_A_TIME).jobs] == ["a000"]
    assert [job.id for job in lua.take(TOPIC, count=10, key_limits=ONE_AT_A_TIME).jobs] == ["b000"]
    assert redis_client.zcard(lua.k(TOPIC).parked) == 6  # a001..a005 and b001, as the take met them
    _jobs(queue, "c", 1, "c")  # in the fair set, listed before the parked
    listed, cursor = [], None
    while True:
        page = queue.jobs(TOPIC, "ready", limit=2, cursor=cursor)
        listed += [job.id for job in page.jobs]
        if page.next is None:
            break
        cursor = page.next
    assert listed == ["c000", "a001", "a002", "a003", "a004", "a005", "b001"]
    assert queue.cancel_all(TOPIC, "ready") == 7
    keys = lua.k(TOPIC)
    assert redis_client.exists(keys.parked, keys.wake, keys.fair) == 0
    check_redis(redis_client, queue.settings.namespace)


def test_a_paced_keys_next_starts_are_taken_with_their_slots(queue: Queue, redis_client: redis.Redis) -> None:
    """A key at 50 starts a second: the starts its rate allows within the next 40 ms come in one take,
    each with its slot (20 ms apart), so that a consumer late to a take loses nothing of the rate."""
    _jobs(queue, "a", 6, "a")
    lua = _lua(queue, redis_client)
    taken = lua.take(TOPIC, count=10, key_limits=("", 20_000, 20_000))
    assert [job.id for job in taken.jobs] == ["a000", "a001", "a002"]
    assert [start - taken.now_ms for start in taken.starts_ms] in ([0, 20, 40], [0, 21, 41])  # µs rounded up
    leases = lua.leases(TOPIC)
    assert leases["a002"] - leases["a000"] in (40, 41)  # each lease runs from its start
    check_redis(redis_client, queue.settings.namespace)
