"""delayq on a real Redis Cluster of 3 masters (``DELAYQ_REDIS_MODE=cluster``): the whole lifecycle
through the Queue API, the Sweeper and the Consumer; partitions spread over the masters by their hash
tags; every Lua call on one slot; nothing forbidden sent while connecting or working (MONITOR on every
master: what delayq's connections sent, apart from what its scripts ran); and the same lifecycle as
the least-privilege ACL user of the README, with the rules it adds for cluster mode, on every master."""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from delayq import Queue, RedisUnavailable
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer
from delayq.store.keys import Keyspace, partition_tag

from support import recorder
from support.compat import (
    CALLBACK_TOPICS,
    MANY_IDS,
    TOPIC,
    TOPICS,
    Monitor,
    Report,
    ScriptCalls,
    Seen,
    callback_lifecycle,
    check_deliveries,
    command_stats,
    direct_client,
    error_stats,
    forbidden_in,
    lifecycle,
    make_settings,
    new_namespace,
    schedule_lifecycle,
)
from support.security import USER, acl_rules
from support.servers import RedisClusterServers

README = Path(__file__).resolve().parents[2] / "docs" / "redis.md"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    with RedisClusterServers(masters=3) as servers:
        yield servers


@pytest.fixture(scope="module")
def nodes(cluster: RedisClusterServers) -> Iterator[dict[int, redis.Redis]]:
    """A direct (not cluster-aware) client of the test's own per master, by port."""
    clients = {node.port: direct_client(node.port) for node in cluster.nodes}
    yield clients
    for client in clients.values():
        client.close()


@pytest.fixture(scope="module")
def slot_owner(cluster: RedisClusterServers) -> dict[int, int]:
    """Slot -> port of its master, from the cluster's own CLUSTER SLOTS."""
    owner: dict[int, int] = {}
    with direct_client(cluster.nodes[0].port) as client:
        for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
            owner.update(dict.fromkeys(range(int(start), int(end) + 1), int(master[1])))
    assert len(owner) == REDIS_CLUSTER_HASH_SLOTS
    return owner


@pytest.fixture
def script_calls(monkeypatch: pytest.MonkeyPatch) -> ScriptCalls:
    """Every EVAL/EVALSHA delayq's connections are asked to send (plain pipelines on each node's own
    connections: redis-py's cluster pipeline would send failed calls again)."""
    return ScriptCalls().install(monkeypatch)


def reset_stats(nodes: dict[int, redis.Redis]) -> None:
    for client in nodes.values():
        client.config_resetstat()


def check_nodes_saw_nothing_forbidden(nodes: dict[int, redis.Redis]) -> None:
    """What every master executed since ``reset_stats`` (delayq's commands and its scripts' own, plus
    this test's CONFIG RESETSTAT): no forbidden command but TIME (inside Lua: INFO commandstats cannot
    tell it apart; MONITOR can, ``check_clients_sent_nothing_forbidden``), no cross-slot or any other
    error than NOSCRIPT, and no COMMAND GETKEYS (the cluster pipeline routes each script call by its
    keys without asking a server)."""
    for port, client in nodes.items():
        commands = command_stats(client)
        forbidden = forbidden_in(commands)
        assert forbidden.pop("config|resetstat", 0) <= 1
        forbidden.pop("time", None)
        assert forbidden == {}, (port, forbidden)
        assert "command|getkeys" not in commands, (port, commands)
        assert commands["evalsha"] > 0, (port, commands)  # every master did some of the work
        errors = error_stats(client)
        assert set(errors) <= {"NOSCRIPT"}, (port, errors)


@contextmanager
def monitored(nodes: dict[int, redis.Redis]) -> Iterator[dict[int, list[Seen]]]:
    """MONITOR on every master while the block runs; then, by port, every command the master ran, but
    those of the test's own clients (``nodes``: the EXISTS of ``keys_live_on_their_master``)."""
    monitors = {port: Monitor(port) for port in nodes}
    seen: dict[int, list[Seen]] = {}
    try:
        yield seen
    finally:
        for port, monitor in monitors.items():  # a connection is told by its address on its own server
            own = addresses_of([nodes[port]])
            seen[port] = [s for s in monitor.stop() if s.client not in own]


def addresses_of(clients: Iterable[redis.Redis]) -> set[str]:
    """The local ``host:port`` of every connection of ``clients``' pools, as MONITOR names clients."""
    out = set()
    for client in clients:
        pool = client.connection_pool
        for connection in [*pool._get_free_connections(), *pool._get_in_use_connections()]:
            sock = getattr(connection, "_sock", None)
            if sock is not None:
                out.add("{}:{}".format(*sock.getsockname()[:2]))
    return out


def check_clients_sent_nothing_forbidden(seen: dict[int, list[Seen]]) -> None:
    """What delayq's connections sent to each master (MONITOR tells a client's command from one its
    script ran): nothing the contract forbids, TIME included, and no script call without keys. Every
    master got script calls, and its scripts' TIME shows as Lua's (the parsing that tells them apart
    works)."""
    for port, commands in seen.items():
        sent = [s for s in commands if not s.from_lua]
        names = Counter(s.name.lower() for s in sent)
        assert forbidden_in(names) == {}, (port, forbidden_in(names))
        assert names["evalsha"] + names["eval"] > 0, (port, names)
        assert [s.args[:3] for s in sent if s.name in ("EVAL", "EVALSHA") and int(s.args[2]) < 1] == [], port
        assert any(s.name == "TIME" for s in commands if s.from_lua), port


def check_script_calls(calls: ScriptCalls, queue: Queue) -> None:
    """Every Lua call named at least one key, all of them in one slot: a partition's, or the slot of the
    namespace's layout key (checked once per client)."""
    assert len(calls.calls) >= 50, "the spy saw too few script calls: has redis-py changed its call path?"
    assert all(numkeys >= 1 for _, numkeys, _ in calls.calls)
    slots = calls.slots()
    assert all(len(s) == 1 for s in slots), [c for c, s in zip(calls.calls, slots, strict=True) if len(s) != 1][:3]
    layout = key_slot(queue.keys.layout.encode())
    assert set().union(*slots) == {queue.keys.slot(p) for p in queue.keys.partitions} | {layout}


def test_cluster_lifecycle_three_partitions_one_per_master(
    cluster: RedisClusterServers, nodes: dict[int, redis.Redis], script_calls: ScriptCalls
) -> None:
    queue = Queue(make_settings(cluster.url, partitions=3, mode="cluster"))
    masters = [cluster.master_of_slot(queue.keys.slot(p)) for p in queue.keys.partitions]
    assert sorted(masters) == sorted(node.port for node in cluster.nodes)  # exactly one partition per master
    reset_stats(nodes)
    assert isinstance(queue.redis, RedisCluster)

    def keys_live_on_their_master() -> None:
        for partition, port in zip(queue.keys.partitions, masters, strict=True):
            delayed = partition.topic_key(TOPIC, "delayed")
            assert nodes[port].exists(delayed, partition.metas, partition.bodies) == 3, (partition, port)
            assert nodes[port].exists(partition.topics) == 1

    try:
        with monitored(nodes) as seen:
            lifecycle(queue, after_enqueue=keys_live_on_their_master)
    finally:
        queue.close()
    check_script_calls(script_calls, queue)
    check_nodes_saw_nothing_forbidden(nodes)
    check_clients_sent_nothing_forbidden(seen)


@pytest.mark.parametrize(
    ("run", "topics"),
    [(schedule_lifecycle, TOPICS), (callback_lifecycle, CALLBACK_TOPICS)],
    ids=["schedules", "callbacks"],
)
def test_cluster_work_across_partitions(
    cluster: RedisClusterServers,
    nodes: dict[int, redis.Redis],
    script_calls: ScriptCalls,
    run: Callable[[Queue], Report],
    topics: dict[str, Any],
) -> None:
    """What makes a job in another partition than its own: schedules (each in the partition of its
    topic/name, their occurrences in those of their ids) and callbacks (each in the partition of its
    own id, usually another master's than the job it reports on). Every script call on one slot,
    nothing forbidden, each job made and delivered once."""
    queue = Queue(make_settings(cluster.url, partitions=3, mode="cluster", topics=topics))
    reset_stats(nodes)
    try:
        with monitored(nodes) as seen:
            run(queue)
    finally:
        queue.close()
    check_script_calls(script_calls, queue)
    check_nodes_saw_nothing_forbidden(nodes)
    check_clients_sent_nothing_forbidden(seen)


def test_cluster_lifecycle_six_partitions_from_the_environment(
    cluster: RedisClusterServers,
    nodes: dict[int, redis.Redis],
    slot_owner: dict[int, int],
    script_calls: ScriptCalls,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    namespace = new_namespace()
    for name, value in {
        "DELAYQ_REDIS_URL": cluster.url,
        "DELAYQ_REDIS_MODE": "cluster",
        "DELAYQ_NAMESPACE": namespace,
        "DELAYQ_PARTITIONS": "6",
        "DELAYQ_TOPICS": json.dumps(TOPICS),
        "DELAYQ_TICK": "0.1",
    }.items():
        monkeypatch.setenv(name, value)
    queue = Queue.from_env()
    assert (queue.settings.redis_mode, queue.settings.partitions) == ("cluster", 6)
    per_master = Counter(slot_owner[queue.keys.slot(p)] for p in queue.keys.partitions)
    assert sorted(per_master.values()) == [2, 2, 2]
    reset_stats(nodes)
    try:
        with monitored(nodes) as seen:
            report = lifecycle(queue)
    finally:
        queue.close()
    # The batch went out as one pipeline of one enqueue call per partition, each answered in order.
    assert [r.id for r in report.batch[: len(MANY_IDS)]] == MANY_IDS
    check_script_calls(script_calls, queue)
    check_nodes_saw_nothing_forbidden(nodes)
    check_clients_sent_nothing_forbidden(seen)


# ------------------------------------------------------------------------------------------ least privilege


def readme_cluster_rules() -> list[str]:
    """The ACL rules the README tells cluster users to add to the user's line."""
    match = re.search(r"In cluster mode [^`]*\badd\s+`([^`]+)`", README.read_text())
    assert match, "the README no longer says what to add to the ACL user in cluster mode"
    return match.group(1).split()


@contextmanager
def acl_user(nodes: dict[int, redis.Redis], namespace: str, password: str, extra: list[str]) -> Iterator[str]:
    """The README's delayq user, limited to ``namespace``, plus ``extra`` rules, on every master (ACL
    users are per node: a cluster does not spread them); its URL. Afterwards, the user is deleted."""
    for client in nodes.values():
        client.execute_command("ACL", "SETUSER", USER, "reset")
        client.execute_command("ACL", "SETUSER", USER, *acl_rules(namespace, password), *extra)
        client.execute_command("ACL", "LOG", "RESET")
    try:
        yield f"redis://{USER}:{password}@127.0.0.1:{next(iter(nodes))}/0"
    finally:
        for client in nodes.values():
            client.execute_command("ACL", "DELUSER", USER)


def refused(nodes: dict[int, redis.Redis]) -> dict[int, list[str]]:
    """What ACL LOG says each master refused: the commands (or keys) it names."""
    logs = {port: client.execute_command("ACL", "LOG") for port, client in nodes.items()}
    return {port: [_log_entry(entry)["object"] for entry in log] for port, log in logs.items() if log}


def _log_entry(entry: list[object] | dict[str, object]) -> dict[str, object]:
    return entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=True))  # type: ignore[arg-type]


def test_cluster_lifecycle_as_the_least_privilege_acl_user(
    cluster: RedisClusterServers, nodes: dict[int, redis.Redis], script_calls: ScriptCalls
) -> None:
    """The README's ACL line plus what it adds for cluster mode, on every master: the whole lifecycle
    runs as that user, no master refused anything, and what delayq sent is still nothing forbidden."""
    namespace = new_namespace()
    extra = readme_cluster_rules()
    assert extra == ["+cluster|slots", "+command"], extra
    with acl_user(nodes, namespace, "cluster-" + uuid.uuid4().hex[:8], extra) as url:
        queue = Queue(make_settings(url, partitions=3, mode="cluster", namespace=namespace))
        try:
            with monitored(nodes) as seen:
                lifecycle(queue)
        finally:
            queue.close()
        assert refused(nodes) == {}, "a master refused a command of the lifecycle"
    check_script_calls(script_calls, queue)
    check_clients_sent_nothing_forbidden(seen)
    for port, commands in seen.items():  # every master was asked for the slot map or the command table
        names = {s.name for s in commands if not s.from_lua}
        assert "AUTH" in names, (port, names)
    sent = {(s.name, s.args[1].upper() if len(s.args) > 1 else "") for c in seen.values() for s in c if not s.from_lua}
    assert ("CLUSTER", "SLOTS") in sent, sent
    assert ("COMMAND", "") in sent, sent


def test_cluster_acl_user_needs_both_rules_the_readme_adds(
    cluster: RedisClusterServers, nodes: dict[int, redis.Redis]
) -> None:
    """Without either of the README's additions for cluster mode, delayq cannot even start: the rules
    are not too many, and each refusal is one the README's sentence explains."""
    extra = readme_cluster_rules()
    for missing in extra:
        namespace = new_namespace()
        with acl_user(nodes, namespace, "cluster-" + uuid.uuid4().hex[:8], [r for r in extra if r != missing]) as url:
            queue = Queue(make_settings(url, partitions=3, mode="cluster", namespace=namespace))
            try:
                with pytest.raises((RedisUnavailable, redis.RedisError)):
                    queue.enqueue(TOPIC, {}, id="x")
            finally:
                if queue._redis is not None:  # (``queue.redis`` would try to connect again)
                    queue._redis.close()
            objects = {name for names in refused(nodes).values() for name in names}
            assert objects == {missing.removeprefix("+")}, (missing, objects)


def _namespace_on_first_slot(index: int, partitions: int) -> str:
    """A namespace whose first candidate tag for partition ``index`` hashes to the first slot of the
    partition's share: where rounding may put it on the master of the previous share."""
    first = index * REDIS_CLUSTER_HASH_SLOTS // partitions
    for n in range(1_000_000):
        if key_slot(f"ns{n}.p{index}.0".encode()) == first:
            return f"ns{n}"
    raise AssertionError("no such namespace")


@pytest.mark.parametrize("partitions", [3, 6])
def test_partition_tags_land_on_the_master_of_their_share(partitions: int, slot_owner: dict[int, int]) -> None:
    """On this cluster (slots split by ``redis-cli --cluster create``), partition i of n lands on the
    master that owns the middle of its share: for the worst namespaces (a tag on its share's first
    slot) and for many random ones."""
    namespaces = [_namespace_on_first_slot(i, partitions) for i in range(1, partitions)]
    namespaces += [uuid.uuid4().hex[:12] for _ in range(300)]
    share = REDIS_CLUSTER_HASH_SLOTS / partitions
    expected = [slot_owner[int((i + 0.5) * share)] for i in range(partitions)]
    assert len(set(expected)) == 3
    for namespace in namespaces:
        keyspace = Keyspace(namespace, partitions)
        assert [slot_owner[keyspace.slot(p)] for p in keyspace.partitions] == expected, (
            namespace,
            [partition_tag(namespace, i, partitions) for i in range(partitions)],
        )


def test_cluster_work_goes_on_after_every_master_forgets_its_scripts(
    cluster: RedisClusterServers, nodes: dict[int, redis.Redis], script_calls: ScriptCalls
) -> None:
    """SCRIPT FLUSH on every master: pipelined and single calls answer NOSCRIPT on each node and fall
    back to EVAL, which caches the script again there."""
    queue = Queue(make_settings(cluster.url, partitions=3, mode="cluster"))
    try:
        queue.enqueue(TOPIC, {"n": 0}, id="warm")  # every script the test uses is cached ...
        assert Consumer(queue).run(Budget.of(0.05))["acked"] == 1
        for client in nodes.values():  # ... then forgotten
            client.script_flush()
        reset_stats(nodes)
        results = queue.enqueue_many([{"topic": TOPIC, "id": f"j{i}", "body": {"i": i}} for i in range(12)])
        assert [r.status for r in results] == [201] * 12
        assert queue.stats(TOPIC).ready == 12
        summary = Consumer(queue).run(Budget.of(0.1))
        assert (summary["acked"], summary["redis_errors"]) == (12, 0)
        check_deliveries(["warm", *(f"j{i}" for i in range(12))])
        assert len(recorder.of(TOPIC)) == 13
    finally:
        queue.close()
    for port, client in nodes.items():
        assert error_stats(client).get("NOSCRIPT", 0) >= 1, port  # the flush did bite on every master
        assert command_stats(client)["eval"] >= 1, port
    assert all(numkeys >= 1 for _, numkeys, _ in script_calls.calls)
