"""Scenario 6: the functions' clock off by +30 s and by -30 s.

The enqueueing process, the sweeper and the consumer all run under libfaketime with their wall clock
30 s ahead or behind Redis'. delayq never decides with a machine's clock: a delay is added to Redis'
``TIME`` inside the enqueue script, and every due, lease and backoff decision is made in Lua with
``TIME``. So jobs due in 2-5 s are handed over at their run-at by Redis' clock, neither ~30 s early
nor ~30 s late, and a retry waits its backoff by Redis' clock too.

Jobs with an absolute ``run_at`` (epoch seconds, and ISO-8601 in UTC and with an offset) are enqueued
through the API handler (``functions/enqueue.py``, API Gateway events built on the ``events/`` sample)
in a skewed process too: due 3-5 s ahead by Redis' clock, which is 25-28 s in the past by that
process's clock at +30 s (a "past means now" decided there would make them due at once) and 33-35 s
ahead at -30 s. Each is stored with the run-at asked, and none is handed over before it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from support.faults import (
    Enqueued,
    Fleet,
    by_job,
    check,
    faketime_env,
    loop_env,
    read_records,
    redis_ms,
    report,
    topics_json,
    wait_until,
)
from support.servers import RedisServer

JOBS = 40
RETRIED = 2  # of which this many fail their first attempt, and are retried after BACKOFF_S
BACKOFF_S = 1.0
MAX_LATE_MS = 1000  # by Redis' clock; a 30 s skew leaking into any decision would be far beyond it
ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, threading, time
began = time.monotonic()
threading.Event().wait(0.2)  # timed waits work in this faketime mode (the loops rely on them)
print(json.dumps({"wall_ms": time.time() * 1000, "waited_s": time.monotonic() - began}))
"""

ENQUEUE = """
import json, sys
from delayq import Queue
results = Queue.from_env().enqueue_many(json.loads(sys.argv[1]))
print(json.dumps([{"status": r.status, **r.to_dict()} if r.status == 201 else {"status": r.status} for r in results]))
"""

# The API handler, one POST /jobs per job: the answers' status and body.
API_ENQUEUE = """
import json, sys
sys.path.insert(0, "tests")
import enqueue
from support.events import FakeContext, api_event
answers = []
for job in json.loads(sys.argv[1]):
    response = enqueue.lambda_handler(api_event("POST", "/jobs", job), FakeContext())
    answers.append({"status": response["statusCode"], "body": json.loads(response["body"])})
print(json.dumps(answers))
"""
ABSOLUTE = 12  # jobs with an absolute run_at, a third in each form


def run_child(code: str, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.fault
@pytest.mark.timeout(90)
@pytest.mark.parametrize("offset", ["+30s", "-30s"])
def test_functions_clock_off_by_30_s(tmp_path: Path, offset: str) -> None:
    offset_ms = int(offset.rstrip("s")) * 1000
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer() as server:
        topics = topics_json(skewed={"timeout": 5, "retries": 2, "backoff": [BACKOFF_S]})
        env = loop_env(server.url, "faults", topics, deliveries, **faketime_env(offset))
        client = server.client()

        # First: does LD_PRELOAD faketime really move Python's time.time() in a child?
        before = redis_ms(client)
        probe = json.loads(run_child(PROBE, env))
        after = redis_ms(client)
        skew_ms = probe["wall_ms"] - (before + after) / 2
        assert abs(skew_ms - offset_ms) < 1500, f"the child's clock is off by {skew_ms:.0f} ms, not {offset}"
        assert 0.15 < probe["waited_s"] < 2, probe
        plain = {name: value for name, value in env.items() if not name.startswith("FAKETIME")} | {
            "LD_PRELOAD": os.environ.get("LD_PRELOAD", "")
        }
        assert abs(json.loads(run_child(PROBE, plain))["wall_ms"] - redis_ms(client)) < 1500

        fleet = Fleet(env, tmp_path)
        with fleet.running():
            began = time.monotonic()
            fleet.sweeper("sweeper")
            fleet.consumer("consumer")
            # Enqueued by a skewed process too: a delay counts from Redis' clock, not the caller's.
            wanted = [
                {
                    "topic": "skewed",
                    "id": f"job-{i:03d}",
                    "delay": 2 + 3 * i / JOBS,
                    "body": {"fail_until": i < RETRIED},
                }
                for i in range(JOBS)
            ]
            before = redis_ms(client)
            results = json.loads(run_child(ENQUEUE, env, json.dumps(wanted)))
            after = redis_ms(client)
            jobs = Enqueued.from_results(results)
            for want, job in zip(wanted, jobs, strict=True):
                delay_ms = want["delay"] * 1000
                assert before + delay_ms - 1 <= job.run_at_ms <= after + delay_ms + 1, (want, job, before, after)

            # Absolute run-ats, through the API handler in a skewed process.
            base_ms = int(redis_ms(client)) + 3000
            asked_ms = [base_ms + i * 2000 // ABSOLUTE for i in range(ABSOLUTE)]
            absolute = [
                {"topic": "skewed", "id": f"abs-{i:03d}", "run_at": run_at_form(i, ms), "body": {"asked_ms": ms}}
                for i, ms in enumerate(asked_ms)
            ]
            # The last line: the handler prints its metrics and logs (EMF, JSON lines) to stdout before.
            answers = json.loads(run_child(API_ENQUEUE, env, json.dumps(absolute)).strip().splitlines()[-1])
            assert [a["status"] for a in answers] == [201] * ABSOLUTE, answers
            for want, ms, answer in zip(absolute, asked_ms, answers, strict=True):
                # Stored as asked (ISO and float seconds round up to the ms: never before it).
                assert ms <= answer["body"]["run_at_ms"] <= ms + 1, (want, answer)
                jobs.append(Enqueued("skewed", answer["body"]["id"], ms))  # early if started before ``ms``
            assert redis_ms(client) < base_ms, "the API jobs fell due before they were all enqueued"

            ended = lambda: len({r["id"] for r in read_records(deliveries) if r["ev"] == "end"})  # noqa: E731
            assert wait_until(lambda: ended() == JOBS + ABSOLUTE, 20), ended()
            summaries = fleet.stop_all()
            duration = time.monotonic() - began

        records = read_records(deliveries)
        # The consumer really ran skewed: its clock against Redis' at each delivery.
        skews = sorted(r["wall_ms"] - r["redis_ms"] for r in records)
        consumer_skew_ms = skews[len(skews) // 2]
        assert abs(consumer_skew_ms - offset_ms) < 1500, consumer_skew_ms
        # Retries wait their backoff by Redis' clock.
        backoffs = []
        for group in by_job(records).values():
            failed = [r for r in group if r["ev"] == "fail"]
            if failed:
                retry = next(r for r in group if r["ev"] == "start" and r["attempt"] == 2)
                backoffs.append(retry["redis_ms"] - failed[0]["redis_ms"])
        assert len(backoffs) == RETRIED
        assert all(BACKOFF_S * 1000 - 5 <= b <= BACKOFF_S * 1000 + MAX_LATE_MS for b in backoffs), backoffs
        totals = check(
            f"6 clock {offset}",
            jobs,
            records,
            duration_s=duration,
            consumer_clock_minus_redis_ms=round(consumer_skew_ms),
            retry_waits_ms=[round(b) for b in backoffs],
        )
        report(f"[faults]   summaries: {summaries}")
        totals.assert_clean()
        assert max(totals.lateness_ms) < MAX_LATE_MS, max(totals.lateness_ms)  # nor ~30 s late
        assert summaries["consumer"]["retried"] == RETRIED
        # Each absolute job handed over once, with the run-at asked, not before it by Redis' clock.
        asked = {want["id"]: ms for want, ms in zip(absolute, asked_ms, strict=True)}
        starts = {r["id"]: r for r in records if r["ev"] == "start" and r["id"] in asked}
        assert len(starts) == ABSOLUTE, sorted(starts)
        assert all(asked[i] <= r["run_at_ms"] <= asked[i] + 1 for i, r in starts.items()), starts
        assert all(r["redis_ms"] >= asked[i] for i, r in starts.items()), starts


def run_at_form(i: int, ms: int) -> float | str:
    """Epoch ms ``ms`` as ``run_at``: epoch seconds, ISO-8601 UTC, or ISO-8601 at +05:30 (a third each)."""
    if i % 3 == 0:
        return ms / 1000
    when = datetime.fromtimestamp(ms / 1000, tz=UTC)
    if i % 3 == 1:
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return when.astimezone(timezone(timedelta(hours=5, minutes=30))).isoformat(timespec="milliseconds")
