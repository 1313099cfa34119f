"""The fault tier's target, ``python:support.fault_target:deliver``, run inside consume PROCESSES.

Every delivery appends JSON lines to the file named by ``DELAYQ_FAULT_LOG``: one when it starts
(``"ev": "start"``), and one when it ends, ``"end"`` on success or ``"fail"`` on a planned failure.
Each line is one ``write`` on a descriptor opened with ``O_APPEND``, so the lines of concurrent
threads and processes never interleave and a process killed with SIGKILL leaves whole lines only.

Each line carries the job's flow key (``key``, null without one) and the Redis server's time
(``redis_ms``), read with ``TIME`` on a client of its own (``DELAYQ_FAULT_REDIS_URL``, default
``DELAYQ_REDIS_URL``): the process may run under faketime, and "early" means early by Redis' clock,
the only clock delayq decides with. When Redis does not answer
(an outage), the time is the process clock plus the last offset measured (``"clock": "offset"``).
``wall_ms`` is the process's own clock, to show how far it is off.

Body keys (all optional): ``sleep`` seconds (waited on an Event: libfaketime breaks ``time.sleep``
in some modes, see support.faults.faketime_env), ``sleep_until`` n (sleep on attempts 1..n only),
``fail`` true (every attempt fails), ``fail_until`` n (attempts 1..n fail), ``lease`` true (the start's
line also carries ``lease_ms``, the job's lease deadline as the take wrote it: the take's Redis time
plus the timeout and the consumer's grace).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import redis

from delayq import Job, Queue

try:  # the layered package; a checkout from before it (``bench/failover/run.py --compare``) has it at the top
    from delayq.store.keys import Keyspace
except ImportError:
    from delayq.keys import Keyspace  # type: ignore[import-not-found, no-redef]

LOG_ENV = "DELAYQ_FAULT_LOG"
REDIS_ENV = "DELAYQ_FAULT_REDIS_URL"


class _State:
    """Per process: one Redis client, one log descriptor, the last offset measured."""

    lock = threading.Lock()
    client: redis.Redis | None = None
    fd: int | None = None
    offset_ms = 0.0  # Redis time minus this process's clock
    keys: Keyspace | None = None  # of the settings in the environment (``lease``)


def _redis() -> redis.Redis:
    with _State.lock:
        if _State.client is None:
            url = os.environ.get(REDIS_ENV) or os.environ["DELAYQ_REDIS_URL"]
            _State.client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        return _State.client


def redis_now_ms() -> tuple[float, str]:
    """Redis' time in ms (``"redis"``), or the process clock plus the last offset (``"offset"``)."""
    try:
        seconds, micros = _redis().time()
    except (redis.RedisError, OSError):
        return time.time() * 1000 + _State.offset_ms, "offset"
    now = seconds * 1000 + micros / 1000
    _State.offset_ms = now - time.time() * 1000
    return now, "redis"


def _write(record: dict[str, Any]) -> None:
    with _State.lock:
        if _State.fd is None:
            _State.fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fd = _State.fd
    os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())


def _record(event: str, job: Job, **extra: Any) -> None:
    now, clock = redis_now_ms()
    _write(
        extra
        | {
            "ev": event,
            "topic": job.topic,
            "id": job.id,
            "key": getattr(job, "key", None),  # a checkout from before flow keys has none (bench --compare)
            "attempt": job.attempt,
            "run_at_ms": job.run_at_ms,
            "redis_ms": round(now, 3),
            "clock": clock,
            "wall_ms": round(time.time() * 1000, 3),
            "pid": os.getpid(),
        }
    )


def _lease_ms(job: Job) -> float | None:
    """The job's lease deadline (ms) in its partition's lease set, read from Redis."""
    with _State.lock:
        if _State.keys is None:
            _State.keys = Queue.from_env().keys
        keys = _State.keys
    partition = keys.for_job(job.topic, job.id)
    if hasattr(partition, "leases"):
        score = _redis().zscore(partition.leases, f"{job.topic}/{job.id}")
    else:  # a checkout from before the partition's lease sets (a benchmark's --compare)
        score = _redis().zscore(f"{partition.prefix}{job.topic}:leased", job.id)
    return None if score is None else float(score)


def deliver(job: Job) -> None:
    body = job.body if isinstance(job.body, dict) else {}
    _record("start", job, **({"lease_ms": _lease_ms(job)} if body.get("lease") else {}))
    if body.get("sleep") and job.attempt <= int(body.get("sleep_until", job.attempt)):
        threading.Event().wait(float(body["sleep"]))
    if body.get("fail") or job.attempt <= int(body.get("fail_until", 0)):
        _record("fail", job)
        raise RuntimeError(f"planned failure of attempt {job.attempt} (poison)")
    _record("end", job)
