"""AWS clients: one per service, region and read timeout per container, created on first use, so a
Lambda container reuses its connections across invocations and pays for a client only if it needs it.
Creation is serialised: boto3's default session is not safe to use from several threads at once."""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config

CONNECT_TIMEOUT_S = 5
MAX_ATTEMPTS = 3  # in all, the first included
POOL_SIZE = 64  # connections per client: a topic's workers share its client

_clients: dict[tuple[str, str | None, int], Any] = {}
_lock = threading.Lock()


def client(service: str, region: str | None = None, read_timeout: int = 60) -> Any:
    """The boto3 client for ``service`` in ``region`` (default: the environment's)."""
    key = (service, region, read_timeout)
    found = _clients.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in _clients:
            config = Config(
                connect_timeout=CONNECT_TIMEOUT_S,
                read_timeout=read_timeout,
                retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
                max_pool_connections=POOL_SIZE,
            )
            _clients[key] = boto3.client(service, region_name=region, config=config)  # type: ignore[call-overload]
        return _clients[key]


def clear() -> None:
    """Forgets every client (tests; a process whose credentials changed)."""
    with _lock:
        _clients.clear()


def count() -> int:
    """How many clients this process made."""
    return len(_clients)
