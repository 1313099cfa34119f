"""A webhook URL, read and checked once, when its target is made."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from delayq.core.errors import ConfigError

_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_HOSTNAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?$")
UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Endpoint:
    """A webhook URL, checked once when the target is made."""

    scheme: str  # "https" or "http"
    host: str  # an ASCII (IDNA) host name, or an IP address without brackets
    port: int
    target: str  # path and query: the request line's target, non-ASCII characters percent-encoded

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """Raises ``ConfigError`` for anything but an http(s) URL with a host."""
        if UNPRINTABLE.search(url) or " " in url:
            raise ConfigError(f"target {_redact(url)!r}: a URL must not contain spaces or control characters")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"target {_redact(url)!r}: not a valid URL ({exc})") from None
        scheme = parts.scheme.lower()
        if scheme not in ("https", "http"):
            raise ConfigError(f"target {_redact(url)!r}: a webhook URL starts with https:// (or http://)")
        if parts.username is not None or parts.password is not None:
            raise ConfigError(
                f"target {_redact(url)!r}: credentials in the URL are not supported (the webhook secret signs requests)"
            )
        host = parts.hostname or ""
        if not host:
            raise ConfigError(f"target {_redact(url)!r}: the URL has no host")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            try:
                host = host.encode("idna").decode("ascii")
            except UnicodeError:
                raise ConfigError(f"target {_redact(url)!r}: {host!r} is not a valid host name") from None
            if not _HOSTNAME.fullmatch(host.lower()):
                raise ConfigError(f"target {_redact(url)!r}: {host!r} is not a valid host name") from None
        if port == 0:
            raise ConfigError(f"target {_redact(url)!r}: port 0 is not a valid port")
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        target = _NON_ASCII.sub(lambda run: quote(run.group(), safe=""), target)  # as UTF-8, as browsers send it
        return cls(scheme=scheme, host=host, port=port or cls.default_port_of(scheme), target=target)

    @staticmethod
    def default_port_of(scheme: str) -> int:
        return 443 if scheme == "https" else 80

    @property
    def netloc(self) -> str:
        """``host[:port]`` as in the ``Host`` header: brackets around IPv6, the port when not the
        scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == self.default_port_of(self.scheme) else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        """``scheme://host[:port]``: how error texts name the URL unless the topic sets ``error_detail``."""
        return f"{self.scheme}://{self.netloc}"

    @property
    def display(self) -> str:
        """The URL with its path, without the query (which may hold a token): with ``error_detail``."""
        return f"{self.origin}{self.target.partition('?')[0]}"


def _redact(url: str) -> str:
    """``url`` as config errors show it: its scheme and host, without credentials, path or query
    (a webhook URL's path may be its only secret, as in Slack's)."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}" if parts.scheme else "(not a URL)"
    except ValueError:
        return "(not a URL)"
