"""A rate-limited topic with real loop processes: two consume processes and a sweeper, a topic with
`rate: 50` spread over two partitions. The consumers could start 200 jobs a second (2 x 10 workers,
0.1 s each); across both, no one-second window holds more than burst + rate starts. Held-back jobs
are not failed attempts: every job is delivered once, on its first attempt.

The handler records each start twice, by Redis' clock: when the take leased it (read back from its
lease) and when the handler began. The limit is on the takes, and holds exactly there. A handler
begins a little after its take (the reply, a worker thread waking), so its starts may crowd a window
by what that delay lets in: their bound is the takes' plus rate x the longest delay seen, measured in
the same run, never a threshold that only a quiet machine meets.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from delayq.loops.consumer import LEASE_GRACE_MS, Consumer
from delayq.store import calls

from support import recorder
from support.faults import (
    Enqueued,
    Fleet,
    busiest_window,
    check,
    loop_env,
    make_queue,
    read_records,
    topics_json,
    wait_until,
)
from support.invariants import check_redis, unsettled
from support.loops import running
from support.recorder import RECORDER

RATED = "rated"
RATE = 50
BURST = RATE  # the default
JOBS = 300
CONCURRENCY = 10
TIMEOUT_MS = 10_000


def test_busiest_window() -> None:
    assert busiest_window([]) == 0
    assert busiest_window([0, 500, 999.9, 1000, 1999]) == 3  # [500, 1500) holds 500, 999.9, 1000
    assert busiest_window([float(n * 10) for n in range(250)]) == 100


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_consumer_processes_keep_the_rate_between_them(
    tmp_path: Path, redis_url: str, namespace: str, redis_client: redis.Redis
) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    topics = topics_json(**{RATED: {"rate": RATE, "concurrency": CONCURRENCY, "timeout": TIMEOUT_MS // 1000}})
    env = loop_env(redis_url, namespace, topics, deliveries, partitions=2)
    queue = make_queue(env)
    fleet = Fleet(env, tmp_path)
    with fleet.running():
        for name in ("consumer-a", "consumer-b"):
            fleet.consumer(name)
        fleet.sweeper("sweeper")
        # Warm up the consumers' handlers (a first delivery opens the target's Redis client): more jobs
        # than one consumer has workers, long enough for the other to take the rest.
        warm = [
            {"topic": RATED, "id": f"warm-{i:02d}", "body": {"sleep": 0.3, "lease": True}}
            for i in range(2 * CONCURRENCY)
        ]
        jobs = Enqueued.from_results(queue.enqueue_many(warm))

        def warmed() -> bool:
            return sum(r["ev"] == "end" for r in read_records(deliveries)) == len(warm)

        assert wait_until(warmed, 30), "the consumers never got going"
        time.sleep(BURST / RATE + 0.2)  # a quiet spell: the buckets fill up again
        jobs += Enqueued.from_results(
            queue.enqueue_many(
                [{"topic": RATED, "id": f"job-{i:03d}", "body": {"sleep": 0.1, "lease": True}} for i in range(JOBS)]
            )
        )

        def all_done() -> bool:
            return len({r["id"] for r in read_records(deliveries) if r["ev"] == "end"}) == len(jobs)

        assert wait_until(all_done, 90), queue.stats(RATED)
        summaries = fleet.stop_all()
        assert unsettled(check_redis(redis_client, namespace, 2)) == {}

    records = read_records(deliveries)
    starts = [r for r in records if r["ev"] == "start"]
    assert len({r["pid"] for r in starts if r["id"].startswith("job-")}) == 2, "both consumers took jobs"
    assert all(r["attempt"] == 1 for r in starts), "a held-back job was counted as a failed attempt"
    assert sum(s.get("failed", 0) + s.get("timed_out", 0) for s in summaries.values()) == 0, summaries
    taken = [r["lease_ms"] - TIMEOUT_MS - LEASE_GRACE_MS for r in starts]
    delay_ms = max(r["redis_ms"] - at for r, at in zip(starts, taken, strict=True))
    most_taken = busiest_window(taken)
    most_started = busiest_window([r["redis_ms"] for r in starts])
    batch = sorted(at for r, at in zip(starts, taken, strict=True) if r["id"].startswith("job-"))
    spread_s = (batch[-1] - batch[0]) / 1000
    print(
        f"rate {RATE}/s, burst {BURST}: busiest 1 s window {most_taken} takes, {most_started} handler starts"
        f" (longest take-to-start delay {delay_ms:.1f} ms); {JOBS} jobs taken over {spread_s:.1f} s"
    )
    assert most_taken <= BURST + RATE, most_taken
    assert most_started <= BURST + RATE + math.ceil(RATE * delay_ms / 1000), (most_started, delay_ms)
    # The limit held back most of the batch: at most BURST + RATE * W takes in W seconds.
    assert spread_s >= (JOBS - BURST) / RATE - 1, spread_s
    check("rate limit with two consumer processes", jobs, records).assert_clean()


def test_a_held_back_lane_waits_for_its_next_start_instead_of_asking_again(
    make_queue: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer in-process, rate 5 with a burst of 1 (a start every 200 ms) and a tick of 10 s: the
    lane waits what each take answers, so the four jobs are all started within the first tick (about
    600 ms; a consumer that slept its tick would need three), with a handful of takes, not one per
    look at the topic index (which names the topic as ready every 10 ms meanwhile)."""
    takes = []
    take = calls.lane_take
    monkeypatch.setattr(calls, "lane_take", lambda *args, **kwargs: takes.append(1) or take(*args, **kwargs))
    queue = make_queue(topics={RATED: {"target": RECORDER, "rate": 5, "burst": 1}}, tick=10.0)
    queue.enqueue_many([{"topic": RATED, "id": f"j{i}", "delay": 0} for i in range(4)])
    with running(Consumer(queue)):
        assert wait_until(lambda: len(recorder.of(RATED)) == 4, timeout=9.0), recorder.of(RATED)
    assert [job.id for job in recorder.of(RATED)] == ["j0", "j1", "j2", "j3"]
    assert len(takes) < 20, len(takes)  # a take per start, and one that finds the bucket empty, give or take
