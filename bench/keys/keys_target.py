"""The flow keys run's handlers: ``python:keys_target:deliver`` notes that a job started, then takes
``BENCH_HANDLER_MS`` ms (0 by default: nothing else), as a handler that does some work would;
``python:keys_target:interval`` takes that long too, then notes when it started and ended, and the
job's key, for the concurrency scenario to find two jobs of one key running at once.

``deliver``: one line ``{"id", "start_ms"}`` per delivery, the format of every worker of the benchmark
(``bench/README.md``); ``interval``: ``{"id", "start_ms", "key", "start_ns", "end_ns"}`` once it ends
(``time.time_ns()``: every consumer process of a run is on this machine, one clock). Appended to the
file ``BENCH_OUT`` names with one write(2) on an O_APPEND descriptor: lines from several threads and
processes never interleave, and none is lost when the process is killed.
"""

from __future__ import annotations

import json
import os
import time

from delayq import Job

_OUT = os.open(os.environ["BENCH_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
_WORK_S = float(os.environ.get("BENCH_HANDLER_MS", "0")) / 1000


def deliver(job: Job) -> None:
    start_ms = time.time() * 1000  # first thing: the handler has started
    os.write(_OUT, f'{{"id":"{job.id}","start_ms":{start_ms:.3f}}}\n'.encode())
    if _WORK_S:
        time.sleep(_WORK_S)


def interval(job: Job) -> None:
    start_ns = time.time_ns()  # first thing: the handler has started
    if _WORK_S:
        time.sleep(_WORK_S)
    end_ns = time.time_ns()  # last thing: it ends
    line = {"id": job.id, "start_ms": start_ns / 1e6, "key": job.key, "start_ns": start_ns, "end_ns": end_ns}
    os.write(_OUT, (json.dumps(line, separators=(",", ":")) + "\n").encode())
