"""Connections to Redis that proxies accept, to the URL in the settings or in a secret.

Connection set-up sends nothing a proxy refuses: no ``HELLO`` (RESP2), no ``CLIENT SETINFO``, no
``SELECT`` for database 0. A broken pooled connection is retried once; a timeout is not retried,
since the command may already have run.

With ``DELAYQ_REDIS_SECRET``, the URL is the value of that Secrets Manager secret (the URL itself, or
JSON ``{"url": ...}``), read through Powertools Parameters once per container and cached. The URL,
which may hold a password, is never logged: ``redact`` it first.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import redis
from aws_lambda_powertools.utilities import parameters
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from .errors import ConfigError, RedisUnavailable
from .settings import ENV, Settings

RedisClient: TypeAlias = "redis.Redis | RedisCluster"

# No CLIENT SETINFO on connect: redis-py 8 turns it off with driver_info=None, older ones with lib_name=None.
_NO_SETINFO: dict[str, Any] = (
    {"driver_info": None}
    if "driver_info" in inspect.signature(redis.Redis.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)
CONNECT_TIMEOUT_S = 2.0
SOCKET_TIMEOUT_S = 5.0
SECRET_MAX_AGE_S = 24 * 3600  # once per container, in practice: containers rarely live a day
URL_SCHEMES = ("redis://", "rediss://", "unix://")


def client_options() -> dict[str, Any]:
    return {
        "decode_responses": True,
        "protocol": 2,
        **_NO_SETINFO,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": SOCKET_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        "health_check_interval": 30,
    }


def redis_url(settings: Settings) -> str:
    """The URL to connect to: from the secret when the settings name one, else the settings' URL."""
    if not settings.redis_secret:
        return settings.redis_url
    try:
        value = parameters.get_secret(settings.redis_secret, max_age=SECRET_MAX_AGE_S)
    except parameters.GetParameterError as exc:
        cause = type(exc.__cause__ or exc).__name__
        raise RedisUnavailable(f"cannot read the Redis URL from {ENV.REDIS_SECRET} ({cause})") from None
    return url_from_secret(value)


def url_from_secret(value: str | bytes | dict[str, Any] | None) -> str:
    """A secret's value (the URL, or JSON with a ``url`` key) -> the URL. Errors never quote the value."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ConfigError(f"{ENV.REDIS_SECRET}: the secret is neither a URL nor JSON") from None
    if isinstance(value, dict):
        value = value.get("url")
    if not isinstance(value, str) or not value.strip().startswith(URL_SCHEMES):
        raise ConfigError(f'{ENV.REDIS_SECRET}: the secret must be a Redis URL or JSON {{"url": "rediss://..."}}')
    return value.strip()


def read_past_tls_handshake(connection: redis.connection.AbstractConnection) -> None:
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
    url = url or redis_url(settings)
    if settings.redis_mode == "cluster":  # the cluster client runs on_connect itself, then this
        return RedisCluster.from_url(url, redis_connect_func=read_past_tls_handshake, **client_options())
    return redis.Redis.from_url(url, redis_connect_func=_set_up, **client_options())


def redact(url: str) -> str:
    """``url`` without its password, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))
