"""Fixtures of the API tier: the enqueue handler for this test's namespace, bare or seeded."""

from __future__ import annotations

import pytest
import redis

from support.api import Api


@pytest.fixture
def api(handler_env: dict[str, str], redis_client: redis.Redis, namespace: str) -> Api:
    """The enqueue handler reloaded for this test's namespace (``handler_env``)."""
    return Api.start(redis_client, namespace)


@pytest.fixture
def seeded(api: Api) -> Api:
    """``api`` with a delayed job, ``orders/seed``: a refusal that wrote anything would be seen. A
    module that needs more extends it (``def seeded(seeded)``)."""
    api.create("orders", "seed", delay=600, body={"seed": True})
    return api
