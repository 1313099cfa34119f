"""Every script touches only the keys it declares, and every key of a namespace carries its partition's tag.

The first check runs each script as a Redis user whose ACL allows exactly the KEYS of that call: a
script that read or wrote any other key would fail with NOPERM (on Redis Cluster it would touch a key
of another slot).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from delayq import Queue, RedisUnavailable
from delayq.core.activity import Counts
from delayq.core.callbacks import Record
from delayq.store import calls
from delayq.store.calls import Failure
from delayq.store.connection import redis_errors
from delayq.store.keys import SCHEDULE_KEYS, TOPIC_INDEX_KEYS, TOPIC_KEYS, Keyspace
from delayq.store.scripts import Call, Script, all_scripts

from support.scripts import Lua, Rules, server_ms

Runner = Callable[[Call[Any]], Any]


def _glob_escape(key: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", key)


@pytest.fixture
def restricted(redis_client: redis.Redis, redis_url: str, namespace: str) -> Iterator[Runner]:
    """``run(call)``: the call sent by a user allowed exactly its keys."""
    user = f"delayq-test-{namespace}"
    clients: list[redis.Redis] = []
    ran: set[str] = set()

    def run(call: Call[Any]) -> Any:
        patterns = [f"~{_glob_escape(key)}" for key in call.keys]
        redis_client.execute_command("ACL", "SETUSER", user, "reset", "on", "nopass", *patterns, "+@all")
        client = redis.Redis.from_url(redis_url, username=user, password="unused", decode_responses=True)
        clients.append(client)
        ran.add(call.script.name)
        return call.run(client)

    run.ran = ran  # type: ignore[attr-defined]
    yield run
    for client in clients:
        client.close()
    redis_client.execute_command("ACL", "DELUSER", user)


def test_the_acl_check_catches_an_undeclared_key(restricted: Runner, namespace: str) -> None:
    """The server refuses the undeclared key inside the script, and delayq reads that refusal (worded
    differently by Redis 7.0, 7.2 and Valkey) as the ACL's: a 503 that names it, not a 500."""
    sneaky = Script("sneaky", "return redis.call('GET', ARGV[1])", "0" * 40)
    allowed, other = f"{namespace}:allowed", f"{namespace}:other"
    assert restricted(Call(sneaky, [allowed], [allowed])) is None
    with pytest.raises(RedisUnavailable, match="NOPERM") as refused, redis_errors():
        restricted(Call(sneaky, [allowed], [other]))
    assert type(refused.value.__cause__) is redis.ResponseError  # an error of the script, not NOPERM's class


def test_every_script_touches_only_its_keys(restricted: Runner, redis_client: redis.Redis, namespace: str) -> None:
    lua = Lua(redis_client, namespace)
    p = lua.p
    write = lua.write
    jobs = [
        write("orders", "a", value=0, retries="0"),
        write("orders", "b", value=0),
        write("orders", "c", value=60_000),
        write("orders", "d", value=60_000),
        write("reminders", "r", value=0),
    ]
    assert restricted(calls.enqueue(p, jobs)).codes == [1, 1, 1, 1, 1]
    assert restricted(calls.enqueue(p, [write("orders", "c", value=30_000)], replace=True)).codes == [2]

    def take(topic: str = "orders", **options: Any) -> calls.Taken:
        options = {"timeout_ms": 30_000, "grace_ms": 2000} | options
        taken: calls.Taken = restricted(calls.take(p, topic, count=10, **options))
        return taken

    rules = Rules(2, "1000")
    taken = take()
    tokens = dict(zip(taken.ids, taken.tokens, strict=True))
    assert set(tokens) == {"a", "b"}
    keeping = Rules(keep_done_ms=60_000, on_done="audit")  # its ack leaves a record in the outbox
    assert restricted(calls.ack(p, "orders", keeping, [("b", tokens["b"], 5)])) == 1
    assert restricted(calls.inspect(p, "orders", "b")).state == "done"
    assert [job.id for job in restricted(calls.jobs_done(p, "orders", limit=5, before=None)).jobs] == ["b"]
    assert restricted(calls.reschedule(p, "orders", "b", "d", 0)).code == -8
    assert restricted(calls.forget(p, [("orders", Rules(keep_done_ms=0))], limit=10)) == (1, False)
    assert restricted(calls.fail(p, "orders", rules, [Failure("a", tokens["a"], "boom")]))[:2] == (0, 1)
    assert restricted(calls.inspect(p, "orders", "a")).state == "dead"
    stats = restricted(calls.stats(p, "orders"))
    assert (stats.delayed, stats.ready, stats.reserved, stats.dead) == (2, 0, 0, 1)
    assert [job.id for job in restricted(calls.dead(p, "orders", 10))] == ["a"]
    assert [
        job.id for job in restricted(calls.jobs_scored(p, "orders", "dead", descending=True, limit=5, after=None))
    ] == ["a"]
    assert restricted(calls.jobs_ready(p, "orders", limit=5, after=None)).jobs == []
    assert [
        job.id
        for job in restricted(calls.jobs_scored(p, "orders", "delayed", descending=False, limit=1, after=(0, "a")))
    ] == ["c"]
    assert sum(restricted(calls.forecast(p, "orders", bucket_ms=60_000, window_ms=3_600_000)).counts) == 2
    assert restricted(calls.pause(p, "orders", True)) is True
    assert take().ids == []
    assert take().paused
    assert restricted(calls.pause(p, "orders", False)) is False
    assert restricted(calls.key_settings(p, "orders", "acme", "1||||1||")) == 1
    assert restricted(calls.keys_walk(p, "orders", "0")).own == {"acme": ("1||||1||", None)}
    assert restricted(calls.key_settings(p, "orders", "acme", "")) == 1
    assert restricted(calls.replay(p, "orders", ["a"])) == 1
    taken = take()
    assert restricted(calls.fail(p, "orders", rules, [Failure("a", taken.tokens[0], "again")]))[:2] == (0, 1)
    assert restricted(calls.replay_oldest(p, "orders", 10)) == 1
    taken = take()
    assert restricted(calls.fail(p, "orders", rules, [Failure("a", taken.tokens[0], "again")]))[:2] == (0, 1)
    assert restricted(calls.purge(p, "orders", 10)) == 1
    assert restricted(calls.reschedule(p, "orders", "c", "d", 0)).code == 3
    assert restricted(calls.cancel(p, "orders", "d")) == 3
    for state in ("delayed", "ready", "dead"):
        assert restricted(calls.cancel_all(p, "nothing", state, 10)) == (0, 0)
    # a take with a rate limit: it spends a start from the topic's control hash
    assert restricted(calls.enqueue(p, [write("metered", "m", value=0)])).codes == [1]
    assert take("metered", take_id="t0", rate=(1000, 5000)).ids == ["m"]
    assert redis_client.hget(p.topic_key("metered", "control"), "rate_at") is not None
    # a take as the consumer sends it, with its id, undone; then an untake that comes before its take
    assert take(take_id="t1").ids == ["c"]
    assert restricted(calls.untake(p, "orders", ["t1"])) == 1
    assert restricted(calls.untake(p, "orders", ["t2"])) == 0
    assert take(take_id="t2").ids == []

    # an expired lease in reminders, for the sweep to take back
    assert take("reminders", timeout_ms=1, grace_ms=0).ids == ["r"]
    time.sleep(0.005)
    redis_client.set(p.lock, "me", px=10_000)
    swept = restricted(calls.sweep(p, [("orders", rules), ("reminders", rules)], token="me", ttl_ms=10_000, limit=100))
    assert swept.held
    assert swept.per_topic == [(0, 0, 0, ()), (0, 1, 0, ())]  # orders: nothing; reminders: a lease taken back, retried
    # a lease an older version kept, moved into the partition's lease sets; then listed and counted
    redis_client.zadd(p.old_leased("reminders"), {"ghost": 1})
    redis_client.zadd(p.old_lease_index, {"reminders": 1})
    assert restricted(calls.move_leases(p, ["reminders"])) == 1
    listed = restricted(calls.jobs_scored(p, "reminders", "leased", descending=False, limit=5, after=None))
    assert listed == []  # a lease without its job lists nothing
    assert restricted(calls.stats(p, "reminders")).reserved == 1
    assert restricted(calls.move_jobs(p, "me", {"orders": "m0", "reminders": "m0"}, 100)) == {
        "orders": "",
        "reminders": "",
    }
    assert restricted(calls.unlock(p, "me")) is True
    assert set(restricted(calls.topics_due(p, limit=100, horizon_ms=120_000)).due) == {"orders", "reminders"}
    assert restricted(calls.layout(Keyspace(namespace, 1))) == (1, True)
    assert restricted(calls.layout(Keyspace(namespace, 2))) == (1, False)  # recorded by the first call, kept after
    assert restricted(calls.jobs_moved(p)) is False
    assert restricted(calls.jobs_moved(p, mark=True)) is True
    now = server_ms(redis_client)
    counts = Counts({3: 2, 40: 1}, done=2, failed=1, dead=1)
    assert restricted(calls.add_activity(p, {(now // 60_000, "orders"): counts})) == 1
    lateness = restricted(calls.read_lateness(p, ["orders", "reminders"], window_minutes=5, around_ms=now))
    assert lateness.read == [{3: 2, 40: 1}, {}]
    assert counts in [m.counts for m in restricted(calls.read_activity(p, "orders", 3, around_ms=now)).read]
    assert restricted(calls.dead_errors(p, "orders", 0, 10)).dead == 0

    # a schedule: written with a claimed outbox (due at once: a claim of 0 ms), read, listed, found due,
    # claimed again and settled, a pending occurrence cancelled, the schedule deleted
    name, definition = "orders/daily", '{"created_ms":1,"schedule":{}}'
    write = calls.schedule_write(p, name, expected="", definition=definition, progress="5|me|c5", claim_ms=0, due=5)
    written = restricted(write)
    assert written.code == 1
    progress = f"{written.generation}|5|me|c5"
    assert restricted(calls.schedule_read(p, [name])).schedules == [(name, definition, progress)]
    assert restricted(calls.schedule_list(p, "-", "+", 10)).schedules == [(name, definition, progress)]
    assert restricted(calls.schedules_due(p, 10)).schedules == [(name, definition, progress)]
    claim = calls.Move(name, progress, f"{written.generation}|5|you|c5", calls.CLAIM)
    assert restricted(calls.schedules_cas(p, [claim], 5000)).made == [True]
    assert restricted(calls.cancel(p, "orders", "c", only="pending")) == -2  # not delayed: left alone
    deleted = calls.schedule_write(p, name, expected=claim.progress, definition="", progress="", claim_ms=0, due=None)
    assert restricted(deleted).code == -7  # "you" holds the claim for 5 s

    # the callback job of b's record, made in its partition, then the record trimmed
    (record,) = [Record.decode(raw) for raw in redis_client.lrange(p.outbox, 0, -1)]
    callback = calls.CallbackJob("audit", record.seq, "cb-b", None, "{}")
    assert restricted(calls.callbacks(p, p, [callback])) == 1
    assert restricted(calls.outbox_trim(p, record.seq)) == 1

    assert restricted.ran == {script.name for script in all_scripts()}  # type: ignore[attr-defined]


def test_every_key_of_a_partitioned_namespace_carries_its_partitions_tag(
    make_queue: Callable[..., Queue], redis_client: redis.Redis, namespace: str
) -> None:
    queue = make_queue(partitions=4)
    lua_of = {p.index: Lua(redis_client, namespace, 4, p.index) for p in queue.keys.partitions}
    for i in range(40):
        topic = ("orders", "reminders")[i % 2]
        queue.enqueue(topic, {"i": i}, id=f"job-{i}", delay=0 if i % 3 else 60, retries=0)
    for p in queue.keys.partitions:
        lua = lua_of[p.index]
        for topic in ("orders", "reminders"):
            taken = lua.take(topic, count=3)
            for job, token, _ in taken.leases[:2]:
                lua.fail(topic, job.id, token, "x", retries=0)
        redis_client.set(p.lock, "me", px=10_000)
        assert lua.sweep(["orders", "reminders"], "me").held
    queue.reschedule("orders", "job-0", delay=5)
    queue.cancel("reminders", "job-1")
    queue.replay("orders")
    for i in range(8):
        queue.schedule("orders", f"every-{i}", every=60)

    tags = {p.tag: p for p in queue.keys.partitions}
    shape = re.compile(rf"^{re.escape(namespace)}:\{{([^}}]+)\}}:(.+)$")
    kinds = {"_seq", "_lock", "_untaken", "_indexed", "_jobs_moved", *TOPIC_INDEX_KEYS, *SCHEDULE_KEYS} | {
        f"{topic}:{kind}" for topic in ("orders", "reminders") for kind in TOPIC_KEYS
    }
    keys = list(redis_client.scan_iter(match=f"{namespace}:*", count=1000))
    assert redis_client.get(queue.keys.layout) == "4"  # the one key outside the partitions
    keys.remove(queue.keys.layout)
    used = set()
    for key in keys:
        match = shape.match(key)
        assert match, key
        tag, rest = match.groups()
        assert tag in tags, key
        assert rest in kinds, key
        assert key_slot(key.encode()) == queue.keys.slot(tags[tag])
        used.add(tag)
    assert used == set(tags)  # the jobs spread over every partition
    slots = sorted(queue.keys.slot(p) for p in queue.keys.partitions)
    assert [slot * 4 // 16384 for slot in slots] == [0, 1, 2, 3]  # one partition per quarter of the slots
