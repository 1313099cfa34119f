"""Recurring schedules through the real loops, in-process against the real Redis: the sweeper makes
each occurrence, the consumer hands it over like any job (once, never before its time, retried when it
fails), and a schedule changed or deleted while the loops run is followed at once."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from delayq import Queue
from delayq.core.recurring import occurrence_id
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper

from support import recorder
from support.loops import running, wait_until
from support.scripts import server_ms, sleep_until_server_ms

MakeQueue = Callable[..., Queue]
SECOND = 1000


def delivered_ok(topic: str) -> Counter[str]:
    return Counter(d.id for d in recorder.of(topic) if d.ok)


@pytest.mark.slow
@pytest.mark.parametrize("partitions", [1, 3])
def test_every_second_schedules_deliver_each_occurrence_once_never_early(
    make_queue: MakeQueue, redis_client: redis.Redis, partitions: int
) -> None:
    queue = make_queue(partitions=partitions, tick=0.2)
    infos = [queue.schedule("orders", f"tick-{i}", every=1, body={"i": i}) for i in range(3)]
    flaky = queue.schedule("payments", "flaky", every=1, body={"fail_until": 1}, backoff=[0.1])
    with running(Sweeper(queue)) as sweeper, running(Consumer(queue)):
        assert wait_until(lambda: len(delivered_ok("orders")) >= 12 and len(delivered_ok("payments")) >= 3, 20)
        for info in infos:
            queue.unschedule("orders", info.name)
        queue.unschedule("payments", "flaky")
        stopped = server_ms(redis_client)
        time.sleep(1.5)  # nothing more comes once they are deleted
    assert sweeper.counts["occurrences"] >= 12
    for info in [*infos, flaky]:
        mine = [d for d in recorder.of(info.topic) if d.id.startswith(f"{info.name}@")]
        assert mine, info.name
        times = {d.id: d.run_at_ms for d in mine if d.attempt == 1}
        # the calendar's occurrences, consecutive from the first: none skipped
        assert sorted(times.values()) == [info.created_at_ms + k * SECOND for k in range(1, len(times) + 1)]
        assert all(job_id == occurrence_id(info.name, at) for job_id, at in times.items())
        assert all(d.started_ms >= d.run_at_ms for d in mine), "handed over before its time"
        assert max(times.values()) <= stopped + SECOND  # at most the pending one after the delete (cancelled)
        assert all(n == 1 for n in Counter(d.id for d in mine if d.ok).values())
    # a failing occurrence is retried like any job: attempt 1 fails, attempt 2 succeeds
    attempts = Counter((d.id, d.attempt, d.ok) for d in recorder.of("payments"))
    assert all(attempts[(job_id, 2, True)] == 1 for job_id, _, ok in attempts if not ok)


@pytest.mark.slow
def test_a_schedule_replaced_while_the_loops_run_follows_the_new_calendar(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    queue = make_queue(tick=0.2)
    queue.schedule("orders", "s", every=1, body="old")
    with running(Sweeper(queue)), running(Consumer(queue)):
        assert wait_until(lambda: len(delivered_ok("orders")) >= 2, 10)
        new = queue.schedule("orders", "s", every=2, body="new")
        sleep_until_server_ms(redis_client, (new.next_runs_ms[2]) + 300)
        delivered = recorder.of("orders")
    after = [d for d in delivered if d.run_at_ms >= new.created_at_ms]
    assert [d.body for d in after] == ["new"] * len(after)
    assert [d.run_at_ms for d in after] == list(new.next_runs_ms[:3])
    assert all(d.started_ms >= d.run_at_ms for d in delivered)
    assert len(set(d.id for d in delivered)) == len(delivered)
