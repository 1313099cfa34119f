"""Every Redis key name delayq uses, from one place: a namespace's, its partitions' (``Partition``:
their topic index, schedules, lock, counters) and each topic's in a partition (``TOPIC_KEYS``, in the
order every script expects them). All keys of one partition share one ``{hash tag}``, chosen so that
partition ``i`` of ``n`` hashes into the ``i``-th ``n``-th of the cluster slot range: every Lua call
touches one slot, and a cluster's masters get their share of partitions by construction. What each
key holds: docs/redis.md's "What is in Redis". Topic names cannot start with ``_``, so topic keys
never collide with a partition's.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from functools import cached_property

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

TOPIC_KEYS = (
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
TOPIC_INDEX_KEYS = ("_topics", "_delayed", "_ready", "_receipts", "_leased", "_leased_lex", "_metas", "_bodies")
OLD_METAS, OLD_BODIES = TOPIC_KEYS.index("meta"), TOPIC_KEYS.index("bodies")  # a version before _metas kept jobs there
SCHEDULE_KEYS = ("_schedules", "_schedule_defs", "_schedule_state", "_schedules_due")


def partition_tag(namespace: str, index: int, partitions: int) -> str:
    """The hash tag of partition ``index``: the first ``{ns}.p{index}.{n}`` whose slot falls in its share.

    Not on the share's first slot when the share starts at a fraction of a slot: tools that split the
    range between masters may round that boundary up and give its slot to the previous master
    (``redis-cli --cluster create`` gives slot 10922 to the second of 3 masters). Shares that start
    on a whole slot (any partition of 1, 2, 4, 8 ...) keep it.
    """
    low = index * REDIS_CLUSTER_HASH_SLOTS // partitions
    high = (index + 1) * REDIS_CLUSTER_HASH_SLOTS // partitions
    if index * REDIS_CLUSTER_HASH_SLOTS % partitions and high - low > 1:
        low += 1
    n = 0
    while True:
        tag = f"{namespace}.p{index}.{n}"
        if low <= key_slot(tag.encode()) < high:
            return tag
        n += 1


def partition_of(topic: str, job_id: str, partitions: int) -> int:
    """Which partition holds a job: a stable hash of ``topic/id``."""
    if partitions == 1:
        return 0
    return zlib.crc32(f"{topic}/{job_id}".encode()) % partitions


@dataclass
class JobsMoved:
    """Whether this process knows that every job of a partition is in the partition's job hashes, none
    left in its topics' own (where a version before them kept jobs): the sweeper moves those, then
    marks the partition (``Partition.jobs_moved``)."""

    known: bool = False


@dataclass(frozen=True)
class Partition:
    """The keys of one partition."""

    namespace: str
    index: int
    tag: str
    moved: JobsMoved = field(default_factory=JobsMoved, compare=False, repr=False)

    @cached_property
    def prefix(self) -> str:
        return f"{self.namespace}:{{{self.tag}}}:"

    @property
    def topics(self) -> str:
        return self.prefix + "_topics"

    @property
    def delayed_index(self) -> str:
        return self.prefix + "_delayed"

    @property
    def leases(self) -> str:
        """Every lease of the partition, whatever its topic: ``topic/id`` -> its deadline (ms)
        (``lua/includes/leases.lua``)."""
        return self.prefix + "_leased"

    @property
    def leases_lex(self) -> str:
        """The same leases scored 0, so that one topic's are a lex range."""
        return self.prefix + "_leased_lex"

    @property
    def old_lease_index(self) -> str:
        """Where a version before the partition's lease sets indexed its topics' leases (topic -> the
        first deadline): the sweeper moves what it names (``move_leases``)."""
        return self.prefix + "_leases"

    def old_leased(self, topic: str) -> str:
        """Where a version before the partition's lease sets kept ``topic``'s leases (id -> deadline)."""
        return f"{self.prefix}{topic}:leased"

    @property
    def metas(self) -> str:
        """Every job's meta, whatever its topic: ``topic/id`` -> its meta (``lua/includes/jobs.lua``)."""
        return self.prefix + "_metas"

    @property
    def bodies(self) -> str:
        """Every job's body (a receipt's result), whatever its topic: ``topic/id`` -> it."""
        return self.prefix + "_bodies"

    @property
    def jobs_moved(self) -> str:
        """Set once no job of the partition is left in its topics' own ``meta`` and ``bodies`` hashes."""
        return self.prefix + "_jobs_moved"

    @property
    def ready_index(self) -> str:
        return self.prefix + "_ready"

    @property
    def receipts_index(self) -> str:
        return self.prefix + "_receipts"

    @property
    def indexed(self) -> str:
        return self.prefix + "_indexed"

    @property
    def seq(self) -> str:
        return self.prefix + "_seq"

    @property
    def untaken(self) -> str:
        return self.prefix + "_untaken"

    @property
    def lock(self) -> str:
        return self.prefix + "_lock"

    @property
    def outbox(self) -> str:
        """Records of jobs done or dead in topics with callbacks, for the sweeper to make jobs of
        (``lua/includes/callbacks.lua``)."""
        return self.prefix + "_outbox"

    @property
    def inbox(self) -> str:
        """Per source partition, the last outbox record a callback job was made of here."""
        return self.prefix + "_inbox"

    def outbox_keys(self) -> list[str]:
        """What a script that may settle a job of a topic with callbacks is given: the partition's
        ``_seq`` counter (the records' numbers) and its ``_outbox``."""
        return [self.seq, self.outbox]

    def schedule_keys(self) -> list[str]:
        """The four keys of the partition's schedules, in ``SCHEDULE_KEYS`` order."""
        return [self.prefix + kind for kind in SCHEDULE_KEYS]

    def topic_keys(self, topic: str) -> list[str]:
        """The keys of ``topic`` in this partition, in ``TOPIC_KEYS`` order."""
        return [self.topic_key(topic, kind) for kind in TOPIC_KEYS]

    def topic_key(self, topic: str, kind: str) -> str:
        """One key of ``topic`` in this partition: ``kind`` is one of ``TOPIC_KEYS``."""
        assert kind in TOPIC_KEYS, kind
        return f"{self.prefix}{topic}:{kind}"

    def key_group(self, topic: str) -> list[str]:
        """What a script about ``topic`` is given: its keys, then the partition's topic index and job
        hashes, in ``TOPIC_INDEX_KEYS`` order (``lua/includes/topic_keys.lua`` reads them so). Once no
        job can be left in the topic's own ``meta`` and ``bodies`` hashes, their places name the
        partition's job hashes instead, and the scripts look nowhere else (``lua/includes/jobs.lua``)."""
        keys = self.topic_keys(topic)
        if self.moved.known:
            keys[OLD_METAS], keys[OLD_BODIES] = self.metas, self.bodies
        return [*keys, *(self.prefix + kind for kind in TOPIC_INDEX_KEYS)]

    @property
    def activity_prefix(self) -> str:
        return self.prefix + "_activity:"

    def activity(self, minute: int) -> str:
        """The hash of one minute's activity (since the epoch) of the topics whose activity this partition
        keeps (``Keyspace.for_topic``), a field per topic: ``delayq.core.activity``."""
        return f"{self.activity_prefix}{minute}"


class Keyspace:
    """All partitions of one namespace."""

    def __init__(self, namespace: str, partitions: int) -> None:
        self.namespace = namespace
        self.partitions: tuple[Partition, ...] = tuple(
            Partition(namespace, i, partition_tag(namespace, i, partitions)) for i in range(partitions)
        )

    def __len__(self) -> int:
        return len(self.partitions)

    @property
    def layout(self) -> str:
        return f"{self.namespace}:_layout"

    @property
    def published_topics(self) -> str:
        """The topic config the loops run with, as they publish it for tools (``Namespace.publish_topics``)."""
        return f"{self.namespace}:_topics_config"

    def for_job(self, topic: str, job_id: str) -> Partition:
        return self.partitions[partition_of(topic, job_id, len(self.partitions))]

    def for_topic(self, topic: str) -> Partition:
        """The partition that keeps what is recorded for a whole topic (its activity)."""
        return self.partitions[zlib.crc32(topic.encode()) % len(self.partitions)]

    def for_schedule(self, topic: str, name: str) -> Partition:
        """Where a schedule lives: a stable hash of ``topic/name``, as a job's partition is of ``topic/id``
        (its occurrences, jobs with ids of their own, usually live elsewhere)."""
        return self.partitions[partition_of(topic, name, len(self.partitions))]

    def slot(self, partition: Partition) -> int:
        return key_slot(partition.tag.encode())
