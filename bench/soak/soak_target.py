"""The mixed soak's handler, ``python:soak_target:deliver``: notes that an attempt started, then does
what the job's body asks.

First thing, one line ``{"id", "topic", "attempt", "run_at_ms", "start_ms"}`` appended to the file
``BENCH_OUT`` names, with one write(2) on an O_APPEND descriptor (as ``bench/scale/scale_target.py``): lines from
several threads never interleave, and none is lost when the process is killed. Then, by the body:

- ``{"fail": n}``: raises ``RuntimeError`` while the attempt is at most ``n`` (a planned failure);
- ``{"sleep": s, "sleep_attempts": k}``: sleeps ``s`` seconds on attempts up to ``k`` (every attempt
  without ``sleep_attempts``): longer than the topic's timeout, a timed-out attempt;
- anything else: returns at once, a success.

A callback job (its body has an ``outcome``) answers what it reports on, ``{"of": "topic/id",
"outcome"}``: its receipt's result, which the run counts.
"""

from __future__ import annotations

import os
import time

from delayq import Job

_OUT = os.open(os.environ["BENCH_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def deliver(job: Job) -> dict[str, str] | None:
    start_ms = time.time() * 1000  # first thing: the handler has started
    line = (
        f'{{"id":"{job.id}","topic":"{job.topic}","attempt":{job.attempt},'
        f'"run_at_ms":{job.run_at_ms},"start_ms":{start_ms:.3f}}}\n'
    )
    os.write(_OUT, line.encode())
    body = job.body if isinstance(job.body, dict) else {}
    fail = body.get("fail")
    if isinstance(fail, int) and job.attempt <= fail:
        raise RuntimeError(f"planned failure: attempt {job.attempt} of a job that fails {fail} times")
    sleep = body.get("sleep")
    if isinstance(sleep, (int, float)) and job.attempt <= body.get("sleep_attempts", job.attempt):
        time.sleep(sleep)
    if "outcome" in body:
        return {"of": f"{body['topic']}/{body['id']}", "outcome": body["outcome"]}
    return None
