"""Recent lateness in Redis (lateness_add.lua, lateness_read.lua, Queue.lateness): counts add up across
consumers, the window forgets old minutes, and the hash goes away once the topic is quiet."""

from __future__ import annotations

import redis

from delayq import Queue
from delayq.core.lateness import WINDOW_MINUTES, bucket_ms, bucket_of
from delayq.store import calls

from support.scripts import server_ms


def add(queue: Queue, topic: str, counts: dict[int, int]) -> int:
    partition = queue.keys.for_topic(topic)
    return calls.add_lateness(partition, {topic: counts}, window_minutes=WINDOW_MINUTES).run(queue.redis)


def test_counts_of_several_consumers_add_up(queue: Queue) -> None:
    fast, slow = bucket_of(20), bucket_of(900)
    add(queue, "orders", {fast: 98})
    add(queue, "orders", {fast: 1, slow: 1})
    add(queue, "payments", {slow: 3})
    lateness = queue.lateness(["orders", "payments", "reminders"])
    assert lateness["orders"].deliveries == 100
    assert lateness["orders"].p50_ms == bucket_ms(fast)
    assert lateness["orders"].p99_ms == bucket_ms(fast)  # the 99th of 100 is still fast
    assert lateness["payments"].deliveries == 3
    assert lateness["payments"].p99_ms == bucket_ms(slow)
    assert lateness["reminders"].deliveries == 0
    assert lateness["reminders"].p50_ms is None


def test_one_call_adds_to_each_of_its_topics(queue: Queue, redis_client: redis.Redis) -> None:
    fast, slow = bucket_of(3), bucket_of(700)
    partition = queue.keys.partitions[0]
    counted = {"orders": {fast: 4}, "payments": {slow: 2, fast: 1}, "reminders": {slow: 1}}
    add(queue, "payments", {fast: 5})  # already holds some this minute: the call adds to them
    assert calls.add_lateness(partition, counted, window_minutes=WINDOW_MINUTES).run(queue.redis) == 0
    lateness = queue.lateness(["orders", "payments", "reminders"])
    assert [lateness[t].deliveries for t in ("orders", "payments", "reminders")] == [4, 8, 1]
    assert lateness["payments"].p99_ms == bucket_ms(slow)
    assert all(redis_client.pttl(partition.lateness(topic)) > 0 for topic in counted)


def test_minutes_that_left_the_window_are_forgotten(queue: Queue, redis_client: redis.Redis) -> None:
    key = queue.keys.for_topic("orders").lateness("orders")
    minute = server_ms(redis_client) // 60_000
    stale = minute - WINDOW_MINUTES - 1
    redis_client.hset(key, mapping={str(stale): f"{bucket_of(5000)}=50", "kept": str(stale)})
    redis_client.hset(key, str(minute - 1), f"{bucket_of(10)}=5")

    assert queue.lateness(["orders"])["orders"].deliveries == 5  # the reader skips the stale minute
    assert add(queue, "orders", {bucket_of(10): 5}) == 1  # the writer forgets it
    assert not redis_client.hexists(key, str(stale))
    assert redis_client.hget(key, "kept") == str(minute - WINDOW_MINUTES)
    assert queue.lateness(["orders"])["orders"].deliveries == 10
    assert 0 < redis_client.pttl(key) <= (WINDOW_MINUTES + 1) * 60_000


def test_topics_spread_over_partitions_and_read_in_one_call_each(make_queue) -> None:
    queue = make_queue(partitions=4)
    topics = [f"t{n}" for n in range(12)]
    assert len({queue.keys.for_topic(topic).index for topic in topics}) > 1
    for n, topic in enumerate(topics):
        add(queue, topic, {bucket_of(10 * (n + 1)): n + 1})
    lateness = queue.lateness(topics)
    assert [lateness[topic].deliveries for topic in topics] == list(range(1, 13))
