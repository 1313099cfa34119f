"""The consumer records its deliveries' lateness in Redis, where any reader finds it: every delivery
is counted once, by whichever consumer made it, in the same round trips as its takes and settles."""

from __future__ import annotations

import time
from collections.abc import Callable

from delayq import Queue
from delayq.core.lateness import FLUSH_S as LATENESS_FLUSH_S
from delayq.core.lateness import bucket_of
from delayq.core.loop import Budget
from delayq.loops.consumer import LATENESS_CHUNK, Consumer
from delayq.store.scripts import run_many

from support.loops import running, wait_until
from support.recorder import RECORDER

MakeQueue = Callable[..., Queue]


def test_every_delivery_of_two_consumers_is_counted_once(make_queue: MakeQueue) -> None:
    topics = {"fast": {"target": RECORDER}, "idle": {"target": RECORDER}}
    first, second = make_queue(topics=topics, tick=0.05), make_queue(topics=topics, tick=0.05)
    first.enqueue_many({"topic": "fast", "delay": 0} for _ in range(300))
    with running(Consumer(first)), running(Consumer(second)):
        assert wait_until(lambda: first.stats("fast").done == 300, timeout=30)
    # A run records what it counted as it ends: nothing waits for the next flush.
    lateness = first.lateness(["fast", "idle"])
    assert lateness["fast"].deliveries == 300
    assert lateness["fast"].p50_ms is not None
    assert lateness["fast"].p99_ms is not None
    assert 0 <= lateness["fast"].p50_ms <= lateness["fast"].p99_ms < 60_000
    assert lateness["idle"].deliveries == 0


def test_a_long_run_records_as_it_goes(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"fast": {"target": RECORDER}}, tick=0.05)
    queue.enqueue("fast", {"n": 1}, delay=0)
    with running(Consumer(queue), budget_s=60):
        # Recorded by a pass within lateness.FLUSH_S, while the consumer still runs.
        assert wait_until(lambda: queue.lateness(["fast"])["fast"].deliveries == 1, timeout=15)


def test_a_one_pass_run_records_too(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"fast": {"target": RECORDER}}, tick=0.05)
    queue.enqueue_many({"topic": "fast", "delay": 0} for _ in range(5))
    Consumer(queue).run(Budget.of(0))
    assert queue.lateness(["fast"])["fast"].deliveries == 5


def test_thousands_of_topics_record_a_chunk_a_pass(make_queue: MakeQueue) -> None:
    """The lateness of 1,200 topics goes in calls of at most ``LATENESS_CHUNK`` topics, one partition
    each, one chunk a pass (so that no pass waits for them all); a run's end sends what is left."""
    queue = make_queue(topics={"*": {"target": RECORDER}}, partitions=2)
    consumer = Consumer(queue)
    names = [f"t{n}" for n in range(1200)]
    for name in names:
        topic = consumer.lanes.topic(name)
        assert topic is not None
        topic.count_lateness(bucket_of(3))
    now = time.monotonic() + LATENESS_FLUSH_S
    first = [call for _, call in consumer._lateness_records(now)]
    assert len(first) == 2  # one call per partition
    assert sum(len(call.keys) for call in first) == LATENESS_CHUNK
    assert all({queue.keys.for_topic(t).lateness(t) for t in names} >= set(call.keys) for call in first)
    assert consumer._lateness_records(now) != []  # the next chunk, at the next pass
    run_many(queue.redis, first)
    rest = [call for _, call in consumer._lateness_records(now, due=True)]  # the end of a run: all that is left
    assert sum(len(call.keys) for call in rest) == len(names) - 2 * LATENESS_CHUNK
    assert consumer._lateness_records(now + LATENESS_FLUSH_S, due=True) == []
    lateness = queue.lateness(names[:LATENESS_CHUNK])
    assert all(lateness[t].deliveries == 1 for t in names[:LATENESS_CHUNK])
    assert not consumer.lanes.topics  # counted, recorded and without a lane: forgotten
