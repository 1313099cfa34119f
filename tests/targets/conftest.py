"""Fixtures of the targets tier. ``aws_env`` is not autouse: the AWS modules ask for it
(``pytestmark = pytest.mark.usefixtures("aws_env")``), the webhook tests run in the environment as it is."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest

from delayq.aws import clients

from support.aws import DEFAULT_REGION


@pytest.fixture
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
