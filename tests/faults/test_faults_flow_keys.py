"""Scenario: flow keys through a kill -9. A topic with ``key_concurrency: 1``, 6 keys and 3 workers a
consumer: consumer A runs jobs of 3 keys and is killed mid-run; consumer B starts then.

A lease counts against its key until it is settled or taken back (the contract's "Flow keys"), so the
dead consumer's leases hold their keys until they expire: no job of those keys starts meanwhile,
not even on the live consumer, while the other keys go on. Once the sweeper takes the leases back,
those keys go on too, one job at a time, and nothing is left counted against any key.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from delayq.store.keys import TOPIC_KEYS

from support.faults import (
    Enqueued,
    Fleet,
    check,
    loop_env,
    make_queue,
    read_records,
    redis_ms,
    report,
    topics_json,
    wait_until,
)
from support.invariants import check_redis, unsettled
from support.servers import RedisServer

KEYS = [f"tenant-{n}" for n in range(6)]
JOBS_PER_KEY = 8
SLEEP_S = 0.3
TIMEOUT_S = 2
WORKERS = 3  # a consumer's for the topic: A holds half the keys when it dies


def runs_by_key(records: list[dict[str, Any]]) -> dict[str, list[tuple[float, float, str]]]:
    """Each key's runs, in start order: (start, end, id) by Redis' clock. A run that never ended (its
    process was killed) ends when its lease does: its key is held till then."""
    ends = {(r["id"], r["attempt"], r["pid"]): r["redis_ms"] for r in records if r["ev"] in ("end", "fail")}
    runs: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for r in records:
        if r["ev"] == "start":
            end = ends.get((r["id"], r["attempt"], r["pid"]), r["lease_ms"])
            runs[r["key"]].append((r["redis_ms"], end, r["id"]))
    return {key: sorted(group) for key, group in runs.items()}


@pytest.mark.fault
@pytest.mark.timeout(90)
def test_key_concurrency_holds_through_a_kill_9(tmp_path: Path) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer() as server:
        config = {"timeout": TIMEOUT_S, "concurrency": WORKERS, "key_concurrency": 1, "retries": 3, "backoff": [0.1]}
        env = loop_env(server.url, "faults", topics_json(keyed=config), deliveries)
        queue = make_queue(env)
        client = server.client()
        busy_key = queue.keys.partitions[0].topic_keys("keyed")[TOPIC_KEYS.index("busy")]  # leases by key
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            began = time.monotonic()
            results = queue.enqueue_many(
                {"topic": "keyed", "id": f"{key}-{n}", "key": key, "body": {"sleep": SLEEP_S, "lease": True}}
                for n in range(JOBS_PER_KEY)
                for key in KEYS
            )
            jobs = Enqueued.from_results(results)
            first = fleet.consumer("consumer-a")
            fleet.sweeper("sweeper")

            def a_mid_run() -> bool:
                mine = [r for r in read_records(deliveries) if r["pid"] == first.pid]
                started = {r["id"] for r in mine if r["ev"] == "start"}
                return len(started - {r["id"] for r in mine if r["ev"] == "end"}) == WORKERS

            assert wait_until(a_mid_run, 20, interval=0.02), "consumer A never got going"
            first.kill()
            killed_at = redis_ms(client)
            at_kill = read_records(deliveries)
            fleet.consumer("consumer-b")

            def all_done() -> bool:
                done = {r["id"] for r in read_records(deliveries) if r["ev"] == "end"}
                return len(done) == len(jobs) and not client.exists(busy_key)

            assert wait_until(all_done, 60), "not every job was done after the kill"
            summaries = fleet.stop_all()
            duration = time.monotonic() - began
            assert unsettled(check_redis(client, "faults")) == {}, "a job was left behind"
            assert not client.exists(busy_key), client.hgetall(busy_key)  # nothing counted against any key

        records = read_records(deliveries)
        of_a = [r for r in at_kill if r["pid"] == first.pid]
        ended_at_kill = {(r["id"], r["attempt"]) for r in of_a if r["ev"] == "end"}
        cut_short = [r for r in of_a if r["ev"] == "start" and (r["id"], r["attempt"]) not in ended_at_kill]
        assert cut_short, "the kill landed between runs: nothing was held"
        held = {r["key"] for r in cut_short}
        first_expiry = min(r["lease_ms"] for r in cut_short)

        # One job of a key at a time, a dead consumer's run counting until its lease ended.
        runs = runs_by_key(records)
        for key, group in runs.items():
            for (_, end, before), (start, _, after) in itertools.pairwise(group):
                assert start >= end, f"{key}: {after} started {end - start:.1f} ms before {before} let the key go"
        # The keys the dead consumer held waited for its leases; the others went on meanwhile.
        went_on = {key for key, group in runs.items() if any(killed_at < start < first_expiry for start, _, _ in group)}
        assert went_on, held
        assert not went_on & held, (went_on, held)
        # The runs cut short were taken back as failed attempts and run again.
        again = {r["id"]: r["attempt"] for r in records if r["ev"] == "end"}
        assert all(again[r["id"]] > r["attempt"] for r in cut_short), [(r["id"], again[r["id"]]) for r in cut_short]
        assert summaries["sweeper"]["retried"] >= len(cut_short), summaries

        totals = check(
            "flow keys: key_concurrency 1 through a kill -9",
            jobs,
            records,
            duration_s=duration,
            keys=len(KEYS),
            held_by_the_dead=len(held),
            went_on_meanwhile=len(went_on),
        )
        report(f"[faults]   summaries: {summaries}")
        # A run that ended just before the kill, its ack not yet sent, runs again: at most one a key.
        totals.assert_clean(duplicated_at_most=len(KEYS))
        queue.close()
