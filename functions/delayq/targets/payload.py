"""What every target but ``python:`` receives, and what an answer it gives back becomes."""

from __future__ import annotations

import json
from typing import Any

from delayq.core.job import Job


def payload(job: Job) -> str:
    """The job as compact JSON: ``topic``, ``id``, ``body``, ``attempt``, ``run_at_ms``, ``run_at``,
    ``enqueued_at_ms`` (``Job.to_dict``)."""
    return json.dumps(job.to_dict(), separators=(",", ":"), ensure_ascii=False)


def answer_of(returned: bytes) -> Any:
    """A successful answer's body as the job's result: its JSON when it is JSON, else its text (bytes
    that are not UTF-8 replaced); None when it is empty."""
    if not returned.strip():
        return None
    text = returned.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text
