"""Callbacks end to end, with the real loops on the real Redis: a topic's ``on_done`` and ``on_dead``
make one job each time one of its jobs succeeds or goes dead (a replayed job that dies again makes
another), delivered with the body the contract names, across partitions; a sweeper that died between
making the callback jobs and dropping the records does not make them twice."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from delayq import Queue
from delayq.core.callbacks import Record
from delayq.loops.callbacks import drain
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper
from delayq.store import calls

from support import loop_targets, recorder
from support.loops import running, state, wait_until
from support.recorder import RECORDER

MakeQueue = Callable[..., Queue]
SWITCH = "python:support.loop_targets:switch"
ANSWERS = "python:support.loop_targets:answers"


def callbacks_of(topic: str) -> list[dict[str, Any]]:
    """The bodies of the callback jobs delivered to ``topic``."""
    return [delivery.body for delivery in recorder.of(topic)]


@pytest.mark.parametrize("partitions", [1, 3])
def test_each_outcome_makes_one_callback_job(make_queue: MakeQueue, partitions: int) -> None:
    queue = make_queue(
        topics={
            "orders": {"target": ANSWERS, "retries": 1, "backoff": [0], "on_done": "audit", "on_dead": "alerts"},
            "flaky": {"target": SWITCH, "retries": 1, "backoff": [0], "on_dead": "alerts"},
            "audit": {"target": RECORDER},
            "alerts": {"target": RECORDER},
        },
        partitions=partitions,
        tick=0.1,
    )
    loop_targets.failing = True
    for n in range(10):
        queue.enqueue("orders", {"answer": {"n": n}}, id=f"o{n}", delay=0, key=f"tenant-{n % 2}")
    queue.enqueue("flaky", {"n": "f"}, id="f1", delay=0)
    with running(Sweeper(queue)), running(Consumer(queue)):
        assert wait_until(lambda: len(recorder.of("audit")) == 10 and len(recorder.of("alerts")) == 1, timeout=10)
        done = sorted(callbacks_of("audit"), key=lambda body: body["id"])
        assert [body["id"] for body in done] == [f"o{n}" for n in range(10)]
        first = done[0]
        info = queue.get("orders", "o0")
        assert first == {
            "topic": "orders",
            "id": "o0",
            "key": "tenant-0",
            "outcome": "done",
            "attempts": 1,
            "body": {"answer": {"n": 0}},
            "result": {"n": 0},
            "result_truncated": False,
            "started_at_ms": info.started_at_ms,
            "ended_at_ms": info.done_at_ms,
        }
        assert {delivery.key for delivery in recorder.of("audit")} == {"tenant-0", "tenant-1"}  # the job's key
        (dead,) = callbacks_of("alerts")
        info = queue.get("flaky", "f1")
        assert info.dead_at_ms is not None
        assert dead == {
            "topic": "flaky",
            "id": "f1",
            "key": None,
            "outcome": "dead",
            "attempts": 2,
            "body": {"n": "f"},
            "error": "RuntimeError: switched off at attempt 2",
            "started_at_ms": info.history[-1].started_at_ms,
            "ended_at_ms": info.dead_at_ms,
        }
        # Replayed, the job has a new life: dead again, another callback job.
        assert queue.replay("flaky", ["f1"]) == 1
        assert wait_until(lambda: len(recorder.of("alerts")) == 2, timeout=10)
        assert state(queue, "flaky", "f1") == "dead"
        # Replayed once more and succeeding: a topic without on_done makes nothing.
        loop_targets.failing = False
        assert queue.replay("flaky", ["f1"]) == 1
        assert wait_until(lambda: state(queue, "flaky", "f1") == "done", timeout=10)
        assert wait_until(lambda: all(queue.redis.llen(p.outbox) == 0 for p in queue.keys.partitions), timeout=5)
    assert len(recorder.of("audit")) == 10
    assert [body["attempts"] for body in callbacks_of("alerts")] == [2, 2]
    assert len({delivery.id for delivery in recorder.of("alerts")}) == 2  # two jobs, each once


def test_an_expired_lease_that_was_the_last_attempt_calls_back(make_queue: MakeQueue) -> None:
    topics = {"lease": {"target": RECORDER, "retries": 0, "on_dead": "alerts"}, "alerts": {"target": RECORDER}}
    queue = make_queue(topics=topics, tick=0.1)
    queue.enqueue("lease", {"x": 1}, id="l1", delay=0)
    partition = queue.keys.partitions[0]
    calls.take(partition, "lease", count=1, timeout_ms=1, grace_ms=0).run(queue.redis)  # then the consumer "dies"
    sweeper = Sweeper(queue)
    assert wait_until(lambda: sweeper.sweep_once() is not None and sweeper.counts["callbacks"] == 1, timeout=5)
    sweeper.release()
    (job,) = queue.jobs("alerts", "ready").jobs
    assert job.body["outcome"] == "dead"
    assert job.body["started_at_ms"] is None  # its start is not known: its consumer never answered
    assert job.body["error"].startswith("lease expired")


def test_a_drain_sent_again_makes_no_second_job(make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweeper dies after making the callback jobs and before dropping the records: the next drain
    sends the same records, and each partition skips what it made."""
    queue = make_queue(
        topics={"orders": {"target": RECORDER, "on_done": "audit"}, "audit": {"target": RECORDER}}, partitions=3
    )
    for n in range(30):
        queue.enqueue("orders", {"n": n}, id=f"o{n}", delay=0)
    for partition in queue.keys.partitions:
        taken = calls.take(partition, "orders", count=100, timeout_ms=30_000, grace_ms=0).run(queue.redis)
        acks = [calls.Ack(job.id, token, taken.now_ms) for job, token, _ in taken.leases]
        calls.ack(partition, "orders", queue.topic_config("orders"), acks).run(queue.redis)
    records = {p: [Record.decode(raw) for raw in queue.redis.lrange(p.outbox, 0, -1)] for p in queue.keys.partitions}
    assert sum(len(r) for r in records.values()) == 30
    assert all(r.seq < s.seq for rs in records.values() for r, s in itertools.pairwise(rs))

    def dies(partition: Any, last_seq: int) -> Any:
        raise SystemExit("killed before the trim")

    with monkeypatch.context() as patched:
        patched.setattr(calls, "outbox_trim", dies)
        for partition in queue.keys.partitions:
            with pytest.raises(SystemExit):
                drain(queue, partition)
    assert queue.stats("audit").ready == 30
    assert sum(drain(queue, partition) for partition in queue.keys.partitions) == 30  # sent again
    assert queue.stats("audit").ready == 30  # and none made twice
    assert all(queue.redis.llen(p.outbox) == 0 for p in queue.keys.partitions)
    ids = [job.body["id"] for job in queue.jobs("audit", "ready", limit=100).jobs]
    assert sorted(ids) == sorted(f"o{n}" for n in range(30))
