"""The consumer and the sweeper record the topics' activity in Redis, where any reader finds it: every
start (with its lateness), success, failed attempt and death is counted once, by whichever process
saw Redis accept it, in the same round trips as the consumer's takes and settles."""

from __future__ import annotations

import time
from collections.abc import Callable

from delayq import Queue
from delayq.core.activity import FLUSH_S as ACTIVITY_FLUSH_S
from delayq.core.loop import Budget
from delayq.loops.consumer import ACTIVITY_CHUNK, Consumer
from delayq.loops.sweeper import Sweeper
from delayq.store import calls
from delayq.store.scripts import run_many

from support.loops import running, wait_until
from support.recorder import RECORDER
from support.scripts import server_ms

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
    assert sum(m.counts.started for m in first.history("fast", 5)) == 300
    assert sum(m.counts.done for m in first.history("fast", 5)) == 300


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
    """The activity of 1,200 topics goes in calls of at most ``ACTIVITY_CHUNK`` topics, one partition
    each, one chunk a pass (so that no pass waits for them all); a run's end sends what is left."""
    queue = make_queue(topics={"*": {"target": RECORDER}}, partitions=2)
    consumer = Consumer(queue)
    names = [f"t{n}" for n in range(1200)]
    at_ms = server_ms(queue.redis)
    for name in names:
        consumer.tally.started(name, 3, at_ms)
    now = time.monotonic() + ACTIVITY_FLUSH_S
    first = consumer._activity_records(now)
    assert len(first) == 2  # one call per partition
    assert all(key.startswith(partition.prefix) for partition, call in first for key in call.keys)
    assert consumer._activity_records(now) != []  # the next chunk, at the next pass
    assert sum(run_many(queue.redis, [call for _, call in first])) == ACTIVITY_CHUNK
    rest = [call for _, call in consumer._activity_records(now, due=True)]  # the end of a run: all that is left
    assert sum(run_many(queue.redis, rest)) == len(names) - 2 * ACTIVITY_CHUNK
    assert consumer._activity_records(now + ACTIVITY_FLUSH_S, due=True) == []
    lateness = queue.lateness(names[:ACTIVITY_CHUNK])
    assert all(lateness[t].deliveries == 1 for t in names[:ACTIVITY_CHUNK])


def test_successes_failures_and_deaths_are_counted_as_redis_accepted_them(make_queue: MakeQueue) -> None:
    """Four jobs that fail twice and die (retries 1), three that fail once then succeed, five that
    succeed: 19 starts, 8 successes, 11 failed attempts, 4 deaths, whichever consumer of two ran them."""
    topics = {"mixed": {"target": RECORDER, "retries": 1, "backoff": [0]}}
    first, second = make_queue(topics=topics, tick=0.05), make_queue(topics=topics, tick=0.05)
    first.enqueue_many({"topic": "mixed", "delay": 0, "body": {"fail": True}} for _ in range(4))
    first.enqueue_many({"topic": "mixed", "delay": 0, "body": {"fail_until": 1}} for _ in range(3))
    first.enqueue_many({"topic": "mixed", "delay": 0, "body": {}} for _ in range(5))
    with running(Consumer(first)), running(Consumer(second)):
        assert wait_until(lambda: (s := first.stats("mixed")).done == 8 and s.dead == 4, timeout=30)
    minutes = [m.counts for m in first.history("mixed", 5)]
    assert sum(c.started for c in minutes) == 19
    assert sum(c.done for c in minutes) == 8
    assert sum(c.failed for c in minutes) == 11
    assert sum(c.dead for c in minutes) == 4


def test_the_sweeper_counts_the_leases_it_takes_back(make_queue: MakeQueue) -> None:
    """A consumer that died holding two leases: the sweeper counts two failed attempts, and the one
    that was the job's last as a death too; nobody started them here."""
    queue = make_queue(topics={"lost": {"target": RECORDER, "timeout": 1, "retries": 0}}, tick=0.1)
    queue.enqueue("lost", {}, id="a", delay=0)
    queue.enqueue("lost", {}, id="b", delay=0)
    taken = calls.take(queue.keys.partitions[0], "lost", count=2, timeout_ms=1000, grace_ms=0).run(queue.redis)
    assert sorted(taken.ids) == ["a", "b"]
    sweeper = Sweeper(queue)
    assert wait_until(lambda: sweeper.sweep_once() is not None and sweeper.counts["dead"] == 2, timeout=5)
    sweeper.run(Budget.of(0))  # a run's end records what it counted
    minutes = [m.counts for m in queue.history("lost", 5)]
    assert (sum(c.failed for c in minutes), sum(c.dead for c in minutes), sum(c.started for c in minutes)) == (2, 2, 0)
