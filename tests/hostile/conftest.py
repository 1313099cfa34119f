"""Fixtures of the hostile-input tier."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from support.hostile import Hostile


@pytest.fixture
def api(
    handler_env: dict[str, str], redis_client: redis.Redis, namespace: str, request: pytest.FixtureRequest
) -> Iterator[Hostile]:
    """The handler reloaded for this test's namespace, with the seeded jobs (so that generated ids
    sometimes name real ones: ``seed-delayed``, ``seed-dead`` ...). At the end, the namespace still
    keeps its invariant (``support.invariants``), and the test's requests were answered each status its
    ``answers`` mark names at least once: a generated test that never saw one tests less than it claims."""
    api = Hostile.start(redis_client, namespace)
    yield api
    api.jobs()
    marker = request.node.get_closest_marker("answers")
    missing = set(marker.args if marker else ()) - api.statuses.keys()
    assert not missing, f"never answered {sorted(missing)}: {sorted(api.statuses.items())}"
