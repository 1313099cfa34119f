"""What every target but ``python:`` receives."""

from __future__ import annotations

import json

from delayq.core.job import Job


def payload(job: Job) -> str:
    """The job as compact JSON: ``topic``, ``id``, ``body``, ``attempt``, ``run_at_ms``, ``run_at``,
    ``enqueued_at_ms`` (``Job.to_dict``)."""
    return json.dumps(job.to_dict(), separators=(",", ":"), ensure_ascii=False)
