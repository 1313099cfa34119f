"""One typed function per Lua script: it packs named arguments into the script's KEYS and ARGV, as
the script's header documents them, and returns a ``Call`` that reads the reply into a named result.

    taken = calls.take(partition, "orders", count=10, timeout_ms=30_000, grace_ms=2000).run(client)
    acked, failed = run_many(client, [calls.ack(partition, "orders", done), calls.fail(...)])  # one round trip

The loops, the client and the tests call these; nothing else knows a script's argument positions.
A decoder runs once per reply and makes no object per job beyond what its caller keeps: ``Taken``
holds its jobs' tokens and timeouts in lists beside the jobs (``leases`` pairs them up on demand).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from delayq.core.activity import KEEP_MINUTES, Counted, Counts, minute_of, minutes_of
from delayq.core.errors import Code
from delayq.core.flows import UNLIMITED, Shares
from delayq.core.job import DONE, DeadJob, Job, Meta, TopicStats, history_of, last_error_of

from .keys import Keyspace, Partition
from .scripts import Arg, Call, Scripts

RETRY, PERMANENT = "r", "p"  # how fail.lua treats a failure
PAUSED = -2  # a take's next_in_ms when its topic is paused
# A stored body is compact JSON written by delayq: decoded without json.loads' checks for whitespace
# around it, which cost more than the decoding of a small body (the take is every delivery's path).
_decode_body = json.JSONDecoder().raw_decode


class Retrying(Protocol):
    """What a failed attempt needs of its topic's config (``TopicConfig`` is one)."""

    @property
    def retries(self) -> int: ...

    @property
    def backoff_csv(self) -> str: ...

    @property
    def on_dead(self) -> str | None: ...  # a callback topic for the jobs that go dead


class Keeping(Protocol):
    """What the receipts of a topic's done jobs need of its config (``TopicConfig`` is one)."""

    @property
    def keep_done_ms(self) -> int: ...

    @property
    def keep_done_max(self) -> int: ...

    @property
    def on_done(self) -> str | None: ...  # a callback topic for the jobs that succeed


class Rules(Retrying, Keeping, Protocol):
    """What settling a topic's attempts needs of its config."""


# ------------------------------------------------------------------------------------ create


@dataclass(slots=True)
class JobWrite:
    """One validated job, as enqueue.lua and enqueue_one.lua write it (not frozen: a frozen dataclass is
    slower to make, and one is made per job)."""

    topic: str
    id: str
    body: str  # JSON
    at: str  # 'd<ms>' a delay, 'a<ms>' epoch ms
    overrides: str  # 'retries|timeout_ms|backoff_csv', '' where the topic's applies
    key: str = ""  # its flow key, '' for none


class Enqueued(NamedTuple):
    """Per write, in order: its code (``Code.CREATED``, ``REPLACED``, or an error code: ``EXISTS``,
    ``RESERVED``) and its run-at in ms (0 when refused)."""

    codes: list[int]
    run_at_ms: list[int]


def enqueue(partition: Partition, writes: Sequence[JobWrite], *, replace: bool = False) -> Call[Enqueued]:
    """Creates ``writes`` (all of ``partition``) in one atomic step, refusing jobs that exist; with
    ``replace``, replaces them instead, unless leased. A single create has its own short script."""
    if len(writes) == 1 and not replace:
        (write,) = writes
        overrides = f"{write.overrides}|{write.key}" if write.key else write.overrides
        args = [write.at, overrides, write.id, write.body]
        return Call(Scripts.enqueue_one, partition.key_group(write.topic), args, _enqueued, wrote=_wrote)
    groups: dict[str, str] = {}
    keys: list[str] = []
    lines: list[Arg] = []
    for write in writes:
        group = groups.get(write.topic)
        if group is None:
            group = groups[write.topic] = str(len(groups) + 1)
            keys.extend(partition.key_group(write.topic))
        lines.append(f"{group}|{write.at}|{write.overrides}|{write.key}|{write.id}|{write.body}")  # one ARGV a job
    return Call(Scripts.enqueue, keys, ["r" if replace else "c", *lines], _enqueued, wrote=_wrote)


def _enqueued(reply: list[int]) -> Enqueued:
    return Enqueued(reply[0::2], reply[1::2])


def _wrote(enqueued: Enqueued) -> bool:
    """Whether an enqueue wrote a job (a create refused as existing writes nothing)."""
    return any(code > 0 for code in enqueued.codes)


# ------------------------------------------------------------------------------------ take and settle


class Lease(NamedTuple):
    """A job leased by a take: its lease token (what ack and fail must show) and its timeout."""

    job: Job
    token: str
    timeout_ms: int


@dataclass(slots=True)
class Taken:
    """A take's reply: Redis' time, the ms until the topic's next delayed job falls due (None: none),
    the jobs leased with each one's token and timeout (same order), and the ids of jobs sent to the
    dead letters because their timeout is longer than a whole run of the consumer. ``paused``: the
    topic is paused (``pause``), nothing was taken. ``acked``: how many of the acks that rode with
    the take were acknowledged. ``held``: the topic's rate cut the take short; ``next_in_ms`` is at
    most the wait for its next start."""

    now_ms: int
    next_in_ms: int | None
    jobs: list[Job]
    tokens: list[str]
    timeouts_ms: list[int]
    dead: list[str]
    paused: bool = False
    acked: int = 0
    held: bool = False
    starts_ms: list[int] = field(default_factory=list)  # when each may start: now, its run-at, its key's slot

    @property
    def leases(self) -> list[Lease]:
        return [Lease(*lease) for lease in zip(self.jobs, self.tokens, self.timeouts_ms, strict=True)]

    @property
    def ids(self) -> list[str]:
        return [job.id for job in self.jobs]


class Ack(NamedTuple):
    """A job whose handler succeeded, as ``ack`` (and a take) acknowledges it: its lease token, when
    its handler started (Redis ms) and its result as its receipt keeps it (``encode_result``; '':
    none)."""

    id: str
    token: str
    started_at_ms: int
    result: str = ""


def _ack_args(acks: Iterable[Sequence[Any]]) -> list[Arg]:
    """``acks`` as ack.lua reads them, 4 values each (a 3-tuple has no result)."""
    return [value for ack in acks for value in Ack(*ack)]


class LaneTake(NamedTuple):
    """One lane's part of a take call (``takes``): its topic, its key group and its arguments."""

    topic: str
    keys: list[str]
    args: list[Arg]


def lane_take(
    partition: Partition,
    topic: str,
    *,
    count: int,
    timeout_ms: int,
    grace_ms: int,
    take_id: str | None = None,
    rate: tuple[int, int] | None = None,
    acks: Sequence[Ack] = (),
    keeping: Keeping | None = None,
    ahead_ms: int = 0,
    key_limits: Shares = UNLIMITED,
    pool: int = 0,
    on_dead: str | None = None,
) -> LaneTake:
    """A take of up to ``count`` due jobs of ``topic``, each leased until its timeout (``timeout_ms``
    unless it has its own) plus ``grace_ms``. With ``take_id``, that id is every lease's token and
    ``untake`` can undo the take; else each lease gets a number. With ``rate``
    (``TopicConfig.rate_share``), no more than the partition's bucket holds starts: the others stay
    ready, and ``next_in_ms`` is at most the wait for the next start. ``acks`` (as ``ack`` takes
    them, with the topic's ``keeping``) are acknowledged first, in the same call. With ``ahead_ms``,
    jobs falling due within that many ms are taken too, each leased from its run-at: the caller starts
    none before Redis' clock (``Taken.now_ms`` plus the time since the reply) reaches its run-at. A
    topic with a ``rate`` takes nothing ahead. ``key_limits`` (``KeyLimits.shares``) are every flow
    key's limits but for keys with settings of their own: the jobs of a key at its limit stay ready
    (parked, ``lua/includes/flow.lua``). ``count`` -1 takes nothing: the acks alone (``lane_acks``).
    With ``pool`` (1, 2, ...: one of ``takes``' pools), no more jobs than the lanes before it in the
    call left of that pool. A job acknowledged leaves a record for ``keeping.on_done``'s callback, and
    one sent to the dead letters for ``on_dead``'s (``lua/includes/callbacks.lua``)."""
    if acks and keeping is None:
        raise ValueError("acks ride with a take only with the topic's keeping")
    interval, tolerance = rate if rate is not None else ("", "")
    keep_ms, keep_max = (keeping.keep_done_ms, keeping.keep_done_max) if keeping is not None else (0, 0)
    on_done = (keeping.on_done or "") if keeping is not None else ""
    args: list[Arg] = [count, pool, timeout_ms, grace_ms, take_id or "", interval, tolerance]
    acked = _ack_args(acks)
    args += [keep_ms, keep_max, ahead_ms, *key_limits, on_done, on_dead or "", len(acked), *acked]
    return LaneTake(topic, partition.key_group(topic), args)


def lane_acks(partition: Partition, topic: str, keeping: Keeping, acks: Sequence[Ack]) -> LaneTake:
    """The acks of ``topic`` alone, riding in a take call of its partition's other lanes (as ``ack``)."""
    return lane_take(partition, topic, count=-1, timeout_ms=0, grace_ms=0, acks=acks, keeping=keeping)


def takes(
    partition: Partition,
    lanes: Sequence[LaneTake],
    *,
    longest_ms: int = -1,
    run_ms: int = -1,
    pools: Sequence[int] = (),
) -> Call[list[Taken]]:
    """The takes of ``lanes`` (of ``partition``) in one call, a ``Taken`` each in their order. A job
    whose timeout exceeds ``longest_ms`` is left for a consumer with more time, one whose timeout
    exceeds ``run_ms`` goes dead (-1: no limit). ``pools``: how many jobs the lanes of each pool
    (``lane_take``'s ``pool``, counted from 1) may bring in all."""
    topics = [lane.topic for lane in lanes]
    keys, args = _packed(partition, lanes, longest_ms, run_ms, pools)
    return Call(Scripts.take, keys, args, lambda reply: [_taken(t, r) for t, r in zip(topics, reply, strict=True)])


def take(partition: Partition, topic: str, *, longest_ms: int = -1, run_ms: int = -1, **lane: Any) -> Call[Taken]:
    """One lane's take alone (``lane_take``'s arguments; ``takes``' limits)."""
    keys, args = _packed(partition, [lane_take(partition, topic, **lane)], longest_ms, run_ms, ())
    return Call(Scripts.take, keys, args, lambda reply: _taken(topic, reply[0]))


def _packed(
    partition: Partition, lanes: Sequence[LaneTake], longest_ms: int, run_ms: int, pools: Sequence[int]
) -> tuple[list[str], list[Arg]]:
    keys = [partition.seq, partition.untaken, partition.outbox]
    args: list[Arg] = [longest_ms, run_ms, len(pools), *pools]
    for lane in lanes:
        keys += lane.keys
        args += lane.args
    return keys, args


TAKEN_FIELDS = 9  # values per leased job in take.lua's reply


def _taken(topic: str, reply: list[Any]) -> Taken:
    acked = int(reply[3])
    if reply[1] == PAUSED:
        return Taken(int(reply[0]), None, [], [], [], [], paused=True, acked=acked)
    dead = int(reply[2])
    end = len(reply) - dead
    jobs: list[Job] = []
    for i in range(5, end, TAKEN_FIELDS):
        job_id, body, attempt, run_at, enqueued_at = reply[i : i + 5]
        body = _decode_body(body)[0] if body is not None else None
        key = reply[i + 7] or None
        jobs.append(Job(topic, job_id, body, int(attempt), int(run_at), int(enqueued_at), key))
    next_in_ms = int(reply[1])
    # Tokens (strings) and timeouts (integers) as Redis sent them: sliced, not read one by one.
    tokens, timeouts_ms, starts_ms = reply[10:end:TAKEN_FIELDS], reply[11:end:TAKEN_FIELDS], reply[13:end:TAKEN_FIELDS]
    next_in = next_in_ms if next_in_ms >= 0 else None
    return Taken(
        int(reply[0]),
        next_in,
        jobs,
        tokens,
        timeouts_ms,
        reply[end:],
        acked=acked,
        held=reply[4] == 1,
        starts_ms=starts_ms,
    )


def untake(partition: Partition, topic: str, take_ids: Sequence[str]) -> Call[int]:
    """Undoes takes whose reply was lost: their jobs go back to the head of the ready list, their
    attempt not counted, and a take that has not run yet will lease nothing. How many jobs went back."""
    return Call(Scripts.untake, [*partition.key_group(topic), partition.untaken], take_ids, int)


def ack(partition: Partition, topic: str, keeping: Keeping, acks: Iterable[Ack]) -> Call[int]:
    """Jobs whose handler succeeded are done, if still leased with their token: kept as receipts by
    ``keeping``, with their results (a few expired receipts are forgotten on the way). How many were."""
    args: list[Arg] = [keeping.keep_done_ms, keeping.keep_done_max, keeping.on_done or "", *_ack_args(acks)]
    return Call(Scripts.ack, [*partition.key_group(topic), *partition.outbox_keys()], args, int)


class Forgotten(NamedTuple):
    forgotten: int  # receipts forgotten
    more: bool  # the limit was reached: more may be left


def forget(partition: Partition, topics: Sequence[tuple[str, Keeping]], *, limit: int) -> Call[Forgotten]:
    """Forgets up to ``limit`` receipts of ``topics``: those kept for their topic's ``keep_done``, then
    the oldest beyond its ``keep_done_max``."""
    keys: list[str] = []
    args: list[Arg] = [limit]
    for topic, keeping in topics:
        keys += partition.key_group(topic)
        args += [keeping.keep_done_ms, keeping.keep_done_max]
    return Call(Scripts.forget, keys, args, _forgotten)


def _forgotten(reply: list[int]) -> Forgotten:
    return Forgotten(int(reply[0]), bool(reply[1]))


class Failure(NamedTuple):
    """A failed attempt of a leased job: retried after its backoff (and at least ``retry_after_ms``)
    while retries are left, unless ``permanent``; then dead. Its history entry says when it started
    (Redis ms, None: not known) and whether it ended in an ``error`` or a ``timeout``."""

    id: str
    token: str
    error: str
    permanent: bool = False
    retry_after_ms: int = 0
    started_at_ms: int | None = None
    outcome: str = "error"


class Failed(NamedTuple):
    retried: int
    dead: int
    dead_ids: tuple[str, ...] = ()  # the jobs that went dead


def fail(partition: Partition, topic: str, rules: Retrying, failures: Iterable[Failure]) -> Call[Failed]:
    """Settles ``failures`` of jobs still leased with their token, by ``rules`` unless a job has its own
    (the dead leave a record for ``rules.on_dead``'s callback)."""
    args: list[Arg] = [rules.retries, rules.backoff_csv, rules.on_dead or ""]
    for failure in failures:
        mode = PERMANENT if failure.permanent else RETRY
        started = "" if failure.started_at_ms is None else failure.started_at_ms
        args += [failure.id, failure.token, failure.error, mode, failure.retry_after_ms, started, failure.outcome]
    return Call(Scripts.fail, [*partition.key_group(topic), *partition.outbox_keys()], args, _failed)


def _failed(reply: list[Any]) -> Failed:
    return Failed(int(reply[0]), int(reply[1]), tuple(reply[2:]))


# ------------------------------------------------------------------------------------ sweep


class SweptTopic(NamedTuple):
    moved: int  # due jobs moved to the ready list
    retried: int  # expired leases taken back and retried
    dead: int  # expired leases taken back with no retry left
    dead_ids: tuple[str, ...] = ()  # those jobs


@dataclass(frozen=True, slots=True)
class Swept:
    """A sweep's reply. ``held``: the lock still held the token (else nothing was done). ``next_in_ms``:
    until the partition's topic index next has work for the sweep (None: none). ``indexed``: the index
    covers every topic (else walk them once, ``sweep(..., walked=True)`` last). ``due``: the topics with
    work for the sweep now, the next call's. ``old``: topics whose leases an older version kept, for
    ``move_leases``. ``per_topic``: in the order of the topics given."""

    held: bool
    next_in_ms: int | None
    indexed: bool
    due: list[str]
    per_topic: list[SweptTopic]
    old: list[str] = field(default_factory=list)
    outbox: int = 0  # records in the partition's outbox: callback jobs to make (``callbacks``)
    now_ms: int = 0  # Redis' time


def sweep(
    partition: Partition,
    topics: Sequence[tuple[str, Retrying]],
    *,
    token: str,
    ttl_ms: int,
    limit: int,
    lag_ms: int = 0,
    due_limit: int = 64,
    walked: bool = False,
) -> Call[Swept]:
    """Under the partition's lock (held with ``token``, renewed for ``ttl_ms``): moves due jobs of
    ``topics`` to their ready lists and takes back expired leases by each topic's rules, at most
    ``limit`` of both; reads which topics (at most ``due_limit``) have a job due for ``lag_ms``, a
    lease expired or receipts to forget. ``walked``: ``topics`` end a walk of every topic of the partition."""
    keys = [partition.lock, partition.delayed_index, partition.receipts_index, partition.indexed]
    keys += [*partition.outbox_keys(), partition.leases, partition.old_lease_index]
    args: list[Arg] = [token, ttl_ms, limit, lag_ms, due_limit, "1" if walked else "0"]
    for topic, rules in topics:
        keys += partition.key_group(topic)
        args += [rules.retries, rules.backoff_csv, rules.on_dead or ""]
    return Call(Scripts.sweep, keys, args, lambda reply: _swept(reply, len(topics)))


def _swept(reply: list[Any], groups: int) -> Swept:
    code, next_in_ms, indexed, outbox, now_ms, due, old = (int(value) for value in reply[:7])
    names = [str(name) for name in reply[7 : 7 + due]]
    old_names = [str(name) for name in reply[7 + due : 7 + due + old]]
    start = 7 + due + old
    counts = [int(value) for value in reply[start : start + 3 * groups]]
    dead_ids = iter(reply[start + 3 * groups :])
    per_topic = []
    for i in range(0, len(counts), 3):
        moved, retried, dead = counts[i : i + 3]
        per_topic.append(SweptTopic(moved, retried, dead, tuple(next(dead_ids) for _ in range(dead))))
    held = code != Code.LOCK_LOST
    next_in = next_in_ms if next_in_ms >= 0 else None
    return Swept(held, next_in, bool(indexed), names, per_topic, old_names, outbox, now_ms)


def move_leases(partition: Partition, topics: Sequence[str]) -> Call[int]:
    """Moves the leases an older version kept per topic into the partition's lease sets (the sweep's
    ``old`` topics); the number moved."""
    keys = [partition.old_lease_index, partition.leases, partition.leases_lex]
    keys += [partition.old_leased(topic) for topic in topics]
    return Call(Scripts.move_leases, keys, list(topics), int)


@dataclass(frozen=True, slots=True)
class TopicsDue:
    """Which topics of a partition have work for a consumer: ``due`` maps each to the ms until it has a
    job due (0: now), by Redis' time ``now_ms``."""

    now_ms: int
    due: dict[str, int]


def topics_due(partition: Partition, *, limit: int, horizon_ms: int) -> Call[TopicsDue]:
    """The partition's topics with ready jobs, then those with a job due within ``horizon_ms``, at most
    ``limit``, read off its topic index."""
    return Call(Scripts.topics_due, [partition.ready_index, partition.delayed_index], [limit, horizon_ms], _topics_due)


def _topics_due(reply: list[Any]) -> TopicsDue:
    due: dict[str, int] = {}
    for i in range(1, len(reply), 2):
        name, in_ms = str(reply[i]), int(reply[i + 1])
        due[name] = min(in_ms, due.get(name, in_ms))
    return TopicsDue(int(reply[0]), due)


def ready_topics(partition: Partition, *, limit: int) -> Call[list[str]]:
    """The partition's topics with ready jobs, the longest ready first, at most ``limit``: a plain read
    of its topic index (no script, no clock), cheap enough for a consumer to look often."""
    return Call.plain("ZRANGE", partition.ready_index, [0, limit - 1], _names)


def delayed_topics(partition: Partition, *, until_ms: int, limit: int) -> Call[dict[str, int]]:
    """The partition's topics whose first delayed job falls due by ``until_ms`` (Redis' ms, as the
    caller reckons it: a look, never a decision), each with that run-at, soonest first, at most
    ``limit``: a plain read of its topic index."""
    args: list[Arg] = ["-inf", until_ms, "WITHSCORES", "LIMIT", 0, limit]
    return Call.plain("ZRANGEBYSCORE", partition.delayed_index, args, _run_ats)


def topics(partition: Partition) -> Call[set[str]]:
    """The partition's topics that hold jobs or are paused (its ``_topics``): a plain read."""
    return Call.plain("SMEMBERS", partition.topics, [], lambda reply: {str(name) for name in reply})


def _names(reply: list[Any]) -> list[str]:
    return [str(name) for name in reply]


def _run_ats(reply: list[Any]) -> dict[str, int]:
    pairs = reply if not reply or isinstance(reply[0], list | tuple) else zip(reply[::2], reply[1::2], strict=True)
    return {str(name): int(float(score)) for name, score in pairs}


def lock(partition: Partition, token: str, *, ttl_ms: int) -> Call[bool]:
    """Takes the partition's sweep lock with ``token`` for ``ttl_ms`` if nobody holds it; whether it did."""
    return Call.plain("SET", partition.lock, [token, "NX", "PX", ttl_ms], _set)


def _set(reply: Any) -> bool:
    return reply is True or reply == "OK"


def unlock(partition: Partition, token: str) -> Call[bool]:
    """Releases the partition's sweep lock if it still holds ``token``; whether it did."""
    return Call(Scripts.unlock, [partition.lock], [token], bool)


class Layout(NamedTuple):
    partitions: int  # the namespace's partition count, as recorded
    new: bool  # recorded by this call: the namespace's first use


def layout(keyspace: Keyspace) -> Call[Layout]:
    """Records the keyspace's partition count at the namespace's first use; the count recorded."""
    return Call(Scripts.layout, [keyspace.layout], [len(keyspace)], lambda reply: Layout(int(reply[0]), reply[1] == 1))


def jobs_moved(partition: Partition, *, mark: bool = False) -> Call[bool]:
    """Whether no job of the partition is left in its topics' own hashes (its ``_jobs_moved`` mark);
    with ``mark``, sets the mark first."""
    return Call(Scripts.jobs_moved, [partition.jobs_moved], ["1" if mark else ""], bool)


def move_jobs(partition: Partition, token: str, walks: dict[str, str], limit: int) -> Call[dict[str, str] | None]:
    """A step of the sweeper's walk that moves jobs an older version kept in its topics' own hashes
    (``move_jobs.lua``): ``walks`` is where each topic's walk is ('m0' to start); answers where each
    is next ('' done), or None if the lock is lost."""
    topics = list(walks)
    keys = [partition.lock, *(key for topic in topics for key in partition.key_group(topic))]

    def parse(reply: Any) -> dict[str, str] | None:
        if reply == -5:
            return None
        return {topic: str(at) for topic, at in zip(topics, reply, strict=True)}

    return Call(Scripts.move_jobs, keys, [token, limit, *(walks[topic] for topic in topics)], parse)


# ------------------------------------------------------------------------------------ one job


class Inspected(NamedTuple):
    state: str  # delayed | ready | reserved | dead | done
    meta: Meta
    body: Any
    history: str | None  # its failed attempts as stored (history.lua; ``history_of`` reads them)
    dead_at_ms: int | None
    result: str | None = None  # a done job's, as stored (``encode_result``)


def inspect(partition: Partition, topic: str, job_id: str) -> Call[Inspected | None]:
    """A job read consistently; None when there is none."""
    return Call(Scripts.inspect, partition.key_group(topic), [job_id], _inspected)


def _inspected(reply: list[Any] | None) -> Inspected | None:
    if not reply:
        return None
    state, meta, stored, history, dead_at = [*reply, None, None][:5]  # a receipt has no dead_at
    dead_at_ms = int(float(dead_at)) if dead_at is not None else None
    body, result = _stored(state == "done", stored)  # inspect.lua names the state
    return Inspected(state, Meta.decode(meta), body, history, dead_at_ms, result)


def _stored(done: bool, stored: str | None) -> tuple[Any, str | None]:
    """(body, result) of what a job's entry in its topic's bodies hash holds: a job's body (JSON), or
    for a receipt, which keeps no body, its result (as ``encode_result`` stored it)."""
    if done:
        return None, stored
    return (json.loads(stored) if stored is not None else None), None


class Rescheduled(NamedTuple):
    code: int  # Code.OK, or NOT_FOUND, RESERVED, DEAD, DONE
    run_at_ms: int


def reschedule(partition: Partition, topic: str, job_id: str, when: str, value: int) -> Call[Rescheduled]:
    """A queued job's new run-at: ``when`` 'd', ``value`` ms from now; 'a', at epoch ms ``value``; 'n',
    now, but a job already due keeps its run-at and its place."""
    return Call(Scripts.reschedule, partition.key_group(topic), [job_id, when, value], _rescheduled)


def _rescheduled(reply: list[int]) -> Rescheduled:
    return Rescheduled(int(reply[0]), int(reply[1]))


def cancel(partition: Partition, topic: str, job_id: str, *, only: str = "") -> Call[int]:
    """The job is gone, whatever its state: ``Code.OK``, or ``NOT_FOUND``. With ``only`` 'pending', only
    while it waits for its first run-at (a schedule's occurrence not started yet); with 'delayed',
    'ready' or 'dead', only while in that state (else ``NOT_FOUND``)."""
    return Call(Scripts.cancel, partition.key_group(topic), [job_id, only], int)


class CancelledAll(NamedTuple):
    cancelled: int  # jobs this call cancelled
    left: int  # jobs left in that state in the partition


def cancel_all(partition: Partition, topic: str, state: str, limit: int) -> Call[CancelledAll]:
    """Cancels ``topic``'s jobs in ``state`` ('delayed', 'ready', 'dead') in this partition, reading at
    most ``limit`` of them (ready: jobs and holes) from the front of that state's order."""
    return Call(Scripts.cancel_all, partition.key_group(topic), [state, limit], _cancelled_all)


def _cancelled_all(reply: list[int]) -> CancelledAll:
    return CancelledAll(int(reply[0]), int(reply[1]))


# ------------------------------------------------------------------------------------ topics


def stats(partition: Partition, topic: str) -> Call[TopicStats]:
    """How many jobs of ``topic`` are in each state in this partition, its next run-at, whether it
    is paused here, and how long ago its oldest due job fell due."""
    return Call(Scripts.stats, partition.key_group(topic), (), lambda reply: _stats(topic, reply))


def _stats(topic: str, reply: list[int]) -> TopicStats:
    delayed, ready, reserved, dead, next_at, paused, now, oldest, done = (int(value) for value in reply)
    return TopicStats(
        topic,
        delayed,
        ready,
        reserved,
        dead,
        next_at if next_at >= 0 else None,
        paused=bool(paused),
        oldest_ready_ms=max(0, now - oldest) if oldest >= 0 else 0,
        done=done,
    )


def pause(partition: Partition, topic: str, paused: bool) -> Call[bool]:
    """Pauses (or resumes) ``topic`` in this partition: its takes lease nothing while paused. Whether
    it is paused now."""
    return Call(Scripts.pause, partition.key_group(topic), ["1" if paused else "0", topic], bool)


def key_settings(partition: Partition, topic: str, key: str, encoded: str) -> Call[int]:
    """Sets ``key``'s own settings in this partition (``KeyLimits.encode``), or with '' clears them and
    its hold; its parked jobs are looked at again by the next take."""
    return Call(Scripts.key_settings, partition.key_group(topic), [key, encoded], int)


class KeysStep(NamedTuple):
    """One step of a walk over a topic's jobs in one partition (``keys_walk.lua``)."""

    cursor: str  # '0': the walk is over
    now_ms: int
    counts: dict[str, tuple[int, int, int]]  # key -> (delayed, ready, reserved)
    own: dict[str, tuple[str, int | None]]  # first step: key -> (its settings encoded or '', held until)


KEYS_STEP = 1000  # ids (and metas) a walk step reads, about


def keys_walk(
    partition: Partition, topic: str, cursor: str, key: str = "", *, metas: int = KEYS_STEP
) -> Call[KeysStep]:
    """A step of the walk over ``topic``'s jobs in this partition (its delayed set, ready list, fair and
    parked sets, its leases) from ``cursor`` ('0' to start), counting each flow key's jobs (only
    ``key``'s, if given) by state, about ``metas`` of them (0: none, only the keys' own settings and
    holds)."""
    return Call(Scripts.keys_walk, partition.key_group(topic), [cursor, metas, key], _keys_step)


def _keys_step(reply: list[Any]) -> KeysStep:
    cursor, now = str(reply[0]), int(reply[1])
    rest = reply[2:]
    split = next((i for i, value in enumerate(rest) if str(value) == ""), len(rest))
    counts = {str(rest[i]): (int(rest[i + 1]), int(rest[i + 2]), int(rest[i + 3])) for i in range(0, split, 4)}
    own: dict[str, tuple[str, int | None]] = {}
    for i in range(split + 1, len(rest), 3):
        held = str(rest[i + 2])
        own[str(rest[i])] = (str(rest[i + 1]), int(held) if held else None)
    return KeysStep(cursor, now, counts, own)


class Forecast(NamedTuple):
    now_ms: int
    counts: list[int]  # delayed jobs falling due per bucket, from now on


def forecast(partition: Partition, topic: str, *, bucket_ms: int, window_ms: int) -> Call[Forecast]:
    """How many delayed jobs of ``topic`` fall due in each ``bucket_ms`` of the ``window_ms`` from
    Redis' now (the last bucket cut short at the window's end)."""
    return Call(Scripts.forecast, partition.topic_keys(topic), [bucket_ms, window_ms], _forecast)


def _forecast(reply: list[int]) -> Forecast:
    return Forecast(int(reply[0]), [int(count) for count in reply[1:]])


# ------------------------------------------------------------------------------------ listing


# A place in the ready jobs' order: a list position, a (turn, id) in the fair set, a parked member.
Place = int | tuple[int, str] | str


class Listed(NamedTuple):
    """A job of a page, with its place: its score in its sorted set, its position in the ready list, or
    its (turn, id) in the fair set (jobs with flow keys)."""

    id: str
    place: Place
    meta: Meta
    body: Any
    history: str | None  # as stored (history.lua)
    result: str | None = None  # a done job's, as stored (``encode_result``)


def jobs_scored(
    partition: Partition, topic: str, kind: str, *, descending: bool, limit: int, after: tuple[int, str] | None
) -> Call[list[Listed]]:
    """Up to ``limit`` jobs of ``topic`` in its ``kind`` sorted set ('delayed', 'leased', 'dead'),
    lowest score first (highest with ``descending``), after the (score, id) ``after``."""
    score, job_id = ("", "") if after is None else after
    args: list[Arg] = [kind, "desc" if descending else "asc", limit, score, job_id]
    return Call(Scripts.jobs_scored, partition.key_group(topic), args, _listed)


def _listed(reply: list[Any]) -> list[Listed]:
    jobs = []
    for i in range(0, len(reply), 5):
        job_id, place, raw, stored, history = reply[i : i + 5]
        if raw is not None:  # a member without its job: nothing to show
            meta = Meta.decode(raw)
            # A score or a list position; in the fair set, 'f<turn>' (jobs_ready.lua).
            at: Place = _place(place, job_id)
            body, result = _stored(meta.state == DONE, stored)
            jobs.append(Listed(job_id, at, meta, body, history, result))
    return jobs


class ReadyPage(NamedTuple):
    """A page of a list (ready jobs, or receipts), each job with its position."""

    jobs: list[Listed]
    more: bool  # jobs are left after these


def jobs_ready(partition: Partition, topic: str, *, limit: int, after: Place | None) -> Call[ReadyPage]:
    """Up to ``limit`` ready jobs of ``topic``, in the order they will be taken, after ``after`` (a
    position in the ready list, a (turn, id) in the fair set, which comes after the list, or a member of
    the parked, which come last)."""
    if isinstance(after, tuple):
        args: list[Arg] = [limit, "", *after, ""]
    elif isinstance(after, str):
        args = [limit, "", "", "", after]
    else:
        args = [limit, "" if after is None else after, "", "", ""]
    return Call(Scripts.jobs_ready, partition.key_group(topic), args, _ready_page)


def jobs_done(partition: Partition, topic: str, *, limit: int, before: int | None) -> Call[ReadyPage]:
    """Up to ``limit`` receipts of ``topic`` (done jobs), newest first, before position ``before``."""
    args: list[Arg] = [limit, "" if before is None else before]
    return Call(Scripts.jobs_done, partition.key_group(topic), args, _ready_page)


def _place(place: Any, job_id: str) -> Place:
    """A place as jobs_ready.lua and jobs_done.lua give it: 'f<turn>', 'p<member>' or a position."""
    if isinstance(place, str) and place[:1] == "f":
        return int(place[1:]), job_id
    if isinstance(place, str) and place[:1] == "p":
        return place[1:]
    return int(float(place))


def _ready_page(reply: list[Any]) -> ReadyPage:
    return ReadyPage(_listed(reply[1:]), bool(int(reply[0])))


def dead(partition: Partition, topic: str, limit: int) -> Call[list[DeadJob]]:
    """The ``limit`` most recent dead jobs of ``topic`` in this partition, newest first."""
    return Call(Scripts.dead, partition.key_group(topic), [limit], lambda reply: _dead(topic, reply))


def _dead(topic: str, reply: list[Any]) -> list[DeadJob]:
    jobs = []
    for i in range(0, len(reply), 5):
        job_id, died_at, raw_meta, body, stored = reply[i : i + 5]
        meta = Meta.decode(raw_meta)
        history = history_of(stored, meta)
        died_at_ms = int(float(died_at))
        body = json.loads(body) if body is not None else None
        last_error = last_error_of(history) or ""
        jobs.append(
            DeadJob(
                topic,
                job_id,
                died_at_ms,
                meta.attempts,
                meta.run_at_ms,
                meta.enqueued_at_ms,
                body,
                last_error,
                tuple(history),
            )
        )
    return jobs


class DeadPage(NamedTuple):
    dead: int  # the partition's dead jobs of the topic
    jobs: list[tuple[str, int, str]]  # newest death first: id, died_at_ms, last error ('' if none)


def dead_errors(partition: Partition, topic: str, start: int, count: int) -> Call[DeadPage]:
    """``count`` dead jobs of ``topic`` in this partition from rank ``start`` (0: the newest death), each
    with its last error, not its body."""
    return Call(Scripts.dead_errors, partition.key_group(topic), [start, count], _dead_page)


def _dead_page(reply: list[Any]) -> DeadPage:
    jobs = []
    for i in range(1, len(reply), 4):
        job_id, died_at, raw_meta, last = reply[i : i + 4]
        error = last_error_of(history_of(last or None, Meta.decode(raw_meta))) or ""
        jobs.append((str(job_id), int(float(died_at)), error))
    return DeadPage(int(reply[0]), jobs)


def replay(partition: Partition, topic: str, job_ids: Sequence[str]) -> Call[int]:
    """The dead jobs among ``job_ids`` are due now with fresh attempts; how many."""
    return Call(Scripts.replay, partition.key_group(topic), ["ids", *job_ids], int)


def replay_oldest(partition: Partition, topic: str, limit: int) -> Call[int]:
    """Up to ``limit`` dead jobs, oldest deaths first, are due now with fresh attempts; how many (0:
    none are left)."""
    return Call(Scripts.replay, partition.key_group(topic), ["oldest", limit], int)


def purge(partition: Partition, topic: str, limit: int) -> Call[int]:
    """Deletes up to ``limit`` dead jobs for good, oldest deaths first; how many (0: none are left)."""
    return Call(Scripts.purge, partition.key_group(topic), [limit], int)


# ------------------------------------------------------------------------------------ activity


def add_activity(partition: Partition, counted: Mapping[Counted, Counts]) -> Call[int]:
    """Adds each topic's counts to its activity in their minute, all kept in ``partition``
    (``Keyspace.for_topic``), in one call; how many topics' minutes it wrote."""
    by_minute: dict[int, list[Arg]] = {}
    for (minute, topic), counts in counted.items():
        by_minute.setdefault(minute, []).extend((topic, counts.encode()))
    args: list[Arg] = [KEEP_MINUTES]
    for minute, pairs in by_minute.items():
        args += [minute, len(pairs) // 2, *pairs]
    return Call(Scripts.activity_add, [partition.activity(minute) for minute in by_minute], args, int)


def add_activities(keyspace: Keyspace, counted: Mapping[Counted, Counts]) -> list[tuple[Partition, Call[int]]]:
    """``add_activity`` for topics of any partitions: a call per partition that keeps some."""
    by_partition: dict[Partition, dict[Counted, Counts]] = {}
    for key, counts in counted.items():
        by_partition.setdefault(keyspace.for_topic(key[1]), {})[key] = counts
    return [(partition, add_activity(partition, part)) for partition, part in by_partition.items()]


MINUTES_SLACK = 1  # minutes' keys a read of activity is given beyond those it wants, on each side


class Window(NamedTuple):
    """The minutes' keys a read of activity is given: those around the current minute by the reader's
    estimate of Redis' clock, ``MINUTES_SLACK`` more on each side, so that an estimate that is off by
    less than that still covers the minutes wanted (Redis' own time picks them)."""

    first: int  # the minute of the first key
    keys: list[str]


def _window(partition: Partition, minutes: int, around_ms: float) -> Window:
    current = minute_of(around_ms)
    first = current - minutes + 1 - MINUTES_SLACK
    return Window(first, [partition.activity(m) for m in range(first, current + MINUTES_SLACK + 1)])


class Activity(NamedTuple):
    """A read of activity: Redis' time, and what was read; None when the keys given did not cover the
    minutes wanted by that time (read again around it)."""

    now_ms: int
    read: Any


def read_activity(partition: Partition, topic: str, minutes: int, *, around_ms: float) -> Call[Activity]:
    """``topic``'s last ``minutes`` minutes of activity, the current one last (kept in ``partition``), as
    ``Minute`` s; ``around_ms``: Redis' time as the reader knows it."""
    window = _window(partition, minutes, around_ms)
    return Call(Scripts.activity_read, window.keys, [window.first, minutes, topic], _activity_read)


def _activity(reply: list[Any], read: Callable[[int, list[Any]], Any]) -> Activity:
    """A reply of activity_read.lua or lateness_read.lua: Redis' time, whether its keys covered the
    minutes wanted, then what ``read`` makes of the rest (given Redis' time)."""
    now_ms, covered = int(reply[0]), reply[1] == 1
    return Activity(now_ms, read(now_ms, reply[2:]) if covered else None)


def _activity_read(reply: list[Any]) -> Activity:
    return _activity(reply, lambda now_ms, fields: minutes_of(now_ms, [None if f is None else str(f) for f in fields]))


def read_lateness(
    partition: Partition, topics: Sequence[str], *, window_minutes: int, around_ms: float
) -> Call[Activity]:
    """The recent lateness of ``topics`` (their activity all kept in ``partition``), each as bucket ->
    deliveries, over the current minute and ``window_minutes`` before it; ``around_ms``: Redis' time as
    the reader knows it."""
    window = _window(partition, window_minutes + 1, around_ms)
    return Call(Scripts.lateness_read, window.keys, [window.first, window_minutes, *topics], _lateness_read)


def _lateness_read(reply: list[Any]) -> Activity:
    return _activity(reply, lambda _, flats: [{int(f[i]): int(f[i + 1]) for i in range(0, len(f), 2)} for f in flats])


# ------------------------------------------------------------------------------------ schedules


class Written(NamedTuple):
    """A schedule write's reply: its code (``Code.CREATED``, ``REPLACED``, ``OK`` for a delete; or
    ``NOT_FOUND``, ``CHANGED``, ``BUSY``), Redis' time (with ``BUSY``: the ms until the claim in the
    way expires) and the generation of the progress written (0: none)."""

    code: int
    now_ms: int
    generation: int


def schedule_write(
    partition: Partition,
    name: str,
    *,
    expected: str,
    definition: str,
    progress: str,
    claim_ms: int,
    due: int | None,
) -> Call[Written]:
    """Writes schedule ``name`` (topic/name) if its progress is still ``expected`` ('' none): its
    ``definition`` ('' deletes it) and its ``progress`` without the generation ('' forgets it), due
    at ``due`` unless the progress holds a claim (then in ``claim_ms``)."""
    args: list[Arg] = [name, expected, definition, progress, claim_ms, "" if due is None else due]
    return Call(Scripts.schedule_write, [*partition.schedule_keys(), partition.seq], args, _written)


def _written(reply: list[int]) -> Written:
    return Written(int(reply[0]), int(reply[1]), int(reply[2]))


class Stored(NamedTuple):
    """A schedule as stored: its name (topic/name), definition (JSON) and progress; None where absent."""

    name: str
    definition: str | None
    progress: str | None


class Read(NamedTuple):
    """Schedules read whole, and Redis' time when they were."""

    now_ms: int
    schedules: list[Stored]


def schedule_read(partition: Partition, names: Sequence[str]) -> Call[Read]:
    """Schedules ``names`` (topic/name) of ``partition``, each read whole."""
    _, defs, state, _ = partition.schedule_keys()
    return Call(Scripts.schedule_read, [defs, state], names, lambda reply: _read(names, reply))


def _read(names: Sequence[str], reply: list[Any]) -> Read:
    pairs = zip(names, range(1, len(reply), 2), strict=True)
    stored = [Stored(name, reply[i] or None, reply[i + 1] or None) for name, i in pairs]
    return Read(int(reply[0]), stored)


def schedule_list(partition: Partition, first: str, last: str, limit: int) -> Call[Read]:
    """Up to ``limit`` schedules of ``partition`` from name ``first`` to ``last`` (as ZRANGE BYLEX
    takes them: ``-``, ``[a/``, ``(a/x``, ``+``), in name order, each read whole."""
    names, defs, state, _ = partition.schedule_keys()
    return Call(Scripts.schedule_list, [names, defs, state], [first, last, limit], _schedules_listed)


def _schedules_listed(reply: list[Any]) -> Read:
    stored = [Stored(reply[i], reply[i + 1] or None, reply[i + 2] or None) for i in range(1, len(reply), 3)]
    return Read(int(reply[0]), stored)


class Due(NamedTuple):
    """The schedules of a partition the sweep has work for now, Redis' time, and the ms until the
    next one not listed falls due (0: more are due now; None: none)."""

    now_ms: int
    next_in_ms: int | None
    schedules: list[Stored]


def schedules_due(partition: Partition, limit: int) -> Call[Due]:
    """Up to ``limit`` schedules of ``partition`` due by Redis' time, each read whole."""
    _, defs, state, due = partition.schedule_keys()
    return Call(Scripts.schedules_due, [due, defs, state], [limit], _due)


def _due(reply: list[Any]) -> Due:
    stored = [Stored(reply[i], reply[i + 2] or None, reply[i + 1] or None) for i in range(2, len(reply), 3)]
    next_in_ms = int(reply[1])
    return Due(int(reply[0]), next_in_ms if next_in_ms >= 0 else None, stored)


CLAIM = "claim"  # a move's ``due``: the claim's deadline


class Move(NamedTuple):
    """One compare-and-set of ``schedules_cas``: schedule ``name`` from progress ``expected`` ('' none)
    to ``progress`` ('' forgets it), due next at ``due``: ms, ``CLAIM`` (the claim's deadline) or None."""

    name: str
    expected: str
    progress: str
    due: int | str | None


class Moved(NamedTuple):
    """Redis' time, and per move whether it was made (else the progress had changed)."""

    now_ms: int
    made: list[bool]


def schedules_cas(partition: Partition, moves: Sequence[Move], claim_ms: int) -> Call[Moved]:
    """Each of ``moves`` made if the schedule's progress is still the one expected."""
    _, _, state, due = partition.schedule_keys()
    args: list[Arg] = [claim_ms]
    for move in moves:
        args += [move.name, move.expected, move.progress, "" if move.due is None else move.due]
    return Call(Scripts.schedules_cas, [state, due], args, _moved)


def _moved(reply: list[int]) -> Moved:
    return Moved(int(reply[0]), [bool(made) for made in reply[1:]])


# ------------------------------------------------------------------------------------ callbacks


class CallbackJob(NamedTuple):
    """A callback job to make from an outbox record: its topic, the record's number, its id, flow key
    and body (JSON)."""

    topic: str
    seq: int
    id: str
    key: str | None
    body: str


def callbacks(partition: Partition, source: Partition, jobs: Sequence[CallbackJob]) -> Call[int]:
    """Makes ``jobs`` (all of ``partition``, in the order of their records) from ``source``'s outbox,
    each due now; records made into jobs here before are skipped. How many jobs were made."""
    topics = list(dict.fromkeys(job.topic for job in jobs))
    group = {topic: n for n, topic in enumerate(topics, 1)}
    keys = [partition.inbox]
    for topic in topics:
        keys += partition.key_group(topic)
    args: list[Arg] = [source.tag]
    for job in jobs:
        args += [group[job.topic], job.seq, job.id, job.key or "", job.body]
    return Call(Scripts.callbacks, keys, args, int)


def outbox_trim(partition: Partition, last_seq: int) -> Call[int]:
    """Drops the partition's outbox records numbered up to ``last_seq``; how many."""
    return Call(Scripts.outbox_trim, [partition.outbox], [last_seq], int)
