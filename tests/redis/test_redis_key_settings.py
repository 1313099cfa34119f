"""A flow key's own settings at run time (kept in Redis, in every partition) and what an operator
reads of a key: its jobs by state, the limits in force (its own over the topic's), its hold."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from delayq import Queue
from delayq.core.errors import InvalidField, TopicNotFound
from delayq.core.flows import KeyLimits
from delayq.store import calls

from support.invariants import check_redis
from support.scripts import lua_for, sleep_until_server_ms

TOPICS = {"orders": {"target": "recorder", "key_concurrency": 2}, "plain": {"target": "recorder"}}


@pytest.fixture
def keyed(make_queue: Callable[..., Queue]) -> Queue:
    return make_queue(topics=TOPICS, partitions=3)


def test_a_key_shows_its_jobs_and_the_limits_in_force(keyed: Queue, redis_client: redis.Redis) -> None:
    for n in range(5):
        keyed.enqueue("orders", {}, id=f"due-{n}", key="acme", delay=0)
    keyed.enqueue("orders", {}, id="later", key="acme", delay=3600)
    keyed.enqueue("orders", {}, id="other", key="globex", delay=0)
    state = keyed.key("orders", "acme")
    assert (state.delayed, state.ready, state.reserved) == (1, 5, 0)
    assert state.limits == KeyLimits(concurrency=2)  # the topic's key_concurrency
    assert state.held_until_ms is None
    assert keyed.key("orders", "nobody").to_dict() == {
        "key": "nobody", "delayed": 0, "ready": 0, "reserved": 0, "concurrency": 2, "rate": None,
        "burst": None, "paused": False, "held_until_ms": None,
    }  # fmt: skip
    check_redis(redis_client, keyed.settings.namespace, 3)


def test_settings_win_field_by_field_and_reset_goes_back(keyed: Queue, redis_client: redis.Redis) -> None:
    state = keyed.set_key("orders", "acme", rate=5, paused=True)
    assert state.limits == KeyLimits(concurrency=2, rate=5.0, paused=True)
    state = keyed.set_key("orders", "acme", concurrency=1, paused=False)
    assert state.limits == KeyLimits(concurrency=1, rate=5.0)  # the rate kept
    for p in keyed.keys.partitions:  # in every partition, with its share of the rate
        raw = redis_client.hget(lua_for(redis_client, keyed, "orders", "any").k("orders").flows.replace(
            keyed.keys.partitions[0].tag, p.tag), "acme")  # fmt: skip
        assert raw == KeyLimits(concurrency=1, rate=5.0).encode(3)
    assert [key.key for key in keyed.flow_keys("orders").keys] == ["acme"]  # a key with settings is listed
    keyed.reset_key("orders", "acme")
    assert keyed.key("orders", "acme").limits == KeyLimits(concurrency=2)
    assert keyed.flow_keys("orders").keys == []
    assert redis_client.keys(f"{keyed.settings.namespace}:*") == [keyed.keys.layout] or not redis_client.keys(
        f"{keyed.settings.namespace}:*:orders:*"
    )  # nothing of the topic is left


def test_the_keys_page_by_name(keyed: Queue) -> None:
    for n in range(7):
        keyed.enqueue("orders", {}, id=f"j{n}", key=f"k{n}", delay=0)
    keyed.enqueue("orders", {}, id="keyless", delay=0)
    first = keyed.flow_keys("orders", limit=3)
    assert [key.key for key in first.keys] == ["k0", "k1", "k2"]
    assert first.next is not None
    second = keyed.flow_keys("orders", limit=3, cursor=first.next)
    third = keyed.flow_keys("orders", limit=3, cursor=second.next)
    assert [key.key for key in second.keys + third.keys] == ["k3", "k4", "k5", "k6"]
    assert third.next is None
    assert all(key.ready == 1 for key in first.keys)


def test_bad_settings_are_refused_naming_the_field(keyed: Queue) -> None:
    for settings, field in (
        ({"concurrency": 0}, "concurrency"),
        ({"rate": -1}, "rate"),
        ({"burst": 1.5}, "burst"),
        ({"paused": "yes"}, "paused"),
        ({"speed": 3}, "speed"),
    ):
        with pytest.raises(InvalidField) as caught:
            keyed.set_key("orders", "acme", **settings)
        assert caught.value.field == field
    with pytest.raises(InvalidField) as caught:
        keyed.key("orders", "not a key")
    assert caught.value.field == "key"
    with pytest.raises(TopicNotFound):
        keyed.key("nosuchtopic", "acme")
    with pytest.raises(InvalidField) as caught:
        keyed.flow_keys("orders", cursor="bogus")
    assert caught.value.field == "cursor"


def test_a_paused_key_waits_and_resumes(keyed: Queue, redis_client: redis.Redis) -> None:
    queue = keyed
    queue.enqueue("plain", {}, id="a1", key="acme", delay=0)
    queue.enqueue("plain", {}, id="g1", key="globex", delay=0)
    queue.pause_key("plain", "acme")
    taken = [
        job.id
        for p in queue.keys.partitions
        for job in calls.take(p, "plain", count=10, timeout_ms=30_000, grace_ms=0).run(queue.redis).jobs
    ]
    assert taken == ["g1"]
    assert queue.key("plain", "acme").ready == 1
    queue.resume_key("plain", "acme")
    again = [
        job.id
        for p in queue.keys.partitions
        for job in calls.take(p, "plain", count=10, timeout_ms=30_000, grace_ms=0).run(queue.redis).jobs
    ]
    assert again == ["a1"]
    check_redis(redis_client, queue.settings.namespace, 3)


@pytest.mark.parametrize("state", ["delayed", "ready", "dead", "done", "reserved"])
def test_a_listing_narrowed_to_a_key_has_full_pages(keyed: Queue, state: str) -> None:
    """250 jobs of other keys around 7 of one key: pages of 3 of the key's, every one once."""
    delay = 3600 if state == "delayed" else 0
    jobs = [{"topic": "plain", "id": f"j{n:03}", "key": "acme" if n % 37 == 5 else f"k{n % 11}", "delay": delay}
            for n in range(250)]  # fmt: skip
    jobs += [{"topic": "plain", "id": f"none{n}", "delay": delay} for n in range(5)]  # keyless
    keyed.enqueue_many(jobs)
    mine = sorted(job["id"] for job in jobs if job.get("key") == "acme")
    config = keyed.settings.topics.for_topic("plain")
    assert config is not None
    for p in keyed.keys.partitions if state in ("dead", "done", "reserved") else ():
        taken = calls.take(p, "plain", count=1000, timeout_ms=30_000, grace_ms=0).run(keyed.redis)
        leases = list(zip(taken.jobs, taken.tokens, strict=True))
        if state == "dead":
            calls.fail(
                p, "plain", config, [calls.Failure(job.id, token, "boom", True, 0) for job, token in leases]
            ).run(keyed.redis)
        elif state == "done":
            calls.ack(p, "plain", config, [(job.id, token, 0) for job, token in leases]).run(keyed.redis)
    listed, cursor, pages = [], None, 0
    while True:
        page = keyed.jobs("plain", state, limit=3, cursor=cursor, key="acme")
        pages += 1
        assert len(page.jobs) == 3 or page.next is None
        listed += [job.id for job in page.jobs]
        if page.next is None:
            break
        cursor = page.next
    assert sorted(listed) == mine
    assert len(listed) == len(set(listed))
    assert pages == 3


def test_a_bulk_cancel_narrowed_to_a_key(keyed: Queue, redis_client: redis.Redis) -> None:
    keyed.enqueue_many([{"topic": "plain", "id": f"a{n}", "key": "acme", "delay": 0} for n in range(30)])
    keyed.enqueue_many([{"topic": "plain", "id": f"g{n}", "key": "globex", "delay": 0} for n in range(30)])
    keyed.enqueue_many([{"topic": "plain", "id": f"l{n}", "key": "acme", "delay": 3600} for n in range(4)])
    assert keyed.cancel_all("plain", "ready", key="acme") == 30
    assert keyed.key("plain", "acme").to_dict()["ready"] == 0
    assert keyed.key("plain", "acme").delayed == 4  # another state: left alone
    assert keyed.key("plain", "globex").ready == 30
    with pytest.raises(InvalidField) as caught:
        keyed.cancel_all("plain", "ready", key="no key")
    assert caught.value.field == "key"
    check_redis(redis_client, keyed.settings.namespace, 3)


def _walk(queue: Queue, topic: str, metas: int) -> tuple[dict[str, tuple[int, int, int]], int]:
    """A walk of ``topic`` in the queue's one partition, ``metas`` ids per step: the counts, the steps."""
    (partition,) = queue.keys.partitions
    totals: dict[str, tuple[int, int, int]] = {}
    cursor, steps = "0", 0
    while True:
        step = calls.keys_walk(partition, topic, cursor, metas=metas).run(queue.redis)
        steps += 1
        for name, (delayed, ready, reserved) in step.counts.items():
            was = totals.get(name, (0, 0, 0))
            totals[name] = (was[0] + delayed, was[1] + ready, was[2] + reserved)
        if step.cursor == "0":
            return totals, steps
        cursor = step.cursor


def test_a_keys_jobs_count_wherever_they_wait(make_queue: Callable[..., Queue], redis_client: redis.Redis) -> None:
    """Delayed, due but not yet moved, waiting their turn, parked by their key's concurrency, leased:
    each counted once, in its state, by a walk of the topic's own structures; another topic's lease
    of the same key counts for that topic alone."""
    queue = make_queue(topics=TOPICS, partitions=1)
    queue.enqueue_many([{"topic": "plain", "id": f"a{n}", "key": "acme", "delay": 0} for n in range(4)])
    queue.enqueue("orders", {}, id="other", key="acme", delay=0)
    (partition,) = queue.keys.partitions
    one_at_a_time = (1, "", "")
    taken = calls.take(partition, "plain", count=10, timeout_ms=30_000, grace_ms=0, key_limits=one_at_a_time)
    assert [job.id for job in taken.run(queue.redis).jobs] == ["a0"]  # a1..a3 parked
    assert [job.id for job in calls.take(partition, "orders", count=10, timeout_ms=30_000, grace_ms=0)
            .run(queue.redis).jobs] == ["other"]  # fmt: skip
    queue.enqueue("plain", {}, id="a-turn", key="acme", delay=0)  # in the fair set
    queue.enqueue("plain", {}, id="g-turn", key="globex", delay=0)
    queue.enqueue("plain", {}, id="a-later", key="acme", delay=3600)
    queue.enqueue("plain", {}, id="g-later", key="globex", delay=3600)
    due = queue.enqueue("plain", {}, id="a-due", key="acme", delay=0.2)
    queue.enqueue("plain", {}, id="keyless", delay=0)  # in the ready list, no key: not counted
    sleep_until_server_ms(redis_client, due.run_at_ms + 1)
    keys = lua_for(redis_client, queue, "plain", "any").k("plain")
    assert redis_client.zcard(keys.delayed) == 3  # a-due still there: no take came since
    assert redis_client.zcard(keys.fair) == 2
    assert redis_client.zcard(keys.parked) == 3
    assert redis_client.lrange(keys.ready, 0, -1) == ["keyless"]

    acme, globex = queue.key("plain", "acme"), queue.key("plain", "globex")
    assert (acme.delayed, acme.ready, acme.reserved) == (1, 5, 1)
    assert (globex.delayed, globex.ready, globex.reserved) == (1, 1, 0)
    assert [(key.key, key.delayed, key.ready, key.reserved) for key in queue.flow_keys("plain").keys] == [
        ("acme", 1, 5, 1),
        ("globex", 1, 1, 0),
    ]
    other = queue.key("orders", "acme")
    assert (other.delayed, other.ready, other.reserved) == (0, 0, 1)
    expected = {"acme": (1, 5, 1), "globex": (1, 1, 0)}
    for metas in (1, 2, 3, 5, 1000):  # steps that end in every structure, and past its end
        assert _walk(queue, "plain", metas)[0] == expected
    assert _walk(queue, "plain", 1)[1] > 10  # a step of one id reads one id


def test_a_walk_costs_its_topics_jobs_not_the_partitions(make_queue: Callable[..., Queue]) -> None:
    """5,000 jobs of another topic in the same partition: a small topic's walk is a single step."""
    queue = make_queue(topics=TOPICS, partitions=1)
    (partition,) = queue.keys.partitions
    queue.enqueue_many(
        [{"topic": "orders", "id": f"o{n}", "key": f"k{n % 7}", "delay": 3600 if n % 2 else 0} for n in range(5000)]
    )
    calls.take(partition, "orders", count=100, timeout_ms=30_000, grace_ms=0).run(queue.redis)
    queue.enqueue_many([{"topic": "plain", "id": f"p{n}", "key": "acme", "delay": 0} for n in range(3)])
    step = calls.keys_walk(partition, "plain", "0", metas=1000).run(queue.redis)
    assert step.cursor == "0"
    assert step.counts == {"acme": (0, 3, 0)}
    counts, steps = _walk(queue, "orders", 1000)
    assert steps > 5
    assert sum(delayed for delayed, _, _ in counts.values()) == 2500
    assert sum(ready for _, ready, _ in counts.values()) == 2400
    assert sum(reserved for _, _, reserved in counts.values()) == 100
