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


def test_key_concurrency_holds_across_consumers(make_queue: MakeQueue) -> None:
    """Two consumers, 8 workers each, `key_concurrency: 1`: never two jobs of one key at once, the
    keys side by side, every job done once."""
    topics = {"t": {"target": RECORDER, "concurrency": 8, "key_concurrency": 1}}
    queue = make_queue(topics=topics, tick=0.1)
    keys = [f"tenant-{n}" for n in range(4)]
    queue.enqueue_many(
        [{"topic": "t", "id": f"{key}-{n:02}", "key": key, "body": {"sleep": 0.01}} for key in keys for n in range(15)]
    )
    with running(Consumer(queue)), running(Consumer(make_queue(topics=topics, tick=0.1))):
        assert wait_until(lambda: len(recorder.of("t")) >= 60, timeout=30)
    assert sorted(d.id for d in recorder.of("t")) == sorted(f"{key}-{n:02}" for key in keys for n in range(15))
    assert {key: recorder.peaks[("t", key)] for key in keys} == dict.fromkeys(keys, 1)
    for key in keys:  # each key's jobs in run-at order (the same run-at: by id)
        ids = [d.id for d in recorder.of("t") if d.key == key]
        assert ids == sorted(ids)
    assert queue.stats("t").done == 60


def test_a_paused_key_waits_while_the_others_go(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"t": {"target": RECORDER}}, tick=0.1)
    queue.pause_key("t", "held")
    queue.enqueue_many([{"topic": "t", "id": f"{key}-{n}", "key": key} for key in ("held", "free") for n in range(3)])
    with running(Consumer(queue)):
        assert wait_until(lambda: len(recorder.of("t")) >= 3, timeout=30)
        assert {d.key for d in recorder.of("t")} == {"free"}
        assert queue.key("t", "held").ready == 3
        queue.resume_key("t", "held")
        assert wait_until(lambda: len(recorder.of("t")) >= 6, timeout=30)
    assert queue.key("t", "held").to_dict()["ready"] == 0
