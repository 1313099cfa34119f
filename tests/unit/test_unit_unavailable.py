"""Which Redis errors mean "not now" (``delayq.store.connection``): every error a failover, a restart or a full
server brings is ``RedisUnavailable`` (503 with ``Retry-After``), recognised by redis-py's class and by
the reply's code, whichever redis-py made it; any other error goes on as it is.

The table covers every exception class of ``redis.exceptions``, found with ``inspect``: a class a
future redis-py adds fails ``test_every_redis_exception_class_is_in_the_table`` until it is placed.
Each is built as redis-py raises it: by its parser (``parse_error`` of the reply as the server sent it,
the code kept in ``status_code`` and cut from the message), or by the client itself (a refused
connection, a cluster client out of redirects). Two older shapes are tried too: no ``status_code``
with the code cut from the message (redis-py < 8), and no ``status_code`` with the code still in it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import pytest
import redis.exceptions
from redis._parsers.base import BaseParser

from delayq.core.errors import RedisUnavailable
from delayq.store.connection import UNAVAILABLE_CODES, as_unavailable, error_code, redis_errors, unavailable
from delayq.surfaces.api import delayq_error

SERVER = "Redis at 10.0.0.1:6379"
SHA = "63eb222a125d122cf189830163acf7b8a05edd14"
IN_SCRIPT = f" script: {SHA}, on @user_script:167."  # what Redis 7 and Valkey 8 add to an error a script met
PASSES = None  # redis_errors() lets the error go on as it is


def parse(reply: str) -> BaseException:
    """What redis-py's parser makes of the error reply ``reply`` (as sent, without the ``-``)."""
    exc: BaseException = BaseParser.parse_error(reply)  # type: ignore[no-untyped-call]
    return exc


@dataclass(frozen=True)
class parsed:
    """The error redis-py's parser makes of the error reply ``reply`` (as sent, without the ``-``)."""

    reply: str

    def __call__(self) -> BaseException:
        return parse(self.reply)


@dataclass(frozen=True)
class raised:
    """``redis.exceptions.<name>(message)``, as the client raises it (no reply behind it)."""

    name: str
    message: str

    def __call__(self) -> BaseException:
        exc: BaseException = getattr(redis.exceptions, self.name)(self.message)
        return exc


@dataclass(frozen=True)
class Case:
    """An error as redis-py raises it; what ``unavailable()`` answers for it (None: not an outage), and
    the ``reason`` of the ``RedisUnavailable`` that ``redis_errors()`` raises instead (PASSES: none)."""

    make: parsed | raised
    reason: str | None
    raised: str | None


# Every class of redis.exceptions, by name: as redis-py raises it, and what delayq makes of it.
CLASSES: dict[str, Case] = {
    # A failover, a restart, slots moving, a full or busy server: the reply's code.
    "AskError": Case(parsed("ASK 3999 127.0.0.1:6381"), "ASK", "ASK"),
    "MovedError": Case(parsed("MOVED 3999 127.0.0.1:6381"), "MOVED", "MOVED"),
    "TryAgainError": Case(parsed("TRYAGAIN Multiple keys request during rehashing of slot"), "TRYAGAIN", "TRYAGAIN"),
    "ClusterDownError": Case(parsed("CLUSTERDOWN The cluster is down"), "CLUSTERDOWN", "CLUSTERDOWN"),
    "MasterDownError": Case(
        parsed("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
        "MASTERDOWN",
        "MASTERDOWN",
    ),
    "ReadOnlyError": Case(parsed("READONLY You can't write against a read only replica."), "READONLY", "READONLY"),
    "BusyLoadingError": Case(parsed("LOADING Redis is loading the dataset in memory"), "LOADING", "LOADING"),
    "OutOfMemoryError": Case(parsed("OOM command not allowed when used memory > 'maxmemory'."), "OOM", "OOM"),
    # The connection itself: refused, reset, timed out, a pool with no connection left.
    "ConnectionError": Case(
        raised("ConnectionError", "Error 111 connecting to 127.0.0.1:6379. Connection refused."),
        "ConnectionError",
        "ConnectionError",
    ),
    "TimeoutError": Case(raised("TimeoutError", "Timeout reading from socket"), "TimeoutError", "TimeoutError"),
    "MaxConnectionsError": Case(
        raised("MaxConnectionsError", "Too many connections"), "MaxConnectionsError", "MaxConnectionsError"
    ),
    # Refused credentials: a password being rotated (the pool reads the secret again).
    "AuthenticationError": Case(
        parsed("WRONGPASS invalid username-password pair or user is disabled."), "WRONGPASS", "WRONGPASS"
    ),
    "AuthorizationError": Case(
        raised("AuthorizationError", "not authorized"), "AuthorizationError", "AuthorizationError"
    ),
    # (Its reason is the reply's code, ERR: it says little, but it is the code.)
    "ExternalAuthProviderError": Case(
        parsed("ERR problem with LDAP service"), "ExternalAuthProviderError", "ExternalAuthProviderError"
    ),
    # The cluster client: no node answers for a slot, or redirects and TRYAGAIN went on past its TTL.
    "RedisClusterException": Case(
        raised(
            "RedisClusterException", "Redis Cluster cannot be connected. Please provide at least one reachable node"
        ),
        "RedisClusterException",
        "RedisClusterException",
    ),
    "SlotNotCoveredError": Case(
        raised("SlotNotCoveredError", "Command # 1 (EVALSHA) requires a key in slot 42 that is not covered"),
        "SlotNotCoveredError",
        "SlotNotCoveredError",
    ),
    "ClusterError": Case(raised("ClusterError", "TTL exhausted."), "ClusterError", "ClusterError"),
    "CrossSlotTransactionError": Case(
        raised("CrossSlotTransactionError", "All keys involved in a cluster transaction must map to the same slot"),
        "CrossSlotTransactionError",
        "CrossSlotTransactionError",
    ),
    "InvalidPipelineStack": Case(
        raised("InvalidPipelineStack", "Unexpected response length for cluster pipeline EXEC."),
        "InvalidPipelineStack",
        "InvalidPipelineStack",
    ),
    # The Redis user may not: its own 503, reason NOPERM (waiting does not mend it; the deployment must).
    "NoPermissionError": Case(
        parsed("NOPERM User delayq has no permissions to run the 'flushall' command"), None, "NOPERM"
    ),
    # Errors of the client's own, not an answer of the server: delayq answers 503 for them too.
    "RedisError": Case(raised("RedisError", "something went wrong"), None, "RedisError"),
    "DataError": Case(raised("DataError", "Invalid input of type: 'dict'."), None, "DataError"),
    "InvalidResponse": Case(raised("InvalidResponse", "Protocol Error: b'x'"), None, "InvalidResponse"),
    "PubSubError": Case(raised("PubSubError", "Channel: 'x' has no handler registered"), None, "PubSubError"),
    "WatchError": Case(raised("WatchError", "Watched variable changed."), None, "WatchError"),
    "LockError": Case(raised("LockError", "Cannot release an unlocked lock"), None, "LockError"),
    "LockNotOwnedError": Case(
        raised("LockNotOwnedError", "Cannot release a lock that's no longer owned"), None, "LockNotOwnedError"
    ),
    # An answer waiting cannot mend: a script's error, a bug, a module. It goes on as it is.
    "ResponseError": Case(parsed("ERR unknown command 'FOO', with args beginning with: "), None, PASSES),
    "NoScriptError": Case(parsed("NOSCRIPT No matching script. Please use EVAL."), None, PASSES),
    "ClusterCrossSlotError": Case(parsed("CROSSSLOT Keys in request don't hash to the same slot"), None, PASSES),
    "ExecAbortError": Case(parsed("EXECABORT Transaction discarded because of previous errors."), None, PASSES),
    "ModuleError": Case(parsed("ERR Error loading the extension. Please check the server logs."), None, PASSES),
    "NoSuchFieldsetError": Case(parsed("ERR no such fieldset"), None, PASSES),
    "AuthenticationWrongNumberOfArgsError": Case(
        parsed("ERR wrong number of arguments for 'auth' command"), None, PASSES
    ),
    # Not errors of Redis at all: redis_errors() does not catch them.
    "ChildDeadlockedError": Case(raised("ChildDeadlockedError", "deadlocked after a fork()"), None, PASSES),
    "IncorrectPolicyType": Case(raised("IncorrectPolicyType", "no such policy"), None, PASSES),
}


def redis_exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class that ``redis.exceptions`` defines, by name."""
    return {
        name: cls
        for name, cls in inspect.getmembers(redis.exceptions, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == redis.exceptions.__name__
    }


def outcome(exc: BaseException) -> RedisUnavailable | BaseException:
    """What ``redis_errors()`` lets out when ``exc`` is raised inside it."""
    try:
        with redis_errors(lambda: SERVER):
            raise exc
    except BaseException as out:
        return out
    raise AssertionError("redis_errors() swallowed the error")


def check(exc: BaseException, reason: str | None, raised_reason: str | None) -> None:
    """``unavailable(exc)`` is ``reason``; ``redis_errors()`` raises a ``RedisUnavailable`` with
    ``raised_reason`` (naming the server, the error as its cause), or lets ``exc`` itself through."""
    assert unavailable(exc) == reason, (type(exc).__name__, str(exc))
    out = outcome(exc)
    if raised_reason is PASSES:
        assert out is exc, (type(exc).__name__, str(exc), out)
        assert as_unavailable(exc) is None
        return
    assert isinstance(out, RedisUnavailable), (type(exc).__name__, str(exc), out)
    assert out.reason == raised_reason, (type(exc).__name__, str(exc))
    assert out.message.startswith(f"{SERVER} "), out.message
    assert out.__cause__ is exc
    assert (out.status, out.error) == (503, "unavailable")


# ------------------------------------------------------------------------------------ every class


def test_every_redis_exception_class_is_in_the_table() -> None:
    """A class redis-py adds (or drops) must be placed here: an outage, a refusal, or an error that
    goes on as it is."""
    found = set(redis_exception_classes())
    assert found - set(CLASSES) == set(), "classes of redis.exceptions missing from the table"
    assert set(CLASSES) - found == set(), "classes in the table that redis.exceptions no longer has"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_class_as_redis_py_raises_it(name: str) -> None:
    """As the parser makes it (the code in ``status_code``, cut from the message) or as the client raises it."""
    case = CLASSES[name]
    exc = case.make()
    assert type(exc).__name__ == name, f"the table builds a {type(exc).__name__}, not a {name}"
    check(exc, case.reason, case.raised)


def _stripped(exc: BaseException) -> BaseException:
    """``exc`` as redis-py < 8 made it: the same class and message, no ``status_code``."""
    return type(exc)(*exc.args)


@pytest.mark.parametrize("name", sorted(name for name, case in CLASSES.items() if isinstance(case.make, parsed)))
def test_each_class_as_older_redis_py_made_it(name: str) -> None:
    """Without ``status_code``, the code cut from the message (redis-py < 8), and, for a reply's class,
    with the code still in the message: the same verdict, the reason the code or the class's name."""
    case = CLASSES[name]
    made = case.make()
    code = getattr(made, "status_code", None)
    shapes = [_stripped(made)]
    if code and name not in ("AskError", "MovedError"):  # those read "<slot> <host:port>" from their message
        shapes.append(type(made)(f"{code} {made.args[0]}"))
    for exc in shapes:
        assert getattr(exc, "status_code", None) is None
        accepted = {None} if case.reason is None else {case.reason, name}
        assert unavailable(exc) in accepted, (name, str(exc), unavailable(exc))
        out = outcome(exc)
        if case.raised is PASSES:
            assert out is exc, (name, str(exc), out)
        else:
            assert isinstance(out, RedisUnavailable), (name, str(exc), out)
            assert out.reason in {case.raised, name}, (name, str(exc), out.reason)


# ------------------------------------------------------------------------------------ replies by code

UNAVAILABLE_REPLIES: list[tuple[str, str]] = [
    ("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", "BUSY"),
    ("BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", "BUSY"),
    ("NOREPLICAS Not enough good replicas to write.", "NOREPLICAS"),
    ("NOREPLICAS Not enough good replicas to write." + IN_SCRIPT, "NOREPLICAS"),
    ("OOM command not allowed when used memory > 'maxmemory'.", "OOM"),
    ("OOM command not allowed when used memory > 'maxmemory'." + IN_SCRIPT, "OOM"),
    ("LOADING Redis is loading the dataset in memory", "LOADING"),
    ("LOADING Valkey is loading the dataset in memory", "LOADING"),
    ("READONLY You can't write against a read only replica.", "READONLY"),
    ("READONLY You can't write against a read only replica." + IN_SCRIPT, "READONLY"),
    ("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", "MASTERDOWN"),
    ("CLUSTERDOWN The cluster is down", "CLUSTERDOWN"),
    ("CLUSTERDOWN Hash slot not served", "CLUSTERDOWN"),
    ("CLUSTERDOWN The cluster is down and only accepts read commands", "CLUSTERDOWN"),
    ("TRYAGAIN Multiple keys request during rehashing of slot", "TRYAGAIN"),
    ("MOVED 3999 127.0.0.1:6381", "MOVED"),
    ("ASK 3999 127.0.0.1:6381", "ASK"),
    # Redis 6.2 wraps the error a script's redis.call met in an ERR of its own.
    (f"ERR Error running script (call to f_{SHA}): @user_script:1: -READONLY You can't write against a read only replica.", "READONLY"),  # noqa: E501
    (f"ERR Error running script (call to f_{SHA}): @user_script:5: -OOM command not allowed when used memory > 'maxmemory'.", "OOM"),  # noqa: E501
    (f"ERR Error running script (call to f_{SHA}): @user_script:12: -NOREPLICAS Not enough good replicas to write.", "NOREPLICAS"),  # noqa: E501
]  # fmt: skip


@pytest.mark.parametrize(("reply", "reason"), UNAVAILABLE_REPLIES, ids=[r[:40] for r, _ in UNAVAILABLE_REPLIES])
def test_a_reply_of_a_failover_restart_or_full_server_is_unavailable(reply: str, reason: str) -> None:
    """By its code, whether redis-py has a class for it (READONLY) or not (BUSY, NOREPLICAS)."""
    assert reason in UNAVAILABLE_CODES
    exc = parse(reply)
    assert error_code(exc) == reason
    check(exc, reason, reason)


# (reply, what redis_errors() raises: PASSES, or the reason of its RedisUnavailable)
OTHER_REPLIES: list[tuple[str, str | None]] = [
    ("ERR user_script:1: Script attempted to access nonexistent global variable 'x'" + IN_SCRIPT, PASSES),
    ("ERR user_script:3: Script attempted to call a non existent function 'x'" + IN_SCRIPT, PASSES),
    (f"ERR Error running script (call to f_{SHA}): @user_script:1: user_script:1: Script attempted to access nonexistent global variable 'x'", PASSES),  # noqa: E501
    (f"ERR Error running script (call to f_{SHA}): @user_script:4: @user_script: 4: Wrong number of args calling Redis command From Lua script", PASSES),  # noqa: E501
    ("WRONGTYPE Operation against a key holding the wrong kind of value", PASSES),
    ("WRONGTYPE Operation against a key holding the wrong kind of value" + IN_SCRIPT, PASSES),
    ("ERR unknown command 'FOO', with args beginning with: ", PASSES),
    ("ERR wrong number of arguments for 'evalsha' command", PASSES),
    ("ERR value is not an integer or out of range", PASSES),
    ("NOSCRIPT No matching script. Please use EVAL.", PASSES),
    ("CROSSSLOT Keys in request don't hash to the same slot", PASSES),
    ("ERR the text READONLY or OOM or BUSY inside a message is no code", PASSES),
    # The Redis user's ACL: refused, its own case (NOPERM), on Redis 7.0, 7.2 and Valkey 8.
    ("NOPERM User delayq has no permissions to run the 'evalsha' command", "NOPERM"),
    ("NOPERM this user has no permissions to access one of the keys used as arguments", "NOPERM"),
    ("ERR The user executing the script can't access at least one of the keys mentioned" + IN_SCRIPT, "NOPERM"),
    ("ERR ACL failure in script: No permissions to access a key" + IN_SCRIPT, "NOPERM"),
    ("ERR ACL failure in script: User delayq has no permissions to run the 'hset' command" + IN_SCRIPT, "NOPERM"),
]  # fmt: skip


@pytest.mark.parametrize(("reply", "raised_reason"), OTHER_REPLIES, ids=[r[:40] for r, _ in OTHER_REPLIES])
def test_a_reply_waiting_cannot_mend_is_not_unavailable(reply: str, raised_reason: str | None) -> None:
    """A script's own error, a wrong type, an unknown command go on as they are; a refusal by the
    ACL is a ``RedisUnavailable`` of its own, reason NOPERM, though ``unavailable()`` says no."""
    exc = parse(reply)
    assert error_code(exc) not in UNAVAILABLE_CODES
    check(exc, None, raised_reason)
    if raised_reason == "NOPERM":
        translated = as_unavailable(exc, SERVER)
        assert translated is not None
        assert translated.reason == "NOPERM"
        assert "NOPERM" in translated.message
        assert "ACL" in translated.message


def test_an_error_already_unavailable_goes_on_as_it_is() -> None:
    error = RedisUnavailable("Redis at x is unavailable: READONLY", reason="READONLY")
    assert outcome(error) is error


@pytest.mark.parametrize("name", sorted(name for name, case in CLASSES.items() if case.raised is not PASSES))
def test_the_api_answers_503_with_retry_after(name: str) -> None:
    """Every error that ``redis_errors()`` turns into ``RedisUnavailable`` is a 503 with ``Retry-After``."""
    translated = as_unavailable(CLASSES[name].make(), SERVER)
    assert translated is not None
    response = delayq_error(translated)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == str(translated.retry_after_s)
    assert translated.retry_after_s >= 1
