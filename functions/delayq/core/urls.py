"""Redis URLs, read by delayq before redis-py sees them, and shown without their secrets.

redis-py reads a URL with ``urllib.parse``, which ends the host at the first ``/``, ``?`` or ``#``:
a password holding one of them (as generated passwords often do) loses its tail, and the rest of the
URL fails in ways whose messages quote a piece of the password (``Port could not be cast to integer
value as 'S3c'``). So delayq reads the URL itself (``parse_redis_url``), refuses what it cannot read
with a ``ConfigError`` that names the setting and the problem but never quotes the URL, and hands
redis-py a URL of its own making (``RedisURL.url``), every part percent-encoded.

The forms read:

    redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?OPTION=VALUE&...]
    rediss://...                                     the same, over TLS
    unix://[[USER]:PASSWORD@]/PATH/TO/SOCKET[?OPTION=VALUE&...]

- USER and PASSWORD are percent-decoded, as in any URL. A password that holds ``/``, ``?``, ``#`` or
  ``@`` unescaped is still read when the URL reads only one way (the address after the last suitable
  ``@`` is a valid one, and no other reading is); it is then taken literally, undecoded, since it
  cannot have been encoded. A URL that reads two ways is refused: percent-encode the password.
- ``?password=`` and ``?username=`` are read too (the ones before the ``@`` win); values are
  percent-decoded, a ``+`` stays a ``+``; ``#`` is a character, never a fragment.
- Only the options in ``OPTIONS`` are accepted: the ones that would make a connection send what
  proxies refuse or send a command twice (``protocol``, ``client_name``, ``retry_on_timeout`` ...) are
  not.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from urllib.parse import quote, unquote

from .errors import ConfigError

SCHEMES = ("redis", "rediss", "unix")
PERCENT_ENCODE = "percent-encode the password (Python: urllib.parse.quote(password, safe=''))"
SECRET_OPTIONS = frozenset({"password", "ssl_password"})
_CREDENTIAL_OPTIONS = frozenset({"username", "password"})
_HOSTNAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TRUE, _FALSE = frozenset({"1", "true", "yes", "y", "on"}), frozenset({"0", "false", "no", "n", "off"})


def _integer(value: str) -> bool:
    return value.isdigit()


def _number(value: str) -> bool:
    try:
        return float(value) >= 0
    except ValueError:
        return False


def _boolean(value: str) -> bool:
    return value.lower() in _TRUE | _FALSE


def _text(value: str) -> bool:
    return True


# Option name -> whether a value is acceptable. Not listed, on purpose: protocol (RESP3 sends HELLO),
# client_name and lib_name (CLIENT SETNAME, CLIENT SETINFO), retry_on_timeout and retry_on_error
# (a command sent twice).
OPTIONS: dict[str, Callable[[str], bool]] = {
    "db": _integer,
    "username": _text,
    "password": _text,
    "socket_timeout": _number,
    "socket_connect_timeout": _number,
    "socket_keepalive": _boolean,
    "health_check_interval": _integer,
    "max_connections": _integer,
    "ssl_cert_reqs": lambda value: value.lower() in ("none", "optional", "required"),
    "ssl_check_hostname": _boolean,
    "ssl_ca_certs": _text,
    "ssl_ca_path": _text,
    "ssl_certfile": _text,
    "ssl_keyfile": _text,
    "ssl_password": _text,
    "ssl_ciphers": _text,
}


class _Unreadable(Exception):
    """One reading of a URL failed; the text says why, without quoting the URL."""


@dataclass(frozen=True)
class RedisURL:
    """A Redis URL, read. ``repr`` and ``redacted`` never show the password."""

    scheme: str
    host: str = ""  # empty for unix://
    port: int | None = None
    path: str = ""  # the socket of unix://
    db: int | None = None
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # decoded, without credentials

    @property
    def url(self) -> str:
        """The URL for redis-py: credentials, path and options percent-encoded."""
        return self._format(self._userinfo(quote), secrets_shown=True)

    @property
    def address(self) -> str:
        """The URL without username and password (``?ssl_password=`` stays: it is not Redis' AUTH)."""
        return self._format("", secrets_shown=True)

    @property
    def redacted(self) -> str:
        """The URL for logs and errors: the password, and any other secret option, as ``***``."""
        userinfo = ""
        if self.password:
            userinfo = f"{quote(self.username, safe='')}:***@" if self.username else ":***@"
        return self._format(userinfo, secrets_shown=False)

    @property
    def credentials(self) -> tuple[str] | tuple[str, str] | None:
        """AUTH's arguments: ``(password,)`` or ``(username, password)``; None without a password."""
        if not self.password:
            return None
        return (self.username, self.password) if self.username else (self.password,)

    def with_credentials(self, username: str | None, password: str | None) -> RedisURL:
        return replace(self, username=username or None, password=password or None)

    def _userinfo(self, encode: Callable[..., str]) -> str:
        if not self.password:
            return ""
        return f"{encode(self.username or '', safe='')}:{encode(self.password, safe='')}@"

    def _format(self, userinfo: str, *, secrets_shown: bool) -> str:
        options = self.options
        if self.scheme == "unix":
            where = quote(self.path, safe="/")
            options = ((("db", str(self.db)),) if self.db is not None else ()) + options
        else:
            where = f"[{self.host}]" if ":" in self.host else self.host
            where += f":{self.port}" if self.port is not None else ""
            where += f"/{self.db}" if self.db is not None else ""
        pairs = [
            f"{name}={quote(value, safe='/:') if secrets_shown or name not in SECRET_OPTIONS else '***'}"
            for name, value in options
        ]
        return f"{self.scheme}://{userinfo}{where}" + ("?" + "&".join(pairs) if pairs else "")


def parse_redis_url(text: str, source: str) -> RedisURL:
    """``text`` read as a Redis URL; ``ConfigError`` naming ``source`` (the setting it came from)
    and the problem, never quoting the URL, when it cannot be read one way only."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{source} is empty; expected a redis://, rediss:// or unix:// URL")
    text = text.strip()
    if _CONTROL.search(text):
        raise ConfigError(f"{source} holds a control character (a line break?)")
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise ConfigError(f"{source} must start with redis://, rediss:// or unix://")
    if scheme == "unix":
        return _read(scheme, rest, source, _unix_tail, ends_authority="/?")
    return _read(scheme, rest, source, _tcp_tail, ends_authority="/?")


Tail = Callable[[str, str], RedisURL]


def _read(scheme: str, rest: str, source: str, tail: Tail, *, ends_authority: str) -> RedisURL:
    """The one reading of ``rest`` (the URL after ``scheme://``): the usual one, where the user part
    ends at the last ``@`` before the first ``/`` or ``?``; else the single reading where it ends at a
    later ``@``, the password then holding a ``/``, ``?`` or ``#``."""
    end = next((i for i, char in enumerate(rest) if char in ends_authority), len(rest))
    at = rest.rfind("@", 0, end)
    try:
        return _reading(scheme, rest, at, tail, decode=True)
    except _Unreadable as exc:
        usual = str(exc)
    readings: list[RedisURL] = []
    for later in (i for i, char in enumerate(rest) if char == "@" and i > end):
        try:
            readings.append(_reading(scheme, rest, later, tail, decode=False))
        except _Unreadable:
            continue
    if len(readings) == 1:
        return readings[0]
    if readings:
        raise ConfigError(f"{source}: the URL reads more than one way; {PERCENT_ENCODE}")
    hint = f"; if the password holds / ? # @ or %, {PERCENT_ENCODE}" if "@" in rest or rest.startswith(":") else ""
    raise ConfigError(f"{source}: {usual}{hint}")


def _reading(scheme: str, rest: str, at: int, tail: Tail, *, decode: bool) -> RedisURL:
    """The URL with its user part ending at ``rest[at]`` (none when ``at`` is -1)."""
    url = tail(scheme, rest[at + 1 :])
    if at < 0:
        return url
    username, colon, password = rest[:at].partition(":")
    if "@" in username:
        raise _Unreadable("the user name holds an '@'")
    if not colon:  # a user name alone: no AUTH, as redis-py does; a raw password has its colon
        if not decode:
            raise _Unreadable("the part before the host has no ':' before the password")
        return url
    if decode:
        username, password = unquote(username), unquote(password)
    return url.with_credentials(username or url.username, password or url.password)


def _tcp_tail(scheme: str, tail: str) -> RedisURL:
    """``HOST[:PORT][/DB][?OPTIONS]``."""
    end = next((i for i, char in enumerate(tail) if char in "/?"), len(tail))
    host, port = _host_port(tail[:end])
    path, _, query = tail[end:].partition("?")
    if path not in ("", "/") and not (path[0] == "/" and path[1:].isdigit()):
        raise _Unreadable("the path after the host must be the database number, such as /0")
    db = int(path[1:]) if path[1:] else None
    return _with_options(RedisURL(scheme=scheme, host=host, port=port, db=db), query)


def _unix_tail(scheme: str, tail: str) -> RedisURL:
    """``/PATH[?OPTIONS]``."""
    path, _, query = tail.partition("?")
    if not path.startswith("/") or path == "/":
        raise _Unreadable("a unix:// URL names the socket by its absolute path, such as unix:///run/redis.sock")
    return _with_options(RedisURL(scheme=scheme, path=unquote(path)), query)


def _host_port(authority: str) -> tuple[str, int | None]:
    if not authority:
        raise _Unreadable("the URL has no host")
    if authority.startswith("["):
        host, bracket, after = authority[1:].partition("]")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _Unreadable("the host in brackets is not an IPv6 address") from None
        if not bracket or (after and not after.startswith(":")):
            raise _Unreadable("the host in brackets is not an IPv6 address")
        port = after[1:] if after else None
    else:
        host, colon, port_text = authority.partition(":")
        port = port_text if colon else None
        if not _HOSTNAME.fullmatch(host):
            raise _Unreadable("the host is not a valid host name or IP address")
    if port is None:
        return host, None
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _Unreadable("the port after the host is not a number between 1 and 65535")
    return host, int(port)


def _with_options(url: RedisURL, query: str) -> RedisURL:
    """``url`` with the options of ``query``; credentials among them go to their own fields."""
    options: dict[str, str] = {}
    for n, part in enumerate((part for part in query.split("&") if part), 1):
        name, equals, raw = part.partition("=")
        if not equals or name not in OPTIONS:
            raise _Unreadable(
                f"option {n} of the query is not one delayq accepts ({', '.join(sorted(OPTIONS))}); "
                "a value holding '&' must be percent-encoded (%26)"
            )
        value = unquote(raw)
        if not OPTIONS[name](value):
            raise _Unreadable(f"the value of the option {name!r} is not valid")
        options[name] = value
    db = int(options.pop("db")) if "db" in options else url.db
    username, password = options.pop("username", None), options.pop("password", None)
    return replace(url, db=db, username=username, password=password or None, options=tuple(options.items()))


__all__ = ["OPTIONS", "SCHEMES", "RedisURL", "parse_redis_url"]
