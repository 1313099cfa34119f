"""Least privilege: delayq runs as a Redis ACL user allowed only the commands it uses and only its
namespace's keys (``support.security.acl_line``).

On a private redis-server: the full lifecycle (client, every HTTP route, sweep with its lock,
consume with success, retry and dead letter, replay, purge, an expired lease) works as that user;
MONITOR shows that it used every command of the list and nothing else, ACL LOG that nothing was
refused; and the user really is restricted: other commands, other keys, channels, and commands or
keys reached from inside a script are refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from delayq import NotReplicated, Queue, RedisUnavailable
from delayq.loops.sweeper import Sweeper
from delayq.store.keys import Keyspace

from support.scripts import to_older_layout
from support.security import (
    ACL_COMMANDS,
    CLIENT_COMMANDS,
    SCRIPT_COMMANDS,
    USER,
    WITH_MIN_REPLICAS,
    Monitor,
    acl_line,
    acl_rules,
    full_lifecycle,
    handlers,
    script_commands_in_source,
    use_redis,
)
from support.servers import RedisServer

NOPERM = r"(?i)noperm|permission|can't access|can't run"
PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as running:
        yield running


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    yield client
    client.close()


@pytest.fixture
def acl_namespace(admin: redis.Redis) -> Iterator[str]:
    """A namespace of this test's own, and the delayq user limited to it (the README's line)."""
    namespace = f"acl-{uuid.uuid4().hex[:8]}"
    admin.execute_command("ACL", "SETUSER", USER, "reset")
    admin.execute_command("ACL", "SETUSER", USER, *acl_rules(namespace, PASSWORD))
    admin.execute_command("ACL", "LOG", "RESET")
    admin.execute_command("SCRIPT", "FLUSH")  # so that the NOSCRIPT -> EVAL fallback is walked too
    yield namespace
    admin.execute_command("ACL", "DELUSER", USER)


@pytest.fixture
def as_user(server: RedisServer, acl_namespace: str) -> Iterator[redis.Redis]:
    client = redis.Redis(
        host="127.0.0.1", port=server.port, username=USER, password=PASSWORD, decode_responses=True, protocol=2
    )
    yield client
    client.close()


def user_url(server: RedisServer, password: str = PASSWORD) -> str:
    return f"redis://{USER}:{password}@127.0.0.1:{server.port}/0"


def test_the_acl_lists_exactly_the_commands_of_the_lua_scripts():
    """The list is the code's: a script calling a command the ACL lacks fails here, not in production."""
    assert set(SCRIPT_COMMANDS) == script_commands_in_source()
    assert set(ACL_COMMANDS) == {*CLIENT_COMMANDS, *SCRIPT_COMMANDS}


def test_the_acl_line_for_the_readme():
    line = acl_line()
    assert line.startswith("ACL SETUSER delayq on ><password> resetkeys ~delayq:* resetchannels -@all +")
    assert line.count(" +") == len(ACL_COMMANDS)
    readme = (Path(__file__).parents[2] / "docs" / "redis.md").read_text()
    assert line in readme, "the README's ACL line is not the one the code needs"


def test_the_whole_lifecycle_runs_as_the_acl_user_and_needs_every_command(
    monkeypatch: pytest.MonkeyPatch, server: RedisServer, admin: redis.Redis, acl_namespace: str
):
    use_redis(monkeypatch, user_url(server), acl_namespace)
    queue = Queue.from_env()
    try:
        with handlers() as h, Monitor(server.client()) as monitor:
            full_lifecycle(queue, h)
    finally:
        queue.close()
    assert admin.execute_command("ACL", "LOG") == [], "a command of the lifecycle was refused"
    # AUTH (each connection's first command, arguments redacted) is every user's, outside ACL rules.
    assert monitor.commands("client") - {"auth"} == set(CLIENT_COMMANDS) - set(WITH_MIN_REPLICAS), monitor.commands(
        "client"
    )
    assert "auth" in monitor.commands("client")
    # And the walk that moves an older version's jobs into the partition's job hashes, as the ACL user.
    assert to_older_layout(admin, Keyspace(acl_namespace, 1).partitions[0]) > 0
    use_redis(monkeypatch, user_url(server), acl_namespace)
    upgraded = Queue.from_env()
    sweeper = Sweeper(upgraded)
    try:
        with Monitor(server.client()) as walk:
            sweeper.sweep_once()
    finally:
        sweeper.release()
        upgraded.close()
    assert all(partition.moved.known for partition in upgraded.keys.partitions)
    assert admin.execute_command("ACL", "LOG") == [], "a command of the walk was refused"
    lua = monitor.commands("lua") | walk.commands("lua")
    assert lua == set(SCRIPT_COMMANDS), lua
    # Every key delayq wrote is the namespace's.
    keys = set(admin.scan_iter(count=1000))
    assert keys, "the lifecycle wrote nothing"
    assert all(key.startswith(f"{acl_namespace}:") for key in keys), sorted(keys)


def test_min_replicas_runs_as_the_acl_user(monkeypatch: pytest.MonkeyPatch, server: RedisServer, acl_namespace: str):
    """WAIT is in the list: with ``DELAYQ_MIN_REPLICAS`` (and no replica here), a create is answered
    ``not_replicated`` by WAIT, not refused by the ACL."""
    use_redis(monkeypatch, user_url(server), acl_namespace)
    monkeypatch.setenv("DELAYQ_MIN_REPLICAS", "1")
    monkeypatch.setenv("DELAYQ_MIN_REPLICAS_WAIT_MS", "10")
    queue = Queue.from_env()
    try:
        with pytest.raises(NotReplicated):
            queue.enqueue("orders", {}, id="w1")
    finally:
        queue.close()


@pytest.mark.parametrize(
    "command",
    [
        ("KEYS", "*"),
        ("SCAN", "0"),
        ("FLUSHALL",),
        ("FLUSHDB",),
        ("CONFIG", "GET", "*"),
        ("INFO",),
        ("CLIENT", "LIST"),
        ("SCRIPT", "LOAD", "return 1"),
        ("MULTI",),
        ("BLPOP", "k", "1"),
        ("PUBLISH", "channel", "x"),
        ("SUBSCRIBE", "channel"),
        ("SELECT", "1"),
        ("EXPIRE", "k", "1"),
        ("OBJECT", "ENCODING", "k"),
        ("ACL", "WHOAMI"),
        ("RENAME", "a", "b"),
        ("SHUTDOWN",),
    ],
    ids=" ".join,
)
def test_commands_outside_the_list_are_refused(as_user: redis.Redis, command: tuple[str, ...]):
    with pytest.raises((NoPermissionError, ResponseError), match=NOPERM):
        as_user.execute_command(*command)


def test_keys_outside_the_namespace_are_refused(as_user: redis.Redis, admin: redis.Redis, acl_namespace: str):
    mine, other = f"{acl_namespace}:probe", "someone-else:data"
    admin.set(other, "secret")
    assert as_user.set(mine, "1")  # SET is allowed (the lock), on the namespace's keys
    assert as_user.get(mine) == "1"
    with pytest.raises(NoPermissionError):
        as_user.get(other)
    with pytest.raises(NoPermissionError):
        as_user.set(other, "overwritten")
    with pytest.raises(NoPermissionError):
        as_user.delete(other)
    with pytest.raises(NoPermissionError):
        as_user.set(f"{acl_namespace}x:probe", "1")  # a namespace that merely starts the same
    assert admin.get(other) == "secret"
    admin.delete(other, mine)


def test_scripts_cannot_reach_past_the_acl(as_user: redis.Redis, admin: redis.Redis, acl_namespace: str):
    """The ACL applies inside scripts: to the keys declared, the keys used and the commands called."""
    mine, other = f"{acl_namespace}:probe", "someone-else:data"
    admin.set(other, "secret")
    with pytest.raises(NoPermissionError):
        as_user.eval("return redis.call('GET', KEYS[1])", 1, other)
    with pytest.raises(ResponseError, match=NOPERM):
        as_user.eval("return redis.call('GET', 'someone-else:data')", 1, mine)
    with pytest.raises(ResponseError, match=NOPERM):
        as_user.eval("return redis.call('FLUSHALL')", 1, mine)
    with pytest.raises(ResponseError, match=NOPERM):
        as_user.eval("return redis.call('KEYS', '*')", 1, mine)
    assert as_user.eval("return redis.call('TIME')[1] ~= nil", 1, mine) == 1  # what delayq's scripts do
    assert admin.get(other) == "secret"
    refused = admin.execute_command("ACL", "LOG")
    assert refused, "ACL LOG records the refusals"
    admin.delete(other)


def test_a_wrong_password_is_a_503_not_a_crash(
    monkeypatch: pytest.MonkeyPatch, server: RedisServer, acl_namespace: str
):
    use_redis(monkeypatch, user_url(server, password="wrong"), acl_namespace)
    queue = Queue.from_env()
    with pytest.raises(RedisUnavailable):
        queue.ping()
    with pytest.raises(AuthenticationError):
        redis.Redis(host="127.0.0.1", port=server.port, username=USER, password="wrong").ping()
    with handlers() as h:
        status, body = h.api("GET", "/health")
        assert (status, body["error"]) == (503, "unavailable")
        status, body = h.api("POST", "/jobs", {"topic": "orders", "delay": 1})
        assert (status, body["error"]) == (503, "unavailable")
    queue.close()


def test_a_user_without_a_needed_command_gets_a_503_naming_the_acl(
    monkeypatch: pytest.MonkeyPatch, server: RedisServer, admin: redis.Redis, acl_namespace: str
):
    """A user whose ACL lacks what delayq needs is a deployment's mistake: a 503 that says so (and a
    ``RedisUnavailable`` from the client, which the loops count as a Redis error), never a 500."""
    use_redis(monkeypatch, user_url(server), acl_namespace)
    admin.execute_command("ACL", "SETUSER", USER, "-evalsha", "-eval")  # the scripts cannot run at all
    queue = Queue.from_env()
    with pytest.raises(RedisUnavailable, match="NOPERM"):
        queue.enqueue("orders", {"n": 1}, delay=5)
    with handlers() as h:
        status, body = h.api("POST", "/jobs", {"topic": "orders", "delay": 1})
        assert (status, body["error"]) == (503, "unavailable")
        assert "ACL" in body["message"]
    # Refused inside the script, at its first write (HSETNX of the job's meta): Redis does not roll a
    # script back, so a refusal there is the one that must leave nothing behind.
    admin.execute_command("ACL", "SETUSER", USER, "+evalsha", "+eval", "-hsetnx")
    with pytest.raises(RedisUnavailable, match="NOPERM"):
        queue.enqueue("orders", {"n": 2}, delay=5)
    assert [key for key in admin.keys(f"{acl_namespace}:*") if key.endswith((":meta", ":bodies"))] == []
    queue.close()
