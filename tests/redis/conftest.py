"""Fixtures of the Redis tier."""

from __future__ import annotations

import pytest
import redis

from support.scripts import Lua


@pytest.fixture
def lua(redis_client: redis.Redis, namespace: str) -> Lua:
    """The scripts on partition 0 of this test's namespace (``support.scripts.Lua``)."""
    return Lua(redis_client, namespace)
