"""The flow keys run's handler, ``python:keys_target:deliver``: notes that a job started, then takes
``BENCH_HANDLER_MS`` ms (0 by default: nothing else), as a handler that does some work would.

One line ``{"id", "start_ms"}`` per delivery, the format of every worker of the benchmark
(``bench/README.md``), appended to the file ``BENCH_OUT`` names with one write(2) on an O_APPEND
descriptor: lines from several threads never interleave, and none is lost when the process is killed.
"""

from __future__ import annotations

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
