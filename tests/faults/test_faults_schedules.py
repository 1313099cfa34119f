"""Scenario 7: recurring schedules under faults, with real sweep and consume processes.

Every schedule here is ``every: 1``, so its occurrences are ``created + k s`` (``created``: Redis' time
when it was written), each a job with id ``name@<second>``. What is checked from the deliveries (the
fault target's records, by Redis' clock): each occurrence delivered once, none before its time, none
that is not on a calendar, and none missing, except where a fault stopped a schedule's sweeps for a
while: there the catch-up rule skips the missed ones but the latest, and only inside that window.

- 7a: three sweepers racing over three partitions: each occurrence is created once (the sweepers'
  ``occurrences`` add up to the jobs that exist or ran), none missing.
- 7b: a sweeper killed (SIGKILL) between its claim of an occurrence and the job's write; then the other
  sweeper killed at an arbitrary moment while a standby runs: the claimed occurrence is made once the
  claim expires, nothing twice, the schedules go on.
- 7c: Redis killed (SIGKILL, AOF fsynced always) and restarted while the loops run: no schedule lost,
  their occurrences go on.
- 7d: the sweeper's, the consumer's and the writer's clock 30 s ahead or behind Redis': the calendar
  counts from Redis' time, occurrences come on it, never early, never ~30 s late.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from delayq import Queue
from delayq.core.recurring import occurrence_id
from delayq.store.schedules import CLAIM_MS

from support.dying_sweeper import CLAIMS_ENV
from support.faults import (
    ROOT,
    Enqueued,
    Fleet,
    LoopProcess,
    check,
    faketime_env,
    loop_env,
    make_queue,
    read_records,
    redis_ms,
    report,
    topics_json,
    wait_until,
)
from support.invariants import check_redis, unsettled
from support.scripts import job_ids
from support.servers import RedisServer

TOPIC = "cron"
SECOND = 1000


@dataclass
class Calendars:
    """The ``every: 1`` schedules of a scenario (name -> created ms) and the windows where a fault may
    have made the catch-up rule skip occurrences (name, or None for all -> [(from_ms, to_ms)])."""

    created: dict[str, int]
    windows: dict[str | None, list[tuple[float, float]]] = field(default_factory=dict)

    def occurrences(self, until_ms: float) -> dict[str, int]:
        """Every occurrence id up to ``until_ms`` -> its time."""
        out = {}
        for name, created in self.created.items():
            k = 1
            while created + k * SECOND <= until_ms:
                out[occurrence_id(name, created + k * SECOND)] = created + k * SECOND
                k += 1
        return out

    def due_delivered(self, ids: set[str], until_ms: float) -> bool:
        """Whether every occurrence up to ``until_ms`` outside the fault windows is among ``ids``."""
        return all(i in ids for i, at in self.occurrences(until_ms).items() if not self.skippable(i.split("@")[0], at))

    def skippable(self, name: str, at_ms: int) -> bool:
        return any(lo < at_ms < hi for key in (name, None) for lo, hi in self.windows.get(key, []))

    def check(self, scenario: str, records: list[dict[str, Any]], until_ms: float, **extra: Any) -> list[str]:
        """``support.faults.check`` of the deliveries against the calendars up to ``until_ms``: an
        occurrence in a fault's window may be missing (the catch-up rule), no other. Returns the ids
        of the occurrences skipped."""
        every = self.occurrences(until_ms + 3 * SECOND)  # those that came after the cut-off are no strangers
        delivered = {r["id"] for r in records if r["ev"] == "end"}
        skipped = [
            job_id
            for job_id, at in every.items()
            if at <= until_ms and job_id not in delivered and self.skippable(job_id.split("@")[0], at)
        ]
        expected = [
            Enqueued(TOPIC, job_id, at) for job_id, at in every.items() if at <= until_ms or job_id in delivered
        ]
        expected = [job for job in expected if job.id not in skipped]
        totals = check(scenario, expected, records, skipped=len(skipped), **extra)
        totals.assert_clean()
        return skipped


def make_schedules(queue: Queue, count: int) -> Calendars:
    """``count`` schedules ``every: 1`` of ``TOPIC``, spread over the partitions."""
    names = [f"tick-{i}" for i in range(count)]
    return Calendars({name: queue.schedule(TOPIC, name, every=1, body={"s": name}).created_at_ms for name in names})


def delivered(path: Path) -> set[str]:
    return {r["id"] for r in read_records(path) if r["ev"] == "end"}


def existing(queue: Queue, client: redis.Redis) -> set[str]:
    """The ids of every occurrence job that exists (delayed, ready, or being handled)."""
    ids: set[str] = set()
    for partition in queue.keys.partitions:
        ids.update(job_ids(client, partition.metas, TOPIC))
    return ids


# ------------------------------------------------------------------------------------------ 7a


@pytest.mark.fault
@pytest.mark.timeout(120)
def test_three_sweepers_racing_make_each_occurrence_once(tmp_path: Path) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer() as server:
        env = loop_env(server.url, "faults", topics_json(cron={"timeout": 5}), deliveries, partitions=3)
        queue = make_queue(env)
        client = server.client()
        calendars = make_schedules(queue, 9)
        assert {queue.keys.for_schedule(TOPIC, name).index for name in calendars.created} == {0, 1, 2}
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            sweepers = [fleet.sweeper(f"sweeper-{i}") for i in range(3)]
            fleet.consumer("consumer")
            began = time.monotonic()
            assert wait_until(lambda: len(delivered(deliveries)) >= 9 * 8, 40), len(delivered(deliveries))
            until = redis_ms(client)
            summaries = {s.name: s.stop() for s in sweepers}  # the schedules stand still from here
            made = existing(queue, client)
            assert wait_until(
                lambda: (
                    {i for i in made if i.split("@")[0] in calendars.created}
                    <= delivered(deliveries) | existing(queue, client)
                ),
                5,
            )
            for name in calendars.created:
                queue.unschedule(TOPIC, name)
            time.sleep(1.5)  # the consumer hands over what fell due before the delete
            fleet.stop_all()
            duration = time.monotonic() - began
        records = read_records(deliveries)
        ever = delivered(deliveries) | made
        by_sweeps = sum(summary["occurrences"] for summary in summaries.values())
        calendars.check(
            "7a three sweepers racing, schedules",
            records,
            until,
            duration_s=duration,
            schedules=len(calendars.created),
            made_by_sweeper=[summary["occurrences"] for summary in summaries.values()],
        )
        # Each occurrence was created by one sweeper: the creates add up to the jobs (the PUTs made the firsts).
        assert by_sweeps + len(calendars.created) == len(ever), (by_sweeps, len(ever))
        assert all(summary["occurrences"] > 0 for summary in summaries.values()), summaries  # all three worked
        assert unsettled(check_redis(client, "faults", 3)) == {}  # whole, and nothing left behind
        queue.close()


# ------------------------------------------------------------------------------------------ 7b


@pytest.mark.fault
@pytest.mark.timeout(120)
def test_a_sweeper_killed_between_claim_and_write_loses_no_schedule(tmp_path: Path) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    claims = tmp_path / "claims.json"
    with RedisServer() as server:
        env = loop_env(server.url, "faults", topics_json(cron={"timeout": 5}), deliveries, **{CLAIMS_ENV: str(claims)})
        queue = make_queue(env)
        client = server.client()
        calendars = make_schedules(queue, 4)
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            began = time.monotonic()
            fleet.consumer("consumer")
            dying = LoopProcess("dying-sweeper", "sweep", env, tmp_path)
            dying.command = [sys.executable, "-m", "support.dying_sweeper"]
            fleet.processes.append(dying.start())
            assert wait_until(lambda: not dying.alive, 15), "the dying sweeper did not die"
            died_ms = redis_ms(client)
            claimed = json.loads(claims.read_text())
            assert claimed, "it died with nothing claimed"
            for claim in claimed:  # what it claimed is not made yet: left for the next sweep
                calendars.windows.setdefault(claim["name"], []).append((claim["at_ms"], died_ms + CLAIM_MS + 3000))
            first = fleet.sweeper("sweeper-a")
            standby = fleet.sweeper("sweeper-b")
            ids = [occurrence_id(c["name"], c["at_ms"]) for c in claimed]
            assert wait_until(lambda: set(ids) <= delivered(deliveries), CLAIM_MS / 1000 + 15), ids
            taken_over_s = redis_ms(client) - died_ms
            time.sleep(2.0)
            killed_ms = redis_ms(client)
            first.kill()  # at an arbitrary moment: perhaps between a claim and its write too
            calendars.windows[None] = [(killed_ms - SECOND, killed_ms + CLAIM_MS + 3000)]
            time.sleep(CLAIM_MS / 1000 + 4)  # the standby goes on, and takes over any claim left
            until = redis_ms(client) - 1500
            assert wait_until(lambda: calendars.due_delivered(delivered(deliveries), until), 10)
            summaries = {"standby": standby.stop()}
            for name in calendars.created:
                assert queue.get_schedule(TOPIC, name).next_run_at_ms is not None  # every schedule goes on
            fleet.stop_all()
            duration = time.monotonic() - began
        skipped = calendars.check(
            "7b sweeper killed between claim and write",
            read_records(deliveries),
            until,
            duration_s=duration,
            claimed_at_death=len(claimed),
            claimed_made_after_ms=round(taken_over_s),
            standby=summaries["standby"],
        )
        report(f"[faults]   skipped by the catch-up rule: {len(skipped)}")
        assert all(i in delivered(deliveries) for i in ids)  # the claimed occurrences were made, once
        assert taken_over_s >= CLAIM_MS - 1000  # not before the claim could expire
        check_redis(client, "faults")  # the namespace is whole (raises if not)
        queue.close()


# ------------------------------------------------------------------------------------------ 7c


@pytest.mark.fault
@pytest.mark.timeout(120)
def test_schedules_survive_a_redis_crash_and_go_on(tmp_path: Path) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer("--appendonly", "yes", "--appendfsync", "always") as server:
        env = loop_env(server.url, "faults", topics_json(cron={"timeout": 5}), deliveries)
        queue = make_queue(env)
        client = server.client()
        calendars = make_schedules(queue, 5)
        before = {info.name: info.to_dict() for info in queue.schedules()}
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            began = time.monotonic()
            fleet.sweeper("sweeper")
            fleet.consumer("consumer")
            assert wait_until(lambda: len(delivered(deliveries)) >= 5 * 3, 20)
            killed_ms = redis_ms(client)
            server.kill()
            time.sleep(2.0)
            server.start()  # same port and directory: the AOF is replayed
            client = server.client()
            restarted_ms = redis_ms(client)
            calendars.windows[None] = [(killed_ms - SECOND, restarted_ms + CLAIM_MS + 3000)]
            after = {info.name: info.to_dict() for info in queue.schedules()}
            assert {name: {k: v for k, v in s.items() if not k.startswith("next_")} for name, s in after.items()} == {
                name: {k: v for k, v in s.items() if not k.startswith("next_")} for name, s in before.items()
            }  # every schedule, as it was written
            resumed = len(delivered(deliveries))
            assert wait_until(lambda: len(delivered(deliveries)) >= resumed + 5 * 4, 30), "the schedules stopped"
            until = redis_ms(client) - 1500
            time.sleep(1.5)
            summaries = fleet.stop_all()
            duration = time.monotonic() - began
        calendars.check(
            "7c redis SIGKILL + AOF restart, schedules",
            read_records(deliveries),
            until,
            duration_s=duration,
            down_ms=round(restarted_ms - killed_ms),
            summaries=summaries,
        )
        check_redis(client, "faults")  # the namespace is whole (raises if not)
        queue.close()


# ------------------------------------------------------------------------------------------ 7d

SCHEDULE_VIA_API = """
import json, sys
sys.path.insert(0, "tests")
import enqueue
from support.events import FakeContext, api_event
answers = []
for name in json.loads(sys.argv[1]):
    response = enqueue.lambda_handler(api_event("PUT", f"/schedules/cron/{name}", {"every": 1}), FakeContext())
    answers.append({"status": response["statusCode"], "body": json.loads(response["body"])})
print(json.dumps(answers))
"""


@pytest.mark.fault
@pytest.mark.timeout(90)
@pytest.mark.parametrize("offset", ["+30s", "-30s"])
def test_schedules_with_clocks_off_by_30_s(tmp_path: Path, offset: str) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer() as server:
        env = loop_env(server.url, "faults", topics_json(cron={"timeout": 5}), deliveries, **faketime_env(offset))
        client = server.client()
        names = [f"tick-{i}" for i in range(4)]
        before = redis_ms(client)
        done = subprocess.run(
            [sys.executable, "-c", SCHEDULE_VIA_API, json.dumps(names)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        after = redis_ms(client)
        assert done.returncode == 0, done.stderr
        answers = json.loads(done.stdout.strip().splitlines()[-1])
        assert [a["status"] for a in answers] == [201] * len(names), answers
        # written by Redis' clock, not the skewed writer's: the calendars count from there
        created = {a["body"]["name"]: a["body"]["created_at_ms"] for a in answers}
        assert all(before <= ms <= after for ms in created.values()), (before, created, after)
        calendars = Calendars(created)
        fleet = Fleet(env, tmp_path)
        with fleet.running():
            began = time.monotonic()
            fleet.sweeper("sweeper")
            fleet.consumer("consumer")
            assert wait_until(lambda: len(delivered(deliveries)) >= len(names) * 5, 25)
            until = redis_ms(client) - 1500
            time.sleep(1.5)
            fleet.stop_all()
            duration = time.monotonic() - began
        records = read_records(deliveries)
        skews = sorted(r["wall_ms"] - r["redis_ms"] for r in records)
        consumer_skew_ms = skews[len(skews) // 2]
        assert abs(consumer_skew_ms - int(offset.rstrip("s")) * 1000) < 1500, consumer_skew_ms  # skewed indeed
        calendars.check(
            f"7d clock {offset}, schedules",
            records,
            until,
            duration_s=duration,
            consumer_clock_minus_redis_ms=round(consumer_skew_ms),
        )
        lateness = [r["redis_ms"] - r["run_at_ms"] for r in records if r["ev"] == "start"]
        assert max(lateness) < 1000, max(lateness)  # on Redis' calendar: a 30 s skew would show here
        starts = Counter(r["id"] for r in records if r["ev"] == "start")
        assert all(n == 1 for n in starts.values())
