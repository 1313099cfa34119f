"""A job's flow key reaches its handler, on every attempt."""

from __future__ import annotations

from collections.abc import Callable

from delayq import Queue
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer

from support import recorder
from support.loops import running, wait_until
from support.recorder import RECORDER

MakeQueue = Callable[..., Queue]


def test_the_handler_gets_the_key_on_every_attempt(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"t": {"target": RECORDER, "backoff": [0]}}, tick=0.1)
    queue.enqueue("t", {"fail_until": 1}, id="keyed", key="tenant-1", delay=0)
    queue.enqueue("t", {}, id="plain", delay=0)
    consumer = Consumer(queue)
    consumer.run(Budget.of(0))
    consumer.run(Budget.of(0.5))
    seen = sorted((d.id, d.attempt, d.key) for d in recorder.of("t"))
    assert seen == [("keyed", 1, "tenant-1"), ("keyed", 2, "tenant-1"), ("plain", 1, None)]


def test_another_keys_job_is_not_held_up_by_a_keys_backlog(make_queue: MakeQueue) -> None:
    """2,000 jobs of one key due at once, with 4 workers; a job of another key created due once the
    backlog is being worked starts within a couple of rounds of the workers, not after the backlog."""
    queue = make_queue(topics={"t": {"target": RECORDER, "concurrency": 4, "batch": 4}}, tick=0.1)
    queue.enqueue_many(
        [{"topic": "t", "id": f"a{n:05}", "key": "noisy", "body": {"sleep": 0.002}} for n in range(2000)]
    )
    consumer = Consumer(queue)
    with running(consumer):
        assert wait_until(lambda: len(recorder.of("t")) >= 100, timeout=30)
        queue.enqueue("t", {}, id="quiet", key="quiet", delay=0)
        assert wait_until(lambda: recorder.of("t", "quiet") != [], timeout=30)
        started = len(recorder.of("t"))
    assert started < 1000, started  # before: after the whole backlog (2,001)
    ahead = [d for d in recorder.of("t") if d.id != "quiet" and d.started_ms > recorder.of("t", "quiet")[0].started_ms]
    assert ahead, "the backlog was still being worked when the quiet key's job started"
