"""Cluster mode sends no script twice, and still follows redirects.

A one-node cluster behind a proxy that loses the reply of a script Redis ran: the caller gets
``RedisUnavailable`` and the script ran once (redis-py's cluster client retries a command on a
connection error, and its cluster pipeline sends unanswered calls again one by one; delayq turns
both off). A two-node cluster whose slot moves after the client read the slot table: the pipelined
call answered MOVED is sent on to the new owner.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from delayq import Queue, RedisUnavailable, Topics
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer
from delayq.store.scripts import Scripts, all_scripts

from support import recorder
from support.compat import RECORDER, TOPIC, error_stats, make_settings
from support.servers import BreakingProxy, RedisServer

CLUSTER_ARGS = ("--cluster-enabled", "yes", "--cluster-node-timeout", "5000", "--appendonly", "no")


def cluster_node(*extra: str) -> RedisServer:
    node = RedisServer()
    node.args = [*CLUSTER_ARGS, "--cluster-config-file", f"nodes-{node.port}.conf", *extra]
    return node


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def cluster_ok(client: redis.Redis) -> bool:
    return "cluster_state:ok" in client.execute_command("CLUSTER", "INFO")


def evalsha_calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.fixture
def proxied_node() -> Iterator[tuple[RedisServer, BreakingProxy, redis.Redis]]:
    """A one-node cluster (every slot) that announces the proxy's address: cluster clients reach it
    only through the proxy. Yields the node, the proxy and a direct client with every script cached."""
    node = cluster_node()
    proxy = BreakingProxy(node.port)
    node.args += ["--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", str(proxy.port)]
    with proxy, node:  # the proxy first: it is closed too if the node fails to start
        admin = node.client()
        admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        wait_for(lambda: cluster_ok(admin), "the one-node cluster")
        for script in all_scripts():
            admin.script_load(script.source)
        yield node, proxy, admin
        admin.close()


def proxied_queue(proxy: BreakingProxy, *, partitions: int = 1) -> Queue:
    """A cluster-mode queue through the proxy, its topic taken in batches of 2."""
    settings = make_settings(proxy.url, partitions=partitions, mode="cluster")
    return Queue(settings.with_(topics=Topics.parse({TOPIC: {"target": RECORDER, "batch": 2}})))


def test_a_cluster_create_whose_reply_is_lost_runs_once(
    proxied_node: tuple[RedisServer, BreakingProxy, redis.Redis],
) -> None:
    _, proxy, admin = proxied_node
    queue = proxied_queue(proxy)
    try:
        assert queue.ping()
        admin.config_resetstat()
        proxy.drop_after(b"EVALSHA")
        with pytest.raises(RedisUnavailable):
            queue.enqueue(TOPIC, {"n": 1}, id="once", delay=60)
        wait_for(lambda: proxy.dropped == 1, "the dropped call")
        assert evalsha_calls(admin) == 1
        assert queue.get(TOPIC, "once").state == "delayed"
    finally:
        queue.close()


def test_a_cluster_take_whose_reply_is_lost_runs_once_and_is_undone(
    proxied_node: tuple[RedisServer, BreakingProxy, redis.Redis],
) -> None:
    _, proxy, admin = proxied_node
    queue = proxied_queue(proxy, partitions=2)
    try:
        queue.enqueue_many([{"topic": TOPIC, "id": f"j{i}", "body": i} for i in range(8)])
        assert queue.stats(TOPIC).ready == 8
        admin.config_resetstat()
        proxy.drop_after(Scripts.take.sha.encode())
        summary = Consumer(queue).run(Budget.of(0))  # one pass: a take per partition, one pipeline
        wait_for(lambda: proxy.dropped == 1, "the dropped call")
        assert summary["redis_errors"] >= 1
        assert evalsha_calls(admin) == 6  # each partition's index read, its take, once; then its untake
        assert summary["untaken"] == 4  # a batch of 2 per partition, back in the ready lists
        stats = queue.stats(TOPIC)
        assert (stats.reserved, stats.ready) == (0, 8)
        assert recorder.of(TOPIC) == []
    finally:
        queue.close()


# ----------------------------------------------------------------------------- redirects


@pytest.fixture
def two_nodes() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A cluster of two masters: slots 0-8191 on the first, 8192-16383 on the second."""
    first, second = cluster_node(), cluster_node()
    with first, second:
        a, b = first.client(), second.client()
        a.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
        b.execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
        a.execute_command("CLUSTER", "MEET", "127.0.0.1", second.port)
        wait_for(lambda: cluster_ok(a) and cluster_ok(b), "the two-node cluster")
        a.close()
        b.close()
        yield first, second


def move_slot(slot: int, source: RedisServer, target: RedisServer) -> None:
    """Hand a slot and its keys over from ``source`` to ``target``, as ``redis-cli --cluster reshard``
    does (a new namespace's partitions hold their marks already, ``Namespace._check_layout``)."""
    src, dst = source.client(), target.client()
    src_id, dst_id = src.execute_command("CLUSTER", "MYID"), dst.execute_command("CLUSTER", "MYID")
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
    if keys:
        src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
    dst.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    src.close()
    dst.close()


def test_a_pipelined_call_answered_moved_goes_on_to_the_new_owner(two_nodes: tuple[RedisServer, RedisServer]) -> None:
    first, second = two_nodes
    queue = Queue(make_settings(first.url, partitions=2, mode="cluster"))
    moved, stays = queue.keys.partitions  # partition tags follow the slot shares: one on each node
    assert (queue.keys.slot(moved) <= 8191, queue.keys.slot(stays) > 8191) == (True, True)
    try:
        assert queue.ping()  # the client has read the slot table
        move_slot(queue.keys.slot(moved), first, second)
        with first.client() as direct:
            direct.config_resetstat()
        jobs = [{"topic": TOPIC, "id": f"j{i}", "body": i, "delay": 60} for i in range(20)]
        results = queue.enqueue_many(jobs)  # one call per partition; the first node answers MOVED
        assert [r.status for r in results] == [201] * 20
        with first.client() as direct:
            assert "MOVED" in error_stats(direct)  # the first node refused the moved partition's call
        with second.client() as direct:
            assert (
                direct.exists(moved.topic_key(TOPIC, "delayed"))
                == direct.exists(stays.topic_key(TOPIC, "delayed"))
                == 1
            )
        assert queue.stats(TOPIC).delayed == 20
    finally:
        queue.close()
