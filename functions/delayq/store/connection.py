"""Connections to Redis that proxies accept (no ``HELLO``, no ``CLIENT SETINFO``, no ``SELECT 0``), to
the URL in the settings or in the secret ``DELAYQ_REDIS_SECRET`` names; and what counts as Redis
being unavailable (``unavailable``, ``redis_errors``: a 503, never a 500).

No command is sent twice: a connection that fails while an answer is awaited does not say whether
Redis ran the script, so redis-py's retries are off, in cluster mode too. What happens before a
command is sent may be retried, by the pool (``Pool``): a connection the server closed, or one idle
``HEALTH_CHECK_S`` whose PING fails, is replaced; credentials Redis refuses are read again from the
secret (``SecretCredentials``). A URL, which may hold a password, is never logged: ``redact`` it.
docs/redis.md ("Connections") and docs/settings.md ("The Redis secret") say the same for users.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeAlias

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import AbstractConnection
from redis.credentials import CredentialProvider
from redis.exceptions import (
    AskError,
    AuthenticationError,
    ClusterError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from delayq.aws import secrets as aws_secrets
from delayq.core.errors import ConfigError, RedisUnavailable
from delayq.core.settings import DEFAULT_REDIS_URL, ENV, Settings
from delayq.core.urls import SCHEMES, parse_redis_url

RedisClient: TypeAlias = "redis.Redis | RedisCluster"
Credentials: TypeAlias = tuple[str] | tuple[str, str]  # AUTH's arguments: (password,) or (username, password)

# No CLIENT SETINFO on connect: redis-py 8 turns it off with driver_info=None, older ones with lib_name=None.
_NO_SETINFO: dict[str, Any] = (
    {"driver_info": None}
    if "driver_info" in inspect.signature(redis.Redis.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)
CONNECT_TIMEOUT_S = 2.0
SOCKET_TIMEOUT_S = 5.0
HEALTH_CHECK_S = 30.0  # a connection idle this long is sent a PING before its next command
SECRET_REFRESH_S = 10.0  # refused credentials re-read the secret at most this often

log = logging.getLogger("delayq.connection")

# Replies that mean "not now": a failover, a restart, slots moving, a full or busy server. Redis and
# Valkey send the same codes; redis-py makes classes of some (``_UNAVAILABLE_CLASSES``) and strips
# the code from their message, so a reply is known by its class, else by its code.
UNAVAILABLE_CODES = frozenset(
    ("CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "LOADING", "MOVED", "ASK", "NOREPLICAS", "OOM", "BUSY")
)
_UNAVAILABLE_CLASSES = (
    RedisConnectionError,  # refused, reset, LOADING (BusyLoadingError), WRONGPASS while a password rotates
    RedisTimeoutError,
    RedisClusterException,  # no node answers, a slot no node serves
    ClusterError,  # CLUSTERDOWN, MASTERDOWN; redirects that never ended ("TTL exhausted")
    TryAgainError,
    AskError,  # ASK, MOVED: followed where they can be; left over, slots are moving
    ReadOnlyError,
    OutOfMemoryError,
)
# Redis 6.2 wraps an error a script's redis.call met: "ERR Error running script (call to f_...):
# @user_script:5: -READONLY You can't write ...". Later servers pass the reply on as it came.
_CODE_IN_SCRIPT = re.compile(r"@user_script:\s*\d+:\s*-([A-Z]+) ")
# The Redis user may not run a command or reach a key delayq needs: a deployment's mistake, not a bug,
# and not an outage either (``RedisUnavailable.reason``).
REFUSED = "NOPERM"
_REFUSED = "refused a command (NOPERM): the Redis user's ACL lacks what delayq needs (see docs/redis.md)"
# How Redis and Valkey word an ACL refusal from inside a script (not always with the NOPERM code), in
# any case: Redis 7.0 "The user executing the script can't access ..."; Redis 7.2 and Valkey 8 "ACL
# failure in script: No permissions to access a key" or "... has no permissions to run the 'hset' command".
_REFUSED_IN_SCRIPT = re.compile(r"^NOPERM|acl failure|user executing the script can't|no permissions to", re.I)


def error_code(exc: BaseException) -> str | None:
    """The code of a Redis error reply (``READONLY``, ``CLUSTERDOWN``, ``ERR``): as redis-py kept it
    (``status_code``, redis-py >= 8), as the message starts, or, for an error a script's
    ``redis.call`` met on Redis 6.2, inside the message; None for an error that is not a reply. A
    ``RedisUnavailable`` has the code of the error it stands for."""
    if isinstance(exc, RedisUnavailable) and exc.__cause__ is not None:
        exc = exc.__cause__
    code = getattr(exc, "status_code", None)
    if not isinstance(exc, ResponseError):
        return str(code) if code else None
    text = str(exc)
    found = _CODE_IN_SCRIPT.search(text)
    if found:
        return found.group(1)
    if code:
        return str(code)
    first = text.split(" ", 1)[0]
    return first if first.isupper() and first.isalpha() else None


def unavailable(exc: BaseException) -> str | None:
    """Why ``exc`` means Redis cannot answer now, for a while (a failover, a restart, a full server):
    its reply's code (``CLUSTERDOWN``) or its class (``ConnectionError``); None for an error waiting
    cannot mend (a script's error, a refused command: ``refused``)."""
    code = error_code(exc)
    if code in UNAVAILABLE_CODES:
        return code
    if isinstance(exc, _UNAVAILABLE_CLASSES):
        return code if code and code != "ERR" else type(exc).__name__  # "ERR max number of clients reached"
    return None


def refused_unrun(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a call before it changed anything: a redirect, a cluster or a
    server that cannot serve now, or a script's first write refused (a replica, a full server)."""
    return error_code(exc) in UNAVAILABLE_CODES


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a command or a key to delayq's user (its ACL)."""
    return isinstance(exc, NoPermissionError) or (
        isinstance(exc, ResponseError) and bool(_REFUSED_IN_SCRIPT.search(str(exc)))
    )


def as_unavailable(exc: BaseException, server: str = "Redis") -> RedisUnavailable | None:
    """``exc`` as the ``RedisUnavailable`` it means (its message starting with ``server``, its
    ``reason`` the code or class), or None for an error that is neither an outage nor a refusal."""
    reason = unavailable(exc)
    if reason is not None:
        return RedisUnavailable(f"{server} is unavailable: {reason}", reason=reason)
    if refused(exc):
        return RedisUnavailable(f"{server} {_REFUSED}", reason=REFUSED)
    if isinstance(exc, RedisError) and not isinstance(exc, ResponseError):
        return RedisUnavailable(f"{server} is unavailable: {type(exc).__name__}", reason=type(exc).__name__)
    return None


@contextmanager
def redis_errors(server: Callable[[], str] = lambda: "Redis") -> Iterator[None]:
    """Turns Redis being down, loading, out of memory, failing over or refusing delayq's user into
    ``RedisUnavailable``, whose message starts with ``server()``: which Redis (``Queue`` names its
    host and port). Any other error (a script's) goes on as it is."""
    try:
        yield
    except RedisUnavailable:
        raise
    except (RedisError, RedisClusterException) as exc:
        translated = as_unavailable(exc, server())
        if translated is None:
            raise
        raise translated from exc


def client_options() -> dict[str, Any]:
    """The options of every client: RESP2, no CLIENT SETINFO, timeouts, and no retry of commands."""
    return {
        "decode_responses": True,
        "protocol": 2,
        **_NO_SETINFO,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": SOCKET_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0, supported_errors=(RedisConnectionError,)),
    }


def redis_url(settings: Settings) -> str:
    """The URL to connect to, as redis-py gets it: from the secret when the settings name one, else
    the settings' URL."""
    if not settings.redis_secret:
        return parse_redis_url(settings.redis_url, ENV.REDIS_URL).url
    return read_secret(settings.redis_secret, base=settings.redis_url)


def read_secret(secret: str, *, base: str = DEFAULT_REDIS_URL, force_fetch: bool = False) -> str:
    """The Redis URL the secret ``secret`` makes (see ``url_from_secret``): cached for
    ``aws_secrets.MAX_AGE_S``, or read anew."""
    try:
        value = aws_secrets.read(secret, fresh=force_fetch)
    except aws_secrets.SecretUnreadable as exc:
        raise RedisUnavailable(f"cannot read the Redis URL from {ENV.REDIS_SECRET} ({exc})") from None
    return url_from_secret(value, base)


def url_from_secret(value: str | bytes | dict[str, Any] | None, base: str = DEFAULT_REDIS_URL) -> str:
    """A secret's value -> the URL, as redis-py gets it. The value is the URL, or JSON with a ``url``
    key, or JSON with a ``password`` (and a ``username``) for the server of ``base`` (the settings'
    URL): the shape Secrets Manager generates and rotates. Errors never quote the value."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ConfigError(f"{ENV.REDIS_SECRET}: the secret is neither a URL nor JSON") from None
    if isinstance(value, dict) and "url" not in value and "password" in value:
        username, password = value.get("username"), value["password"]
        if not isinstance(password, str) or not isinstance(username, str | None):
            raise ConfigError(f'{ENV.REDIS_SECRET}: the secret\'s "username" and "password" must be strings')
        return parse_redis_url(base, ENV.REDIS_URL).with_credentials(username, password).url
    if isinstance(value, dict):
        value = value.get("url")
    if not isinstance(value, str):
        raise ConfigError(
            f'{ENV.REDIS_SECRET}: the secret must be a Redis URL, JSON {{"url": "rediss://..."}}, or JSON '
            f'{{"username": ..., "password": ...}} for the server of {ENV.REDIS_URL}'
        )
    return parse_redis_url(value, ENV.REDIS_SECRET).url


def split_credentials(url: str) -> tuple[str, Credentials | None]:
    """``url`` without its username and password (in the address or the query), and them as AUTH
    arguments: ``(password,)`` or ``(username, password)``; ``None`` without a password."""
    parsed = parse_redis_url(url, ENV.REDIS_URL)
    return parsed.address, parsed.credentials


class SecretCredentials(CredentialProvider):
    """The username and password of the URL in ``DELAYQ_REDIS_SECRET``, given to each new connection,
    and read again from Secrets Manager when Redis refuses them (``refresh``)."""

    def __init__(self, secret: str, credentials: Credentials, address: str, base: str = DEFAULT_REDIS_URL) -> None:
        self.secret = secret
        self._base = base  # the settings' URL: the server of a secret that holds only credentials
        self.version = 0  # how many times the credentials changed
        self._credentials = credentials
        self._address = address  # the URL without credentials
        self._fetched_at = -SECRET_REFRESH_S
        self._lock = threading.Lock()

    def get_credentials(self) -> Credentials:
        return self._credentials

    def refresh(self, seen: int) -> bool:
        """Redis refused the credentials of version ``seen``: whether there are other ones to try now
        (another thread's refresh, or a new secret value). Reads the secret past its cache, at most
        once per ``SECRET_REFRESH_S``."""
        with self._lock:
            if self.version != seen:
                return True
            now = time.monotonic()
            if now - self._fetched_at < SECRET_REFRESH_S:
                return False
            self._fetched_at = now
            try:
                address, credentials = split_credentials(read_secret(self.secret, base=self._base, force_fetch=True))
            except (RedisUnavailable, ConfigError) as exc:
                log.warning("Redis refused the credentials; reading %s again failed: %s", ENV.REDIS_SECRET, exc)
                return False
            if address != self._address:
                log.warning(
                    "Redis refused the credentials, and %s now names another server (%s): this container "
                    "keeps its server until it is replaced",
                    ENV.REDIS_SECRET,
                    redact(address),
                )
                return False
            if credentials is None or credentials == self._credentials:
                return False
            self._credentials = credentials
            self.version += 1
            log.warning("Redis refused the credentials; new ones from %s are used from now on", ENV.REDIS_SECRET)
            return True


class Pool(redis.ConnectionPool):
    """redis-py's connection pool, plus what is safe to retry before a command is sent: a connection
    whose health check fails is replaced, and refused credentials from a secret are read again."""

    def __init__(self, *args: Any, **options: Any) -> None:
        options.setdefault("health_check_interval", HEALTH_CHECK_S)  # cluster nodes get none otherwise
        super().__init__(*args, **options)

    def get_connection(self, *args: Any, **options: Any) -> Any:
        credentials = self.connection_kwargs.get("credential_provider")
        if not isinstance(credentials, SecretCredentials):
            return self._healthy(super().get_connection(*args, **options))
        seen = credentials.version
        try:
            connection = super().get_connection(*args, **options)
        except AuthenticationError:
            if not credentials.refresh(seen):
                raise
            connection = super().get_connection(*args, **options)
        return self._healthy(connection)

    def _healthy(self, connection: Any) -> Any:
        """``connection`` once its health check, if due, passed; else a new connection in its place.
        Only a PING was sent on it, so connecting again is safe (redis-py's own check would raise)."""
        if not connection.health_check_interval or time.monotonic() <= connection.next_health_check:
            return connection
        try:
            connection.check_health()
        except (RedisConnectionError, RedisTimeoutError):
            try:
                connection.disconnect()
                connection.connect()
            except BaseException:
                self.release(connection)
                raise
            connection.next_health_check = time.monotonic() + connection.health_check_interval
        return connection


def read_past_tls_handshake(connection: AbstractConnection) -> None:
    """On a new TLS connection, one PING. A TLS 1.3 server sends session tickets just after the
    handshake; until something is read they make the socket look readable, and redis-py's parser
    then throws the new connection away as holding an answer nobody asked for. redis-py's own CLIENT
    SETINFO would read past them, but it is off here (proxies refuse it); a PING, which proxies
    accept, does the same. Other connections are left alone."""
    if isinstance(connection, redis.SSLConnection):
        connection.send_command("PING", check_health=False)  # type: ignore[no-untyped-call]
        answer = connection.read_response()
        if (answer.decode() if isinstance(answer, bytes) else answer) != "PONG":
            raise RedisConnectionError("no PONG after the TLS handshake")


def _set_up(connection: Any) -> None:
    """A standalone client's connection set-up: the usual (AUTH), then past the TLS handshake."""
    connection.on_connect()
    read_past_tls_handshake(connection)


def connect(settings: Settings, url: str | None = None) -> RedisClient:
    """A client for ``url`` (default: the settings' URL, or its secret's) in the settings' mode."""
    options = client_options()
    if url is None and settings.redis_secret:
        url, credentials = split_credentials(redis_url(settings))
        if credentials:
            options["credential_provider"] = SecretCredentials(
                settings.redis_secret, credentials, url, base=settings.redis_url
            )
    url = parse_redis_url(url or settings.redis_url, ENV.REDIS_URL).url  # never a URL redis-py would misread
    if settings.redis_mode == "cluster":  # the cluster client runs on_connect itself, then this
        return RedisCluster.from_url(
            url, redis_connect_func=read_past_tls_handshake, connection_pool_class=Pool, **options
        )
    client = redis.Redis(connection_pool=Pool.from_url(url, redis_connect_func=_set_up, **options))
    client.auto_close_connection_pool = True  # as Redis.from_url: closing the client closes its pool
    return client


def server_address(client: RedisClient) -> str:
    """Where ``client`` connects: host and port, or a socket's path (never a password)."""
    if isinstance(client, RedisCluster):
        node = client.get_default_node()  # type: ignore[no-untyped-call]
        return f"{node.host}:{node.port}" if node is not None else "a Redis Cluster"
    options = client.connection_pool.connection_kwargs
    return str(options.get("path") or f"{options.get('host', 'localhost')}:{options.get('port', 6379)}")


def redact(url: str) -> str:
    """``url`` for logs: its password, and any other secret in it, as ``***``; a URL that cannot be
    read shows only its scheme."""
    try:
        return parse_redis_url(url, ENV.REDIS_URL).redacted
    except ConfigError:
        scheme = url.partition("://")[0].lower() if "://" in url else ""
        return f"{scheme if scheme in SCHEMES else '?'}://(a URL that cannot be read)"
