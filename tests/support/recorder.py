"""The tests' target (``RECORDER``: ``python:support.recorder:deliver``), driven by the job's body, and
the topics every tier starts with (``DEFAULT_TOPICS``).

Body keys it understands (all optional):
  ``fail``        true: every attempt fails
  ``fail_until``  n: attempts 1..n fail, later ones succeed
  ``sleep``       seconds to sleep before answering

Every delivery is recorded, with its start time, so tests can check that nothing was lost,
duplicated or handed over early.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from delayq import Job

RECORDER = "python:support.recorder:deliver"

# Topics of the events/ samples, and "*" for any other; all delivered to the recorder.
DEFAULT_TOPICS: dict[str, Any] = {
    "orders": {"target": RECORDER},
    "reminders": {"target": RECORDER},
    "payments": {"target": RECORDER, "retries": 8},
    "*": {"target": RECORDER},
}


@dataclass(frozen=True)
class Delivery:
    topic: str
    id: str
    attempt: int
    body: Any
    run_at_ms: int
    enqueued_at_ms: int
    started_ms: float
    ok: bool
    key: str | None = None

    @property
    def lateness_ms(self) -> float:
        return self.started_ms - self.run_at_ms


_lock = threading.Lock()
deliveries: list[Delivery] = []
running: Counter[tuple[str, str | None]] = Counter()  # (topic, key) -> handlers running now
peaks: Counter[tuple[str, str | None]] = Counter()  # (topic, key) -> most handlers ever running at once


def reset() -> None:
    with _lock:
        deliveries.clear()
        running.clear()
        peaks.clear()


def of(topic: str | None = None, job_id: str | None = None) -> list[Delivery]:
    with _lock:
        return [d for d in deliveries if (topic is None or d.topic == topic) and (job_id is None or d.id == job_id)]


def deliver(job: Job) -> None:
    started = time.time() * 1000
    body = job.body if isinstance(job.body, dict) else {}
    fails = bool(body.get("fail")) or job.attempt <= int(body.get("fail_until", 0))
    at = (job.topic, job.key)
    with _lock:
        deliveries.append(
            Delivery(
                job.topic, job.id, job.attempt, job.body, job.run_at_ms, job.enqueued_at_ms, started, not fails, job.key
            )
        )
        running[at] += 1
        peaks[at] = max(peaks[at], running[at])
    try:
        if body.get("sleep"):
            time.sleep(float(body["sleep"]))
    finally:
        with _lock:
            running[at] -= 1
    if fails:
        raise RuntimeError(f"planned failure of attempt {job.attempt}")
