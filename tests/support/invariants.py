"""The namespace invariant: what Redis must hold for a delayq namespace at any instant, whatever ran
against it (every step is one Lua call, so there is no "between" to see). Used by the hostile tier
after every request and by the fault tier while and after its processes run.

Read from Redis, not through delayq (``inspect.lua`` calls any queued job that is not in ``delayed``
``ready``, so the API cannot show a job that is in no place at all). The layout is README "What is in
Redis", ``keys.py`` and ``lua/includes/meta.lua``; per partition and topic:

- every key of the namespace is its ``_layout`` (a string: the partition count), its
  ``_topics_config`` (the topic config the loops published for tools, JSON), a partition key
  (``_topics`` set, ``_seq`` counter, ``_lock`` string, ``_untaken`` sorted set, the topic index
  ``_delayed``, ``_ready``, ``_receipts`` sorted sets and its ``_indexed`` mark, its lease sets
  ``_leased`` and ``_leased_lex``, the callbacks' ``_outbox`` list, of records numbered in order by
  ``_seq``, and ``_inbox`` hash, a number no higher than its source partition's ``_seq`` per source)
  or one of the topic keys (``TOPIC_KEYS``), of its type,
  for a valid topic name that the partition's ``_topics`` set lists;
- the partition's two lease sets hold the same members, ``topic/id`` each (``_leased_lex`` scored 0), of
  jobs of topics that have keys here;
- the topic index never hides work: a topic with delayed jobs is in ``_delayed`` no later than its
  first run-at, one with ready jobs in ``_ready``, one with receipts in ``_receipts`` (it may name
  topics that have none: the next sweep or take corrects that); and every topic it names is in
  ``_topics``;
- the ready list's holes (``''``, left by jobs cancelled while ready) are as many as its ``control``
  hash counts, and that hash holds only ``paused`` (a time), ``tail`` and ``holes`` (numbers);
- the ids of ``meta`` are exactly those of ``bodies``, but for receipts (``d``), which keep no body
  but may keep a result there instead (``=`` and its JSON, ``"`` and a text, or ``~`` and the text
  it was cut to, at most 64 KiB);
  ``errors`` (a job's history of failed attempts) holds only ids of ``meta``, each a well-formed
  history of at most 10 attempts; every id is a valid id;
- each job of ``meta`` is in exactly one place, the one its state says: ``q`` in ``delayed`` (scored
  with its run-at) or ``ready`` (once, and due), ``l`` in the partition's leases, ``x`` in ``dead``, ``d`` (a
  receipt of a job that succeeded) in ``done``; no place holds an id without a meta;
- the partition's schedules: the names of ``_schedules`` are exactly those of ``_schedule_defs``, each
  ``topic/name`` valid and hashed to this partition, each definition a valid schedule with its
  ``created_ms``; each has a progress in ``_schedule_state``, well formed (``generation|last|claim|outbox``);
  a progress without a definition is a delete under way (its outbox forgets it); a claimed outbox is in
  ``_schedules_due``, and nothing is there without a progress;
- each meta is well formed: ``state|attempts|run_at|enqueued_at|lease|retries|timeout|backoff[|key]``, a
  lease token exactly when leased (a number issued by the partition's ``_seq``, no two alike, or the
  id of the consumer's take: ``t`` and 16 hex digits; a receipt holds ``started_at:done_at`` there
  instead, after an attempt), run-at never before the enqueue, at least one attempt behind a leased
  job, a last error behind every dead job and every failed attempt (a queued job with attempts, a
  leased one past its first attempt). A dead job may have no attempt: a permanent failure found before
  any (a timeout no consume run can last).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import redis

from delayq.core.callbacks import Record
from delayq.core.job import RESULT_MAX_BYTES
from delayq.core.models import KEY_PATTERN
from delayq.core.recurring import SCHEDULE_NAME_PATTERN
from delayq.store.keys import TOPIC_KEYS, Keyspace, Partition
from delayq.store.schedules import Definition

# The contract's limits (CONTRACT.md "Limits"), matched whole: a trailing newline is not a name.
TOPIC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}")
META = re.compile(
    r"([qlxd])\|(\d+)\|(\d+)\|(\d+)\|(\d*|t[0-9a-f]{16}|\d+:\d+)\|(\d*)\|(\d*)\|((?:\d+(?:,\d+)*)?)"
    + r"(?:\|"
    + KEY_PATTERN.strip("^$")
    + ")?"  # a flow key, if the job has one
)
KINDS = {"delayed": "zset", "ready": "list", "dead": "zset", "meta": "hash", "bodies": "hash",
         "errors": "hash", "control": "hash", "done": "list", "fair": "zset", "turns": "hash", "flows": "hash",
         "busy": "hash", "pace": "zset", "held": "zset", "parked": "zset", "wake": "zset"}  # fmt: skip
CONTROL_FIELDS = {"paused", "tail", "holes", "rate_at", "done_head", "done_holes", "untaken", "turn", "keyed", "fair",
                  "flows", "held", "busy", "parked"}  # fmt: skip
RECEIPT_LEASE = re.compile(r"\d+:\d+")  # a receipt's 'started_at:done_at'
# A job's history (history.lua): 1 to 10 failed attempts, 'attempt|started|ended|outcome|error' each
_ATTEMPT = r"\d+\|\d*\|\d+\|(?:error|timeout|lease_expired)\|[^\x1e]*"
HISTORY = re.compile(rf"{_ATTEMPT}(?:\x1e{_ATTEMPT}){{0,9}}", re.DOTALL)

HOLE = ""  # a ready list's hole (lua/includes/queue.lua)
KEYED_META = re.compile(r"(?:[^|]*\|){8}(.+)")  # a meta that ends with a flow key
PARKED = re.compile(r"(.+)\|(\d{15})\|(.+)")  # a parked job: key|run_at|id (lua/includes/flow.lua)
PARTITION_KINDS = {"_topics": "set", "_seq": "string", "_lock": "string", "_untaken": "zset", "_schedules": "zset",
                   "_schedule_defs": "hash", "_schedule_state": "hash", "_schedules_due": "zset",
                   "_delayed": "zset", "_ready": "zset", "_receipts": "zset", "_leased": "zset", "_leased_lex": "zset",
                   "_indexed": "string", "_outbox": "list", "_inbox": "hash", "_metas": "hash", "_bodies": "hash",
                   "_jobs_moved": "string"}  # fmt: skip
SCHEDULE = re.compile(rf"({TOPIC_NAME.pattern})/({SCHEDULE_NAME_PATTERN.strip('^$')})")
PROGRESS = re.compile(r"(\d+)\|(\d*)\|([0-9a-f]*)\|((?:[crx]\d+|d)(?:,(?:[crx]\d+|d))*)?")
PLACE_OF_STATE = {"q": ("delayed", "ready"), "l": ("leased",), "x": ("dead",), "d": ("done",)}

# ``{key: (type, content)}``: a hash as a dict, a list as a list, a set as a sorted list, a sorted set as
# ``[(member, score)]``, a string as itself.
Snapshot = dict[str, tuple[str, Any]]


class StoredJob(NamedTuple):
    """One job as the namespace holds it."""

    topic: str
    id: str
    meta: str
    state: str  # q, l, x or d
    place: str  # delayed, ready, leased, dead or done ("nowhere", or "delayed+ready": the invariant is broken)
    run_at_ms: int
    attempts: int
    lease: str  # the lease token, "" unless leased (a done job's: when its handler started, ms)
    body: str | None
    error: str | None


class Broken(AssertionError):
    """The namespace breaks the invariant; ``problems`` says how."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = "\n  ".join(problems[:30])
        more = f"\n  ... and {len(problems) - 30} more" if len(problems) > 30 else ""
        super().__init__(f"the namespace breaks the invariant ({len(problems)} problems):\n  {shown}{more}")


# ------------------------------------------------------------------------------------------ reading


def stored_result(stored: str) -> bool:
    """Whether a receipt's entry in ``bodies`` is a result as ``encode_result`` stores it."""
    kind, text = stored[:1], stored[1:]
    if len(text.encode()) > RESULT_MAX_BYTES or kind not in ("=", '"', "~"):
        return False
    try:
        return kind != "=" or json.loads(text) is not None
    except ValueError:
        return False


def read_keys(client: redis.Redis, keys: Iterable[str]) -> Snapshot:
    """``keys`` as a snapshot, in two pipelined round trips (not atomic: for a namespace nobody else
    writes to; ``read_atomic`` is for one that is being worked on)."""
    keys = sorted(keys)
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
    kinds = pipe.execute()
    readers: dict[str, Callable[[str], Any]] = {
        "string": pipe.get,
        "hash": pipe.hgetall,
        "list": lambda key: pipe.lrange(key, 0, -1),
        "set": pipe.smembers,
        "zset": lambda key: pipe.zrange(key, 0, -1, withscores=True),
    }
    for key, kind in zip(keys, kinds, strict=True):
        readers.get(kind, pipe.type)(key)
    contents = pipe.execute()
    out: Snapshot = {}
    for key, kind, content in zip(keys, kinds, contents, strict=True):
        if kind != "none":
            out[key] = (kind, sorted(content) if kind == "set" else content)
    return out


def namespace_keys(client: redis.Redis, namespace: str) -> list[str]:
    return sorted(client.scan_iter(match=f"{namespace}:*", count=1000))


def read_namespace(client: redis.Redis, namespace: str) -> Snapshot:
    """Every key of ``namespace``, when nothing else writes to it."""
    return read_keys(client, namespace_keys(client, namespace))


def read_atomic(client: redis.Redis, namespace: str, partitions: int = 1) -> Snapshot:
    """Every key of ``namespace`` as it was at one instant, while loops may be working on it: the
    partition keys and the topic keys of every topic the ``_topics`` sets name, read in one MULTI/EXEC
    (typed reads: a key of the wrong type fails the read), plus any other key of the namespace (read
    apart: there should be none, and the invariant says so). ``client`` must decode responses."""
    keyspace = Keyspace(namespace, partitions)
    for _ in range(10):
        topics = {p.index: sorted(client.smembers(p.topics)) for p in keyspace.partitions}
        pipe = client.pipeline(transaction=True)
        layout: list[tuple[str, str]] = []
        for p in keyspace.partitions:
            pipe.smembers(p.topics)
            pipe.get(p.seq)
            pipe.get(p.lock)
            pipe.zrange(p.untaken, 0, -1, withscores=True)
            layout += [(p.topics, "set"), (p.seq, "string"), (p.lock, "string"), (p.untaken, "zset")]
            for index in (p.delayed_index, p.ready_index, p.receipts_index, p.leases, p.leases_lex):
                pipe.zrange(index, 0, -1, withscores=True)
                layout.append((index, "zset"))
            pipe.get(p.indexed)
            pipe.get(p.jobs_moved)
            pipe.hgetall(p.metas)
            pipe.hgetall(p.bodies)
            layout += [(p.indexed, "string"), (p.jobs_moved, "string"), (p.metas, "hash"), (p.bodies, "hash")]
            names, defs, state, due = p.schedule_keys()
            pipe.zrange(names, 0, -1, withscores=True)
            pipe.hgetall(defs)
            pipe.hgetall(state)
            pipe.zrange(due, 0, -1, withscores=True)
            layout += [(names, "zset"), (defs, "hash"), (state, "hash"), (due, "zset")]
            for topic in topics[p.index]:
                for key, kind in zip(p.topic_keys(topic), TOPIC_KEYS, strict=True):
                    if KINDS[kind] == "zset":
                        pipe.zrange(key, 0, -1, withscores=True)
                    elif KINDS[kind] == "list":
                        pipe.lrange(key, 0, -1)
                    else:
                        pipe.hgetall(key)
                    layout.append((key, KINDS[kind]))
        contents = pipe.execute()
        snap: Snapshot = {}
        for (key, kind), content in zip(layout, contents, strict=True):
            if content is None or (kind != "string" and not content):
                continue  # Redis has no empty collections: absent
            snap[key] = (kind, sorted(content) if kind == "set" else content)
        now_topics = {p.index: sorted(snap.get(p.topics, ("set", []))[1]) for p in keyspace.partitions}
        if now_topics == topics:  # no topic appeared between the two reads
            others = [key for key in namespace_keys(client, namespace) if key not in dict(layout)]
            snap.update(read_keys(client, others))
            return snap
    raise AssertionError("the topics kept changing: no consistent read in 10 tries")


# ------------------------------------------------------------------------------------------ the check


def problems(snap: Snapshot, namespace: str, partitions: int = 1, *, now_ms: int | None = None,
             topics: Iterable[tuple[int, str]] | None = None) -> list[str]:  # fmt: skip
    """What in ``snap`` breaks the invariant (nothing: ``[]``). With ``now_ms`` (Redis' time, taken
    after the snapshot), a ready job must be due by then. With ``topics`` ((partition, topic) pairs),
    only those topics' jobs are checked (what changed since a check that passed); every key's place in
    the layout and the topic sets always are."""
    return _Examination(snap, namespace, partitions, now_ms, topics).found


def check(snap: Snapshot, namespace: str, partitions: int = 1, *, now_ms: int | None = None,
          topics: Iterable[tuple[int, str]] | None = None) -> dict[tuple[str, str], StoredJob]:  # fmt: skip
    """Raises ``Broken`` unless ``snap`` keeps the invariant; else every job of it (of ``topics``, when
    given), by (topic, id)."""
    examined = _Examination(snap, namespace, partitions, now_ms, topics)
    if examined.found:
        raise Broken(examined.found)
    return examined.jobs


def check_redis(client: redis.Redis, namespace: str, partitions: int = 1) -> dict[tuple[str, str], StoredJob]:
    """``check`` of the namespace as it is now in Redis (read at one instant: loops may be running)."""
    snap = read_atomic(client, namespace, partitions)
    seconds, micros = client.time()
    return check(snap, namespace, partitions, now_ms=int(seconds) * 1000 + int(micros) // 1000)


def unsettled(jobs: dict[tuple[str, str], StoredJob]) -> dict[tuple[str, str], StoredJob]:
    """The jobs of ``jobs`` (a ``check``'s answer) that are not receipts of jobs that succeeded: what a
    run that should have settled everything left behind."""
    return {key: job for key, job in jobs.items() if job.state != "d"}


def topic_of_key(key: str, keyspace: Keyspace) -> tuple[Partition, str, str] | None:
    """(partition, topic, kind) of a topic key; ``None`` for any other key."""
    for p in keyspace.partitions:
        if key.startswith(p.prefix):
            rest = key[len(p.prefix) :]
            if ":" not in rest:
                return None
            topic, kind = rest.rsplit(":", 1)
            return (p, topic, kind) if kind in KINDS else None
    return None


class _Examination:
    """One pass over a snapshot: ``found`` (the problems) and ``jobs``."""

    def __init__(
        self,
        snap: Snapshot,
        namespace: str,
        partitions: int,
        now_ms: int | None,
        topics: Iterable[tuple[int, str]] | None,
    ) -> None:
        self.snap = snap
        self.keyspace = Keyspace(namespace, partitions)
        self.now_ms = now_ms
        self.only = None if topics is None else set(topics)
        self.found: list[str] = []
        self.jobs: dict[tuple[str, str], StoredJob] = {}
        by_topic = self.layout()
        for p in self.keyspace.partitions:
            self.partition(p, {topic: parts for (index, topic), parts in sorted(by_topic.items()) if index == p.index})

    def activity_key(self, key: str, kind: str, content: Any) -> bool:
        """Checks ``key`` if it is a partition's minute of activity (telemetry, not a job's state): a hash
        of the topics that partition keeps the activity of. Whether it is."""
        for p in self.keyspace.partitions:
            if key.startswith(p.activity_prefix) and key[len(p.activity_prefix) :].isdigit():
                if kind != "hash":
                    self.found.append(f"{key} is a {kind}, not a hash")
                    return True
                strays = [t for t in content if not TOPIC_NAME.fullmatch(t) or self.keyspace.for_topic(t) != p]
                if strays:
                    self.found.append(f"{key} holds topics another partition keeps, or no topic: {strays}")
                return True
        return False

    def namespace_key(self, key: str, kind: str, content: Any) -> bool:
        """Checks ``key`` if it is one of the namespace's own (not a partition's); whether it is."""
        if key == self.keyspace.layout:
            if (kind, content) != ("string", str(len(self.keyspace))):
                self.found.append(f"{key} is {kind} {content!r}, not the partition count {len(self.keyspace)}")
            return True
        if key == self.keyspace.published_topics:  # the loops' topic config, for tools
            if kind != "string" or not isinstance(json.loads(content).get("topics"), dict):
                self.found.append(f"{key} is {kind} {str(content)[:80]!r}, not a published topic config")
            return True
        return False

    def layout(self) -> dict[tuple[int, str], dict[str, Any]]:
        """Every key in its place and of its type; the topic keys' contents, by (partition, topic)."""
        partition_keys = {p.prefix + name: name for p in self.keyspace.partitions for name in PARTITION_KINDS}
        by_topic: dict[tuple[int, str], dict[str, Any]] = {}
        for key, (kind, content) in self.snap.items():
            if self.namespace_key(key, kind, content):
                continue
            if key in partition_keys:
                name = partition_keys[key]
                if kind != PARTITION_KINDS[name]:
                    self.found.append(f"{key} is a {kind}, not a {PARTITION_KINDS[name]}")
                elif name == "_seq" and not str(content).isdigit():
                    self.found.append(f"{key} is not a counter: {content!r}")
                continue
            if self.activity_key(key, kind, content):
                continue
            where = topic_of_key(key, self.keyspace)
            if where is None:
                self.found.append(f"stray key {key!r} ({kind}): not in the layout")
                continue
            p, topic, part = where
            if not TOPIC_NAME.fullmatch(topic):
                self.found.append(f"key {key!r} of an invalid topic name {topic!r}")
            if part in ("meta", "bodies"):  # where a version before the job hashes kept them
                self.found.append(f"{key}: jobs of an older version, not moved into the partition's job hashes")
            elif kind != KINDS[part]:
                self.found.append(f"{key} is a {kind}, not a {KINDS[part]}")
            else:
                by_topic.setdefault((p.index, topic), {})[part] = content
        return by_topic

    def callbacks(self, p: Partition, seq: int) -> None:
        """The outbox's records decode and are numbered in order, none beyond ``_seq``; the inbox names
        partitions of the namespace, none beyond their ``_seq``."""
        numbers = []
        for raw in self.snap.get(p.outbox, ("list", []))[1]:
            try:
                numbers.append(Record.decode(raw).seq)
            except (ValueError, TypeError) as exc:
                self.found.append(f"{p.outbox}: a record that does not decode ({exc}): {raw[:80]!r}")
        if numbers != sorted(set(numbers)) or (numbers and numbers[-1] > seq):
            self.found.append(f"{p.outbox}: records not numbered in order up to _seq {seq}: {numbers[:20]}")
        tags = {q.tag: q for q in self.keyspace.partitions}
        for source, last in dict(self.snap.get(p.inbox, ("hash", {}))[1]).items():
            issued = str(self.snap.get(tags[source].seq, ("string", "0"))[1]) if source in tags else None
            if issued is None or not str(last).isdigit() or int(last) > int(issued or 0):
                self.found.append(f"{p.inbox}: {source!r} -> {last!r}: not a partition's number it issued")

    def partition(self, p: Partition, topics: dict[str, dict[str, Any]]) -> None:
        listed = set(self.snap.get(p.topics, ("set", []))[1])
        seq_text = str(self.snap.get(p.seq, ("string", "0"))[1])
        seq = int(seq_text) if seq_text.isdigit() else 0
        tokens: Counter[str] = Counter()
        for kind, key in (("meta", p.metas), ("bodies", p.bodies)):
            for topic, held in self.job_hash(key).items():
                topics.setdefault(topic, {})[kind] = held
        for topic, held in self.leases(p).items():
            if topic in topics:
                topics[topic]["leased"] = held
            else:
                self.found.append(f"{p.leases}: leases of topic {topic!r}, which has no key in partition {p.index}")
        for topic, parts in topics.items():
            if topic not in listed:
                self.found.append(f"topic {topic!r} has keys in partition {p.index} but is not in {p.topics}")
            if self.only is None or (p.index, topic) in self.only:
                for job in self.topic(p, topic, parts):
                    if job.state == "l" and job.lease.isdigit():  # a take id may lease several jobs; a number, one
                        tokens[job.lease] += 1
                        if int(job.lease) > seq:
                            self.found.append(f"{p.prefix}{topic}: {job.id!r} holds lease token {job.lease}, never "
                                              f"issued (_seq is {seq})")  # fmt: skip
        self.index(p, topics)
        self.callbacks(p, seq)
        if self.only is None:  # every leased job of the partition seen: no token twice
            twice = {token: n for token, n in tokens.items() if n > 1}
            self.found += [f"lease token {token} held by {n} jobs in partition {p.index}" for token, n in twice.items()]
        self.schedules(p)

    def job_hash(self, key: str) -> dict[str, dict[str, str]]:
        """One of a partition's job hashes by topic, {id: value} (``lua/includes/jobs.lua``)."""
        by_topic: dict[str, dict[str, str]] = {}
        for field, value in dict(self.snap.get(key, ("hash", {}))[1]).items():
            topic, _, job_id = field.partition("/")
            if not TOPIC_NAME.fullmatch(topic) or not JOB_ID.fullmatch(job_id):
                self.found.append(f"{key}: {field!r} is not topic/id")
            by_topic.setdefault(topic, {})[job_id] = value
        return by_topic

    def leases(self, p: Partition) -> dict[str, list[tuple[str, float]]]:
        """The partition's leases by topic, [(id, deadline)]; its two lease sets agree."""
        by_deadline = self.snap.get(p.leases, ("zset", []))[1]
        by_topic = self.snap.get(p.leases_lex, ("zset", []))[1]
        if {member for member, _ in by_deadline} != {member for member, _ in by_topic}:
            self.found.append(f"{p.leases} and {p.leases_lex} hold different leases")
        if any(score != 0 for _, score in by_topic):
            self.found.append(f"{p.leases_lex}: a member not scored 0")
        leases: dict[str, list[tuple[str, float]]] = {}
        for member, deadline in by_deadline:
            topic, _, job_id = member.partition("/")
            if not TOPIC_NAME.fullmatch(topic) or not JOB_ID.fullmatch(job_id):
                self.found.append(f"{p.leases}: {member!r} is not topic/id")
            leases.setdefault(topic, []).append((job_id, deadline))
        return leases

    def index(self, p: Partition, topics: dict[str, dict[str, Any]]) -> None:
        """The partition's topic index hides no work: each topic's first run-at, its ready jobs and
        receipts are there, no later than they are."""
        parts = ("delayed", "ready", "done")
        indexes = (p.delayed_index, p.ready_index, p.receipts_index)
        known = set(self.snap.get(p.topics, ("set", []))[1])
        for index_key, part in zip(indexes, parts, strict=True):
            scores = {name: score for name, score in self.snap.get(index_key, ("zset", []))[1]}
            # An enqueue writes no _topics for a topic the index names already (create.lua)
            self.found += [f"{index_key}: {name!r} is not in {p.topics}" for name in sorted(scores.keys() - known)]
            for topic, parts in topics.items():
                content = parts.get(part)
                if part == "ready":
                    listed = any(job_id != HOLE for job_id in content or [])
                    if (listed or parts.get("fair") or parts.get("parked")) and topic not in scores:
                        self.found.append(f"{index_key}: {topic!r} has ready jobs but is not in the index")
                    continue
                if not content:
                    continue
                if part == "done":  # scored by when the first receipt expires: by topic config
                    if any(job_id != HOLE for job_id in content) and topic not in scores:
                        self.found.append(f"{index_key}: {topic!r} has receipts but is not in the index")
                    continue
                first = min(score for _, score in content)
                if topic not in scores:
                    self.found.append(f"{index_key}: {topic!r} has {part} jobs but is not in the index")
                elif scores[topic] > first:
                    self.found.append(f"{index_key}: {topic!r} at {scores[topic]:.0f}, after its first {part} "
                                      f"job at {first:.0f}")  # fmt: skip

    def schedules(self, p: Partition) -> None:
        """The partition's schedules: names, definitions, progress and due index agree."""
        names_key, defs_key, state_key, due_key = p.schedule_keys()
        names = {name for name, _ in self.snap.get(names_key, ("zset", []))[1]}
        defs: dict[str, str] = dict(self.snap.get(defs_key, ("hash", {}))[1])
        states: dict[str, str] = dict(self.snap.get(state_key, ("hash", {}))[1])
        due = {name for name, _ in self.snap.get(due_key, ("zset", []))[1]}
        found = [f"{names_key}: {n!r} listed without a definition" for n in sorted(names - defs.keys())]
        found += [f"{defs_key}: {n!r} defined but not listed" for n in sorted(defs.keys() - names)]
        found += [f"{due_key}: {n!r} due without a progress" for n in sorted(due - states.keys())]
        found += [f"{state_key}: {n!r} defined without a progress" for n in sorted(defs.keys() - states.keys())]
        for name in sorted(defs.keys() | states.keys()):
            match = SCHEDULE.fullmatch(name)
            if match is None:
                found.append(f"{defs_key}: {name!r} is not a valid topic/name")
            elif self.keyspace.for_schedule(*match.groups()).index != p.index:
                found.append(f"{defs_key}: {name!r} is not in its own partition")
            if name in defs:
                try:
                    Definition.decode(defs[name])
                except (ValueError, KeyError) as exc:
                    found.append(f"{defs_key}: {name!r} is not a valid definition: {exc}")
            progress = PROGRESS.fullmatch(states.get(name, ""))
            if name in states and progress is None:
                found.append(f"{state_key}: {name!r} has a malformed progress {states[name]!r}")
            elif progress is not None:
                claim, outbox = progress.group(3, 4)
                if bool(claim) != bool(outbox):
                    found.append(
                        f"{state_key}: {name!r} has a claim without an outbox or the reverse: {states[name]!r}"
                    )
                if claim and name not in due:
                    found.append(f"{state_key}: {name!r} is claimed but not in {due_key}")
                if name not in defs and "d" not in (outbox or "").split(","):
                    found.append(f"{state_key}: {name!r} has a progress but no definition, and is not being deleted")
        self.found += found

    def topic(self, p: Partition, topic: str, parts: dict[str, Any]) -> list[StoredJob]:
        where = f"{p.prefix}{topic}"
        metas: dict[str, str] = parts.get("meta") or {}
        bodies: dict[str, str] = parts.get("bodies") or {}
        errors: dict[str, str] = parts.get("errors") or {}
        delayed: dict[str, float] = dict(parts.get("delayed") or [])
        ready: list[str] = parts.get("ready") or []
        done_list: list[str] = parts.get("done") or []
        self.control(where, parts.get("control") or {}, ready.count(HOLE), done_list.count(HOLE))
        places: dict[str, str] = dict.fromkeys(delayed, "delayed")
        twice: dict[str, list[str]] = {}  # ids in more than one place (or twice in ready)
        for place, ids in (
            ("leased", [job_id for job_id, _ in parts.get("leased") or []]),
            ("dead", [job_id for job_id, _ in parts.get("dead") or []]),
            ("done", [job_id for job_id in done_list if job_id != HOLE]),
            ("ready", [job_id for job_id in ready if job_id != HOLE]),
            ("ready", [job_id for job_id, _ in parts.get("fair") or []]),  # ready, with a flow key
            ("ready", [match[3] for member, _ in parts.get("parked") or [] if (match := PARKED.fullmatch(member))]),
        ):
            for job_id in ids:
                if job_id in places:
                    twice.setdefault(job_id, [places[job_id]]).append(place)
                else:
                    places[job_id] = place
        self.flow_keys(where, parts, metas)
        for job_id in bodies.keys() - metas.keys():
            self.found.append(f"{where}: body of {job_id!r}, which has no meta")
        for job_id in errors.keys() - metas.keys():
            self.found.append(f"{where}: last error of {job_id!r}, which has no meta")
        for job_id in places.keys() - metas.keys():
            self.found.append(f"{where}: {job_id!r} in {twice.get(job_id, [places[job_id]])} without a meta")
        home = self.keyspace.for_job if len(self.keyspace) > 1 else None
        now_ms = self.now_ms
        out = []
        for job_id, raw in metas.items():
            match = META.fullmatch(raw)
            if match is None:
                self.found.append(f"{where}: {job_id!r} has a malformed meta {raw!r}")
                continue
            state, attempts_text, run_at_text, enqueued_text, lease = match.group(1, 2, 3, 4, 5)
            attempts, run_at = int(attempts_text), int(run_at_text)
            place = "+".join(twice[job_id]) if job_id in twice else places.get(job_id, "nowhere")
            job = StoredJob(topic, job_id, raw, state, place, run_at, attempts, lease, bodies.get(job_id),
                            errors.get(job_id))  # fmt: skip
            out.append(job)
            # The common case in one expression; the messages only when something is off.
            done = state == "d"
            if (
                place not in PLACE_OF_STATE[state]
                or (state in "ld") != (lease != "")
                or run_at < int(enqueued_text)
                or (job.body is None and not done)
                or (done and job.body is not None and not stored_result(job.body))
                or (done and (not RECEIPT_LEASE.fullmatch(lease) or attempts < 1))
                or (job.error is not None and not HISTORY.fullmatch(job.error))
                or (job.error is None and (state == "x" or (not done and attempts >= (2 if state == "l" else 1))))
                or (state == "l" and attempts < 1)
                or (place == "delayed" and int(delayed[job_id]) != run_at)
                or (place == "ready" and now_ms is not None and run_at > now_ms)
                or not JOB_ID.fullmatch(job_id)
                or (home is not None and home(topic, job_id).index != p.index)
                or (topic, job_id) in self.jobs
            ):
                self.job(p, job, int(enqueued_text), delayed.get(job_id))
            self.jobs[(topic, job_id)] = job
        return out

    def flow_keys(self, where: str, parts: dict[str, Any], metas: dict[str, str]) -> None:
        """Ready jobs with a flow key are in the fair set, the others in the ready list; control says
        when the fair set holds jobs (the take reads it there)."""
        if bool(parts.get("fair")) != ("fair" in (parts.get("control") or {})):
            self.found.append(f"{where}: control 'fair' is not set exactly while the fair set holds jobs")
        for job_id, _ in parts.get("fair") or []:
            if job_id in metas and not KEYED_META.fullmatch(metas[job_id]):
                self.found.append(f"{where}: {job_id!r} is in the fair set without a flow key")
        for job_id in parts.get("ready") or []:
            if job_id in metas and KEYED_META.fullmatch(metas[job_id]):
                self.found.append(f"{where}: {job_id!r} has a flow key but is in the ready list, not the fair set")
        self.key_limits(where, parts, metas)

    def key_limits(self, where: str, parts: dict[str, Any], metas: dict[str, str]) -> None:
        """Parked jobs are named by their key and run-at, and their keys have a wake time (no other key
        has); while control counts, `busy` counts each key's leased jobs; control says when keys have
        settings or holds. Nothing lingers for a key without jobs but its settings and its hold."""
        control = parts.get("control") or {}
        parked_keys: set[str] = set()
        for member, _ in parts.get("parked") or []:
            match = PARKED.fullmatch(member)
            if match is None:
                self.found.append(f"{where}: parked member {member!r} is not key|run_at|id")
                continue
            key, run_at, job_id = match.groups()
            parked_keys.add(key)
            meta = metas.get(job_id, "")
            keyed = KEYED_META.fullmatch(meta)
            if not meta.startswith("q|") or keyed is None or keyed[1] != key or meta.split("|")[2] != str(int(run_at)):
                self.found.append(f"{where}: parked {member!r} does not match its job's meta {meta!r}")
        woken = {key for key, _ in parts.get("wake") or []}
        if woken != parked_keys:
            self.found.append(
                f"{where}: keys with a wake time {sorted(woken)} are not those parked {sorted(parked_keys)}"
            )
        if "busy" in control:
            leased: Counter[str] = Counter()
            for job_id, _ in parts.get("leased") or []:
                keyed = KEYED_META.fullmatch(metas.get(job_id, ""))
                if keyed is not None:
                    leased[keyed[1]] += 1
            busy = {key: int(n) for key, n in (parts.get("busy") or {}).items()}
            if busy != dict(leased):
                self.found.append(f"{where}: busy {busy} does not count the leased jobs of each key {dict(leased)}")
        elif parts.get("busy"):
            self.found.append(f"{where}: busy is kept but control does not say it counts")
        if bool(parts.get("flows")) != ("flows" in control):
            self.found.append(f"{where}: control 'flows' is not set exactly while keys have settings")
        if bool(parked_keys) != ("parked" in control):
            self.found.append(f"{where}: control 'parked' is not set exactly while jobs are parked")
        if parts.get("held") and "held" not in control:
            self.found.append(f"{where}: keys are held but control does not say so")

    def control(self, where: str, control: dict[str, str], holes: int, done_holes: int) -> None:
        """The control hash: its fields, numbers, and the counts of holes the ready and done lists hold."""
        for name, value in control.items():
            if name not in CONTROL_FIELDS or not value.lstrip("-").isdigit():
                self.found.append(f"{where}: control field {name!r} = {value!r} is not one of {sorted(CONTROL_FIELDS)}")
        if int(control.get("holes", "0")) != holes:
            self.found.append(f"{where}: control counts {control.get('holes', '0')} holes, the ready list has {holes}")
        if int(control.get("done_holes", "0")) != done_holes:
            counted = control.get("done_holes", "0")
            self.found.append(f"{where}: control counts {counted} done holes, the done list has {done_holes}")

    def job(self, p: Partition, job: StoredJob, enqueued_at: int, delayed_at: float | None) -> None:
        """What is wrong with ``job``, said: ``delayed_at`` is its score in ``delayed``, if it has one."""
        state, place, run_at, attempts = job.state, job.place, job.run_at_ms, job.attempts
        at = [] if place == "nowhere" else place.split("+")
        home = self.keyspace.for_job(job.topic, job.id).index
        rules = [
            (not JOB_ID.fullmatch(job.id), "is not a valid id"),
            (home != p.index, f"is in partition {p.index}, not its own ({home})"),
            ((job.topic, job.id) in self.jobs, "is in two partitions"),
            (job.body is None and state != "d", "has no body"),
            (
                state == "d" and job.body is not None and not stored_result(job.body),
                "is done (a receipt) but its result is not a stored result (it kept its body?)",
            ),
            (job.error is not None and not HISTORY.fullmatch(job.error), f"has a malformed history {job.error!r}"),
            (
                state == "d" and not RECEIPT_LEASE.fullmatch(job.lease),
                f"is done without when its handler started and when it succeeded: {job.lease!r}",
            ),
            (len(at) != 1, f"(state {state}) is in {len(at)} places: {at}"),
            (len(at) == 1 and place not in PLACE_OF_STATE[state], f"has state {state} but is in {at}"),
            (state == "l" and job.lease == "", f"has state {state} and lease token {job.lease!r}"),
            (state in "qx" and job.lease != "", f"has state {state} and lease token {job.lease!r}"),
            (run_at < enqueued_at, f"runs at {run_at}, before it was enqueued ({enqueued_at})"),
            (state in "ld" and attempts < 1, f"has state {state} after {attempts} attempts"),
            (
                job.error is None and (state == "x" or (state != "d" and attempts >= (2 if state == "l" else 1))),
                f"(state {state}, {attempts} attempts) has no last error",
            ),
            (
                place == "delayed" and delayed_at is not None and int(delayed_at) != run_at,
                f"is delayed until {delayed_at}, its meta says {run_at}",
            ),
            (
                place == "ready" and self.now_ms is not None and run_at > self.now_ms,
                f"is ready {run_at - (self.now_ms or 0)} ms before its run-at",
            ),
        ]
        found = [f"{p.prefix}{job.topic}: {job.id!r} {what}" for broken, what in rules if broken]
        assert found, f"{job}: the quick check and the rules disagree"
        self.found += found
