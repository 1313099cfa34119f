"""``DELAYQ_MIN_REPLICAS`` on a Redis Cluster with a replica per master: the ``WAIT`` of each create goes
to the master that wrote it, on the connection that wrote it (a ``WAIT`` elsewhere would have nothing to
wait for), so every job is on its master's replica when its create is answered, whichever master its
partition lives on; and a cluster whose masters have no replica answers 503 ``not_replicated``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from delayq import NotReplicated, Queue, Settings, Topics

from support.recorder import RECORDER
from support.servers import RedisClusterServers, RedisServer

TOPIC = "orders"
TOPICS: dict[str, Any] = {TOPIC: {"target": RECORDER}}
QUICK_SYNC = ("--repl-diskless-sync-delay", "0")  # a replica's first sync at once


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    with RedisClusterServers(3, replicas=1, args=QUICK_SYNC) as started:
        yield started


def make_queue(cluster: RedisClusterServers, **changes: Any) -> Queue:
    settings = Settings(
        redis_url=cluster.url,
        redis_mode="cluster",
        namespace=f"cr-{uuid.uuid4().hex[:8]}",
        partitions=3,
        topics=Topics.parse(TOPICS),
        **changes,
    )
    return Queue(settings)


def replica_port(master: RedisServer) -> int:
    """The port of ``master``'s replica, as the master itself lists it (``INFO replication``)."""
    with master.client() as client:
        return int(client.info("replication")["slave0"]["port"])


def replica_holds(cluster: RedisClusterServers, queue: Queue, job_id: str) -> bool:
    """Whether the replica of the master that holds the job has its body, read on the replica itself."""
    partition = queue.keys.for_job(TOPIC, job_id)
    master = cluster.master_process_of_slot(queue.keys.slot(partition))
    with redis.Redis(port=replica_port(master), decode_responses=True) as client:
        client.execute_command("READONLY")
        return bool(client.hexists(partition.bodies, f"{TOPIC}/{job_id}"))


@pytest.mark.timeout(120)
def test_every_create_is_on_its_masters_replica_when_answered(cluster: RedisClusterServers) -> None:
    queue = make_queue(cluster, min_replicas=1)
    try:
        ids = [f"one-{n}" for n in range(12)]  # over every partition, so every master
        for job_id in ids:
            queue.enqueue(TOPIC, {}, id=job_id, delay=600)
        results = queue.enqueue_many({"topic": TOPIC, "id": f"many-{n}", "delay": 600} for n in range(300))
        assert [result.status for result in results] == [201] * 300
        ids += [f"many-{n}" for n in range(300)]
        assert {queue.keys.for_job(TOPIC, job_id).index for job_id in ids} == {0, 1, 2}
        assert all(replica_holds(cluster, queue, job_id) for job_id in ids)
    finally:
        queue.close()


@pytest.mark.timeout(120)
def test_more_replicas_than_a_master_has_is_503_not_replicated(cluster: RedisClusterServers) -> None:
    queue = make_queue(cluster, min_replicas=2, min_replicas_wait_ms=50)
    try:
        with pytest.raises(NotReplicated) as short:
            queue.enqueue(TOPIC, {}, id="two-wanted", delay=600)
        assert (short.value.replicas, short.value.wanted) == (1, 2)
        assert queue.get(TOPIC, "two-wanted").state == "delayed"  # written on its master all the same
    finally:
        queue.close()
