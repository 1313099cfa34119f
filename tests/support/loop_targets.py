"""Targets for the loop tests, named ``python:support.loop_targets:NAME`` in topic configs.

The tests import this module as ``support.loop_targets`` and the consumer resolves
``python:support.loop_targets:NAME`` to this very module. ``reset()`` runs before and after each test
of ``tests/loops`` (its ``conftest.py``).

Targets:
  ``gate``          records the job, then blocks until ``release(id)`` (at most 10 s)
  ``counted``       counts handlers running at once (``max_active``), sleeps ``body["sleep"]``
  ``switch``        records the job, fails while ``failing`` is true
  ``first_sleeps``  attempt 1 sleeps ``body["sleep"]`` (to outlive its timeout); attempt 2 waits
                    until attempt 1 has returned, looks its own job up in ``queue`` and succeeds
  ``break_redis``   records the job, then points ``queue`` at a Redis that does not answer
  ``permanent``     always fails with ``PermanentFailure``
  ``unreadable``    records the job, then fails with an exception whose message cannot be read
  ``answers``       records the job, returns ``body["answer"]`` (``body["answer_mb"]``: that many MB
                    of text; ``body["answer_kib"]``: that many KiB of text, its id first)
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from delayq import Job, JobInfo, PermanentFailure, Queue

GATE_LIMIT_S = 10.0
DEAD_REDIS_URL = "redis://127.0.0.1:1/0"


@dataclass
class Call:
    job: Job
    started_ms: float
    ended_ms: float | None = None
    seen: JobInfo | None = None  # what queue.get answered from inside the handler
    extra: dict[str, Any] = field(default_factory=dict)


_lock = threading.Lock()
calls: list[Call] = []
gates: dict[str, threading.Event] = {}
first_done: dict[str, threading.Event] = {}
active = 0
max_active = 0
failing = False
queue: Queue | None = None
broken_client: Any = None


def reset() -> None:
    """Forget everything and release every blocked handler."""
    global active, max_active, failing, queue, broken_client  # noqa: PLW0603
    with _lock:
        for event in [*gates.values(), *first_done.values()]:
            event.set()
        gates.clear()
        first_done.clear()
        calls.clear()
        active = max_active = 0
        failing = False
        queue = None
        broken_client = None


def of(job_id: str | None = None) -> list[Call]:
    with _lock:
        return [c for c in calls if job_id is None or c.job.id == job_id]


def _event(table: dict[str, threading.Event], key: str) -> threading.Event:
    with _lock:
        return table.setdefault(key, threading.Event())


def _record(job: Job) -> Call:
    call = Call(job, time.time() * 1000)
    with _lock:
        calls.append(call)
    return call


def _end(call: Call) -> None:
    call.ended_ms = time.time() * 1000


def release(job_id: str) -> None:
    _event(gates, job_id).set()


def gate(job: Job) -> None:
    call = _record(job)
    _event(gates, job.id).wait(GATE_LIMIT_S)
    _end(call)


def counted(job: Job) -> None:
    global active, max_active  # noqa: PLW0603
    call = _record(job)
    with _lock:
        active += 1
        max_active = max(max_active, active)
    try:
        time.sleep(float(job.body.get("sleep", 0)))
    finally:
        with _lock:
            active -= 1
        _end(call)


def switch(job: Job) -> None:
    call = _record(job)
    _end(call)
    if failing:
        raise RuntimeError(f"switched off at attempt {job.attempt}")


def first_sleeps(job: Job) -> None:
    call = _record(job)
    done = _event(first_done, job.id)
    if job.attempt == 1:
        time.sleep(float(job.body["sleep"]))
        _end(call)
        done.set()
        return
    call.extra["first_was_running"] = not done.is_set()
    done.wait(GATE_LIMIT_S)
    time.sleep(0.1)  # let the consumer handle attempt 1's late result while this lease is live
    if queue is not None:
        call.seen = queue.get(job.topic, job.id)
    _end(call)


def break_redis(job: Job) -> None:
    call = _record(job)
    assert queue is not None
    if broken_client is not None:
        queue._redis = broken_client
    _end(call)


def permanent(job: Job) -> None:
    """Always fails permanently: the job must go dead at its first attempt."""
    _record(job)
    raise PermanentFailure(f"job {job.id} can never succeed")


class UnreadableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message for you")


def unreadable(job: Job) -> None:
    """Fails with an exception whose ``str()`` itself raises."""
    _record(job)
    raise UnreadableError


def answers(job: Job) -> Any:
    """Succeeds with the answer its body asks for: its result."""
    _record(job)
    if "answer_mb" in job.body:
        return "r" * (job.body["answer_mb"] << 20)
    if "answer_kib" in job.body:
        return job.id.ljust(job.body["answer_kib"] << 10, ".")
    return job.body.get("answer")
