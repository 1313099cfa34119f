"""Redis URLs, whatever their password holds: read by delayq before redis-py sees them, refused with
an error that names DELAYQ_REDIS_URL and the problem but never a piece of the password, and shown in
logs without it.

Issue 15: a password with an unescaped ``/``, ``#`` or ``?`` (common in generated passwords) leaked
its first part through redis-py's ``ValueError: Port could not be cast to integer value as 'S3c'`` at
every entry point, and ``redact()`` showed ``?password=`` whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import redis

from delayq import ConfigError, Queue, Settings
from delayq.core.urls import parse_redis_url
from delayq.store.connection import connect, redact, split_credentials

from support.servers import RedisServer

# A password as a generator makes them: every character a URL gives a meaning to.
RAW = "S3c/r#t?x@y:z%41+&="
USER = "app"


@pytest.fixture(scope="module")
def locked() -> Iterator[RedisServer]:
    """A private redis-server: the default user's password and the ACL user ``app``'s are ``RAW``."""
    server = RedisServer("--requirepass", RAW)
    try:
        server.start(ready=lambda: server.client(password=RAW).ping())
        with server.client(password=RAW) as admin:
            admin.acl_setuser(USER, enabled=True, passwords=[f"+{RAW}"], keys=["*"], commands=["+@all"])
        yield server
    finally:
        server.close()


def _pieces(secret: str) -> list[str]:
    """The parts of ``secret`` that a URL parser cuts it into: none may show."""
    pieces = {secret}
    for separator in "/#?@:&=%+":
        pieces.update(part for part in secret.split(separator) if len(part) >= 3)
    return sorted(pieces)


def _shows_secret(text: str, secret: str = RAW) -> list[str]:
    return [piece for piece in _pieces(secret) if piece in text]


# ------------------------------------------------------------------------------------------ readings


@pytest.mark.parametrize(
    ("url", "credentials", "where"),
    [
        (f"redis://:{RAW}@h:6379/0", (RAW,), ("h", 6379, 0)),  # raw: reads one way only
        (f"redis://{USER}:{RAW}@h:6379/3", (USER, RAW), ("h", 6379, 3)),
        (f"rediss://{USER}:{RAW}@cache.example:6380/0", (USER, RAW), ("cache.example", 6380, 0)),
        (f"redis://:{quote(RAW, safe='')}@h:6379/0", (RAW,), ("h", 6379, 0)),  # percent-encoded
        (f"redis://h:6379/0?password={quote(RAW, safe='')}", (RAW,), ("h", 6379, 0)),
        (f"redis://h/0?username={USER}&password={quote(RAW, safe='')}", (USER, RAW), ("h", None, 0)),
        ("redis://:S3c/r#t?x@host:6379/0", ("S3c/r#t?x",), ("host", 6379, 0)),  # the issue's own
        ("redis://:p@ss@h:1/0", ("p@ss",), ("h", 1, 0)),  # '@' in the password, as urllib reads it
        ("redis://h:1/0?password=p@ss+1", ("p@ss+1",), ("h", 1, 0)),  # '+' stays a '+'
        ("redis://[::1]:6380/1", None, ("::1", 6380, 1)),
        ("redis://app@h:1/0", None, ("h", 1, 0)),  # a user name alone: no AUTH, as redis-py does
    ],
)
def test_urls_are_read_whatever_the_password_holds(url: str, credentials: Any, where: Any) -> None:
    parsed = parse_redis_url(url, "DELAYQ_REDIS_URL")
    assert parsed.credentials == credentials
    assert (parsed.host, parsed.port, parsed.db) == where
    for shown in (parsed.redacted, repr(parsed), redact(url)):
        assert _shows_secret(shown) == [], shown
        assert "p@ss" not in shown
    # What redis-py gets reads back the same with its own parser.
    options = redis.connection.parse_url(parsed.url)
    assert options.get("password") == (credentials[-1] if credentials else None)
    assert options.get("host") == where[0]


@pytest.mark.parametrize(
    ("url", "path", "credentials", "db"),
    [
        (f"unix://:{RAW}@/run/redis.sock?db=2", "/run/redis.sock", (RAW,), 2),
        (f"unix:///run/redis.sock?password={quote(RAW, safe='')}", "/run/redis.sock", (RAW,), None),
        ("unix:///run/redis.sock?password=S3c#r?t", "/run/redis.sock", ("S3c#r?t",), None),  # '#' is no fragment
        ("unix:///tmp/a%20b.sock", "/tmp/a b.sock", None, None),
    ],
)
def test_unix_socket_urls(url: str, path: str, credentials: Any, db: int | None) -> None:
    parsed = parse_redis_url(url, "DELAYQ_REDIS_URL")
    assert (parsed.path, parsed.credentials, parsed.db) == (path, credentials, db)
    assert _shows_secret(parsed.redacted) == []
    assert redis.connection.parse_url(parsed.url)["path"] == path


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://:S3c/r@host/0?password=x@y", "reads more than one way"),
        ("redis://:abc/def", "percent-encode the password"),
        ("redis://:S3cr3tpw@host:6379/0/extra", "database number"),
        ("redis://host:6379/0?password=S3c&r3t", "option 2 of the query"),
        ("redis://host:65536/0", "port"),
        ("redis://:S3cr3tpw@/0", "no host"),
        ("redis://host/0?protocol=3", "option 1 of the query"),  # RESP3 would send HELLO
        ("redis://host/0?client_name=x", "option 1 of the query"),  # CLIENT SETNAME
        ("redis://host/0?retry_on_timeout=yes", "option 1 of the query"),  # a command sent twice
        ("redis://host/0?db=S3cr3tpw", "the option 'db'"),
        ("unix://:S3cr3tpw@relative.sock", "absolute path"),
        ("http://:S3cr3tpw@host/", "must start with redis://"),
        ("redis://:S3cr3tpw@host/0\n", "redis://"),  # the newline is stripped; the URL reads
        ("redis://:S3cr3tpw@ho\nst/0", "control character"),
        ("", "is empty"),
    ],
)
def test_what_cannot_be_read_is_refused_naming_the_setting_and_the_problem(url: str, problem: str) -> None:
    if url.endswith("\n"):
        assert parse_redis_url(url, "DELAYQ_REDIS_URL").credentials == ("S3cr3tpw",)
        return
    with pytest.raises(ConfigError) as caught:
        parse_redis_url(url, "DELAYQ_REDIS_URL")
    message = caught.value.message
    assert message.startswith("DELAYQ_REDIS_URL")
    assert problem in message
    for secret in ("S3c", "r@host", "x@y", "abc", "def", "S3cr3tpw", "r3t"):
        assert secret not in message, message
    assert redact(url).endswith("(a URL that cannot be read)") or url == ""


def test_the_issue_s_url_before_and_after() -> None:
    """Before: ``ValueError: Port could not be cast to integer value as 'S3c'`` from redis-py, at
    Queue.from_env() as at every handler. Now it is read, and its password sent as written."""
    url = "redis://:S3c/r#t?x@127.0.0.1:6379/0"
    with pytest.raises(ValueError, match="S3c"):
        redis.connection.parse_url(url)  # what redis-py alone does with it
    queue = Queue.from_env(redis_url=url)
    assert split_credentials(queue.settings.redis_url)[1] == ("S3c/r#t?x",)
    assert redact(url) == "redis://:***@127.0.0.1:6379/0"


def test_redact_hides_query_passwords_and_ssl_key_passwords() -> None:
    """Before: ``redact('redis://h:6379/0?password=S3cretQ')`` returned it whole."""
    assert redact("redis://127.0.0.1:6379/0?password=S3cretQ") == "redis://:***@127.0.0.1:6379/0"
    assert redact("rediss://u:S3cretQ@h:6380/0?ssl_password=K3yPass&ssl_cert_reqs=required") == (
        "rediss://u:***@h:6380/0?ssl_password=***&ssl_cert_reqs=required"
    )
    assert redact("unix:///run/r.sock?password=S3cretQ&db=1") == "unix://:***@/run/r.sock?db=1"


def test_settings_refuse_an_unreadable_url_at_once() -> None:
    """Every entry point reads ``Settings``: the URL is refused there, before any connection."""
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"DELAYQ_REDIS_URL": "redis://:S3c/r@h/0?password=x@y"})
    assert "DELAYQ_REDIS_URL" in caught.value.message
    assert "S3c" not in caught.value.message
    with pytest.raises(ConfigError):
        Queue(redis_url="redis://:pw@host:S3cret/0")
    assert "S3cret" not in repr(Settings(redis_url="redis://:S3cret@h/0"))


# ------------------------------------------------------------------------------ against a server


@pytest.mark.parametrize(
    "userinfo",
    [f":{RAW}", f"{USER}:{RAW}", f":{quote(RAW, safe='')}", f"{USER}:{quote(RAW, safe='')}"],
    ids=["raw", "user-raw", "encoded", "user-encoded"],
)
def test_a_password_with_every_url_character_authenticates(locked: RedisServer, userinfo: str) -> None:
    client = connect(Settings(redis_url=f"redis://{userinfo}@127.0.0.1:{locked.port}/0"))
    try:
        assert client.ping()
        assert client.acl_whoami() == (USER if userinfo.startswith(USER) else "default")
    finally:
        client.close()


def test_a_query_password_authenticates(locked: RedisServer) -> None:
    client = connect(Settings(redis_url=f"redis://127.0.0.1:{locked.port}/0?password={quote(RAW, safe='')}"))
    try:
        assert client.ping()
    finally:
        client.close()
