"""Helpers of the AWS target tests: the fake account and regions, jobs to deliver, Lambda answers. The
fake credentials and the clean client cache are the fixture ``aws_env`` (``tests/targets/conftest.py``).
"""

from __future__ import annotations

import io
import json
from typing import Any

from botocore.response import StreamingBody

from delayq import Job

ACCOUNT = "123456789012"  # moto's default account
REGION = "eu-west-1"  # where the targets live: not the default region below
DEFAULT_REGION = "us-east-1"


def make_job(**changes: Any) -> Job:
    """A job as the consumer hands it over, with ``changes`` applied."""
    fields: dict[str, Any] = {
        "topic": "orders",
        "id": "order-1",
        "body": {"total": 42, "note": "déjà vu ✓"},
        "attempt": 1,
        "run_at_ms": 1_700_000_060_000,
        "enqueued_at_ms": 1_700_000_000_000,
    }
    fields.update(changes)
    return Job(**fields)


def streaming(data: Any) -> StreamingBody:
    """A Lambda ``Payload`` answer: ``data`` as JSON (bytes are used as they are)."""
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))
