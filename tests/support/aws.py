"""Helpers for the AWS target tests: fake credentials, a clean client cache, jobs to deliver.

``tests/targets`` is on pytest's ``pythonpath`` (pyproject.toml). A test module imports the autouse
fixture ``aws_env`` by name, which makes it apply to every test of that module.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody

from delayq import Job
from delayq.aws import clients

ACCOUNT = "123456789012"  # moto's default account
REGION = "eu-west-1"  # where the targets live: not the default region below
DEFAULT_REGION = "us-east-1"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake credentials and a default region that is not the targets' one; no profile or endpoint
    from the environment; a fresh default boto3 session and an empty client cache."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": DEFAULT_REGION,
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    clients.clear()
    yield
    clients.clear()


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
