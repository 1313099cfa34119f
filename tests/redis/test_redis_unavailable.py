"""What a failover, a restart or a full server answers, provoked for real on private servers (Redis, or
Valkey with ``DELAYQ_TEST_SERVER=valkey``): a replica (READONLY), a server loading its dataset (LOADING),
one out of memory (OOM), one without the replicas it wants (NOREPLICAS), a replica cut from its primary
(MASTERDOWN), one running a long script (BUSY), one down (refused connections) or frozen (timeouts), and
a Redis Cluster that lost a master or a slot (CLUSTERDOWN) or whose slot is moving (MOVED, ASK, TRYAGAIN).

Each time, ``delayq.Queue`` raises ``RedisUnavailable`` with the reply's code (or the error's class) as
its ``reason``, the API answers 503 with ``Retry-After``, and one pass of the consumer and of the
sweeper counts the failure (``redis_errors``) instead of raising it. Reads that the server still
answers (a replica, a full server) are not asked to fail.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from delayq import Queue, RedisUnavailable, Settings, Topics
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper
from delayq.store import connection
from delayq.store.keys import Keyspace

from support.api import Api
from support.recorder import RECORDER
from support.servers import RedisClusterServers, RedisServer, ReplicaPair

TOPIC = "orders"
TOPICS: dict[str, Any] = {TOPIC: {"target": RECORDER}}
QUICK_SYNC = ("--repl-diskless-sync-delay", "0")  # a replica's first sync at once, not after 5 s
PARTITIONS = 3  # on a cluster: one on each master
CLUSTER_NODE_TIMEOUT_MS = 1000  # a killed master is seen failed within a second or two


# ---------------------------------------------------------------------------------- helpers


def new_settings(url: str, **changes: Any) -> Settings:
    """Settings for a namespace of this test's own on the server at ``url``."""
    namespace = changes.pop("namespace", None) or f"u-{uuid.uuid4().hex[:10]}"
    return Settings(redis_url=url, namespace=namespace, topics=Topics.parse(TOPICS), tick=0.2, **changes)


def direct(server: RedisServer, **options: Any) -> redis.Redis:
    """A plain client of the test's own that never retries (redis-py's default one retries a refused
    connection, or a LOADING answer, for seconds)."""
    options = {"retry": Retry(NoBackoff(), 0), "socket_connect_timeout": 2, "socket_timeout": 5, **options}
    client: redis.Redis = server.client(**options)
    return client


def poll(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Until ``predicate()`` holds; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not seen within {timeout} s"
        time.sleep(0.02)


def id_in(keys: Keyspace, index: int, prefix: str) -> str:
    """A job id of ``TOPIC`` that partition ``index`` holds."""
    return next(f"{prefix}{n}" for n in range(10_000) if keys.for_job(TOPIC, f"{prefix}{n}").index == index)


def ids_by_partition(queue: Queue, count: int) -> dict[int, str]:
    """A job id for each partition of ``queue`` (``count`` of them), by partition index."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < count:
        found.setdefault(queue.keys.for_job(TOPIC, f"j{n}").index, f"j{n}")
        n += 1
    return found


@pytest.fixture
def start_api(monkeypatch: pytest.MonkeyPatch) -> Callable[[Settings, redis.Redis], Api]:
    """``start_api(settings, client)``: the enqueue handler, in process, configured as ``settings``."""

    def start(settings: Settings, client: redis.Redis) -> Api:
        env = {
            "DELAYQ_REDIS_URL": settings.redis_url,
            "DELAYQ_REDIS_MODE": settings.redis_mode,
            "DELAYQ_NAMESPACE": settings.namespace,
            "DELAYQ_PARTITIONS": str(settings.partitions),
            "DELAYQ_TOPICS": json.dumps(TOPICS),
            "DELAYQ_TICK": "0.2",
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return Api.start(client, settings.namespace)

    return start


def reasons(expected: str | Collection[str]) -> set[str]:
    return {expected} if isinstance(expected, str) else set(expected)


def raises_unavailable(call: Callable[[], Any], expected: str | Collection[str]) -> RedisUnavailable:
    """``call()`` raises ``RedisUnavailable`` whose reason is ``expected`` (or one of them)."""
    with pytest.raises(RedisUnavailable) as info:
        call()
    error = info.value
    assert error.reason in reasons(expected), (error.reason, error.message, repr(error.__cause__))
    assert (error.status, error.error) == (503, "unavailable")
    return error


def check_queue(queue: Queue, expected: str | Collection[str], *, reads: bool, job_id: str = "seed") -> None:
    """A create (and, with ``reads``, a get and the topic's stats) raises ``RedisUnavailable(expected)``."""
    raises_unavailable(lambda: queue.enqueue(TOPIC, {"n": 1}, id=f"new-{uuid.uuid4().hex[:8]}"), expected)
    if reads:
        raises_unavailable(lambda: queue.get(TOPIC, job_id), expected)
        raises_unavailable(lambda: queue.stats(TOPIC), expected)


def check_api(
    api: Api, expected: str | Collection[str], *, reads: bool, job_id: str = "seed", new_id: str | None = None
) -> None:
    """``POST /jobs`` of ``new_id`` (and, with ``reads``, ``GET`` of ``job_id`` and of the topic)
    answers 503 with ``Retry-After``, naming the reason."""
    new_id = new_id or f"api-{uuid.uuid4().hex[:8]}"
    requests: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", "/jobs", {"topic": TOPIC, "id": new_id, "delay": 5})
    ]
    if reads:
        requests += [("GET", f"/jobs/{TOPIC}/{job_id}", None), ("GET", f"/topics/{TOPIC}", None)]
    for method, path, body in requests:
        reply = api.call(method, path, body) if body is not None else api.call(method, path)
        assert (reply.status, reply.json["error"]) == (503, "unavailable"), (method, path, reply)
        headers = {name.lower(): value for name, value in reply.headers.items()}
        assert headers.get("retry-after") == "1", (method, path, reply.headers)
        assert any(reply.json["message"].endswith(f"unavailable: {reason}") for reason in reasons(expected)), reply


def check_loops(queue: Queue, *, consumer_fails: bool = True) -> None:
    """One pass of the sweeper and one of the consumer: neither raises, and each counts what failed
    (the consumer's, unless its calls may go through: ``consumer_fails``)."""
    summary = Consumer(queue).run(Budget.of(0))
    if consumer_fails:
        assert summary["redis_errors"] >= 1, summary
    sweeper = Sweeper(queue)
    sweeper.sweep_once()
    assert sweeper.counts["redis_errors"] >= 1, sweeper.summary()


# ---------------------------------------------------------------------------------- one server


@pytest.mark.timeout(60)
def test_a_replica_answers_readonly_to_writes(start_api: Callable[[Settings, redis.Redis], Api]) -> None:
    """The URL names a node that became a replica (a failover moved the primary): every write is
    READONLY (on Redis 7 and Valkey 8 a script's write answers so as it came)."""
    with ReplicaPair(*QUICK_SYNC) as pair, direct(pair.primary) as primary, direct(pair.replica) as replica:
        settings = new_settings(pair.primary.url)
        seeded = Queue(settings)
        seeded.enqueue(TOPIC, {"n": 0}, id="seed", delay=0)  # due now: the consumer takes, a write
        seeded.close()
        assert primary.execute_command("WAIT", 1, 5000) == 1
        # WAIT counts the replica's acknowledgement; Valkey's replica may still be applying what it
        # acknowledged for a moment (seen once in a few runs): wait until it holds the namespace.
        layout = Keyspace(settings.namespace, settings.partitions).layout
        deadline = time.monotonic() + 5
        while not replica.exists(layout) and time.monotonic() < deadline:
            time.sleep(0.01)
        queue = Queue(settings.with_(redis_url=pair.replica.url))
        try:
            assert queue.get(TOPIC, "seed").state == "ready"  # a replica answers reads
            check_queue(queue, "READONLY", reads=False)
            check_api(start_api(queue.settings, replica), "READONLY", reads=False)
            check_loops(queue)
        finally:
            queue.close()


@pytest.mark.timeout(60)
def test_a_server_loading_its_dataset_answers_loading(start_api: Callable[[Settings, redis.Redis], Api]) -> None:
    """A restart: the server answers LOADING until its dataset is read (slowed here with
    ``key-load-delay``, so that it lasts seconds, not milliseconds)."""
    with RedisServer("--loading-process-events-interval-bytes", "1024") as server:
        settings = new_settings(server.url)
        with direct(server) as client:
            seeded = Queue(settings)
            seeded.enqueue(TOPIC, {"n": 0}, id="seed", delay=0)
            seeded.close()
            for start in range(0, 100_000, 5000):
                client.mset({f"fill:{n}": n for n in range(start, start + 5000)})
            client.save()
        server.stop()
        server.args += ["--key-load-delay", "10"]  # microseconds per key: 100,000 keys take seconds
        server.start(ready=lambda: answers_at_all(server))
        queue = Queue(settings)
        try:
            with direct(server) as client:
                assert loading(client), "the server is not loading"
                check_queue(queue, "LOADING", reads=True)
                check_api(start_api(settings, client), "LOADING", reads=True)
                check_loops(queue)
                assert loading(client), "the server finished loading before the checks did: they prove nothing"
        finally:
            queue.close()
            server.kill()  # rather than wait for the load to finish


def answers_at_all(server: RedisServer) -> bool:
    """The server takes connections and answers, if only LOADING."""
    with direct(server) as client, suppress(redis.BusyLoadingError):
        client.ping()
    return True


def loading(client: redis.Redis) -> bool:
    return bool(client.info("persistence")["loading"])


@pytest.mark.timeout(60)
def test_a_full_server_answers_oom_to_writes(start_api: Callable[[Settings, redis.Redis], Api]) -> None:
    """``maxmemory`` reached with ``noeviction``: the creates that fill it are refused OOM, and so is the
    sweeper's lock. The consumer's take and ack may still run: Redis refuses a script's write only while
    the script has written nothing yet, and theirs start by removing."""
    with RedisServer("--maxmemory", "8mb", "--maxmemory-policy", "noeviction") as server, direct(server) as client:
        queue = Queue(new_settings(server.url))
        try:
            queue.enqueue(TOPIC, {"n": 0}, id="seed", delay=0)
            fill_up(client)
            refused = fill_with_creates(queue)
            assert refused.reason == "OOM", refused.message
            # Held past its limit, as a full server stays until something frees memory: without it, the
            # buffers of connections that close would leave room for another small create.
            used = int(client.info("memory")["used_memory"])
            client.config_set("maxmemory", used - 1024 * 1024)
            assert queue.get(TOPIC, "seed").state == "ready"  # a full server answers reads
            check_queue(queue, "OOM", reads=False)
            check_api(start_api(queue.settings, client), "OOM", reads=False)
            check_loops(queue, consumer_fails=False)
        finally:
            queue.close()


def fill_with_creates(queue: Queue, limit: int = 10_000) -> RedisUnavailable:
    """Creates jobs of 1 kB until one is refused; the refusal."""
    body = {"fill": "x" * 1000}
    for n in range(limit):
        try:
            queue.enqueue(TOPIC, body, id=f"fill-{n}", delay=600)
        except RedisUnavailable as exc:
            return exc
    raise AssertionError(f"{limit} creates of 1 kB and still not full")


def fill_up(client: redis.Redis, value_size: int = 1000, limit: int = 100_000) -> None:
    """Writes values of ``value_size`` bytes until the server refuses one OOM."""
    pipe = client.pipeline(transaction=False)
    for start in range(0, limit, 500):
        for n in range(start, start + 500):
            pipe.set(f"fill:{n}", "x" * value_size)
        if any(isinstance(reply, redis.exceptions.OutOfMemoryError) for reply in pipe.execute(raise_on_error=False)):
            return
    raise AssertionError(f"{limit} values of {value_size} bytes and still not full")


@pytest.mark.timeout(60)
def test_a_primary_without_its_replicas_answers_noreplicas(start_api: Callable[[Settings, redis.Redis], Api]) -> None:
    """``min-replicas-to-write 1`` and no replica left: every write is NOREPLICAS."""
    with RedisServer() as server, direct(server) as client:
        queue = Queue(new_settings(server.url))
        try:
            queue.enqueue(TOPIC, {"n": 0}, id="seed", delay=0)
            client.config_set("min-replicas-to-write", 1)
            check_queue(queue, "NOREPLICAS", reads=False)
            check_api(start_api(queue.settings, client), "NOREPLICAS", reads=False)
            check_loops(queue)
        finally:
            queue.close()


@pytest.mark.timeout(60)
def test_a_replica_cut_from_its_primary_answers_masterdown(start_api: Callable[[Settings, redis.Redis], Api]) -> None:
    """A replica with ``replica-serve-stale-data no`` whose primary stopped answers MASTERDOWN to
    everything, reads too."""
    with ReplicaPair("--replica-serve-stale-data", "no", *QUICK_SYNC) as pair, direct(pair.replica) as replica:
        settings = new_settings(pair.primary.url)
        seeded = Queue(settings)
        seeded.enqueue(TOPIC, {"n": 0}, id="seed", delay=0)
        seeded.close()
        with direct(pair.primary) as primary:
            assert primary.execute_command("WAIT", 1, 5000) == 1
        pair.primary.stop()
        poll(lambda: replica.info("replication")["master_link_status"] == "down", "the replica's link down")
        queue = Queue(settings.with_(redis_url=pair.replica.url))
        try:
            check_queue(queue, "MASTERDOWN", reads=True)
            check_api(start_api(queue.settings, replica), "MASTERDOWN", reads=True)
            check_loops(queue)
        finally:
            queue.close()


@pytest.mark.timeout(60)
def test_a_server_running_a_long_script_answers_busy(start_api: Callable[[Settings, redis.Redis], Api]) -> None:
    """Another client's script runs past ``busy-reply-threshold``: every command but SCRIPT KILL is BUSY."""
    with RedisServer("--busy-reply-threshold", "100") as server, direct(server) as client:
        queue = Queue(new_settings(server.url))
        try:
            queue.enqueue(TOPIC, {"n": 0}, id="seed", delay=0)
            with busy(server, client):
                check_queue(queue, "BUSY", reads=True)
                check_api(start_api(queue.settings, client), "BUSY", reads=True)
                check_loops(queue)
        finally:
            queue.close()


@contextmanager
def busy(server: RedisServer, client: redis.Redis) -> Iterator[None]:
    """A script that never ends, run from a connection of its own, until the block ends (SCRIPT KILL)."""
    blocker = server.client(retry=Retry(NoBackoff(), 0))
    ended: list[BaseException] = []

    def run() -> None:
        try:
            blocker.eval("while true do end", 0)
        except redis.RedisError as exc:
            ended.append(exc)

    thread = threading.Thread(target=run, daemon=True, name="busy-script")
    thread.start()
    try:
        poll(lambda: busy_now(client), "BUSY answers", timeout=10)
        yield
    finally:
        poll(lambda: script_killed(client), "the script killed", timeout=10)
        thread.join(10)
        blocker.close()
    assert ended, "the busy script ended by itself"


def busy_now(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.ResponseError as exc:
        return str(exc).startswith("BUSY")
    return False


def script_killed(client: redis.Redis) -> bool:
    try:
        client.script_kill()
    except redis.ResponseError as exc:
        return "NOTBUSY" in str(exc)  # nothing left to kill
    return True


@pytest.mark.timeout(60)
def test_a_server_restarting_refuses_connections(start_api: Callable[[Settings, redis.Redis], Api]) -> None:
    """A restart: while the server is down its connections are refused (``ConnectionError``); once it is
    back, the same queue answers again, on new connections."""
    with RedisServer("--appendonly", "yes") as server, direct(server) as client:
        queue = Queue(new_settings(server.url))
        try:
            queue.enqueue(TOPIC, {"n": 0}, id="seed", delay=0)
            server.stop()
            check_queue(queue, "ConnectionError", reads=True)
            check_api(start_api(queue.settings, client), "ConnectionError", reads=True)
            check_loops(queue)
            server.start()
            assert queue.get(TOPIC, "seed").state == "ready"
        finally:
            queue.close()


@pytest.mark.timeout(60)
def test_a_frozen_server_times_out(
    start_api: Callable[[Settings, redis.Redis], Api], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that stops answering without closing anything (SIGSTOP: a host gone, a network cut):
    every call times out (``TimeoutError``; the timeout cut to 0.5 s here)."""
    monkeypatch.setattr(connection, "SOCKET_TIMEOUT_S", 0.5)
    with RedisServer() as server, direct(server) as client:
        queue = Queue(new_settings(server.url))
        try:
            queue.enqueue(TOPIC, {"n": 0}, id="seed", delay=0)
            os.kill(server.pid, signal.SIGSTOP)
            try:
                check_queue(queue, "TimeoutError", reads=True)
                check_api(start_api(queue.settings, client), "TimeoutError", reads=False)
                check_loops(queue)
            finally:
                os.kill(server.pid, signal.SIGCONT)
            assert queue.get(TOPIC, "seed").state == "ready"
        finally:
            queue.close()


# ---------------------------------------------------------------------------------- a cluster


def slot_owners(cluster: RedisClusterServers, ask: RedisServer) -> dict[int, int]:
    """Slot -> port of its master, as ``ask`` sees it."""
    owners: dict[int, int] = {}
    with direct(ask) as client:
        for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
            owners.update(dict.fromkeys(range(int(start), int(end) + 1), int(master[1])))
    return owners


def partition_port(owners: dict[int, int], keys: Keyspace, index: int) -> int:
    """The port of the master that holds partition ``index`` of ``keys``."""
    return owners[key_slot(keys.partitions[index].tag.encode())]


def pick_namespace(owners: dict[int, int], accept: Callable[[int, Keyspace], bool]) -> str:
    """A new namespace of 3 partitions that ``accept(port of the master of its _layout key, its
    keyspace)``: its ``_layout`` key, untagged, hashes anywhere, and a new Queue reads it first."""
    for _ in range(10_000):
        namespace = f"u-{uuid.uuid4().hex[:10]}"
        if accept(owners[key_slot(f"{namespace}:_layout".encode())], Keyspace(namespace, PARTITIONS)):
            return namespace
    raise AssertionError("no namespace found")


def cluster_state(node: RedisServer) -> str:
    try:
        with direct(node, socket_timeout=1) as client:
            info = client.execute_command("CLUSTER", "INFO")
    except redis.RedisError:
        return "?"
    return "fail" if "cluster_state:fail" in info else "ok"


@pytest.mark.timeout(90)
def test_a_cluster_that_lost_a_master_answers_clusterdown(start_api: Callable[[Settings, redis.Redis], Api]) -> None:
    """A master of three killed, with no replica to take over: once the others see it failed, they
    answer CLUSTERDOWN, and its own partition's calls are refused connections. In cluster mode and to
    a plain client pointed at one node (the issue's ``ClusterDownError``, which stopped the sweeper)."""
    with RedisClusterServers(3, node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS) as cluster:
        owners = slot_owners(cluster, cluster.nodes[0])
        namespace = pick_namespace(owners, lambda layout, keys: layout != partition_port(owners, keys, 1))
        victim_port = partition_port(owners, Keyspace(namespace, PARTITIONS), 1)
        survivor = next(node for node in cluster.nodes if node.port != victim_port)
        settings = new_settings(survivor.url, partitions=PARTITIONS, redis_mode="cluster", namespace=namespace)
        queue = Queue(settings)
        plain = Queue(settings.with_(redis_mode="standalone"))  # a plain client of a surviving master
        ids = ids_by_partition(queue, PARTITIONS)
        try:
            for job_id in ids.values():
                queue.enqueue(TOPIC, {"n": 0}, id=job_id, delay=0)
            cluster.node(victim_port).kill()
            poll(lambda: cluster_state(survivor) == "fail", "cluster_state:fail on a surviving master")

            on_survivors = [index for index in ids if partition_port(owners, queue.keys, index) != victim_port]
            for job_id in [ids[index] for index in on_survivors]:
                raises_unavailable(partial(queue.get, TOPIC, job_id), "CLUSTERDOWN")
            raises_unavailable(lambda: queue.get(TOPIC, ids[1]), {"ConnectionError", "TimeoutError", "CLUSTERDOWN"})
            raises_unavailable(lambda: queue.stats(TOPIC), {"CLUSTERDOWN", "ConnectionError", "TimeoutError"})
            check_queue(queue, {"CLUSTERDOWN", "ConnectionError", "TimeoutError"}, reads=False)
            with direct(survivor) as client:
                check_api(start_api(settings, client), "CLUSTERDOWN", reads=False)
            check_queue(plain, "CLUSTERDOWN", reads=True, job_id=ids[on_survivors[0]])
            check_loops(plain)
            check_loops(queue)
        finally:
            plain.close()
            queue.close()


@pytest.mark.timeout(90)
def test_a_cluster_with_a_slot_nobody_serves_answers_clusterdown(
    start_api: Callable[[Settings, redis.Redis], Api],
) -> None:
    """A partition's slot taken from its master (``CLUSTER DELSLOTS``): coverage lost, that master
    answers CLUSTERDOWN; the partitions on the other masters still answer."""
    with RedisClusterServers(3, node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS) as cluster:
        owners = slot_owners(cluster, cluster.nodes[0])
        namespace = pick_namespace(owners, lambda layout, keys: layout != partition_port(owners, keys, 1))
        keys = Keyspace(namespace, PARTITIONS)
        owner_port = partition_port(owners, keys, 1)
        other = cluster.node(owners[key_slot(f"{namespace}:_layout".encode())])  # a master that keeps serving
        settings = new_settings(other.url, partitions=PARTITIONS, redis_mode="cluster", namespace=namespace)
        queue = Queue(settings)
        owner = cluster.node(owner_port)
        plain = Queue(settings.with_(redis_mode="standalone", redis_url=owner.url))  # a plain client of it
        ids = ids_by_partition(queue, PARTITIONS)
        try:
            for job_id in ids.values():
                queue.enqueue(TOPIC, {"n": 0}, id=job_id, delay=0)
            slot = key_slot(queue.keys.partitions[1].tag.encode())
            with direct(owner) as client:
                client.execute_command("CLUSTER", "DELSLOTS", slot)
            poll(lambda: cluster_state(owner) == "fail", "cluster_state:fail on the slot's master")

            raises_unavailable(lambda: queue.get(TOPIC, ids[1]), "CLUSTERDOWN")
            raises_unavailable(lambda: queue.stats(TOPIC), "CLUSTERDOWN")
            for index in (0, 2):
                if partition_port(owners, keys, index) != owner_port:
                    assert queue.get(TOPIC, ids[index]).state == "ready"
            with direct(other) as client:
                api = start_api(settings, client)
                reply = api.get(f"/jobs/{TOPIC}/{ids[1]}")
                assert (reply.status, reply.json["error"]) == (503, "unavailable"), reply
                assert {name.lower(): value for name, value in reply.headers.items()}.get("retry-after") == "1"
            check_queue(plain, "CLUSTERDOWN", reads=True, job_id=ids[1])
            check_loops(plain)
            check_loops(queue)
        finally:
            plain.close()
            queue.close()


@pytest.mark.timeout(90)
def test_a_cluster_whose_slot_is_moving_answers_moved_ask_and_tryagain(
    start_api: Callable[[Settings, redis.Redis], Api],
) -> None:
    """A partition's slot migrating to another master (``CLUSTER SETSLOT ... MIGRATING``/``IMPORTING``):
    a plain client of the source gets TRYAGAIN while the partition's keys are split, ASK once they have
    all moved, and MOVED for the partitions of other masters; the cluster client follows the
    redirects and, while TRYAGAIN lasts, gives up (redis-py's ``ClusterError``): all RedisUnavailable."""
    with RedisClusterServers(3, node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS) as cluster:
        owners = slot_owners(cluster, cluster.nodes[0])
        # A plain client of the partition's master reads the _layout key there too.
        namespace = pick_namespace(owners, lambda layout, keys: layout == partition_port(owners, keys, 1))
        keys = Keyspace(namespace, PARTITIONS)
        source_port = partition_port(owners, keys, 1)
        source = cluster.node(source_port)
        target = next(node for node in cluster.nodes if node.port != source_port)
        settings = new_settings(source.url, partitions=PARTITIONS, redis_mode="cluster", namespace=namespace)
        queue = Queue(settings)
        plain = Queue(settings.with_(redis_mode="standalone"))
        ids = ids_by_partition(queue, PARTITIONS)
        slot = key_slot(queue.keys.partitions[1].tag.encode())
        try:
            for job_id in ids.values():
                queue.enqueue(TOPIC, {"n": 0}, id=job_id, delay=0)
            elsewhere = next(index for index in (0, 2) if partition_port(owners, keys, index) != source_port)
            raises_unavailable(lambda: plain.get(TOPIC, ids[elsewhere]), "MOVED")

            with direct(source) as from_client, direct(target) as to_client:
                source_id = from_client.execute_command("CLUSTER", "MYID")
                target_id = to_client.execute_command("CLUSTER", "MYID")
                to_client.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
                from_client.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)

                raises_unavailable(lambda: plain.get(TOPIC, ids[1]), "TRYAGAIN")  # some keys here, some not
                created = id_in(keys, 1, "new-")
                raises_unavailable(lambda: plain.enqueue(TOPIC, {"n": 1}, id=created), {"TRYAGAIN", "ASK"})
                raises_unavailable(lambda: queue.get(TOPIC, ids[1]), {"TRYAGAIN", "ClusterError"})
                api = start_api(settings, from_client)
                check_api(api, {"TRYAGAIN", "ClusterError"}, reads=False, new_id=id_in(keys, 1, "api-"))

                moved = from_client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
                assert moved
                from_client.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *moved)
                raises_unavailable(lambda: plain.get(TOPIC, ids[1]), "ASK")  # none left here
                raises_unavailable(lambda: queue.get(TOPIC, ids[1]), {"TRYAGAIN", "ClusterError"})
                check_loops(plain)
                check_loops(queue)
        finally:
            plain.close()
            queue.close()
