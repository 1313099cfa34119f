"""Receipts in the loops: a job the consumer delivers becomes ``done``, with when its handler started
by Redis' clock; large results are acknowledged once each, in calls of bounded size; the cap holds;
receipts expire without traffic, forgotten by the sweep in bounded passes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis

from delayq import Queue
from delayq.core.job import RESULT_MAX_BYTES, encode_result
from delayq.loops import consumer as consumer_module
from delayq.loops.consumer import Consumer
from delayq.loops.settlement import SETTLE_BYTES
from delayq.loops.sweeper import Sweeper
from delayq.store import calls
from delayq.store.scripts import Call, run_many

from support import loop_targets
from support.loops import running, state, wait_until
from support.recorder import RECORDER
from support.scripts import server_ms

GATE = "python:support.loop_targets:gate"
MakeQueue = Callable[..., Queue]


def test_a_delivered_job_becomes_done_with_its_start_by_redis_time(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"life": {"target": GATE}}, tick=0.1)
    scheduled = queue.enqueue("life", {"n": 1}, id="job-1", delay=0)
    before_take = server_ms(queue.redis)
    with running(Consumer(queue)):
        assert wait_until(lambda: loop_targets.of("job-1"))  # the handler has started
        after_start = server_ms(queue.redis)
        assert state(queue, "life", "job-1") == "reserved"
        loop_targets.release("job-1")
        assert wait_until(lambda: state(queue, "life", "job-1") == "done")
    done = queue.get("life", "job-1")
    assert (done.attempts, done.run_at_ms, done.body, done.last_error) == (1, scheduled.run_at_ms, None, None)
    assert done.started_at_ms is not None
    assert done.done_at_ms is not None
    # Redis' time at the take plus what passed here before the handler started: between the two reads
    # of Redis' clock around it (a ms either side for the rounding of each clock to ms).
    assert before_take - 1 <= done.started_at_ms <= after_start + 1
    assert done.started_at_ms <= done.done_at_ms
    assert queue.stats("life").done == 1
    assert [job.id for job in queue.jobs("life", "done").jobs] == ["job-1"]


def test_jobs_with_64_kib_results_are_acknowledged_once_each_in_calls_of_at_most_settle_bytes(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = ["big-a", "big-b", "big-c"]  # one partition: their acks ride in each other's take calls
    target = "python:support.loop_targets:answers"
    queue = make_queue(topics={topic: {"target": target, "concurrency": 16} for topic in topics}, tick=0.1)
    jobs = [(topic, f"{topic}-{n}") for topic in topics for n in range(60)]
    queue.enqueue_many({"topic": topic, "id": job_id, "body": {"answer_kib": 64}, "delay": 0} for topic, job_id in jobs)
    sent: list[list[str]] = []  # per call the consumer sent: the results it carried

    def recorded(client: Any, sends: Sequence[Call[Any]], **options: Any) -> list[Any]:
        for call in sends:  # a result is the only argument over a KiB
            sent.append([arg for arg in call.args if isinstance(arg, str) and len(arg) > 1024])
        return run_many(client, sends, **options)

    monkeypatch.setattr(consumer_module, "run_many", recorded)
    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: consumer.counts["acked"] >= len(jobs), timeout=30)
    assert consumer.counts["acked"] == len(jobs)
    assert Counter(call.job.id for call in loop_targets.of()) == Counter(job_id for _, job_id in jobs)
    results = {job_id: job_id.ljust(RESULT_MAX_BYTES, ".") for _, job_id in jobs}
    for topic, job_id in jobs:
        done = queue.get(topic, job_id)
        assert (done.state, done.result, done.result_truncated) == ("done", results[job_id], False)
    carried = [result for call in sent for result in call]
    assert Counter(carried) == Counter(encode_result(result) for result in results.values())  # each sent once
    assert max(sum(len(result) for result in call) for call in sent) <= SETTLE_BYTES


def test_the_consumer_keeps_at_most_keep_done_max_receipts(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"capped": {"target": RECORDER, "keep_done_max": 3, "batch": 2}}, tick=0.1)
    for n in range(8):
        queue.enqueue("capped", {}, id=f"j{n}", delay=0)
    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: consumer.counts["acked"] == 8)
    stats = queue.stats("capped")
    assert (stats.ready, stats.reserved, stats.done) == (0, 0, 3)


def test_keep_done_zero_delivers_and_forgets(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"nokeep": {"target": RECORDER, "keep_done": 0}}, tick=0.1)
    queue.enqueue("nokeep", {}, id="a", delay=0)
    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: consumer.counts["acked"] == 1)
    assert state(queue, "nokeep", "a") is None
    assert queue.stats("nokeep").done == 0


def test_receipts_expire_without_traffic(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"brief": {"target": RECORDER, "keep_done": 1}}, tick=0.1)
    for n in range(3):
        queue.enqueue("brief", {}, id=f"j{n}", delay=0)
    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: consumer.counts["acked"] == 3)
    assert queue.stats("brief").done == 3
    with running(Sweeper(queue)) as sweeper:  # no ack comes: the sweep forgets them once a second old
        assert wait_until(lambda: queue.stats("brief").done == 0, timeout=10)
    assert sweeper.counts["forgotten"] == 3
    assert state(queue, "brief", "j0") is None


def test_the_sweep_forgets_a_backlog_of_expired_receipts_in_bounded_passes(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    queue = make_queue(topics={"bulk": {"target": RECORDER, "keep_done": 1}})
    keeping = queue.topic_config("bulk")
    partition = queue.keys.partitions[0]
    queue.enqueue_many({"topic": "bulk", "id": f"j{n}", "delay": 0} for n in range(2500))
    taken = calls.take(partition, "bulk", count=2500, timeout_ms=60_000, grace_ms=0).run(queue.redis)
    leases = [(job.id, token, taken.now_ms) for job, token, _ in taken.leases]
    for start in range(0, 2500, 1000):
        assert calls.ack(partition, "bulk", keeping, leases[start : start + 1000]).run(queue.redis) == len(
            leases[start : start + 1000]
        )
    assert queue.stats("bulk").done == 2500
    receipts = redis_client.hgetall(partition.metas)
    started = {field: raw.split("|")[4].split(":")[0] for field, raw in receipts.items()}
    redis_client.hset(  # all done long ago
        partition.metas, mapping={field: f"d|1|1|1|{started[field]}:1|||" for field in receipts}
    )
    sweeper = Sweeper(queue, limit=1000)
    try:
        sweeper.sweep_once()
        assert sweeper.counts["forgotten"] == 1000  # one call, one bound
        assert queue.stats("bulk").done == 1500
        sweeper.sweep_once()
        sweeper.sweep_once()
        assert sweeper.counts["forgotten"] == 2500
    finally:
        sweeper.release()
    assert queue.stats("bulk").done == 0
    assert redis_client.hlen(partition.metas) == 0
