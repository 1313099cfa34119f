"""A topic's activity in Redis (activity_add.lua, activity_read.lua, lateness_read.lua; Queue.history
and Queue.lateness): counts add up across processes, each in its own minute by Redis' clock, a hash
per minute and partition with a field per topic; the recent lateness reads the last minutes; a minute
is kept a day, then expires whole; a reader whose clock is off still reads Redis' minutes."""

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


def add(queue: Queue, topic: str, lateness: dict[int, int] | None = None, *, minute: int, **ended: int) -> int:
    partition = queue.keys.for_topic(topic)
    return calls.add_activity(partition, {(minute, topic): Counts(lateness or {}, **ended)}).run(queue.redis)


def test_counts_of_several_consumers_add_up(queue: Queue) -> None:
    minute = this_minute(queue.redis)
    fast, slow = bucket_of(20), bucket_of(900)
    add(queue, "orders", {fast: 98}, minute=minute)
    add(queue, "orders", {fast: 1, slow: 1}, done=97, failed=3, dead=1, minute=minute)
    add(queue, "payments", {slow: 3}, minute=minute)
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


def test_one_call_adds_each_topic_to_its_minute(queue: Queue, redis_client: redis.Redis) -> None:
    """A call carries counts of several minutes (a flush across a minute's end): each goes to its own
    minute's hash, one field per topic, added to what other processes wrote there."""
    minute = this_minute(redis_client)
    fast, slow = bucket_of(3), bucket_of(700)
    partition = queue.keys.partitions[0]
    counted = {
        (minute, "orders"): Counts({fast: 4}),
        (minute, "payments"): Counts({slow: 2, fast: 1}),
        (minute - 1, "payments"): Counts({fast: 6}, done=6),
        (minute, "reminders"): Counts(dead=1),
    }
    add(queue, "payments", {fast: 5}, minute=minute)  # already holds some this minute: the call adds to them
    call = calls.add_activity(partition, counted)
    assert list(call.keys) == [partition.activity(minute), partition.activity(minute - 1)]
    assert call.run(queue.redis) == 4
    lateness = queue.lateness(["orders", "payments", "reminders"])
    assert [lateness[t].deliveries for t in ("orders", "payments", "reminders")] == [4, 14, 0]
    assert lateness["payments"].p99_ms == bucket_ms(slow)
    assert [m.counts.done for m in queue.history("payments", 2)] == [6, 0]
    assert queue.history("reminders", 1)[0].counts.dead == 1
    assert redis_client.hkeys(partition.activity(minute)) == ["payments", "orders", "reminders"]
    for at in (minute, minute - 1):  # each minute's hash goes a day after that minute ends
        assert redis_client.pexpiretime(partition.activity(at)) == (at + 1 + KEEP_MINUTES) * 60_000


def test_the_history_lists_every_minute_oldest_first(queue: Queue, redis_client: redis.Redis) -> None:
    partition = queue.keys.for_topic("orders")
    minute = this_minute(redis_client)
    redis_client.hset(partition.activity(minute - 2), "orders", f"d=4,f=1,{bucket_of(10)}=5")
    redis_client.hset(partition.activity(minute), mapping={"orders": "x=2,f=2", "payments": "d=50"})

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


def test_a_minute_is_kept_a_day_then_goes_whole(queue: Queue, redis_client: redis.Redis) -> None:
    partition = queue.keys.for_topic("orders")
    minute = this_minute(redis_client)
    recent = minute - WINDOW_MINUTES - 1  # outside the recent lateness, inside the history
    add(queue, "orders", {bucket_of(10): 7}, minute=recent)
    add(queue, "orders", {bucket_of(10): 5}, minute=minute - 1)
    assert queue.lateness(["orders"])["orders"].deliveries == 5  # the recent lateness: the last minutes only
    assert sum(m.counts.started for m in queue.history("orders", KEEP_MINUTES)) == 12

    # A minute a day old (a process that counted it, then lost Redis that long) is past keeping: gone.
    stale = minute - KEEP_MINUTES - 1
    assert add(queue, "orders", {bucket_of(5000): 50}, minute=stale) == 1
    assert not redis_client.exists(partition.activity(stale))
    assert sum(m.counts.started for m in queue.history("orders", KEEP_MINUTES)) == 12
    # The oldest minute the history shows expires as it leaves it.
    oldest = minute - KEEP_MINUTES + 1
    add(queue, "orders", {bucket_of(10): 1}, minute=oldest)
    assert 0 < redis_client.pttl(partition.activity(oldest)) <= 2 * 60_000
    assert sum(m.counts.started for m in queue.history("orders", KEEP_MINUTES)) == 13


def test_a_reader_whose_clock_is_off_reads_redis_minutes(queue: Queue, redis_client: redis.Redis) -> None:
    """The minutes' keys are named by the reader: one whose clock is hours off learns Redis' time from
    its first read and reads again around it, with the same answer as a reader on time."""
    minute = this_minute(redis_client)
    add(queue, "orders", {bucket_of(10): 3}, done=3, minute=minute)
    add(queue, "orders", {bucket_of(10): 2}, minute=minute - 2)
    expected = [m.to_dict() for m in queue.history("orders", 5)]
    for off_ms in (-3 * 3_600_000, 3 * 3_600_000, -90_000):
        queue._redis_clock.saw(server_ms(redis_client) + off_ms)
        assert [m.to_dict() for m in queue.history("orders", 5)] == expected
        queue._redis_clock.saw(server_ms(redis_client) + off_ms)
        assert queue.lateness(["orders"])["orders"].deliveries == 5


def test_topics_spread_over_partitions_and_read_in_one_call_each(make_queue) -> None:
    queue = make_queue(partitions=4)
    minute = this_minute(queue.redis)
    topics = [f"t{n}" for n in range(12)]
    assert len({queue.keys.for_topic(topic).index for topic in topics}) > 1
    counted = {(minute, topic): Counts({bucket_of(10 * (n + 1)): n + 1}, done=n) for n, topic in enumerate(topics)}
    written = 0
    for partition, call in calls.add_activities(queue.keys, counted):
        assert list(call.keys) == [partition.activity(minute)]
        written += call.run(queue.redis)
    assert written == len(topics)
    for topic in topics:  # each in the partition that keeps its activity
        assert queue.redis.hexists(queue.keys.for_topic(topic).activity(minute), topic)
    lateness = queue.lateness(topics)
    assert [lateness[topic].deliveries for topic in topics] == list(range(1, 13))
    assert [queue.history(topic, 1)[0].counts.done for topic in topics] == list(range(12))
