"""Fixtures every tier shares: the server, a namespace per test, settings and queues in it, the
handlers' environment. A tier's own fixtures are in its ``conftest.py``; helpers in ``support``.

Tests run against the real Redis at ``DELAYQ_TEST_REDIS_URL`` (default 127.0.0.1:6379, database 0),
each in its own namespace, removed afterwards. A Redis that does not answer fails the run: nothing
is skipped.

With ``DELAYQ_TEST_SERVER=valkey`` they run on Valkey: on a private valkey-server started for the
session (or the one at ``DELAYQ_TEST_REDIS_URL``), and the tests that start servers of their own
start valkey-server (``support.servers``). The session checks that the server it was given is the one
it was asked for.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from delayq import Queue, Settings, Topics

from support import recorder
from support.recorder import DEFAULT_TOPICS
from support.servers import SERVER_ENV, RedisServer, Server, server_kind

REDIS_URL = os.environ.get("DELAYQ_TEST_REDIS_URL")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The server every test shares: ``DELAYQ_TEST_REDIS_URL``; else the Redis at 127.0.0.1:6379, or a
    private valkey-server for the session under ``DELAYQ_TEST_SERVER=valkey``."""
    kind = server_kind()
    if REDIS_URL is None and kind == "valkey":
        with RedisServer() as server:
            yield check_server(server.url, kind)
        return
    yield check_server(REDIS_URL or "redis://127.0.0.1:6379/0", kind)


def check_server(url: str, kind: Server) -> str:
    """``url``, once a PING answers there and the server is of ``kind`` (Valkey says so in INFO)."""
    with redis.Redis.from_url(url) as client:
        try:
            info = client.info("server")
        except redis.ConnectionError as exc:
            pytest.fail(f"the tests need {kind} at {url}: {exc}")
    found = str(info.get("server_name") or "redis")
    if found != kind:
        pytest.fail(f"{url} is {found} {info.get(f'{found}_version')}, not {kind} ({SERVER_ENV}={kind})")
    return url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def namespace(redis_client: redis.Redis) -> Iterator[str]:
    """A namespace of this test's own; its keys are deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    yield name
    keys = list(redis_client.scan_iter(match=f"{name}:*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture
def connection_attempts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every TCP connection redis-py tries from now on, as (host, port), in order. A call that gives
    up at once on a Redis that refuses tries once; one that retried would try again (and wait in
    between): counting tries tells "quickly" apart without timing anything."""
    attempts: list[tuple[str, int]] = []
    connect = redis.connection.Connection._connect

    def counted(connection: redis.connection.Connection) -> Any:
        attempts.append((connection.host, connection.port))
        return connect(connection)

    monkeypatch.setattr(redis.connection.Connection, "_connect", counted)
    return attempts


@pytest.fixture(autouse=True)
def _clean_recorder() -> Iterator[None]:
    recorder.reset()
    yield
    recorder.reset()


@pytest.fixture
def settings(redis_url: str, namespace: str) -> Settings:
    """Settings for this test: its namespace, the recorder topics, a fast tick."""
    return Settings(redis_url=redis_url, namespace=namespace, topics=Topics.parse(DEFAULT_TOPICS), tick=0.2)


@pytest.fixture
def make_queue(settings: Settings) -> Iterator[Callable[..., Queue]]:
    """``make_queue(topics=..., partitions=..., tick=...)``: a Queue in this test's namespace."""
    made: list[Queue] = []

    def make(**changes: Any) -> Queue:
        if isinstance(changes.get("topics"), dict):
            changes["topics"] = Topics.parse(changes["topics"])
        queue = Queue(settings.with_(**changes))
        made.append(queue)
        return queue

    yield make
    for queue in made:
        if queue._redis is not None:
            queue._redis.close()  # not .redis: that checks the namespace's layout first


@pytest.fixture
def queue(make_queue: Callable[..., Queue]) -> Queue:
    return make_queue()


@pytest.fixture
def handler_env(monkeypatch: pytest.MonkeyPatch, redis_url: str, namespace: str) -> dict[str, str]:
    """The environment the Lambda handlers read, pointed at this test's namespace."""
    env = {
        "DELAYQ_REDIS_URL": redis_url,
        "DELAYQ_NAMESPACE": namespace,
        "DELAYQ_TOPICS": json.dumps(DEFAULT_TOPICS),
        "DELAYQ_TICK": "0.2",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env
