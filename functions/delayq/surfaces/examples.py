"""The local stack's example topics (``EXAMPLE_TOPICS``, what ``make dev`` runs without
``DELAYQ_TOPICS``) and their targets, named ``python:delayq.local:log_delivery`` and
``python:delayq.local:fail_delivery``. Apart from the stack: a consumer anywhere (a Lambda too) can
load them without the ``local`` extra's HTTP server."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from delayq.core.job import Job

log = logging.getLogger("delayq.local")

EXAMPLE_TOPICS = {
    "example": {"target": "python:delayq.local:log_delivery", "retries": 2, "backoff": [1, 5, 30]},
    "example-fails": {
        "target": "python:delayq.local:fail_delivery",
        "retries": 1,
        "backoff": [2],
        "on_dead": "example-dead",  # a callback: each job that goes dead makes one there (``*`` logs it)
    },
    "*": {"target": "python:delayq.local:log_delivery"},
}


LOGGED_BODY_CHARS = 1000  # of a body in a delivery's log line: a 256 KB body is not a log line


def log_delivery(job: Job) -> dict[str, Any]:
    """The example topic's target: logs each delivery, how late it started and its body (cut); its
    result says it did, and how late (this machine's clock)."""
    late_ms = time.time() * 1000 - job.run_at_ms
    body = json.dumps(job.body)
    if len(body) > LOGGED_BODY_CHARS:
        body = f"{body[:LOGGED_BODY_CHARS]}… ({len(body):,} characters)"
    log.info("delivered %s/%s attempt %d, %.0f ms after its run-at: %s", job.topic, job.id, job.attempt, late_ms, body)
    return {"logged": True, "late_ms": round(late_ms)}


def fail_delivery(job: Job) -> None:
    """The failing example topic's target: every delivery fails, so the job is retried once, then
    dead, and the dead-letter routes have something to show."""
    raise RuntimeError(f"{job.topic} fails every delivery: see GET /topics/{job.topic}/dead, then replay or purge")
