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
from support.scripts import leases as leases_of
from support.servers import RedisServer

KEYS = [f"tenant-{n}" for n in range(6)]
JOBS_PER_KEY = 8
SLEEP_S = 0.3
TIMEOUT_S = 2
WORKERS = 3  # a consumer's for the topic: A holds half the keys when it dies

Run = tuple[float, float, str]


def runs_by_key(records: list[dict[str, Any]], dead: int, leases: dict[str, float]) -> dict[str, list[Run]]:
    """Each key's runs, in start order: (start, end, id) by Redis' clock. A run of the ``dead`` process
    whose job was still leased when it died (its handler cut short, or ended with the ack unsent) ends
    when that lease does: its key is held till then."""
    ends = {(r["id"], r["attempt"], r["pid"]): r["redis_ms"] for r in records if r["ev"] in ("end", "fail")}
    runs: dict[str, list[Run]] = defaultdict(list)
    for r in records:
        if r["ev"] == "start":
            held = r["pid"] == dead and r["id"] in leases
            end = leases[r["id"]] if held else ends[(r["id"], r["attempt"], r["pid"])]
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
        partition = queue.keys.partitions[0]
        busy_key = partition.topic_key("keyed", "busy")  # leases counted, by key
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
            # Nothing else consumes yet: what is leased now is what A held, unsettled, when it died.
            leases = leases_of(client, partition, "keyed")
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
        assert 0 < len(leases) <= WORKERS, leases
        held = {r["key"] for r in records if r["ev"] == "start" and r["id"] in leases}
        first_expiry = min(leases.values())

        # One job of a key at a time, a dead consumer's run counting until its lease ended.
        runs = runs_by_key(records, first.pid, leases)
        for key, group in runs.items():
            for (_, end, before), (start, _, after) in itertools.pairwise(group):
                assert start >= end, f"{key}: {after} started {end - start:.1f} ms before {before} let the key go"
        # The keys the dead consumer held waited for its leases; the others went on meanwhile.
        went_on = {key for key, group in runs.items() if any(killed_at < start < first_expiry for start, _, _ in group)}
        assert went_on, held
        assert not went_on & held, (went_on, held)
        # The dead consumer's leases were taken back as failed attempts, and their jobs run again.
        again = {r["id"]: r["attempt"] for r in records if r["ev"] == "end" and r["pid"] != first.pid}
        assert all(again[job_id] >= 2 for job_id in leases), {job_id: again.get(job_id) for job_id in leases}
        assert summaries["sweeper"]["retried"] == len(leases), summaries

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
        # A run that ended just before the kill, its ack not yet sent, runs again.
        totals.assert_clean(duplicated_at_most=len(leases))
        queue.close()
