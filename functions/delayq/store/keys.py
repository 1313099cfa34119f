"""Every Redis key name delayq uses, from one place.

A namespace is split into partitions. All keys of one partition share one ``{hash tag}``, so every
Lua call, which touches one partition, touches one Redis Cluster slot. The tags are chosen so that
partition ``i`` of ``n`` hashes into the ``i``-th ``n``-th of the slot range: on a cluster whose
masters own contiguous slot ranges (what ``redis-cli --cluster create`` makes) the partitions spread
evenly over the masters by construction, not by luck.

Per namespace::

    {ns}:_layout                string   the partition count, recorded at the namespace's first use

Per partition::

    {ns}:{tag}:_topics          set      topics that ever had a job in this partition
    {ns}:{tag}:_delayed         zset     topic -> the earliest run-at in its delayed set (ms)
    {ns}:{tag}:_leases          zset     topic -> the earliest lease deadline in its leased set (ms)
    {ns}:{tag}:_ready           zset     topic -> when its ready list last started holding jobs (ms)
    {ns}:{tag}:_receipts        zset     topic -> when its first receipt of a done job expires (ms)
    {ns}:{tag}:_indexed         string   set once the four indexes above cover every topic
    {ns}:{tag}:_seq             string   counter for lease tokens (takes without an id)
    {ns}:{tag}:_untaken         zset     take id -> when undone (ms): takes undone before they ran
    {ns}:{tag}:_lock            string   the sweeper's lock (random token, TTL)

Per partition, the recurring schedules whose ``topic/name`` hashes there (``SCHEDULE_KEYS``, in this
order, is the layout the schedule scripts expect; ``scheduler.py`` says how they are used)::

    {ns}:{tag}:_schedules       zset     topic/name, all scores 0: the schedules, by name
    {ns}:{tag}:_schedule_defs   hash     topic/name -> definition (JSON, with when it was written)
    {ns}:{tag}:_schedule_state  hash     topic/name -> progress: gen|last occurrence|claim|outbox
    {ns}:{tag}:_schedules_due   zset     topic/name -> when the sweep next has work for it (ms)

Per topic in a partition (``TOPIC_KEYS``, in this order, is the layout every script expects)::

    {ns}:{tag}:{topic}:delayed  zset     id -> run-at (ms); waiting for run-at
    {ns}:{tag}:{topic}:ready    list     ids, due, in the order they fell due
    {ns}:{tag}:{topic}:leased   zset     id -> lease deadline (ms); taken by a consumer
    {ns}:{tag}:{topic}:dead     zset     id -> time it died (ms)
    {ns}:{tag}:{topic}:meta     hash     id -> state, attempts, times, overrides (``job.Meta``)
    {ns}:{tag}:{topic}:bodies   hash     id -> body (JSON)
    {ns}:{tag}:{topic}:errors   hash     id -> last error
    {ns}:{tag}:{topic}:control  hash     the topic's switch and counters here: ``paused`` (1 while
                                         paused), ``tail`` (ids ever pushed at the ready list's tail),
                                         ``holes`` (ids of cancelled jobs left as holes in that list),
                                         ``rate_at`` (the rate limit's bucket: lua/includes/rate.lua),
                                         ``done_tail`` and ``done_holes`` (the same for the done list)
    {ns}:{tag}:{topic}:done     list     ids of the jobs that succeeded, oldest first: receipts, kept
                                         ``keep_done`` s (their meta is the compact ``d`` form; body
                                         and error dropped; lua/includes/receipts.lua)

A ready job's place in the list never changes while it stays ready: a job cancelled (or rescheduled,
or replaced) while ready leaves a hole instead of being removed, and the take drops holes as it reaches
them. So ``tail - LLEN + index`` is a fixed position, and a listing's cursor can be one
(``lua/includes/queue.lua``).

Per topic, in one partition chosen by its name (``Keyspace.for_topic``), outside ``TOPIC_KEYS``::

    {ns}:{tag}:{topic}:lateness hash     "<minute>:<bucket>" -> deliveries: recent lateness (lateness.py)

The four indexes (``TOPIC_INDEX_KEYS``, with ``_topics``) follow a topic's keys in the key group of
every script that changes the topic (``Partition.key_group``), which keeps them
(``lua/includes/topic_index.lua``): the sweeper and the consumer read them to find the topics that have
something due, without visiting the others.

Topic names cannot start with ``_``, so topic keys never collide with partition keys.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cached_property

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

TOPIC_KEYS = ("delayed", "ready", "leased", "dead", "meta", "bodies", "errors", "control", "done")
TOPIC_INDEX_KEYS = ("_topics", "_delayed", "_leases", "_ready", "_receipts")
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


@dataclass(frozen=True)
class Partition:
    """The keys of one partition."""

    namespace: str
    index: int
    tag: str

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
    def leased_index(self) -> str:
        return self.prefix + "_leases"

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

    def schedule_keys(self) -> list[str]:
        """The four keys of the partition's schedules, in ``SCHEDULE_KEYS`` order."""
        return [self.prefix + kind for kind in SCHEDULE_KEYS]

    def topic_keys(self, topic: str) -> list[str]:
        """The keys of ``topic`` in this partition, in ``TOPIC_KEYS`` order."""
        base = f"{self.prefix}{topic}:"
        return [base + kind for kind in TOPIC_KEYS]

    def key_group(self, topic: str) -> list[str]:
        """What a script that changes ``topic`` is given: its keys, then the partition's topic index, in
        ``TOPIC_INDEX_KEYS`` order (``lua/includes/topic_keys.lua`` reads them so)."""
        return [*self.topic_keys(topic), *(self.prefix + kind for kind in TOPIC_INDEX_KEYS)]

    def lateness(self, topic: str) -> str:
        """The hash of ``topic``'s recent lateness (in the partition ``Keyspace.for_topic`` names)."""
        return f"{self.prefix}{topic}:lateness"


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

    def for_job(self, topic: str, job_id: str) -> Partition:
        return self.partitions[partition_of(topic, job_id, len(self.partitions))]

    def for_topic(self, topic: str) -> Partition:
        """The partition that keeps what is recorded for a whole topic (its recent lateness)."""
        return self.partitions[zlib.crc32(topic.encode()) % len(self.partitions)]

    def for_schedule(self, topic: str, name: str) -> Partition:
        """Where a schedule lives: a stable hash of ``topic/name``, as a job's partition is of ``topic/id``
        (its occurrences, jobs with ids of their own, usually live elsewhere)."""
        return self.partitions[partition_of(topic, name, len(self.partitions))]

    def slot(self, partition: Partition) -> int:
        return key_slot(partition.tag.encode())
