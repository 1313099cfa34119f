"""Every script touches only the keys it declares, and every key of a namespace carries its partition's tag.

The first check runs each script as a Redis user whose ACL allows exactly the KEYS of that call: a
script that read or wrote any other key would fail with NOPERM (on Redis Cluster it would touch a key
of another slot).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from delayq import Queue, RedisUnavailable
from delayq.keys import TOPIC_KEYS
from delayq.queue import redis_errors
from delayq.scripts import Script, Scripts, all_scripts

from redis_support import Lua

Runner = Callable[[Script, Sequence[str], Sequence[Any]], Any]


def _glob_escape(key: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", key)


@pytest.fixture
def restricted(redis_client: redis.Redis, redis_url: str, namespace: str) -> Iterator[Runner]:
    """``run(script, keys, args)``: the script run by a user allowed exactly ``keys``."""
    user = f"delayq-test-{namespace}"
    clients: list[redis.Redis] = []
    ran: set[str] = set()

    def run(script: Script, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        patterns = [f"~{_glob_escape(key)}" for key in keys]
        redis_client.execute_command("ACL", "SETUSER", user, "reset", "on", "nopass", *patterns, "+@all")
        client = redis.Redis.from_url(redis_url, username=user, password="unused", decode_responses=True)
        clients.append(client)
        ran.add(script.name)
        return script(client, keys, args)

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
    assert restricted(sneaky, [allowed], [allowed]) is None
    with pytest.raises(RedisUnavailable, match="NOPERM") as refused, redis_errors():
        restricted(sneaky, [allowed], [other])
    assert type(refused.value.__cause__) is redis.ResponseError  # an error of the script, not NOPERM's class


def test_every_script_touches_only_its_keys(restricted: Runner, redis_client: redis.Redis, namespace: str) -> None:
    lua = Lua(redis_client, namespace)
    p = lua.p
    orders, reminders = lua.keys("orders"), lua.keys("reminders")

    def enqueue(topic_keys: list[str], topics: list[str], jobs: list[list[Any]], mode: str = "c") -> list[Any]:
        args: list[Any] = [len(topics), mode, *topics]
        for job in jobs:
            args += job
        return restricted(Scripts.enqueue, [p.topics, *topic_keys], args)

    out = enqueue(
        orders + reminders,
        ["orders", "reminders"],
        [
            lua.job_args(1, "a", value=0, retries="0"),
            lua.job_args(1, "b", value=0),
            lua.job_args(1, "c", value=60_000),
            lua.job_args(1, "d", value=60_000),
            lua.job_args(2, "r", value=0),
        ],
    )
    assert out[0::2] == [1, 1, 1, 1, 1]
    assert enqueue(orders, ["orders"], [lua.job_args(1, "c", value=30_000)], "r")[0] == 2

    taken = restricted(Scripts.take, [*orders, p.seq], [10, 30_000, 2000])
    tokens = dict(zip(taken[2::7], taken[7::7], strict=True))
    assert set(tokens) == {"a", "b"}
    assert restricted(Scripts.ack, orders, ["b", tokens["b"]]) == 1
    assert restricted(Scripts.fail, orders, [2, "1000", "a", tokens["a"], "boom", "r"]) == [0, 1]
    assert restricted(Scripts.inspect, orders, ["a"])[0] == "dead"
    assert [int(v) for v in restricted(Scripts.stats, orders)[:4]] == [2, 0, 0, 1]
    assert restricted(Scripts.dead, orders, [10])[0] == "a"
    assert restricted(Scripts.replay, orders, ["ids", "a"]) == 1
    taken = restricted(Scripts.take, [*orders, p.seq], [10, 30_000, 2000])
    assert restricted(Scripts.fail, orders, [0, "1000", "a", taken[7], "again", "r"]) == [0, 1]
    assert restricted(Scripts.replay, orders, ["oldest", 10]) == 1
    taken = restricted(Scripts.take, [*orders, p.seq], [10, 30_000, 2000])
    assert restricted(Scripts.fail, orders, [0, "1000", "a", taken[7], "again", "r"]) == [0, 1]
    assert restricted(Scripts.purge, orders, [10]) == 1
    assert restricted(Scripts.reschedule, orders, ["c", "d", 0])[0] == 3
    assert restricted(Scripts.cancel, orders, ["d"]) == 3
    # a take as the consumer sends it, with its id, undone; then an untake that comes before its take
    with_id = [*orders, p.seq, p.untaken]
    assert restricted(Scripts.take, with_id, [10, 30_000, 2000, -1, -1, "t1"])[3::7] == ["c"]
    assert restricted(Scripts.untake, [*orders, p.untaken], ["t1"]) == 1
    assert restricted(Scripts.untake, [*orders, p.untaken], ["t2"]) == 0
    assert restricted(Scripts.take, with_id, [10, 30_000, 2000, -1, -1, "t2"])[3:] == []

    # an expired lease in reminders, for the sweep to take back
    assert restricted(Scripts.take, [*reminders, p.seq], [10, 1, 0])[2] == "r"
    time.sleep(0.005)
    redis_client.set(p.lock, "me", px=10_000)
    swept = restricted(Scripts.sweep, [p.lock, p.topics, *orders, *reminders], ["me", 10_000, 100, 2, "1", 2, "1"])
    code, _next_in, _more, _topics, *per_topic = (int(v) for v in swept)
    assert code == 3
    assert per_topic == [0, 0, 0, 0, 1, 0]  # orders: nothing; reminders: one lease taken back, retried
    assert restricted(Scripts.unlock, [p.lock], ["me"]) == 1
    layout = f"{namespace}:_layout"
    assert restricted(Scripts.layout, [layout], [1]) == "1"
    assert restricted(Scripts.layout, [layout], [2]) == "1"  # recorded by the first call, kept after

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
            for job in taken.jobs[:2]:
                lua.fail(topic, job.id, job.token, "x", retries=0)
        redis_client.set(p.lock, "me", px=10_000)
        assert lua.sweep(["orders", "reminders"], "me")["code"] == 3
    queue.reschedule("orders", "job-0", delay=5)
    queue.cancel("reminders", "job-1")
    queue.replay("orders")

    tags = {p.tag: p for p in queue.keys.partitions}
    shape = re.compile(rf"^{re.escape(namespace)}:\{{([^}}]+)\}}:(.+)$")
    kinds = {"_topics", "_seq", "_lock", "_untaken"} | {
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
