"""AWS clients: one per service and region per container, created on first use, so a Lambda container
reuses its connections across invocations and pays for a client only if it needs it. Creation is
serialised: boto3's default session is not safe to use from several threads at once.

Each client has one fixed configuration. How long one call may wait for an answer is set per call
instead (``read_timeout``): a topic's or a job's own timeout makes no new client and no new pool of
connections. botocore reads it from the call's request context (botocore >= 1.43.68); older ones
ignore it and the client's read timeout applies.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import boto3
from botocore.config import Config

CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 60  # a call made outside ``read_timeout``
SERVICE_READ_TIMEOUT_S = {"lambda": 905}  # Invoke waits for the function: longer than any runs (900 s)
MAX_ATTEMPTS = 3  # in all, the first included
POOL_SIZE = 64  # connections per client: a topic's workers share its client

_clients: dict[tuple[str, str | None], Any] = {}
_lock = threading.Lock()
_call_read_timeout: ContextVar[float | None] = ContextVar("delayq_aws_read_timeout", default=None)


def client(service: str, region: str | None = None) -> Any:
    """The boto3 client for ``service`` in ``region`` (default: the environment's)."""
    key = (service, region)
    found = _clients.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in _clients:
            config = Config(
                connect_timeout=CONNECT_TIMEOUT_S,
                read_timeout=SERVICE_READ_TIMEOUT_S.get(service, READ_TIMEOUT_S),
                retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
                max_pool_connections=POOL_SIZE,
            )
            made = boto3.client(service, region_name=region, config=config)  # type: ignore[call-overload]
            made.meta.events.register("before-call", _apply_read_timeout)
            _clients[key] = made
        return _clients[key]


@contextmanager
def read_timeout(seconds: float) -> Iterator[None]:
    """Calls made in this block, by this thread, wait at most ``seconds`` for each answer (each of
    the SDK's attempts), whatever their client's read timeout."""
    token = _call_read_timeout.set(seconds)
    try:
        yield
    finally:
        _call_read_timeout.reset(token)


def _apply_read_timeout(context: dict[str, Any], **kwargs: Any) -> None:
    """botocore's ``before-call`` event: the read timeout of the enclosing ``read_timeout`` block."""
    seconds = _call_read_timeout.get()
    if seconds is not None:
        context["read_timeout"] = seconds


def clear() -> None:
    """Forgets every client (tests; a process whose credentials changed)."""
    with _lock:
        _clients.clear()


def count() -> int:
    """How many clients this process made."""
    return len(_clients)
