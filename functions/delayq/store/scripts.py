"""The Lua scripts in ``lua/``, and how they are sent.

Each script is one atomic operation; its header documents KEYS, ARGV and what it returns. A line
``-- @include name`` pulls in ``lua/includes/name.lua`` (once, wherever it is first asked for), and of
what it defines only the functions the script calls: each one left is a closure made at every call.
``calls.py`` has one typed function per script that packs its arguments and reads its reply: callers
use those, and this module sends what they build (``Call.run``, ``run_many`` for one round trip, or
``stream`` for calls built one batch after another while Redis runs the last).

Calls go out as EVALSHA; when the server answers NOSCRIPT (a restart, a ``SCRIPT FLUSH``, another node
behind a proxy, a replica just promoted) the same call is repeated as EVAL, which runs the script and
caches it. Never ``SCRIPT LOAD``: Codis and twemproxy refuse it.

A write may wait for replicas (``Replicas``, ``DELAYQ_MIN_REPLICAS``): a ``WAIT`` goes after it on the
same connection, in the same round trip (on a cluster, after each node's calls, on that node's
connection), and the calls it covers that wrote something (``Call.wrote``) fail with ``NotReplicated``
if too few replicas hold them.

On a cluster every call goes to its node on a plain connection of that node (``_run_per_node``), all
nodes' pipelines sent before any reply is read: a node that fails or hangs fails its own calls, and
holds up the others' at most ``NODE_REPLY_S``. redis-py's cluster client is used for its slot table,
and to follow a MOVED or ASK; never for its retries, which sleep and send again.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from importlib import resources
from typing import Any, Generic, NamedTuple, TypeVar
from weakref import WeakKeyDictionary

from redis import Redis
from redis.cluster import NodesManager, RedisCluster
from redis.connection import Connection
from redis.exceptions import (
    AskError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from delayq.core.errors import NotReplicated

from .connection import RedisClient

INCLUDE = re.compile(r"^-- @include (\w+)[ \t]*$", re.MULTILINE)
FUNCTION = re.compile(r"local function (\w+)\(")
COMMENT = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.DOTALL)
WORD = re.compile(r"\w+")
Arg = str | int | float | bytes
R = TypeVar("R")
NODE_REPLY_S = 0.5  # on a cluster, how long a round trip waits for a node's replies before failing its calls
SLOTS_REFRESH_S = 0.25  # on a cluster, the slot table is read again at most this often after a node failed


def _read(path: str) -> str:
    return resources.files(__package__).joinpath(f"lua/{path}").read_text(encoding="utf-8")


def build_source(name: str) -> str:
    """The source of ``lua/<name>.lua`` with its includes (and theirs) pulled in, each once, less the
    functions it never calls."""
    return without_unused_functions(expand_includes(_read(f"{name}.lua")))


def expand_includes(text: str) -> str:
    """``text`` with its ``-- @include`` lines (and theirs) replaced by ``lua/includes/``, each once."""
    seen: set[str] = set()

    def expand(text: str) -> str:
        def include(match: re.Match[str]) -> str:
            dep = match.group(1)
            if dep in seen:
                return ""
            seen.add(dep)
            return expand(_read(f"includes/{dep}.lua")).rstrip("\n")

        return INCLUDE.sub(include, text)

    return expand(text)


def without_unused_functions(source: str) -> str:
    """``source`` less its top-level functions that nothing else in it names outside comments (and then
    those that only they named). Lua runs every ``local function`` line of a script at each call, making
    a closure, so a script that includes a file pays for all it defines; what is never named can never
    be called."""
    lines = source.splitlines(keepends=True)
    while True:
        named = Counter(_names(lines))
        unused = [
            (first, last)
            for name, first, last in _top_functions(lines)
            if named[name] == _names(lines[first:last]).count(name)
        ]
        if not unused:
            return "".join(lines)
        for first, last in reversed(unused):
            del lines[first:last]


def _names(lines: list[str]) -> list[str]:
    """Every word of ``lines`` outside comments, each time it occurs."""
    return WORD.findall(COMMENT.sub("", "".join(lines)))


def _top_functions(lines: list[str]) -> Iterator[tuple[str, int, int]]:
    """Each top-level ``local function``: its name and its lines ``[first, last)``, the comment lines
    just above it included. It ends on its own line when that ends with ``end``, else at the first line
    that is ``end`` alone (the code inside a function is indented)."""
    for at, line in enumerate(lines):
        found = FUNCTION.match(line)
        if not found:
            continue
        first = at
        while first > 0 and lines[first - 1].startswith("--"):
            first -= 1
        last = at + 1
        if not line.rstrip().endswith("end"):
            while lines[last - 1].rstrip() != "end":
                last += 1
        yield found.group(1), first, last


@dataclass(frozen=True)
class Script:
    name: str
    source: str
    sha: str

    @classmethod
    def load(cls, name: str) -> Script:
        source = build_source(name)
        return cls(name, source, hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest())

    def __call__(self, client: RedisClient, keys: Sequence[str], args: Sequence[Arg] = ()) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)


class Replicas(NamedTuple):
    """What a write waits for before it is answered: ``wanted`` replicas that hold it (Redis ``WAIT`` on
    the connection that wrote it), ``wait_ms`` at most."""

    wanted: int
    wait_ms: int

    @property
    def command(self) -> tuple[Arg, ...]:
        return ("WAIT", self.wanted, self.wait_ms)

    def apply(self, results: list[Any], indexes: Iterable[int], acked: Any) -> None:
        """``WAIT``'s reply ``acked`` for the calls at ``indexes`` of ``results``: when it is short (or
        failed), those answered become ``_Unreplicated``, which fail if they wrote (``_decoded``)."""
        if isinstance(acked, int) and acked >= self.wanted:
            return
        error = acked if isinstance(acked, Exception) else NotReplicated(int(acked), self.wanted, self.wait_ms)
        for i in indexes:
            if not isinstance(results[i], Exception):
                results[i] = _Unreplicated(results[i], error)


class _Unreplicated(NamedTuple):
    """A call's reply that too few replicas may hold: ``error`` if the call wrote something."""

    reply: Any
    error: Exception

    def decoded(self, call: Call[R]) -> R:
        """The reply decoded, if the call wrote nothing (a create refused as 409); else the error."""
        value = call.decode(self.reply)
        if call.wrote is None or call.wrote(value):
            raise self.error
        return value


def _as_sent(reply: Any) -> Any:
    """A reply as Redis sent it: the decoder of a call built without one (tests of the sending)."""
    return reply


@dataclass(slots=True)
class Call(Generic[R]):
    """One script call, and how its reply reads (``decode``): ``run`` sends it alone, ``run_many``
    sends several in one round trip. Built by the functions of ``calls.py``; not changed after (not
    frozen only because a frozen dataclass takes three times as long to make, and every pass makes some).

    A call without a script is the plain ``command`` of its one key (``Call.plain``): what a consumer's
    frequent look at the topic index needs, for a fraction of a script call's cost, or the sweep lock."""

    script: Script | None
    keys: Sequence[str]
    args: Sequence[Arg] = ()
    decode: Callable[[Any], R] = _as_sent
    command: str = ""
    wrote: Callable[[R], bool] | None = None  # whether a decoded reply says the call wrote (None: always)

    @classmethod
    def plain(cls, command: str, key: str, args: Sequence[Arg], decode: Callable[[Any], R]) -> Call[R]:
        """A plain command on ``key``: ``command key *args``."""
        return cls(None, [key], args, decode, command)

    def sent(self) -> tuple[Arg, ...]:
        """The command as sent: EVALSHA of the script with its keys and arguments, or the plain read."""
        if self.script is None:
            return (self.command, *self.keys, *self.args)
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)

    def run(self, client: RedisClient) -> R:
        """Sends the call alone; its decoded reply."""
        result: R = run_many(client, [self])[0]
        return result

    def _run_alone(self, client: RedisClient) -> R:
        """Sends the call through ``client`` itself (standalone: its pool; a cluster client follows a
        redirect), as EVAL if the server answers NOSCRIPT."""
        if self.script is None:
            return self.decode(client.execute_command(*self.sent()))  # type: ignore[no-untyped-call]
        return self.decode(self.script(client, self.keys, self.args))


def run_many(
    client: RedisClient,
    calls: Sequence[Call[Any]],
    *,
    return_exceptions: bool = False,
    replicas: Replicas | None = None,
) -> list[Any]:
    """Run several script calls in one round trip (a pipeline without MULTI; on a cluster, one per
    node, sent together); their decoded replies in call order.

    Calls answered NOSCRIPT are repeated one by one as EVAL; in cluster mode, calls answered MOVED,
    ASK or TRYAGAIN (refused, not run) are repeated one by one through the cluster client, which
    follows the redirect. Nothing else is ever sent again. Any other error is raised, or, with
    ``return_exceptions``, returned in its call's place: on a cluster, a node that fails or does not
    answer within ``NODE_REPLY_S`` fails its own calls, the others' replies are read; on one server,
    an error of the connection itself is raised. A READONLY answer (the server became a replica)
    sends the next calls on new connections, which find the primary if its name moved there. With
    ``replicas``, the calls are writes that wait for them (``Replicas``).
    """
    if isinstance(client, RedisCluster):
        results = _run_per_node(client, calls, replicas=replicas)
    elif len(calls) == 1 and not return_exceptions and replicas is None:
        try:
            return [calls[0]._run_alone(client)]
        except ReadOnlyError:
            _reconnect_later(client)
            raise
    else:
        pipe: Any = client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*call.sent())
        if replicas is not None:
            pipe.execute_command(*replicas.command)
        results = pipe.execute(raise_on_error=False)
        if replicas is not None:
            replicas.apply(results, range(len(calls)), results.pop())
    return _decoded(client, calls, results, return_exceptions=return_exceptions, replicas=replicas)


def _decoded(
    client: RedisClient,
    calls: Sequence[Call[Any]],
    results: list[Any],
    *,
    return_exceptions: bool,
    replicas: Replicas | None = None,
) -> list[Any]:
    """``run_many``'s replies of ``calls``, each decoded, or sent again, or an error raised or kept."""
    for i, (call, result) in enumerate(zip(calls, results, strict=True)):
        if isinstance(result, _Unreplicated):
            try:
                results[i] = result.decoded(call)
            except Exception as exc:
                if not return_exceptions:
                    raise
                results[i] = exc
        elif isinstance(result, NoScriptError | AskError | TryAgainError):  # MovedError is an AskError
            try:
                results[i] = _send_again(client, call, result, replicas)
            except (RedisError, RedisClusterException, NotReplicated) as exc:
                if not return_exceptions:
                    raise
                results[i] = exc
        elif isinstance(result, Exception):
            if isinstance(result, ReadOnlyError) and not isinstance(client, RedisCluster):
                _reconnect_later(client)
            if not return_exceptions:
                raise result
        else:
            results[i] = call.decode(result)
    return results


def stream(
    connect: Callable[[], RedisClient], batches: Iterable[Sequence[Call[Any]]], *, replicas: Replicas | None = None
) -> Iterator[list[Any]]:
    """Runs each batch of calls as ``run_many`` does, but sends it as soon as ``batches`` builds it and
    reads its replies only once the next batch is sent (or ``batches`` ends): Redis runs one batch
    while the caller builds the next. The decoded replies of each batch, in order, one batch at a time.

    ``connect()`` gives the client once a batch has a call (empty batches alone never connect). One
    connection of its pool carries the stream (at most two batches unanswered on it); a call answered
    NOSCRIPT is sent again as EVAL on another, after the batch sent behind it, which may then have run
    first (the script was cached meanwhile by another client). If the stream stops before every reply
    is read (an error, a caller that stops reading), the connection is closed, not handed back with
    replies on it. In cluster mode each batch is run alone with ``run_many``. With ``replicas``, each
    batch is followed by its ``WAIT``, and a batch that too few replicas hold raises ``NotReplicated``."""
    client: Any = None
    connection: Any = None  # None in cluster mode: each batch is run when its turn comes
    sent: deque[Sequence[Call[Any]]] = deque()  # batches not answered yet, the oldest first
    try:
        for batch in batches:
            if batch and client is None:
                client = connect()
                if not isinstance(client, RedisCluster):
                    connection = client.connection_pool.get_connection()
            if batch and connection is not None:
                commands = [call.sent() for call in batch] + ([replicas.command] if replicas else [])
                connection.send_packed_command(connection.pack_commands(commands))
            sent.append(batch)
            while len(sent) > (connection is not None):  # one batch stays unanswered while the next is built
                replies = _replies(client, connection, sent[0], replicas)
                sent.popleft()
                yield replies
        while sent:
            replies = _replies(client, connection, sent[0], replicas)
            sent.popleft()
            yield replies
    finally:
        if connection is not None:
            if sent:
                connection.disconnect()
            client.connection_pool.release(connection)


def _replies(client: Any, connection: Any, calls: Sequence[Call[Any]], replicas: Replicas | None) -> list[Any]:
    """The decoded replies of ``calls``, sent on ``connection``, in order, and of the ``WAIT`` after
    them with ``replicas``. As ``run_many``: a call answered NOSCRIPT is sent again as EVAL (once every
    reply of the batch is read), any other error is raised. In cluster mode (no ``connection``) the
    calls are sent now, with ``run_many``."""
    if not calls:
        return []
    if connection is None:
        return run_many(client, calls, replicas=replicas)
    replies: list[Any] = []
    for call in calls:
        try:
            replies.append(client.parse_response(connection, call.sent()[0]))
        except NoScriptError as exc:  # its reply was read whole: the connection goes on
            replies.append(exc)
    if replicas is not None:
        acked = _reply_or_error(client.parse_response, connection, "WAIT")
        replicas.apply(replies, range(len(calls)), acked)
    for i, (call, reply) in enumerate(zip(calls, replies, strict=True)):
        if isinstance(reply, NoScriptError):
            replies[i] = _send_again(client, call, reply, replicas)
        else:
            replies[i] = reply.decoded(call) if isinstance(reply, _Unreplicated) else call.decode(reply)
    return replies


def _send_again(client: RedisClient, call: Call[R], refusal: Exception, replicas: Replicas | None = None) -> R:
    """A call refused without being run, sent again alone: as EVAL after NOSCRIPT (which caches the
    script), through the cluster client after a redirect (which follows it). A write that waits for
    ``replicas`` goes with its ``WAIT`` on one connection: after a redirect, once the slot table is
    read again, to the node it names."""
    if isinstance(refusal, NoScriptError) and call.script is not None:
        command: tuple[Arg, ...] = ("EVAL", call.script.source, len(call.keys), *call.keys, *call.args)
    elif replicas is not None and isinstance(client, RedisCluster):
        refresh_slots(client, every_s=0)
        command = call.sent()
    else:
        return call._run_alone(client)
    if isinstance(client, RedisCluster):
        reply = _run_per_node(client, [call], sent=[command], replicas=replicas)[0]
    elif replicas is not None:
        pipe: Any = client.pipeline(transaction=False)
        pipe.execute_command(*command)
        pipe.execute_command(*replicas.command)
        replies = pipe.execute(raise_on_error=False)
        replicas.apply(replies, [0], replies.pop())
        reply = replies[0]
    else:
        reply = client.execute_command(*command)  # type: ignore[no-untyped-call]
    if isinstance(reply, Exception):
        raise reply
    return reply.decoded(call) if isinstance(reply, _Unreplicated) else call.decode(reply)


def _run_per_node(
    client: RedisCluster, calls: Sequence[Call[Any]], *, sent: Sequence[Any] = (), replicas: Replicas | None = None
) -> list[Any]:
    """Cluster mode: each node's calls in one plain pipeline on a connection of that node, every
    node's sent before any reply is read; each call's reply (an error reply, or the error of its
    node's connection, as an exception). Not redis-py's cluster pipeline: when a connection fails
    while the answers are read, it sends the unanswered calls again one by one, and a script that
    did run would run twice. Calls are routed by their first key from the client's slot table, so no
    server is asked where each goes (COMMAND GETKEYS); a stale table shows as MOVED, which
    ``run_many`` follows, or as a node that fails, after which the table is read again
    (``refresh_slots``). ``sent``: the commands as sent, where not ``call.sent()``. With ``replicas``,
    each node's calls are followed by a ``WAIT`` on its connection (``Replicas.apply``)."""
    results: list[Any] = [None] * len(calls)
    by_node: dict[str, tuple[Any, list[int]]] = {}
    for i, call in enumerate(calls):
        try:
            node = client.get_node_from_key(call.keys[0]) if call.keys else client.get_default_node()  # type: ignore[no-untyped-call]
        except RedisClusterException as exc:  # no node serves the slot (yet)
            results[i] = exc
            continue
        by_node.setdefault(node.name, (node, []))[1].append(i)
    commands = list(sent) or [call.sent() for call in calls]
    pending: list[tuple[str, Any, Any, list[int]]] = []  # (node, pool, connection, indexes) with replies to read
    for node, indexes in by_node.values():
        pool = client.get_redis_connection(node).connection_pool
        connection: Any = None
        try:
            connection = pool.get_connection()
            packed = [commands[i] for i in indexes] + ([replicas.command] if replicas else [])
            connection.send_packed_command(connection.pack_commands(packed))
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if connection is not None:
                connection.disconnect()
                pool.release(connection)
            _node_failed(client, node.name, indexes, exc, results)
            continue
        pending.append((node.name, pool, connection, indexes))
    # A node has NODE_REPLY_S to answer, and its WAIT as long again as the wait it was given.
    deadline = time.monotonic() + NODE_REPLY_S + (replicas.wait_ms / 1000 if replicas else 0.0)
    for name, pool, connection, indexes in pending:
        read = 0
        try:
            for i in indexes:
                try:
                    results[i] = _read_by(connection, deadline)
                except ResponseError as exc:  # an error reply, read whole: the connection goes on
                    results[i] = exc
                read += 1
            if replicas is not None:
                replicas.apply(results, indexes, _reply_or_error(_read_by, connection, deadline))
        except (RedisConnectionError, RedisTimeoutError) as exc:
            connection.disconnect()  # replies may still come on it: never reused
            # Calls whose reply was read are not known to be replicated without the WAIT's.
            _node_failed(client, name, indexes if replicas else indexes[read:], exc, results)
        finally:
            pool.release(connection)
    return results


def _reply_or_error(read: Callable[..., Any], *args: Any) -> Any:
    """``read(*args)``'s reply, or the error reply it raised."""
    try:
        return read(*args)
    except ResponseError as exc:
        return exc


def _read_by(connection: Any, deadline: float) -> Any:
    """The next reply on ``connection``, waited for until ``deadline`` (monotonic) at most, where
    redis-py can be told; else for its socket timeout."""
    if not _READ_TAKES_TIMEOUT:
        return connection.read_response()
    return connection.read_response(timeout=max(0.001, deadline - time.monotonic()))


def _node_failed(client: RedisCluster, node: str, indexes: Sequence[int], exc: Exception, results: list[Any]) -> None:
    """``node``'s connection failed: its calls fail with ``exc``, and the slot table is read again
    (the node may have failed over), asking that node last."""
    for i in indexes:
        results[i] = exc
    refresh_slots(client, failed_node=node)


_READ_TAKES_TIMEOUT = "timeout" in inspect.signature(Connection.read_response).parameters
_INITIALIZE_TAKES_FAILED = "last_failed_node_name" in inspect.signature(NodesManager.initialize).parameters
_refreshed: WeakKeyDictionary[RedisCluster, float] = WeakKeyDictionary()  # client -> monotonic time of its last refresh
_refresh_lock = threading.Lock()


def refresh_slots(client: RedisCluster, *, every_s: float = SLOTS_REFRESH_S, failed_node: str | None = None) -> bool:
    """Reads the cluster's slot table again, as the cluster client does after its own calls fail,
    but at most once per ``every_s`` per client (a node that fails does not make every call ask
    every node); whether it was read. ``failed_node`` (``host:port``) is asked last, where redis-py
    can be told: a node that hangs would hold the read for a socket timeout. No node
    answering is not an error: the next call tries again."""
    now = time.monotonic()
    with _refresh_lock:
        if now - _refreshed.get(client, -every_s) < every_s:
            return False
        _refreshed[client] = now
    manager = client.nodes_manager
    with suppress(RedisError, RedisClusterException):
        if failed_node is not None and _INITIALIZE_TAKES_FAILED:
            manager.initialize(last_failed_node_name=failed_node)
        else:
            manager.initialize()
        return True
    return False


def _reconnect_later(client: Redis) -> None:
    """A server answered READONLY: it is a replica now (a failover). The pool's connections are
    closed (idle ones now, busy ones when handed back), so the next calls connect again and reach
    the primary where its name (DNS) now points."""
    pool: Any = client.connection_pool
    if hasattr(pool, "update_active_connections_for_reconnect"):  # redis-py >= 6
        pool.update_active_connections_for_reconnect()
        pool.disconnect_free_connections()
    else:
        pool.disconnect(inuse_connections=False)


class Scripts:
    """Every script, loaded once per process."""

    enqueue = Script.load("enqueue")
    enqueue_one = Script.load("enqueue_one")
    take = Script.load("take")
    untake = Script.load("untake")
    ack = Script.load("ack")
    forget = Script.load("forget")
    fail = Script.load("fail")
    sweep = Script.load("sweep")
    move_leases = Script.load("move_leases")
    topics_due = Script.load("topics_due")
    cancel = Script.load("cancel")
    cancel_all = Script.load("cancel_all")
    reschedule = Script.load("reschedule")
    replay = Script.load("replay")
    purge = Script.load("purge")
    inspect = Script.load("inspect")
    stats = Script.load("stats")
    jobs_scored = Script.load("jobs_scored")
    jobs_ready = Script.load("jobs_ready")
    jobs_done = Script.load("jobs_done")
    forecast = Script.load("forecast")
    pause = Script.load("pause")
    key_settings = Script.load("key_settings")
    keys_walk = Script.load("keys_walk")
    dead = Script.load("dead")
    dead_errors = Script.load("dead_errors")
    unlock = Script.load("unlock")
    layout = Script.load("layout")
    jobs_moved = Script.load("jobs_moved")
    move_jobs = Script.load("move_jobs")
    activity_add = Script.load("activity_add")
    activity_read = Script.load("activity_read")
    lateness_read = Script.load("lateness_read")
    schedule_write = Script.load("schedule_write")
    schedule_read = Script.load("schedule_read")
    schedule_list = Script.load("schedule_list")
    schedules_due = Script.load("schedules_due")
    schedules_cas = Script.load("schedules_cas")
    callbacks = Script.load("callbacks")
    outbox_trim = Script.load("outbox_trim")


def all_scripts() -> list[Script]:
    return [value for value in vars(Scripts).values() if isinstance(value, Script)]
