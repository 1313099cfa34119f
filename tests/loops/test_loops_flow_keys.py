"""A job's flow key reaches its handler, on every attempt."""

from __future__ import annotations

from collections.abc import Callable

from delayq import Queue
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer

from support import recorder
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
