"""Helpers for the Redis tier: direct script calls with the real key layout, and namespace dumps.

Not a test module (no ``test_`` prefix); the test files of this folder import it by name.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import redis

from delayq.job import Meta
from delayq.keys import TOPIC_KEYS, Keyspace, Partition
from delayq.scripts import Scripts

GRACE_MS = 2000
TIMEOUT_MS = 30_000
BACKOFF = "1000,5000,60000"


def server_ms(client: redis.Redis) -> int:
    """Redis server time in ms (what the scripts use)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def sleep_until_server_ms(client: redis.Redis, ms: int) -> None:
    """Until Redis' clock reads ``ms`` (the scripts' clock, not ours): a job due then is due now."""
    while (left := ms - server_ms(client)) > 0:
        time.sleep(left / 1000)


def dump(client: redis.Redis, namespace: str) -> dict[str, Any]:
    """Every key of ``namespace`` with its type and full value, for before/after comparisons."""
    out: dict[str, Any] = {}
    for key in sorted(client.scan_iter(match=f"{namespace}:*", count=1000)):
        kind = client.type(key)
        if kind == "string":
            value: Any = client.get(key)
        elif kind == "hash":
            value = client.hgetall(key)
        elif kind == "list":
            value = client.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(client.smembers(key))
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        else:  # pragma: no cover - delayq writes no other type
            value = kind
        out[key] = (kind, value)
    return out


@dataclass
class TopicKeys:
    """The seven keys of one topic in one partition, by name."""

    delayed: str
    ready: str
    leased: str
    dead: str
    meta: str
    bodies: str
    errors: str

    @classmethod
    def of(cls, partition: Partition, topic: str) -> TopicKeys:
        return cls(**dict(zip(TOPIC_KEYS, partition.topic_keys(topic), strict=True)))


@dataclass
class Leased:
    id: str
    body: str
    attempt: int
    run_at_ms: int
    enqueued_at_ms: int
    token: str
    timeout_ms: int


@dataclass
class Taken:
    now_ms: int
    next_in_ms: int
    jobs: list[Leased]

    @property
    def ids(self) -> list[str]:
        return [job.id for job in self.jobs]


class Lua:
    """Direct calls of the scripts on one partition of a namespace."""

    def __init__(self, client: redis.Redis, namespace: str, partitions: int = 1, index: int = 0) -> None:
        self.r = client
        self.keyspace = Keyspace(namespace, partitions)
        self.p = self.keyspace.partitions[index]

    def k(self, topic: str) -> TopicKeys:
        return TopicKeys.of(self.p, topic)

    def keys(self, topic: str) -> list[str]:
        return self.p.topic_keys(topic)

    # ------------------------------------------------------------------ writes

    @staticmethod
    def job_args(
        group: int,
        job_id: str,
        body: str = '{"n":1}',
        *,
        when: str = "d",
        value: int = 60_000,
        retries: str = "",
        timeout: str = "",
        backoff: str = "",
    ) -> list[Any]:
        return [group, job_id, body, f"{when}{value}", f"{retries}|{timeout}|{backoff}"]

    def enqueue_raw(self, topics: list[str], jobs: list[list[Any]], mode: str = "c") -> list[int]:
        keys = [self.p.topics]
        for topic in topics:
            keys += self.keys(topic)
        args: list[Any] = [len(topics), mode, *topics]
        for job in jobs:
            args += job
        return [int(v) for v in Scripts.enqueue(self.r, keys, args)]

    def enqueue(
        self, topic: str, job_id: str, body: str = '{"n":1}', *, mode: str = "c", **options: Any
    ) -> tuple[int, int]:
        code, run_at = self.enqueue_raw([topic], [self.job_args(1, job_id, body, **options)], mode)
        return code, run_at

    def take(
        self,
        topic: str,
        count: int = 10,
        timeout_ms: int = TIMEOUT_MS,
        grace_ms: int = GRACE_MS,
        *,
        take_id: str | None = None,
    ) -> Taken:
        """A take; with ``take_id``, as the consumer sends it (no time limits, so no dead section)."""
        keys, args = [*self.keys(topic), self.p.seq], [count, timeout_ms, grace_ms]
        if take_id is not None:
            keys, args = [*keys, self.p.untaken], [*args, -1, -1, take_id]
        reply = Scripts.take(self.r, keys, args)
        first = 2 if take_id is None else 3
        jobs = [
            Leased(
                id=reply[i],
                body=reply[i + 1],
                attempt=int(reply[i + 2]),
                run_at_ms=int(reply[i + 3]),
                enqueued_at_ms=int(reply[i + 4]),
                token=str(reply[i + 5]),
                timeout_ms=int(reply[i + 6]),
            )
            for i in range(first, len(reply), 7)
        ]
        return Taken(int(reply[0]), int(reply[1]), jobs)

    def untake(self, topic: str, *take_ids: str) -> int:
        return int(Scripts.untake(self.r, [*self.keys(topic), self.p.untaken], list(take_ids)))

    def ack(self, topic: str, *pairs: str) -> int:
        return int(Scripts.ack(self.r, self.keys(topic), list(pairs)))

    def fail(
        self, topic: str, *triples: str, retries: int = 2, backoff: str = BACKOFF, permanent: bool = False
    ) -> tuple[int, int]:
        """Fails jobs given as (id, token, error) triples, all retryable or all permanent."""
        kind = "p" if permanent else "r"
        args = [value for i in range(0, len(triples), 3) for value in (*triples[i : i + 3], kind)]
        retried, dead = Scripts.fail(self.r, self.keys(topic), [retries, backoff, *args])
        return int(retried), int(dead)

    def sweep(
        self,
        topics: list[str],
        token: str,
        *,
        ttl_ms: int = 10_000,
        limit: int = 1000,
        retries: int = 2,
        backoff: str = BACKOFF,
    ) -> dict[str, int]:
        keys = [self.p.lock, self.p.topics]
        args: list[Any] = [token, ttl_ms, limit]
        for topic in topics:
            keys += self.keys(topic)
            args += [retries, backoff]
        code, next_in_ms, more, known, *per_topic = (int(v) for v in Scripts.sweep(self.r, keys, args))
        return {
            "code": code,
            "moved": sum(per_topic[0::3]),
            "retried": sum(per_topic[1::3]),
            "dead": sum(per_topic[2::3]),
            "next_in_ms": next_in_ms,
            "more": more,
            "topics": known,
        }

    def cancel(self, topic: str, job_id: str) -> int:
        return int(Scripts.cancel(self.r, self.keys(topic), [job_id]))

    def reschedule(self, topic: str, job_id: str, when: str, value: int) -> tuple[int, int]:
        code, run_at = Scripts.reschedule(self.r, self.keys(topic), [job_id, when, value])
        return int(code), int(run_at)

    def replay(self, topic: str, *args: Any) -> int:
        return int(Scripts.replay(self.r, self.keys(topic), list(args)))

    def purge(self, topic: str, limit: int) -> int:
        return int(Scripts.purge(self.r, self.keys(topic), [limit]))

    def inspect(self, topic: str, job_id: str) -> Any:
        return Scripts.inspect(self.r, self.keys(topic), [job_id])

    def stats(self, topic: str) -> list[int]:
        return [int(v) for v in Scripts.stats(self.r, self.keys(topic))]

    def dead(self, topic: str, limit: int) -> list[Any]:
        return Scripts.dead(self.r, self.keys(topic), [limit])

    def unlock(self, token: str) -> int:
        return int(Scripts.unlock(self.r, [self.p.lock], [token]))

    # ------------------------------------------------------------------ reads

    def meta(self, topic: str, job_id: str) -> Meta | None:
        raw = self.r.hget(self.k(topic).meta, job_id)
        return None if raw is None else Meta.decode(raw)

    def where(self, topic: str, job_id: str) -> set[str]:
        """The places ``job_id`` is in: any of delayed, ready, leased, dead, meta, bodies, errors."""
        k = self.k(topic)
        found = set()
        if self.r.zscore(k.delayed, job_id) is not None:
            found.add("delayed")
        if job_id in self.r.lrange(k.ready, 0, -1):
            found.add("ready")
        if self.r.zscore(k.leased, job_id) is not None:
            found.add("leased")
        if self.r.zscore(k.dead, job_id) is not None:
            found.add("dead")
        for name in ("meta", "bodies", "errors"):
            if self.r.hexists(getattr(k, name), job_id):
                found.add(name)
        return found

    def make_due(self, topic: str, job_id: str) -> None:
        """A delayed job due now: its run-at (in the delayed set and in its meta) set to the past."""
        k = self.k(topic)
        meta = self.meta(topic, job_id)
        assert meta is not None
        assert self.r.zscore(k.delayed, job_id) is not None
        past = server_ms(self.r) - 1
        self.r.hset(k.meta, job_id, replace(meta, run_at_ms=past).encode())
        self.r.zadd(k.delayed, {job_id: past})

    def make_leased(self, topic: str, job_id: str, **options: Any) -> Leased:
        """A job created due now and leased; its lease."""
        options.setdefault("value", 0)
        code, _ = self.enqueue(topic, job_id, **options)
        assert code == 1
        taken = self.take(topic, count=1)
        assert taken.ids == [job_id]
        return taken.jobs[0]

    def make_dead(self, topic: str, job_id: str, error: str = "boom", **options: Any) -> None:
        """A job created, leased and failed with no retries left: dead."""
        options.setdefault("retries", "0")
        lease = self.make_leased(topic, job_id, **options)
        assert self.fail(topic, job_id, lease.token, error) == (0, 1)


# ---------------------------------------------------------------------------------- for Queue tests


def lua_for(client: redis.Redis, queue: Any, topic: str, job_id: str) -> Lua:
    """Direct script calls on the partition that holds ``topic``/``job_id`` in ``queue``'s keyspace."""
    partition = queue.keys.for_job(topic, job_id)
    return Lua(client, queue.settings.namespace, len(queue.keys), partition.index)


def lease_job(client: redis.Redis, queue: Any, topic: str, job_id: str) -> Leased:
    """Leases a ready job (the only ready one of its topic in its partition), as a consumer would."""
    taken = lua_for(client, queue, topic, job_id).take(topic, count=10)
    assert taken.ids == [job_id]
    return taken.jobs[0]


def kill_job(client: redis.Redis, queue: Any, topic: str, job_id: str, error: str = "boom") -> None:
    """Leases a ready job and fails it with no retries left: it is dead."""
    lease = lease_job(client, queue, topic, job_id)
    assert lua_for(client, queue, topic, job_id).fail(topic, job_id, lease.token, error, retries=0) == (0, 1)
