"""Key names and partitioning of ``delayq.store.keys``: no Redis."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from delayq.store.keys import TOPIC_INDEX_KEYS, TOPIC_KEYS, Keyspace, Partition, partition_of, partition_tag
from delayq.store.scripts import build_source

PARTITION_COUNTS = [1, 2, 3, 5, 16, 64]


def hash_tags(key: str) -> list[str]:
    return re.findall(r"\{([^{}]*)\}", key)


def test_topic_keys_order():
    assert TOPIC_KEYS == (
        "delayed",
        "ready",
        "dead",
        "meta",
        "bodies",
        "errors",
        "control",
        "done",
        "fair",
        "turns",
        "flows",
        "busy",
        "pace",
        "held",
        "parked",
        "wake",
    )


# ----------------------------------------------------------------------------- partition_tag


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
@pytest.mark.parametrize("namespace", ["delayq", "t-0123456789ab", "prod:eu"])
def test_partition_tag_falls_in_its_share_of_slots(namespace, partitions):
    for index in range(partitions):
        tag = partition_tag(namespace, index, partitions)
        low = index * REDIS_CLUSTER_HASH_SLOTS // partitions
        high = (index + 1) * REDIS_CLUSTER_HASH_SLOTS // partitions
        assert low <= key_slot(tag.encode()) < high, (index, tag)


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
def test_partition_tags_are_deterministic_and_distinct(partitions):
    first = [partition_tag("delayq", i, partitions) for i in range(partitions)]
    second = [partition_tag("delayq", i, partitions) for i in range(partitions)]
    assert first == second
    assert len(set(first)) == partitions
    slots = [key_slot(tag.encode()) for tag in first]
    assert len(set(slots)) == partitions
    assert slots == sorted(slots)


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
def test_partition_tag_shape(partitions):
    for index in range(partitions):
        tag = partition_tag("delayq", index, partitions)
        assert re.fullmatch(rf"delayq\.p{index}\.\d+", tag)
        assert "{" not in tag
        assert "}" not in tag


def test_partition_tags_differ_between_namespaces():
    assert partition_tag("a", 0, 4) != partition_tag("b", 0, 4)


# ----------------------------------------------------------------------------- partition_of


@pytest.mark.parametrize(
    ("topic", "job_id", "partitions"),
    [
        ("orders", "o-1", 1),
        ("orders", "o-1", 2),
        ("orders", "o-1", 8),
        ("reminders", "r:42@x", 64),
        ("a", "b", 16384),
    ],
)
def test_partition_of_is_stable_and_in_range(topic, job_id, partitions):
    first = partition_of(topic, job_id, partitions)
    assert 0 <= first < partitions
    assert all(partition_of(topic, job_id, partitions) == first for _ in range(10))


def test_partition_of_single_partition_is_zero():
    assert {partition_of("orders", f"job-{i}", 1) for i in range(1000)} == {0}


def test_partition_of_depends_on_topic_and_id():
    # the same ids in two topics do not all land in the same partitions
    a = [partition_of("orders", f"job-{i}", 8) for i in range(200)]
    b = [partition_of("payments", f"job-{i}", 8) for i in range(200)]
    assert a != b


@pytest.mark.parametrize(
    "ids",
    [
        [f"job-{i}" for i in range(10_000)],
        [str(i) for i in range(10_000)],
        [f"{i:032x}" for i in range(0, 10_000 * 7919, 7919)],
    ],
    ids=["job-n", "n", "hex"],
)
def test_partition_of_spreads(ids):
    counts = Counter(partition_of("orders", job_id, 8) for job_id in ids)
    assert set(counts) == set(range(8))
    for partition, count in counts.items():
        assert 0.10 * len(ids) <= count <= 0.15 * len(ids), (partition, count)


# ----------------------------------------------------------------------------- Partition


@pytest.fixture
def partition() -> Partition:
    return Partition("delayq", 0, partition_tag("delayq", 0, 1))


def test_partition_key_names(partition):
    tag = partition.tag
    assert partition.prefix == f"delayq:{{{tag}}}:"
    assert partition.topics == f"delayq:{{{tag}}}:_topics"
    assert partition.seq == f"delayq:{{{tag}}}:_seq"
    assert partition.lock == f"delayq:{{{tag}}}:_lock"
    assert partition.untaken == f"delayq:{{{tag}}}:_untaken"
    assert partition.topic_keys("orders") == [f"delayq:{{{tag}}}:orders:{kind}" for kind in TOPIC_KEYS]


@pytest.mark.parametrize("partitions", [1, 3, 16])
def test_every_key_of_a_partition_has_one_hash_tag_and_one_slot(partitions):
    keyspace = Keyspace("prod:eu", partitions)
    for part in keyspace.partitions:
        keys = [part.topics, part.seq, part.lock, part.untaken, *part.topic_keys("orders"), *part.topic_keys("a.b-c_d")]
        assert len(set(keys)) == len(keys)
        for key in keys:
            assert key.startswith("prod:eu:")
            assert hash_tags(key) == [part.tag]
            assert key.count("{") == 1
            assert key.count("}") == 1
        assert {key_slot(key.encode()) for key in keys} == {keyspace.slot(part)}


def test_topic_keys_come_in_topic_keys_order(partition):
    keys = partition.topic_keys("orders")
    assert len(keys) == len(TOPIC_KEYS) == 16
    assert [key.rsplit(":", 1)[1] for key in keys] == list(TOPIC_KEYS)


def test_topic_keys_do_not_collide_with_partition_keys(partition):
    partition_keys = {partition.topics, partition.seq, partition.lock, partition.untaken}
    for topic in ["topics", "seq", "lock", "untaken", "orders"]:
        assert partition_keys.isdisjoint(partition.topic_keys(topic))


# ----------------------------------------------------------------------------- Keyspace


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
def test_keyspace_partitions(partitions):
    keyspace = Keyspace("delayq", partitions)
    assert len(keyspace) == partitions
    assert [p.index for p in keyspace.partitions] == list(range(partitions))
    assert [p.tag for p in keyspace.partitions] == [partition_tag("delayq", i, partitions) for i in range(partitions)]
    assert all(p.namespace == "delayq" for p in keyspace.partitions)
    for p in keyspace.partitions:
        low = p.index * REDIS_CLUSTER_HASH_SLOTS // partitions
        high = (p.index + 1) * REDIS_CLUSTER_HASH_SLOTS // partitions
        assert low <= keyspace.slot(p) < high


@pytest.mark.parametrize("partitions", [1, 2, 8])
def test_keyspace_for_job_is_consistent(partitions):
    keyspace = Keyspace("delayq", partitions)
    again = Keyspace("delayq", partitions)
    for i in range(500):
        job_id = f"job-{i}"
        part = keyspace.for_job("orders", job_id)
        assert part is keyspace.partitions[partition_of("orders", job_id, partitions)]
        assert part.index == partition_of("orders", job_id, partitions)
        assert again.for_job("orders", job_id) == part
    used = {keyspace.for_job("orders", f"job-{i}").index for i in range(500)}
    assert used == set(range(partitions))


def test_the_lua_side_names_the_topic_keys_in_the_same_order():
    """lua/includes/topic_keys.lua reads each topic's keys by position: its names, order and count
    are keys.py's."""
    source = build_source("stats")
    count = re.search(r"local TOPIC_KEY_COUNT = (\d+)", source)
    assert count
    assert int(count.group(1)) == len(TOPIC_KEYS)
    offsets = dict(re.findall(r"(\w+) = KEYS\[first(?: \+ (\d+))?\]", source))
    # The topic's own job hashes are where a version before the partition's job hashes kept them
    older = [f"old_{kind}" if kind in ("meta", "bodies") else kind for kind in TOPIC_KEYS]
    assert sorted(offsets, key=lambda name: int(offsets[name] or 0)) == older


def test_a_key_group_is_the_topics_keys_then_the_partitions_topic_index(partition):
    group = partition.key_group("orders")
    assert group[: len(TOPIC_KEYS)] == partition.topic_keys("orders")
    index = [partition.topics, partition.delayed_index, partition.ready_index, partition.receipts_index]
    assert group[len(TOPIC_KEYS) :] == [
        *index,
        partition.leases,
        partition.leases_lex,
        partition.metas,
        partition.bodies,
    ]
    source = build_source("stats")
    size = re.search(r"local KEY_GROUP_SIZE = TOPIC_KEY_COUNT \+ (\d+)", source)
    assert size
    assert int(size.group(1)) == len(TOPIC_INDEX_KEYS)


def test_once_its_jobs_are_moved_a_group_names_the_partitions_job_hashes_where_the_topics_were():
    """What tells the scripts to look for jobs in the partition's job hashes alone (jobs.lua): the
    places of the topic's own ``meta`` and ``bodies`` name them."""
    partition = Keyspace("delayq", 2).partitions[1]
    before = partition.key_group("orders")
    assert before[TOPIC_KEYS.index("meta")] == partition.topic_key("orders", "meta")
    partition.moved.known = True
    after = partition.key_group("orders")
    assert after[TOPIC_KEYS.index("meta")] == after[-2] == partition.metas
    assert after[TOPIC_KEYS.index("bodies")] == after[-1] == partition.bodies
    assert [key for key, was in zip(after, before, strict=True) if key != was] == [partition.metas, partition.bodies]
