"""A topic's activity in Redis (activity_add.lua, activity_read.lua, lateness_read.lua; Queue.history
and Queue.lateness): counts add up across processes, minute by minute by Redis' clock; the recent
lateness reads the last minutes of the same hash; a day is kept, older minutes are forgotten, and the
hash goes away once the topic is quiet."""

from __future__ import annotations

import time

import pytest
import redis

from delayq import Queue
from delayq.core.activity import KEEP_MINUTES, Counts
from delayq.core.errors import InvalidField, TopicNotFound
from delayq.core.lateness import WINDOW_MINUTES, bucket_ms, bucket_of
from delayq.store import calls

from support.scripts import server_ms


def this_minute(client: redis.Redis) -> int:
    """Redis' current minute, with at least 2 s of it left (else the next's): a test's writes and
    reads fall in the minute it expects."""
    ms = server_ms(client)
    if ms % 60_000 > 58_000:
        time.sleep((60_000 - ms % 60_000 + 50) / 1000)
        ms = server_ms(client)
    return ms // 60_000


def add(queue: Queue, topic: str, lateness: dict[int, int] | None = None, **ended: int) -> int:
    partition = queue.keys.for_topic(topic)
    return calls.add_activity(partition, {topic: Counts(lateness or {}, **ended)}).run(queue.redis)


def test_counts_of_several_consumers_add_up(queue: Queue) -> None:
    minute = this_minute(queue.redis)
    fast, slow = bucket_of(20), bucket_of(900)
    add(queue, "orders", {fast: 98})
    add(queue, "orders", {fast: 1, slow: 1}, done=97, failed=3, dead=1)
    add(queue, "payments", {slow: 3})
    lateness = queue.lateness(["orders", "payments", "reminders"])
    assert lateness["orders"].deliveries == 100
    assert lateness["orders"].p50_ms == bucket_ms(fast)
    assert lateness["orders"].p99_ms == bucket_ms(fast)  # the 99th of 100 is still fast
    assert lateness["payments"].deliveries == 3
    assert lateness["payments"].p99_ms == bucket_ms(slow)
    assert lateness["reminders"].deliveries == 0
    assert lateness["reminders"].p50_ms is None

    [row] = queue.history("orders", 1)
    assert row.to_dict() == {
        "from_ms": minute * 60_000,
        "started": 100,
        "done": 97,
        "failed": 3,
        "dead": 1,
        "p50_ms": pytest.approx(bucket_ms(fast), rel=0.01),
        "p99_ms": pytest.approx(bucket_ms(fast), rel=0.01),
    }


def test_one_call_adds_to_each_of_its_topics(queue: Queue, redis_client: redis.Redis) -> None:
    fast, slow = bucket_of(3), bucket_of(700)
    partition = queue.keys.partitions[0]
    counted = {"orders": Counts({fast: 4}), "payments": Counts({slow: 2, fast: 1}), "reminders": Counts(dead=1)}
    add(queue, "payments", {fast: 5})  # already holds some this minute: the call adds to them
    assert calls.add_activity(partition, counted).run(queue.redis) == 0
    lateness = queue.lateness(["orders", "payments", "reminders"])
    assert [lateness[t].deliveries for t in ("orders", "payments", "reminders")] == [4, 8, 0]
    assert lateness["payments"].p99_ms == bucket_ms(slow)
    assert queue.history("reminders", 1)[0].counts.dead == 1
    assert all(redis_client.pttl(partition.activity(topic)) > 0 for topic in counted)


def test_the_history_lists_every_minute_oldest_first(queue: Queue, redis_client: redis.Redis) -> None:
    key = queue.keys.for_topic("orders").activity("orders")
    minute = this_minute(redis_client)
    redis_client.hset(key, mapping={str(minute - 2): f"d=4,f=1,{bucket_of(10)}=5", str(minute): "x=2,f=2"})

    found = queue.history("orders", 4)
    assert [m.from_ms for m in found] == [(minute - 3 + i) * 60_000 for i in range(4)]
    rows = [m.to_dict() for m in found]
    assert [(r["started"], r["done"], r["failed"], r["dead"]) for r in rows] == [
        (0, 0, 0, 0),
        (5, 4, 1, 0),
        (0, 0, 0, 0),
        (0, 0, 2, 2),
    ]
    assert (rows[0]["p50_ms"], rows[0]["p99_ms"]) == (None, None)  # no starts, no lateness
    assert rows[1]["p99_ms"] == pytest.approx(bucket_ms(bucket_of(10)), rel=0.01)
    assert len(queue.history("orders")) == 60
    assert len(queue.history("orders", KEEP_MINUTES)) == KEEP_MINUTES


@pytest.mark.parametrize("minutes", [0, KEEP_MINUTES + 1, True, "5"])
def test_a_history_longer_than_kept_is_refused(queue: Queue, minutes: object) -> None:
    with pytest.raises(InvalidField) as refused:
        queue.history("orders", minutes)  # type: ignore[arg-type]
    assert refused.value.field == "minutes"


def test_the_history_of_a_topic_nothing_covers_is_not_found(make_queue) -> None:
    queue = make_queue(topics={"orders": {"target": "python:support.recorder:deliver"}})
    with pytest.raises(TopicNotFound):
        queue.history("nosuch")
    assert [m.counts.started for m in queue.history("orders", 2)] == [0, 0]  # configured: zeros


def test_minutes_older_than_a_day_are_forgotten(queue: Queue, redis_client: redis.Redis) -> None:
    key = queue.keys.for_topic("orders").activity("orders")
    minute = this_minute(redis_client)
    stale = minute - KEEP_MINUTES - 1
    recent = minute - WINDOW_MINUTES - 1  # outside the recent lateness, inside the history
    redis_client.hset(key, mapping={str(stale): f"{bucket_of(5000)}=50", "kept": str(stale)})
    redis_client.hset(key, str(recent), f"{bucket_of(10)}=7")
    redis_client.hset(key, str(minute - 1), f"{bucket_of(10)}=5")

    assert queue.lateness(["orders"])["orders"].deliveries == 5  # the recent lateness: the last minutes only
    assert add(queue, "orders", {bucket_of(10): 5}) == 1  # the writer forgets the minute older than a day
    assert not redis_client.hexists(key, str(stale))
    assert redis_client.hget(key, str(recent)) == f"{bucket_of(10)}=7"
    assert redis_client.hget(key, "kept") == str(minute - KEEP_MINUTES)
    assert queue.lateness(["orders"])["orders"].deliveries == 10
    assert sum(m.counts.started for m in queue.history("orders", KEEP_MINUTES)) == 17
    assert 0 < redis_client.pttl(key) <= (KEEP_MINUTES + 1) * 60_000


def test_topics_spread_over_partitions_and_read_in_one_call_each(make_queue) -> None:
    queue = make_queue(partitions=4)
    topics = [f"t{n}" for n in range(12)]
    assert len({queue.keys.for_topic(topic).index for topic in topics}) > 1
    counted = {topic: Counts({bucket_of(10 * (n + 1)): n + 1}, done=n) for n, topic in enumerate(topics)}
    for partition, call in calls.add_activities(queue.keys, counted):
        assert {queue.keys.for_topic(topic) for topic in topics if partition.activity(topic) in call.keys} == {
            partition
        }
        call.run(queue.redis)
    lateness = queue.lateness(topics)
    assert [lateness[topic].deliveries for topic in topics] == list(range(1, 13))
    assert [queue.history(topic, 1)[0].counts.done for topic in topics] == list(range(12))
