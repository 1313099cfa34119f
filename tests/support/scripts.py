"""The scripts called through ``delayq.store.calls`` on one partition (``Lua``, the Redis tier's
``lua`` fixture), namespace dumps (``dump``) and Redis' clock (``server_ms``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import redis

from delayq.core.activity import Counts
from delayq.core.callbacks import Record
from delayq.core.job import Attempt, DeadJob, Meta, TopicStats, history_of, last_error_of
from delayq.store import calls
from delayq.store.calls import Ack, Failure, JobWrite, Lease
from delayq.store.keys import TOPIC_KEYS, Keyspace, Partition

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


def leases(client: redis.Redis, partition: Partition, topic: str) -> dict[str, float]:
    """The leased jobs of ``topic`` in ``partition``, id -> lease deadline (ms), soonest first, as the
    partition's lease sets hold them (``lua/includes/leases.lua``); both sets must agree."""
    prefix = f"{topic}/"
    by_topic = client.zrangebylex(partition.leases_lex, f"[{prefix}", f"({topic}0")
    found = {
        str(member)[len(prefix) :]: float(score)
        for member, score in client.zrange(partition.leases, 0, -1, withscores=True)
        if str(member).startswith(prefix)
    }
    assert sorted(found) == sorted(str(member)[len(prefix) :] for member in by_topic), "the lease sets disagree"
    return found


def set_lease(client: redis.Redis, partition: Partition, topic: str, job_id: str, deadline_ms: float) -> None:
    """Leases ``job_id`` until ``deadline_ms`` as a take would record it (its meta aside)."""
    client.zadd(partition.leases, {f"{topic}/{job_id}": deadline_ms})
    client.zadd(partition.leases_lex, {f"{topic}/{job_id}": 0})


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


def job_field(topic: str, job_id: str) -> str:
    """A job's field in its partition's job hashes (``lua/includes/jobs.lua``)."""
    return f"{topic}/{job_id}"


def job_meta(client: redis.Redis, partition: Partition, topic: str, job_id: str) -> str | None:
    return client.hget(partition.metas, job_field(topic, job_id))


def job_body(client: redis.Redis, partition: Partition, topic: str, job_id: str) -> str | None:
    return client.hget(partition.bodies, job_field(topic, job_id))


def job_ids(client: redis.Redis, hash_key: str, topic: str) -> list[str]:
    """The ids of ``topic``'s jobs in one of a partition's job hashes, sorted."""
    prefix = job_field(topic, "")
    return sorted(field[len(prefix) :] for field in client.hkeys(hash_key) if field.startswith(prefix))


def to_older_layout(client: redis.Redis, partition: Partition) -> int:
    """Puts every job of the partition where a version before its job hashes kept it, and takes its
    mark away: what an upgraded namespace holds. Returns the jobs moved."""
    moved = 0
    for hash_key, kind in ((partition.metas, "meta"), (partition.bodies, "bodies")):
        for field, value in client.hgetall(hash_key).items():
            topic, _, job_id = field.partition("/")
            client.hset(partition.topic_key(topic, kind), job_id, value)
            moved += kind == "meta"
        client.delete(hash_key)
    client.delete(partition.jobs_moved)
    return moved


@dataclass
class TopicKeys:
    """The keys of one topic in one partition, by name."""

    delayed: str
    ready: str
    dead: str
    meta: str
    bodies: str
    errors: str
    control: str
    done: str
    fair: str
    turns: str
    flows: str
    busy: str
    pace: str
    held: str
    parked: str
    wake: str

    @classmethod
    def of(cls, partition: Partition, topic: str) -> TopicKeys:
        return cls(**dict(zip(TOPIC_KEYS, partition.topic_keys(topic), strict=True)))


class Rules(NamedTuple):
    """A topic's retries and backoff, as fail and sweep read them (``delayq.store.calls.Retrying``), and
    its receipts, as ack and forget read them (``delayq.store.calls.Keeping``)."""

    retries: int = 2
    backoff_csv: str = BACKOFF
    keep_done_ms: int = 0
    keep_done_max: int = 10_000
    on_done: str | None = None
    on_dead: str | None = None


class Lua:
    """The product's script calls (``delayq.store.calls``) on one partition of a namespace, with the
    defaults these tests use, and direct reads of what the scripts wrote."""

    def __init__(
        self, client: redis.Redis, namespace: str, partitions: int = 1, index: int = 0, *, moved: bool = True
    ) -> None:
        """``moved``: the partitions hold no job of a version before their job hashes (a namespace this
        version made), as ``Namespace`` learns it."""
        self.r = client
        self.keyspace = Keyspace(namespace, partitions)
        self.p = self.keyspace.partitions[index]
        for partition in self.keyspace.partitions:
            partition.moved.known = moved

    def k(self, topic: str) -> TopicKeys:
        return TopicKeys.of(self.p, topic)

    def keys(self, topic: str) -> list[str]:
        return self.p.topic_keys(topic)

    def leases(self, topic: str) -> dict[str, float]:
        """The topic's leased jobs: id -> deadline (ms), soonest first."""
        return leases(self.r, self.p, topic)

    def set_lease(self, topic: str, job_id: str, deadline_ms: float) -> None:
        set_lease(self.r, self.p, topic, job_id, deadline_ms)

    # ------------------------------------------------------------------ writes

    @staticmethod
    def write(
        topic: str,
        job_id: str,
        body: str = '{"n":1}',
        *,
        when: str = "d",
        value: int = 60_000,
        retries: str = "",
        timeout: str = "",
        backoff: str = "",
    ) -> JobWrite:
        """A job to write: due in ``value`` ms (``when`` 'd') or at epoch ms ``value`` ('a'), with
        per-job overrides as the meta stores them ('' for the topic's)."""
        return JobWrite(topic, job_id, body, f"{when}{value}", f"{retries}|{timeout}|{backoff}")

    def enqueue_many(self, writes: list[JobWrite], *, replace: bool = False) -> calls.Enqueued:
        return calls.enqueue(self.p, writes, replace=replace).run(self.r)

    def enqueue(
        self, topic: str, job_id: str, body: str = '{"n":1}', *, replace: bool = False, **options: Any
    ) -> tuple[int, int]:
        (code,), (run_at,) = self.enqueue_many([self.write(topic, job_id, body, **options)], replace=replace)
        return code, run_at

    def take(
        self, topic: str, count: int = 10, timeout_ms: int = TIMEOUT_MS, grace_ms: int = GRACE_MS, **limits: Any
    ) -> calls.Taken:
        """A take; ``limits``: ``longest_ms``, ``run_ms``, ``take_id`` (``calls.take``)."""
        call = calls.take(self.p, topic, count=count, timeout_ms=timeout_ms, grace_ms=grace_ms, **limits)
        return call.run(self.r)

    def untake(self, topic: str, *take_ids: str) -> int:
        return calls.untake(self.p, topic, take_ids).run(self.r)

    def ack(
        self,
        topic: str,
        job_id: str,
        token: str,
        *,
        started_at_ms: int = 0,
        keep_ms: int = 0,
        keep_max: int = 10_000,
        result: str = "",
    ) -> int:
        """An ack; by default with no receipt kept (``keep_ms`` 0), as before receipts."""
        return self.ack_many(topic, [Ack(job_id, token, started_at_ms, result)], keep_ms=keep_ms, keep_max=keep_max)

    def ack_many(self, topic: str, leases: list[Ack], *, keep_ms: int, keep_max: int = 10_000) -> int:
        rules = Rules(keep_done_ms=keep_ms, keep_done_max=keep_max)
        return calls.ack(self.p, topic, rules, leases).run(self.r)

    def jobs_done(self, topic: str, limit: int, before: int | None = None) -> calls.ReadyPage:
        return calls.jobs_done(self.p, topic, limit=limit, before=before).run(self.r)

    def forget(self, topics: list[str], *, keep_ms: int, keep_max: int = 10_000, limit: int = 1000) -> calls.Forgotten:
        rules = [(topic, Rules(keep_done_ms=keep_ms, keep_done_max=keep_max)) for topic in topics]
        return calls.forget(self.p, rules, limit=limit).run(self.r)

    def fail(
        self,
        topic: str,
        job_id: str,
        token: str,
        error: str,
        *,
        retries: int = 2,
        backoff: str = BACKOFF,
        permanent: bool = False,
        retry_after_ms: int = 0,
        started_at_ms: int | None = None,
        outcome: str = "error",
        on_dead: str | None = None,
    ) -> tuple[int, int]:
        """A failed attempt: (retried, dead)."""
        failure = Failure(job_id, token, error, permanent, retry_after_ms, started_at_ms, outcome)
        rules = Rules(retries, backoff, on_dead=on_dead)
        failed = calls.fail(self.p, topic, rules, [failure]).run(self.r)
        assert failed.dead_ids == ((job_id,) if failed.dead else ())
        return failed.retried, failed.dead

    def sweep(
        self,
        topics: list[str],
        token: str,
        *,
        ttl_ms: int = 10_000,
        limit: int = 1000,
        retries: int = 2,
        backoff: str = BACKOFF,
        on_dead: str | None = None,
    ) -> calls.Swept:
        rules = [(topic, Rules(retries, backoff, on_dead=on_dead)) for topic in topics]
        return calls.sweep(self.p, rules, token=token, ttl_ms=ttl_ms, limit=limit).run(self.r)

    def cancel(self, topic: str, job_id: str) -> int:
        return calls.cancel(self.p, topic, job_id).run(self.r)

    def reschedule(self, topic: str, job_id: str, when: str, value: int) -> calls.Rescheduled:
        return calls.reschedule(self.p, topic, job_id, when, value).run(self.r)

    def replay(self, topic: str, *job_ids: str) -> int:
        return calls.replay(self.p, topic, job_ids).run(self.r)

    def replay_oldest(self, topic: str, limit: int) -> int:
        return calls.replay_oldest(self.p, topic, limit).run(self.r)

    def purge(self, topic: str, limit: int) -> int:
        return calls.purge(self.p, topic, limit).run(self.r)

    def inspect(self, topic: str, job_id: str) -> calls.Inspected | None:
        return calls.inspect(self.p, topic, job_id).run(self.r)

    def stats(self, topic: str) -> TopicStats:
        return calls.stats(self.p, topic).run(self.r)

    def dead(self, topic: str, limit: int) -> list[DeadJob]:
        return calls.dead(self.p, topic, limit).run(self.r)

    def pause(self, topic: str, paused: bool = True) -> bool:
        return calls.pause(self.p, topic, paused).run(self.r)

    def forecast(self, topic: str, bucket_ms: int, window_ms: int) -> calls.Forecast:
        return calls.forecast(self.p, topic, bucket_ms=bucket_ms, window_ms=window_ms).run(self.r)

    def jobs_scored(
        self, topic: str, kind: str, limit: int, after: tuple[int, str] | None = None, *, descending: bool = False
    ) -> list[calls.Listed]:
        return calls.jobs_scored(self.p, topic, kind, descending=descending, limit=limit, after=after).run(self.r)

    def jobs_ready(self, topic: str, limit: int, after: int | None = None) -> calls.ReadyPage:
        return calls.jobs_ready(self.p, topic, limit=limit, after=after).run(self.r)

    def ready_ids(self, topic: str) -> list[str]:
        """The ready list as stored, holes ('') included."""
        return self.r.lrange(self.k(topic).ready, 0, -1)

    def unlock(self, token: str) -> bool:
        return calls.unlock(self.p, token).run(self.r)

    # ------------------------------------------------------------------ reads

    def meta(self, topic: str, job_id: str) -> Meta | None:
        raw = self.raw_meta(topic, job_id)
        return None if raw is None else Meta.decode(raw)

    def raw_meta(self, topic: str, job_id: str) -> str | None:
        """The job's meta as stored (``lua/includes/jobs.lua``)."""
        return job_meta(self.r, self.p, topic, job_id)

    def body(self, topic: str, job_id: str) -> str | None:
        """The job's body (a receipt's result) as stored."""
        return job_body(self.r, self.p, topic, job_id)

    def set_meta(self, topic: str, job_id: str, raw: str) -> None:
        self.r.hset(self.p.metas, job_field(topic, job_id), raw)

    def set_body(self, topic: str, job_id: str, raw: str) -> None:
        self.r.hset(self.p.bodies, job_field(topic, job_id), raw)

    def meta_ids(self, topic: str) -> list[str]:
        """The ids of the topic's jobs that have a meta, sorted."""
        return job_ids(self.r, self.p.metas, topic)

    def body_ids(self, topic: str) -> list[str]:
        """The ids of the topic's jobs that have a body (or a result), sorted."""
        return job_ids(self.r, self.p.bodies, topic)

    def history(self, topic: str, job_id: str) -> list[Attempt]:
        """The job's attempts as ``GET`` shows them (its stored history, and a receipt's success)."""
        meta = self.meta(topic, job_id)
        assert meta is not None
        return history_of(self.r.hget(self.k(topic).errors, job_id), meta)

    def last_error(self, topic: str, job_id: str) -> str | None:
        """The error of the job's last attempt, as ``GET`` shows it."""
        return last_error_of(self.history(topic, job_id))

    def where(self, topic: str, job_id: str) -> set[str]:
        """The places ``job_id`` is in: any of delayed, ready, leased, dead, done, meta, bodies, errors."""
        k = self.k(topic)
        found = set()
        if self.r.zscore(k.delayed, job_id) is not None:
            found.add("delayed")
        if job_id in self.r.lrange(k.ready, 0, -1):  # holes are '' and never an id
            found.add("ready")
        if job_id in self.leases(topic):
            found.add("leased")
        if self.r.zscore(k.dead, job_id) is not None:
            found.add("dead")
        if job_id in self.r.lrange(k.done, 0, -1):  # holes are '' and never an id
            found.add("done")
        if self.raw_meta(topic, job_id) is not None:
            found.add("meta")
        if self.body(topic, job_id) is not None:
            found.add("bodies")
        if self.r.hexists(k.errors, job_id):
            found.add("errors")
        return found

    def make_due(self, topic: str, job_id: str, ago_ms: int = 1) -> None:
        """A delayed job due now: its run-at (in the delayed set and in its meta) set ``ago_ms`` ago."""
        k = self.k(topic)
        meta = self.meta(topic, job_id)
        assert meta is not None
        assert self.r.zscore(k.delayed, job_id) is not None
        past = server_ms(self.r) - ago_ms
        self.set_meta(topic, job_id, replace(meta, run_at_ms=past).encode())
        self.r.zadd(k.delayed, {job_id: past})
        self.r.zadd(self.p.delayed_index, {topic: past}, lt=True)  # as a script moving it would

    def outbox(self) -> list[Record]:
        """The partition's outbox records, oldest first."""
        return [Record.decode(raw) for raw in self.r.lrange(self.p.outbox, 0, -1)]

    def make_leased(self, topic: str, job_id: str, **options: Any) -> Lease:
        """A job created due now and leased; its lease."""
        options.setdefault("value", 0)
        code, _ = self.enqueue(topic, job_id, **options)
        assert code == 1
        taken = self.take(topic, count=1)
        assert taken.ids == [job_id]
        return taken.leases[0]

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


def lease_job(client: redis.Redis, queue: Any, topic: str, job_id: str) -> Lease:
    """Leases a ready job (the only ready one of its topic in its partition), as a consumer would."""
    taken = lua_for(client, queue, topic, job_id).take(topic, count=10)
    assert taken.ids == [job_id]
    return taken.leases[0]


def kill_job(client: redis.Redis, queue: Any, topic: str, job_id: str, error: str = "boom") -> None:
    """Leases a ready job and fails it with no retries left: it is dead."""
    lease = lease_job(client, queue, topic, job_id)
    assert lua_for(client, queue, topic, job_id).fail(topic, job_id, lease.token, error, retries=0) == (0, 1)


def add_activity_now(client: redis.Redis, keys: Keyspace, topic: str, counts: Counts) -> int:
    """Adds ``counts`` to ``topic``'s activity in Redis' current minute (as a consumer's flush does)."""
    minute = server_ms(client) // 60_000
    return calls.add_activity(keys.for_topic(topic), {(minute, topic): counts}).run(client)
