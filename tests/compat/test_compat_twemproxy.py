"""delayq behind twemproxy (nutcracker, ``hash_tag: "{}"``) in front of two Redis servers: the whole
lifecycle through the proxy, each partition on one backend; the proxy really is strict (it hangs up
on what the contract forbids); and NOSCRIPT after a SCRIPT FLUSH on the backends falls back to EVAL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from delayq import Queue
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper
from delayq.store.connection import client_options
from delayq.store.scripts import Scripts, all_scripts
from delayq.surfaces.api import create_app

from support import recorder
from support.answers import response_json
from support.compat import (
    CALLBACK_TOPICS,
    TOPIC,
    callback_lifecycle,
    check_deliveries,
    direct_client,
    lifecycle,
    make_settings,
    schedule_lifecycle,
)
from support.events import api_event
from support.servers import RedisServer, Twemproxy


@pytest.fixture(scope="module")
def backends() -> Iterator[list[RedisServer]]:
    with RedisServer() as first, RedisServer() as second:
        yield [first, second]


@pytest.fixture(scope="module")
def proxy(backends: list[RedisServer]) -> Iterator[Twemproxy]:
    with Twemproxy(backends) as server:
        yield server


@pytest.fixture
def backend_clients(backends: list[RedisServer]) -> Iterator[list[redis.Redis]]:
    clients = [direct_client(backend.port) for backend in backends]
    yield clients
    for client in clients:
        client.close()


def where_keys_are(clients: list[redis.Redis], namespace: str) -> dict[str, list[int]]:
    """Each partition tag of ``namespace`` -> the backends (indexes) holding keys with it; the
    namespace's layout key (no tag: one per namespace) as ``_layout``."""
    found: dict[str, set[int]] = {}
    for index, client in enumerate(clients):
        for key in client.scan_iter(match=f"{namespace}:*", count=1000):
            if key == f"{namespace}:_layout":
                found.setdefault("_layout", set()).add(index)
                continue
            tag = key[key.index("{") + 1 : key.index("}")]
            found.setdefault(tag, set()).add(index)
    return {tag: sorted(where) for tag, where in found.items()}


def test_lifecycle_through_twemproxy(proxy: Twemproxy, backend_clients: list[redis.Redis]) -> None:
    # A fixed namespace: twemproxy's ketama spreads its six partitions over both backends.
    queue = Queue(make_settings(proxy.url, partitions=6, namespace="c-proxy-life"))
    placed: dict[str, list[int]] = {}

    def keys_on_the_backends() -> None:
        placed.update(where_keys_are(backend_clients, "c-proxy-life"))

    try:
        lifecycle(queue, after_enqueue=keys_on_the_backends)
    finally:
        queue.close()
    # The work went through the proxy: each partition's keys on one backend, and both backends used.
    assert len(placed.pop("_layout")) == 1
    assert set(placed) == {p.tag for p in queue.keys.partitions}
    assert all(len(where) == 1 for where in placed.values()), placed
    assert {where[0] for where in placed.values()} == {0, 1}, placed


def test_http_api_and_sweeper_through_twemproxy(proxy: Twemproxy) -> None:
    queue = Queue(make_settings(proxy.url, partitions=2))
    app = create_app(queue)

    def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        response = app.resolve(api_event(method, path, body), None)
        return response["statusCode"], response_json(response)

    try:
        assert call("GET", "/health")[0] == 200
        assert call("POST", "/jobs", {"topic": TOPIC, "id": "h1", "delay": 0.2, "body": {"n": 1}})[0] == 201
        status, batch = call("POST", "/jobs/batch", {"jobs": [{"topic": TOPIC, "id": f"b{i}"} for i in range(4)]})
        assert (status, [r["status"] for r in batch["results"]]) == (200, [201] * 4)
        status, job = call("GET", f"/jobs/{TOPIC}/h1")
        assert (status, job["state"]) == (200, "delayed")
        assert call("GET", f"/topics/{TOPIC}")[1]["ready"] == 4
        summary = Sweeper(queue).run(Budget.of(0.4))  # holds both locks and renews them while it sweeps
        assert (summary["locks_taken"], summary["locks_lost"], summary["redis_errors"]) == (2, 0, 0)
        assert summary["moved"] == 1
        assert Consumer(queue).run(Budget.of(0.1))["acked"] == 5
        check_deliveries(["h1", *(f"b{i}" for i in range(4))])
    finally:
        queue.close()


@pytest.mark.parametrize(
    "command",
    [["TIME"], ["SCRIPT", "FLUSH"], ["MULTI"], ["EVAL", "return 1", "0"], ["HELLO", "3"], ["INFO"], ["KEYS", "*"]],
    ids=lambda c: " ".join(c[:2]),
)
def test_twemproxy_hangs_up_on_what_the_contract_forbids(proxy: Twemproxy, command: list[str]) -> None:
    """If this proxy became lenient, the lifecycle above would prove less: check it still refuses."""
    client = redis.Redis(port=proxy.port, **client_options())
    try:
        with pytest.raises(redis.ConnectionError):
            client.execute_command(*command)
        assert redis.Redis(port=proxy.port, **client_options()).ping()  # the proxy itself is fine
    finally:
        client.close()


def test_twemproxy_hangs_up_on_redis_py_default_client(proxy: Twemproxy) -> None:
    """redis-py's own set-up (CLIENT SETINFO, HELLO) is refused: delayq's is not (the tests above)."""
    client = redis.Redis(port=proxy.port, socket_timeout=5, retry=Retry(NoBackoff(), 0))  # set-up as it comes
    try:
        with pytest.raises(redis.ConnectionError):
            client.ping()
    finally:
        client.close()


def test_noscript_through_twemproxy_falls_back_to_eval(proxy: Twemproxy, backend_clients: list[redis.Redis]) -> None:
    queue = Queue(make_settings(proxy.url, partitions=4))
    try:
        queue.enqueue(TOPIC, {"n": 0}, id="warm")
        assert Consumer(queue).run(Budget.of(0.05))["acked"] == 1
        for client in backend_clients:  # the backends forget every script, behind the proxy's back
            client.script_flush()
        stats_keys = queue.keys.partitions[0].topic_keys(TOPIC)
        with pytest.raises(redis.exceptions.NoScriptError):  # NOSCRIPT comes back through the proxy
            queue.redis.evalsha(Scripts.stats.sha, len(stats_keys), *stats_keys)

        assert queue.enqueue(TOPIC, {"n": 1}, id="one").created  # a single call: EVALSHA, then EVAL
        results = queue.enqueue_many([{"topic": TOPIC, "id": f"j{i}"} for i in range(12)])  # pipelined
        assert [r.status for r in results] == [201] * 12
        assert queue.stats(TOPIC).ready == 13
        summary = Consumer(queue).run(Budget.of(0.1))
        assert (summary["acked"], summary["redis_errors"]) == (13, 0)
        check_deliveries(["warm", "one", *(f"j{i}" for i in range(12))])
        assert len(recorder.of(TOPIC)) == 14
    finally:
        queue.close()
    # The EVAL fallback cached the scripts again on the backends (never SCRIPT LOAD). Not ack.lua: on a
    # busy machine every ack may ride with a take (take.lua) and ack.lua never run.
    used = {Scripts.enqueue.sha, Scripts.enqueue_one.sha, Scripts.stats.sha, Scripts.take.sha}
    cached = {s.sha for s in all_scripts() if any(c.script_exists(s.sha)[0] for c in backend_clients)}
    assert used <= cached


def test_schedules_through_twemproxy(proxy: Twemproxy, backend_clients: list[redis.Redis]) -> None:
    queue = Queue(make_settings(proxy.url, partitions=6, namespace="c-proxy-schedules"))
    try:
        schedule_lifecycle(queue)
    finally:
        queue.close()
    placed = where_keys_are(backend_clients, "c-proxy-schedules")
    placed.pop("_layout")
    assert all(len(where) == 1 for where in placed.values()), placed  # each partition on one backend
    assert {where[0] for where in placed.values()} == {0, 1}, placed


def test_callbacks_through_twemproxy(proxy: Twemproxy) -> None:
    queue = Queue(make_settings(proxy.url, partitions=6, namespace="c-proxy-callbacks", topics=CALLBACK_TOPICS))
    try:
        callback_lifecycle(queue)
    finally:
        queue.close()
