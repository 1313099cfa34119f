"""Connections to a private redis-server, through a proxy that breaks them on purpose.

A command is never sent twice: when the connection drops after Redis ran a script but before its
reply arrived, the caller gets ``RedisUnavailable`` (503) and the script has run exactly once (one
batch leased, the job created once). What runs before a command is sent is another matter: a pooled
connection that the server closed, or that died silently, is replaced and the command goes out on
the new one without the caller noticing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from delayq import Queue, RedisUnavailable, Settings, Topics
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer
from delayq.store import connection
from delayq.store.scripts import Scripts, all_scripts
from delayq.surfaces.api import create_app

from support import recorder
from support.answers import response_json
from support.events import FakeContext, api_event
from support.recorder import RECORDER
from support.servers import BreakingProxy, RedisServer

TOPICS = {"orders": {"target": RECORDER, "batch": 2, "concurrency": 4}}


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client of the test's own, straight to the server, which has every script cached (a
    first EVALSHA answered NOSCRIPT would not run)."""
    client = server.client()
    for script in all_scripts():
        client.script_load(script.source)
    yield client
    client.close()


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[BreakingProxy]:
    with BreakingProxy(server.port) as proxy:
        yield proxy


@pytest.fixture
def make_queue() -> Iterator[Callable[[str], Queue]]:
    made: list[Queue] = []

    def make(url: str) -> Queue:
        queue = Queue(Settings(redis_url=url, namespace=f"c-{uuid.uuid4().hex[:8]}", topics=Topics.parse(TOPICS)))
        made.append(queue)
        return queue

    yield make
    for queue in made:
        queue.close()


def evalsha_calls(admin: redis.Redis) -> int:
    """How many EVALSHA the server ran since the last CONFIG RESETSTAT."""
    stats: dict[str, Any] = admin.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# ----------------------------------------------------------------------------- lost replies


def test_a_create_whose_reply_is_lost_runs_once_and_answers_503_not_409(
    proxy: BreakingProxy, admin: redis.Redis, make_queue: Callable[[str], Queue]
) -> None:
    queue = make_queue(proxy.url)
    assert queue.ping()  # a pooled connection, through the proxy
    admin.config_resetstat()
    proxy.drop_after(b"EVALSHA")
    app = create_app(queue)
    response = app.resolve(api_event("POST", "/jobs", {"topic": "orders", "id": "once", "delay": 60}), FakeContext())
    assert response["statusCode"] == 503, response_json(response)
    assert response_json(response)["error"] == "unavailable"
    wait_for(lambda: proxy.dropped == 1)
    assert evalsha_calls(admin) == 1
    assert queue.get("orders", "once").state == "delayed"  # created, once, by the lost call
    assert proxy.connections == 2  # the lost one, and a new one for the get


def test_a_cancel_whose_reply_is_lost_runs_once_and_raises_unavailable_not_404(
    proxy: BreakingProxy, admin: redis.Redis, make_queue: Callable[[str], Queue]
) -> None:
    queue = make_queue(proxy.url)
    queue.enqueue("orders", {"n": 1}, id="gone", delay=60)
    admin.config_resetstat()
    proxy.drop_after(b"EVALSHA")
    with pytest.raises(RedisUnavailable):
        queue.cancel("orders", "gone")
    wait_for(lambda: proxy.dropped == 1)
    assert evalsha_calls(admin) == 1
    assert queue.stats("orders").delayed == 0


def test_a_take_whose_reply_is_lost_runs_once_and_is_undone(
    proxy: BreakingProxy, admin: redis.Redis, make_queue: Callable[[str], Queue]
) -> None:
    """The take ran (one batch leased, to nobody), its reply lost: the consumer undoes it before it
    stops, so its jobs are ready again at once, their attempt not counted, instead of waiting for their
    leases to expire as failed attempts."""
    queue = make_queue(proxy.url)
    queue.enqueue_many([{"topic": "orders", "id": f"j{i}", "body": i} for i in range(4)])
    assert queue.stats("orders").ready == 4
    admin.config_resetstat()
    proxy.drop_after(Scripts.take.sha.encode())
    summary = Consumer(queue).run(Budget.of(0))  # one pass: one take, in a pipeline; then the untake
    wait_for(lambda: proxy.dropped == 1)
    assert summary["redis_errors"] >= 1
    assert summary["untaken"] == 2
    assert evalsha_calls(admin) == 3  # the read of the topic index, the take, once, and the untake
    stats = queue.stats("orders")
    assert (stats.reserved, stats.ready) == (0, 4)
    assert {queue.get("orders", f"j{i}").attempts for i in range(4)} == {0}
    assert recorder.of("orders") == []
    summary = Consumer(queue).run(Budget.of(0))
    assert (summary["taken"], summary["acked"]) == (2, 2)
    assert sorted((d.id, d.attempt) for d in recorder.of("orders")) == [("j0", 1), ("j1", 1)]


# ----------------------------------------------------------------------------- stale connections


def test_a_pooled_connection_the_server_killed_is_replaced(
    server: RedisServer, admin: redis.Redis, make_queue: Callable[[str], Queue]
) -> None:
    queue = make_queue(server.url)
    assert queue.ping()
    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1  # the queue's pooled one among them
    admin.config_resetstat()
    queue.enqueue("orders", {"n": 1}, id="after-kill", delay=60)
    assert queue.get("orders", "after-kill").body == {"n": 1}
    assert evalsha_calls(admin) == 2  # the create and the get, each once


def test_pooled_connections_to_a_restarted_server_are_replaced(
    server: RedisServer, make_queue: Callable[[str], Queue]
) -> None:
    queue = make_queue(server.url)
    queue.enqueue("orders", {"n": 1}, id="before", delay=60)
    server.restart()  # no persistence: the job is gone, and so are the cached scripts
    queue.enqueue("orders", {"n": 2}, id="after", delay=60)  # NOSCRIPT, then EVAL
    assert queue.get("orders", "after").body == {"n": 2}
    assert queue.stats("orders").delayed == 1


def test_an_idle_connection_that_died_silently_is_replaced_after_its_health_check(
    proxy: BreakingProxy, admin: redis.Redis, make_queue: Callable[[str], Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No FIN, no RST: the pool cannot see it is dead. The PING of the health check, due on a
    connection idle that long, times out; the pool connects again and the command goes out once."""
    monkeypatch.setattr(connection, "HEALTH_CHECK_S", 0.2)
    monkeypatch.setattr(connection, "SOCKET_TIMEOUT_S", 0.5)
    queue = make_queue(proxy.url)
    assert queue.ping()
    proxy.freeze()
    admin.config_resetstat()
    time.sleep(0.3)
    queue.enqueue("orders", {"n": 1}, id="after-freeze", delay=60)
    assert b"PING" in proxy.swallowed
    assert b"EVALSHA" not in proxy.swallowed
    assert evalsha_calls(admin) == 1
    assert queue.get("orders", "after-freeze").body == {"n": 1}
    assert proxy.connections == 2
