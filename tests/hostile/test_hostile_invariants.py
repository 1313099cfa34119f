"""The oracle's own test: the namespace invariant (``invariants``) holds for a namespace delayq made,
with a job in every state, and each way of half-writing or misplacing a job is caught, with a message
that names it. Each breakage is made on a copy of a real snapshot (and a few in Redis itself)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from delayq import Queue
from delayq.store import calls
from delayq.store.calls import Failure
from delayq.store.keys import TOPIC_KEYS, Keyspace

from support.events import api_event
from support.hostile import SEED_TOPIC, Hostile
from support.invariants import Broken, Snapshot, check, check_redis, problems, read_atomic, read_namespace
from support.scripts import Rules, server_ms


@pytest.fixture
def seeded(handler_env: dict[str, str], redis_client: redis.Redis, namespace: str) -> tuple[Hostile, Snapshot]:
    """The hostile tier's seed (a delayed, a ready, a dead and a reserved job), plus a job that failed
    once and waits for its retry, one that succeeded (a receipt), and one in a second topic."""
    api = Hostile.start(redis_client, namespace)
    body = '{"topic": "orders", "id": "retried", "delay": 0, "body": 1}'
    assert api.raw(api_event("POST", "/jobs", None, raw_body=body)).status == 201
    assert api.raw(api_event("POST", "/jobs", None, raw_body='{"topic": "reminders", "id": "r1"}')).status == 201
    token = api.lease(SEED_TOPIC, "retried")
    partition = api.keys.for_job(SEED_TOPIC, "retried")
    failure = Failure("retried", token, "boom")
    assert calls.fail(partition, SEED_TOPIC, Rules(2, "60000"), [failure]).run(redis_client)[:2] == (1, 0)
    assert api.raw(api_event("POST", "/jobs", None, raw_body='{"topic": "orders", "id": "finished"}')).status == 201
    token = api.lease(SEED_TOPIC, "finished")
    leases = [("finished", token, server_ms(redis_client))]
    assert calls.ack(partition, SEED_TOPIC, Rules(keep_done_ms=60_000), leases).run(redis_client) == 1
    return api, read_namespace(redis_client, namespace)


def keys_of(api: Hostile, topic: str = SEED_TOPIC) -> dict[str, str]:
    """The topic's keys by kind, its partition's lease sets as ``_leased`` and ``_leased_lex``, and its
    partition's job hashes as ``meta`` and ``bodies`` (fields: ``F``)."""
    partition = api.keys.partitions[0]
    keys = dict(zip(TOPIC_KEYS, partition.topic_keys(topic), strict=True))
    return {**keys, "_leased": partition.leases, "_leased_lex": partition.leases_lex, "meta": partition.metas,
            "bodies": partition.bodies}  # fmt: skip


def F(job_id: str, topic: str = SEED_TOPIC) -> str:
    """A job's field in its partition's job hashes."""
    return f"{topic}/{job_id}"


def test_a_namespace_delayq_made_keeps_the_invariant(seeded: tuple[Hostile, Snapshot]):
    api, snap = seeded
    jobs = check(snap, api.namespace, now_ms=server_ms(api.r))
    places = {job_id: job.place for (_, job_id), job in jobs.items()}
    assert places == {
        "seed-delayed": "delayed",
        "seed-ready": "ready",
        "seed-dead": "dead",
        "seed-reserved": "leased",
        "retried": "delayed",
        "finished": "done",
        "r1": "ready",
    }
    stored = jobs[(SEED_TOPIC, "retried")].error  # its history: one failed attempt
    assert stored is not None
    assert stored.startswith("1||")
    assert stored.endswith("|error|boom")
    assert check_redis(api.r, api.namespace) == jobs


def _set_meta(snap: Snapshot, key: str, job_id: str, change: Callable[[list[str]], None]) -> None:
    fields = snap[key][1][job_id].split("|")
    change(fields)
    snap[key][1][job_id] = "|".join(fields)


def _zadd(snap: Snapshot, key: str, member: str, score: float) -> None:
    kind, content = snap.get(key, ("zset", []))
    snap[key] = (kind, sorted([*content, (member, score)]))


def _zrem(snap: Snapshot, key: str, member: str) -> None:
    snap[key] = ("zset", [(m, s) for m, s in snap[key][1] if m != member])


def _lease(snap: Snapshot, k: dict[str, str], job_id: str, deadline: float, topic: str = SEED_TOPIC) -> None:
    _zadd(snap, k["_leased"], f"{topic}/{job_id}", deadline)
    _zadd(snap, k["_leased_lex"], f"{topic}/{job_id}", 0)


def _meta_field(index: int, value: str) -> Callable[[list[str]], None]:
    def change(fields: list[str]) -> None:
        fields[index] = value

    return change


# (what is broken, how, what the report must say)
BREAKAGES: list[tuple[str, Callable[[Snapshot, dict[str, str], str], None], str]] = [
    ("a body without a job", lambda s, k, ns: s[k["bodies"]][1].update({F("ghost"): "{}"}), "body of 'ghost'"),
    ("an error without a job", lambda s, k, ns: s[k["errors"]][1].update({"ghost": "x"}), "last error of 'ghost'"),
    ("a delayed id without a job", lambda s, k, ns: _zadd(s, k["delayed"], "ghost", 1), "'ghost' in ['delayed']"),
    ("a ready id without a job", lambda s, k, ns: s[k["ready"]][1].append("ghost"), "'ghost' in ['ready']"),
    ("a leased id without a job", lambda s, k, ns: _lease(s, k, "ghost", 1), "'ghost' in ['leased']"),
    ("a lease of a topic with no keys", lambda s, k, ns: _lease(s, k, "j", 1, "nowhere"), "leases of topic 'nowhere'"),
    (
        "lease sets that disagree",
        lambda s, k, ns: _zadd(s, k["_leased"], f"{SEED_TOPIC}/ghost", 1),
        "hold different leases",
    ),
    ("a dead id without a job", lambda s, k, ns: _zadd(s, k["dead"], "ghost", 1), "'ghost' in ['dead']"),
    ("a done id without a job", lambda s, k, ns: s[k["done"]][1].append("ghost"), "'ghost' in ['done']"),
    ("a receipt in no place", lambda s, k, ns: s[k["done"]][1].remove("finished"), "'finished' (state d) is in 0"),
    ("a done hole not counted", lambda s, k, ns: s[k["done"]][1].append(""), "control counts 0 done holes"),
    (
        "a receipt that kept its body",
        lambda s, k, ns: s[k["bodies"]][1].update({F("finished"): "{}"}),
        "'finished' is done (a receipt) but its result is not a stored result (it kept its body?)",
    ),
    (
        "a receipt's result cut beyond 64 KiB",
        lambda s, k, ns: s[k["bodies"]][1].update({F("finished"): "~" + "x" * 65_537}),
        "'finished' is done (a receipt) but its result is not a stored result",
    ),
    (
        "a receipt without its start",
        lambda s, k, ns: _set_meta(s, k["meta"], F("finished"), _meta_field(4, "")),
        "'finished' is done without when its handler started and when it succeeded",
    ),
    ("a job in no place", lambda s, k, ns: _zrem(s, k["delayed"], "seed-delayed"), "'seed-delayed' (state q) is in 0"),
    (
        "a job in two places",
        lambda s, k, ns: s[k["ready"]][1].append("seed-delayed"),
        "'seed-delayed' (state q) is in 2 places",
    ),
    ("a job twice in ready", lambda s, k, ns: s[k["ready"]][1].append("seed-ready"), "['ready', 'ready']"),
    (
        "a dead job in the queue",
        lambda s, k, ns: (_zrem(s, k["dead"], "seed-dead"), _zadd(s, k["delayed"], "seed-dead", 1)),
        "'seed-dead' has state x but is in ['delayed']",
    ),
    ("a job without a body", lambda s, k, ns: s[k["bodies"]][1].pop(F("seed-ready")), "'seed-ready' has no body"),
    ("a malformed meta", lambda s, k, ns: s[k["meta"]][1].update({F("seed-ready"): "q|0|1"}), "malformed meta"),
    (
        "a delayed score that is not the run-at",
        lambda s, k, ns: (_zrem(s, k["delayed"], "seed-delayed"), _zadd(s, k["delayed"], "seed-delayed", 5)),
        "'seed-delayed' is delayed until 5",
    ),
    (
        "a run-at its delayed score disagrees with",
        lambda s, k, ns: _set_meta(s, k["meta"], F("seed-delayed"), _meta_field(2, "99999999999999")),
        "'seed-delayed' is delayed until",
    ),
    (
        "a ready job not due yet",
        lambda s, k, ns: _set_meta(s, k["meta"], F("seed-ready"), _meta_field(2, "99999999999999")),
        "'seed-ready' is ready",
    ),
    (
        "a run-at before the enqueue",
        lambda s, k, ns: _set_meta(s, k["meta"], F("seed-ready"), _meta_field(3, "99999999999999")),
        "before it was enqueued",
    ),
    (
        "a leased job without a token",
        lambda s, k, ns: _set_meta(s, k["meta"], F("seed-reserved"), _meta_field(4, "")),
        "has state l and lease token ''",
    ),
    (
        "a queued job with a token",
        lambda s, k, ns: _set_meta(s, k["meta"], F("seed-ready"), _meta_field(4, "1")),
        "has state q and lease token '1'",
    ),
    (
        "a token never issued",
        lambda s, k, ns: _set_meta(s, k["meta"], F("seed-reserved"), _meta_field(4, "999")),
        "never issued",
    ),
    (
        "two jobs with one token",
        lambda s, k, ns: (
            _zrem(s, k["delayed"], "seed-delayed"),
            _lease(s, k, "seed-delayed", 1),
            _set_meta(s, k["meta"], F("seed-delayed"), _meta_field(0, "l")),
            _set_meta(s, k["meta"], F("seed-delayed"), _meta_field(1, "1")),
            _set_meta(
                s, k["meta"], F("seed-delayed"), _meta_field(4, s[k["meta"]][1][F("seed-reserved")].split("|")[4])
            ),
        ),
        "held by 2 jobs",
    ),
    (
        "a leased job never attempted",
        lambda s, k, ns: _set_meta(s, k["meta"], F("seed-reserved"), _meta_field(1, "0")),
        "has state l after 0 attempts",
    ),
    ("a dead job without its error", lambda s, k, ns: s[k["errors"]][1].pop("seed-dead"), "'seed-dead' (state x"),
    ("a retried job without its error", lambda s, k, ns: s[k["errors"]][1].pop("retried"), "'retried' (state q, 1"),
    (
        "an invalid id",
        lambda s, k, ns: (
            s[k["meta"]][1].update({F("bad\n"): s[k["meta"]][1][F("seed-ready")]}),
            s[k["bodies"]][1].update({F("bad\n"): "1"}),
            s[k["ready"]][1].append("bad\n"),
        ),
        "'bad\\n' is not a valid id",
    ),
    (
        "a parked job that is not its job",
        lambda s, k, ns: (_zadd(s, k["parked"], "acme|000000000000001|seed-dead", 0), _zadd(s, k["wake"], "acme", 0)),
        "parked 'acme|000000000000001|seed-dead' does not match",
    ),
    (
        "a wake time for a key with nothing parked",
        lambda s, k, ns: _zadd(s, k["wake"], "acme", 0),
        "keys with a wake time ['acme'] are not those parked []",
    ),
    (
        "a key's leases miscounted",
        lambda s, k, ns: (s[k["control"]][1].update({"busy": "1"}), s.update({k["busy"]: ("hash", {"acme": "2"})})),
        "busy {'acme': 2} does not count",
    ),
    (
        "key settings the control does not know of",
        lambda s, k, ns: s.update({k["flows"]: ("hash", {"acme": "1||||1||"})}),
        "control 'flows' is not set exactly",
    ),
    ("a stray key", lambda s, k, ns: s.update({f"{ns}:other": ("string", "x")}), "stray key '{ns}:other'"),
    (
        "a topic key of another kind",
        lambda s, k, ns: s.update({k["control"].replace(":control", ":extra"): ("hash", {"a": "b"})}),
        ":extra'",
    ),
    ("a topic key of the wrong type", lambda s, k, ns: s.update({k["ready"]: ("set", ["x"])}), "is a set, not a list"),
    (
        "a topic missing from the topics set",
        lambda s, k, ns: s.update({Keyspace(ns, 1).partitions[0].topics: ("set", ["reminders"])}),
        "topic 'orders' has keys in partition 0 but is not in",
    ),
    (
        "a lease counter that is not one",
        lambda s, k, ns: s.update({Keyspace(ns, 1).partitions[0].seq: ("string", "x")}),
        "is not a counter",
    ),
    (
        "outbox records out of order",
        lambda s, k, ns: s.update({Keyspace(ns, 1).partitions[0].outbox: ("list", [_record(2), _record(1)])}),
        "records not numbered in order",
    ),
    (
        "an outbox record numbered beyond the counter",
        lambda s, k, ns: s.update({Keyspace(ns, 1).partitions[0].outbox: ("list", [_record(10**9)])}),
        "records not numbered in order up to _seq",
    ),
    (
        "an inbox of a partition that is not one",
        lambda s, k, ns: s.update({Keyspace(ns, 1).partitions[0].inbox: ("hash", {"elsewhere": "1"})}),
        "not a partition's number it issued",
    ),
]


def _record(seq: int) -> str:
    """An outbox record numbered ``seq`` (``lua/includes/callbacks.lua``)."""
    return json.dumps([str(seq), "audit", "orders", "a", "", "done", "1", "", "1", "{}", ""])


@pytest.mark.parametrize(("what", "breakage", "said"), BREAKAGES, ids=[b[0] for b in BREAKAGES])
def test_every_breakage_is_caught(seeded: tuple[Hostile, Snapshot], what: str, breakage: Any, said: str):
    api, snap = seeded
    broken = copy.deepcopy(snap)
    breakage(broken, keys_of(api), api.namespace)
    now_ms = server_ms(api.r)
    found = problems(broken, api.namespace, now_ms=now_ms)
    assert found, f"{what}: not caught"
    said = said.replace("{ns}", api.namespace)
    assert any(said in line for line in found), (what, found)
    with pytest.raises(Broken, match="breaks the invariant"):
        check(broken, api.namespace, now_ms=now_ms)


def test_a_checked_topic_subset_still_sees_every_key(seeded: tuple[Hostile, Snapshot]):
    """``topics=``: only those topics' jobs are examined, but stray keys and topic sets always are."""
    api, snap = seeded
    broken = copy.deepcopy(snap)
    broken[keys_of(api)["bodies"]][1][F("ghost")] = "{}"
    assert problems(broken, api.namespace, topics=[(0, "reminders")]) == []
    assert problems(broken, api.namespace, topics=[(0, SEED_TOPIC)])
    broken[f"{api.namespace}:other"] = ("string", "x")
    assert problems(broken, api.namespace, topics=[])


def test_read_from_redis_half_written_job_is_caught(seeded: tuple[Hostile, Snapshot]):
    """The same through Redis: a body left behind without its job, and a job taken out of every place."""
    api, _ = seeded
    keys = keys_of(api)
    api.r.hset(keys["bodies"], F("ghost"), "{}")
    with pytest.raises(Broken, match="body of 'ghost'"):
        check_redis(api.r, api.namespace)
    api.r.hdel(keys["bodies"], F("ghost"))
    api.r.lrem(keys["ready"], 1, "seed-ready")
    with pytest.raises(Broken, match=r"'seed-ready' \(state q\) is in 0 places"):
        check_redis(api.r, api.namespace)
    with pytest.raises(AssertionError, match="is in 0 places"):
        api.jobs()  # the hostile oracle's own refresh sees it too


def test_partitions_each_job_in_its_own(make_queue: Callable[..., Queue], redis_client: redis.Redis, namespace: str):
    queue = make_queue(partitions=3)
    results = queue.enqueue_many([{"topic": "orders", "id": f"j{i}", "delay": i % 2 * 60} for i in range(12)])
    assert [r.status for r in results] == [201] * 12
    jobs = check_redis(redis_client, namespace, 3)
    assert len(jobs) == 12
    snap = read_atomic(redis_client, namespace, 3)
    assert check(snap, namespace, 3) == jobs
    # One job's keys moved to another partition: caught.
    home = queue.keys.for_job("orders", "j0")
    other = next(p for p in queue.keys.partitions if p != home)
    broken = copy.deepcopy(snap)
    for kind in ("metas", "bodies"):
        value = broken[getattr(home, kind)][1].pop("orders/j0")
        broken.setdefault(getattr(other, kind), ("hash", {}))[1]["orders/j0"] = value
    broken[home.topic_key("orders", "ready")][1].remove("j0")
    broken.setdefault(other.topic_key("orders", "ready"), ("list", []))[1].append("j0")
    assert any("'j0' is in partition" in line for line in problems(broken, namespace, 3))
    assert problems(broken, namespace, 1), "read as one partition, three partitions' keys are stray"
