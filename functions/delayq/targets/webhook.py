"""``https://...`` (and, where a topic allows it, ``http://...``) targets: each attempt is a POST of
the job as JSON, signed when a signing key is set, to an address the guard (``REFUSED``,
``GLOBAL_UNICAST``) lets through, within the attempt's timeout from the lookup to the last byte.
2xx is success; what each other answer means, the headers, the signature and the guard's networks
are docs/topics.md's "webhooks" section. A receiver checks a signature with ``verify_signature``.
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import hashlib
import heapq
import hmac
import http.client
import ipaddress
import itertools
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from delayq.aws import secrets as aws_secrets
from delayq.core.errors import MAX_RETRY_AFTER_S, ConfigError, PermanentFailure, RetryAfter
from delayq.core.job import Job
from delayq.core.settings import ENV, Settings, TopicConfig
from delayq.version import VERSION

from .payload import payload

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

SIGNATURE_HEADER = "Delayq-Signature"
SIGNATURE_TOLERANCE_S = 300
SIGNING_KEY_MAX_AGE_S = 300  # a key from DELAYQ_WEBHOOK_SECRET_ID is read again after this long
ERROR_BODY_CHARS = 200  # of a failed response's body, in the error text
RETRIED_4XX = frozenset({408, 425, 429})
RETRY_AFTER_STATUSES = frozenset({429, 503})  # whose Retry-After holds the retry back

_READ_BYTES = 2048  # read of a failed response's body, enough for ERROR_BODY_CHARS characters
_REASON_CHARS = 60
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _networks(*specs: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(spec) for spec in specs)


# The guard's tables, written out rather than taken from ``ipaddress``'s ``is_global`` and
# ``is_private``, which differ between Python versions. An address passes only if it is global
# unicast (GLOBAL_UNICAST) and in none of the REFUSED networks (the IANA special-purpose address
# registries: https://www.iana.org/assignments/iana-ipv4-special-registry and iana-ipv6-special-registry).
# IPv4 embedded in IPv6 (mapped, 6to4, NAT64) is judged as that IPv4 address.
GLOBAL_UNICAST = _networks(
    "0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3",  # IPv4 unicast: 0.0.0.0 to 223.255.255.255
    "2000::/3",  # IPv6 global unicast
)  # fmt: skip
REFUSED: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(spec), reason)
    for spec, reason in (
        ("169.254.169.254/32", "an instance metadata"),
        ("fd00:ec2::254/128", "an instance metadata"),
        ("0.0.0.0/8", "unspecified ('this network')"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "carrier-grade NAT (100.64.0.0/10)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignment (192.0.0.0/24)"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),  # 255.255.255.255 included
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("100::/64", "discard-only"),
        ("2001::/23", "IETF protocol assignment (2001::/23: Teredo, ORCHID, benchmarking)"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("fc00::/7", "private (unique local)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_HOSTNAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?$")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_DELAY_SECONDS = re.compile(r"^[0-9]+$")  # RFC 9110 delay-seconds: ASCII digits, nothing else
_FAMILIES = frozenset({socket.AF_INET, socket.AF_INET6})


USER_AGENT = f"delayq/{VERSION}"  # the package's, in a Lambda bundle too (it has no package metadata)


class WebhookError(Exception):
    """A failed attempt worth retrying: a 408, 425, 429 or 5xx answer, a timeout, or a DNS, TCP or
    TLS failure."""


class WebhookRetryAfter(WebhookError, RetryAfter):
    """A 429 or 503 answer with ``Retry-After``: retried, no sooner than it asks (at most a day later)."""


class WebhookRefused(PermanentFailure):
    """An attempt that retrying cannot fix: a 3xx or other 4xx answer, or a URL or address the
    topic's config does not allow. The job goes dead at once."""


# --------------------------------------------------------------------------------- signature


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``Delayq-Signature`` header value for ``body`` sent at ``timestamp`` (unix seconds)."""
    return f"t={timestamp},v1={_digest(secret, timestamp, body)}"


def verify_signature(
    secret: str, header: str, body: bytes | str, *, tolerance_s: int = SIGNATURE_TOLERANCE_S, now: float | None = None
) -> bool:
    """Whether ``header`` (a ``Delayq-Signature`` value) signs ``body`` with ``secret``, and its
    timestamp is within ``tolerance_s`` seconds of ``now`` (default: the current time), before or
    after. ``body`` is the raw request body (a ``str`` is taken as its UTF-8 encoding). Several
    ``v1=`` entries are accepted, any one matching. Comparison is in constant time; a malformed
    header is ``False``, never an exception."""
    if not secret or not header:
        return False
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        value = value.strip()
        if not sep:
            continue
        if key == "t":
            if timestamp is not None or not _TIMESTAMP.fullmatch(value):
                return False
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value.lower())
    if timestamp is None or not candidates:
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        return False
    expected = _digest(secret, timestamp, raw).encode("ascii")
    matches = [hmac.compare_digest(expected, candidate.encode("utf-8")) for candidate in candidates]
    return any(matches)


def _digest(secret: str, timestamp: int, body: bytes) -> str:
    message = f"{timestamp}.".encode("ascii") + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


# --------------------------------------------------------------------------------- the URL


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
        if _UNPRINTABLE.search(url) or " " in url:
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


def _origin_of(location: str) -> str:
    """A redirect's ``Location`` as error texts show it: its origin, or that it was relative."""
    try:
        parts = urlsplit(location)
    except ValueError:
        return "(an unreadable Location)"
    if not parts.scheme or not parts.netloc:
        return "(a path on the same server)"
    return _clean(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}", ERROR_BODY_CHARS)


# --------------------------------------------------------------------------------- the guard


@dataclass(frozen=True)
class Address:
    """One resolved address: what ``socket.connect`` takes, and the IP it is."""

    family: socket.AddressFamily
    sockaddr: tuple[Any, ...]  # (ip, port) or (ip, port, flowinfo, scope_id)
    ip: IPAddress


def resolve(host: str, port: int) -> list[Address]:
    """The TCP addresses of ``host`` (one DNS lookup). Raises ``WebhookError`` when it has none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise WebhookError(f"cannot resolve {host}: {exc.strerror or exc}") from None
    except (OSError, UnicodeError) as exc:
        raise WebhookError(f"cannot resolve {host}: {exc}") from None
    addresses: list[Address] = []
    for family, _, _, _, sockaddr in infos:
        if family not in _FAMILIES:  # an IPv6 stack's scoped address is "fe80::1%eth0"
            continue
        address = Address(family, tuple(sockaddr), ipaddress.ip_address(str(sockaddr[0]).partition("%")[0]))
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise WebhookError(f"cannot resolve {host}: no IPv4 or IPv6 address")
    return addresses


def refusal(ip: IPAddress) -> str | None:
    """Why the guard refuses ``ip`` (``"loopback"``, ``"private"``, ...), or None for a public one."""
    embedded = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    if embedded is not None:
        reason = refusal(embedded)
        return None if reason is None else f"{reason} (embedded in IPv6)"
    for network, reason in REFUSED:
        if ip in network:
            return reason
    if not any(ip in network for network in GLOBAL_UNICAST):
        return "not global unicast"
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``ip`` stands for: IPv4-mapped (::ffff:a.b.c.d), 6to4 (2002:AABB:CCDD::),
    NAT64 (64:ff9b::a.b.c.d); None for any other."""
    if ip in _MAPPED or ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
    return None


def vet(endpoint: Endpoint, addresses: list[Address]) -> None:
    """Raises ``WebhookRefused`` if any of ``addresses`` is refused."""
    for address in addresses:
        reason = refusal(address.ip)
        if reason is not None:
            shown = "" if endpoint.host == str(address.ip) else f" resolves to {address.ip},"
            raise WebhookRefused(
                f"{endpoint.origin}: refused:{shown} {reason} address; set allow_private on the topic to allow "
                "non-public addresses"
            )


# --------------------------------------------------------------------------------- the deadline


class _Attempt:
    """One delivery's deadline. At the deadline the watchdog shuts its socket down, which ends any
    read or write blocked on it, however slowly the server trickles bytes."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = False
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._done = False

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.expired = True
            raise TimeoutError("deadline passed")
        return left

    def use(self, sock: socket.socket) -> None:
        """The socket to shut down at the deadline; its timeout becomes the time left."""
        with self._lock:
            if self.expired:
                raise TimeoutError("deadline passed")
            self._sock = sock
        sock.settimeout(self.remaining())

    def expire(self) -> None:
        """Called by the watchdog at the deadline."""
        with self._lock:
            if self._done:
                return
            self.expired = True
            if self._sock is not None:
                # The plain socket's shutdown, even on an SSLSocket: no TLS close_notify exchange.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def finish(self) -> None:
        """The delivery is over: the watchdog must no longer touch its socket (about to be closed)."""
        with self._lock:
            self._done = True
            self._sock = None


class _Watchdog:
    """One daemon thread for every delivery in the process: expires each at its deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Attempt]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def expire_at_deadline(self, attempt: _Attempt) -> None:
        """Expires ``attempt`` at its deadline unless it is done by then."""
        with self._cond:
            heapq.heappush(self._heap, (attempt.deadline, next(self._seq), attempt))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="delayq-webhook-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        attempt = heapq.heappop(self._heap)[2]
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            attempt.expire()


_WATCHDOG = _Watchdog()


# --------------------------------------------------------------------------------- delivery


def _connect(address: Address, timeout: float) -> socket.socket:
    """A TCP connection to one vetted address: no name lookup happens here."""
    sock = socket.socket(address.family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.settimeout(timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.connect(address.sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass(frozen=True)
class _Answer:
    status: int
    reason: str
    location: str | None
    body: str
    retry_after: str | None = None
    date: str | None = None


def retry_after_s(value: str | None, *, date: str | None = None, now: float | None = None) -> float | None:
    """The seconds a ``Retry-After`` header asks to wait, never negative: delay seconds, or an HTTP date
    counted from ``date`` (the answer's own ``Date`` header, so that only the server's clock counts)
    when it reads as one, else from ``now`` (default: this machine's clock). None when absent or
    unreadable."""
    if value is None:
        return None
    text = value.strip()
    if _DELAY_SECONDS.fullmatch(text):
        return float(text) if len(text) <= 15 else float(MAX_RETRY_AFTER_S)  # beyond any cap: no huge int
    until = _http_date(text)
    if until is None:
        return None
    since = _http_date(date) if date is not None else None
    return max(0.0, until - (since if since is not None else time.time() if now is None else now))


def _http_date(text: str) -> float | None:
    """An HTTP date (IMF-fixdate, or the obsolete RFC 850 and asctime forms) as epoch seconds; GMT
    when it names no zone."""
    try:
        when = email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


SigningKey = Callable[[], str | None]


def signing_key(settings: Settings) -> SigningKey:
    """The key that signs deliveries, read at each delivery: ``DELAYQ_WEBHOOK_SECRET`` as is, or the
    value of the Secrets Manager secret ``DELAYQ_WEBHOOK_SECRET_ID``, cached per container for
    ``SIGNING_KEY_MAX_AGE_S`` (a rotated key reaches every container within that time: receivers accept
    both keys meanwhile). A key that cannot be read fails the delivery (retried), never sends it unsigned."""
    secret_id, key = settings.webhook_secret_id, settings.webhook_secret
    if secret_id is None:
        return lambda: key

    def read() -> str:
        try:
            return aws_secrets.read_text(secret_id, max_age_s=SIGNING_KEY_MAX_AGE_S)
        except aws_secrets.SecretUnreadable as exc:
            raise WebhookError(f"cannot read the signing key from {ENV.WEBHOOK_SECRET_ID} ({exc})") from None

    return read


class Webhook:
    """The target: ``webhook(job, timeout_s)`` delivers one job (see the module docstring)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        allow_http: bool,
        allow_private: bool,
        key: SigningKey,
        error_detail: bool = False,
    ) -> None:
        self.endpoint = endpoint
        self.allow_http = allow_http
        self.allow_private = allow_private
        self.error_detail = error_detail
        self._key = key
        self._tls = ssl.create_default_context() if endpoint.scheme == "https" else None
        self._shown = endpoint.display if error_detail else endpoint.origin  # how error texts name the URL

    def __repr__(self) -> str:
        return f"Webhook({self.endpoint.origin!r})"

    def __call__(self, job: Job, timeout: float) -> None:
        endpoint = self.endpoint
        if endpoint.scheme == "http" and not self.allow_http:
            raise WebhookRefused(
                f"{self._shown}: refused: plain http:// is not allowed; use https://, or set allow_http on the topic"
            )
        deadline = time.monotonic() + timeout
        try:
            addresses = resolve(endpoint.host, endpoint.port)
        except WebhookError as exc:
            raise WebhookError(f"{self._shown}: {exc}") from None
        if not self.allow_private:
            vet(endpoint, addresses)
        body = payload(job).encode("utf-8")
        headers = self.headers(job, body)
        answer = self._exchange(addresses, body, headers, deadline, timeout)
        self._judge(answer)

    def headers(self, job: Job, body: bytes) -> dict[str, str]:
        """The request headers for ``job`` (``body`` is what the signature covers)."""
        headers = {
            "Host": self.endpoint.netloc,
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Delayq-Topic": job.topic,
            "Delayq-Id": job.id,
            "Delayq-Attempt": str(job.attempt),
            "Idempotency-Key": f"{job.topic}/{job.id}/{job.enqueued_at_ms}",
            "Connection": "close",
        }
        key = self._key()
        if key:
            headers[SIGNATURE_HEADER] = sign(key, body, int(time.time()))
        return headers

    def _exchange(
        self, addresses: list[Address], body: bytes, headers: dict[str, str], deadline: float, timeout: float
    ) -> _Answer:
        endpoint = self.endpoint
        attempt = _Attempt(deadline)
        _WATCHDOG.expire_at_deadline(attempt)
        sock: socket.socket | None = None
        conn: http.client.HTTPConnection | None = None
        try:
            sock, address = self._open(addresses, attempt)
            if self._tls is not None:
                try:
                    sock = self._tls.wrap_socket(sock, server_hostname=endpoint.host)
                except ssl.SSLCertVerificationError as exc:
                    reason = exc.verify_message or exc.reason or str(exc)
                    raise WebhookError(f"TLS certificate of {endpoint.host} ({address.ip}) refused: {reason}") from None
                attempt.use(sock)
            conn = http.client.HTTPConnection(endpoint.host, endpoint.port)
            conn.sock = sock
            try:
                conn.request("POST", endpoint.target, body, headers)
            except (BrokenPipeError, ConnectionResetError) as exc:
                sent: OSError | None = exc  # it may have answered early (413, say) and closed: read that
            else:
                sent = None
            try:
                response = conn.getresponse()
            except (OSError, http.client.HTTPException):
                if sent is not None:
                    raise sent from None
                raise
            return self._read(response)
        except WebhookError as exc:
            raise WebhookError(f"{self._shown}: {exc}") from None
        except (OSError, http.client.HTTPException) as exc:
            if attempt.expired or time.monotonic() >= deadline:
                raise WebhookError(f"{self._shown}: timed out after {timeout:g}s") from None
            raise WebhookError(f"{self._shown}: {_describe(exc, self.error_detail)}") from None
        finally:
            attempt.finish()
            if conn is not None:
                conn.close()
            if sock is not None:
                sock.close()

    @staticmethod
    def _open(addresses: list[Address], attempt: _Attempt) -> tuple[socket.socket, Address]:
        """A TCP connection to the first vetted address that accepts one, in resolver order."""
        failures: list[str] = []
        for address in addresses:
            try:
                sock = _connect(address, attempt.remaining())
            except TimeoutError:
                raise
            except OSError as exc:
                failures.append(f"{address.ip}: {exc.strerror or exc}")
                continue
            try:
                attempt.use(sock)
            except BaseException:
                sock.close()
                raise
            return sock, address
        raise WebhookError(f"cannot connect ({'; '.join(failures)})")

    @staticmethod
    def _read(response: http.client.HTTPResponse) -> _Answer:
        status = response.status
        location = response.getheader("Location")
        text = ""
        if not 200 <= status < 300:
            try:
                text = response.read(_READ_BYTES).decode("utf-8", errors="replace")
            except (OSError, http.client.HTTPException, ValueError):
                text = "(the body could not be read)"
        reason, shown = _clean(response.reason or "", _REASON_CHARS), _clean(text, ERROR_BODY_CHARS)
        return _Answer(status, reason, location, shown, response.getheader("Retry-After"), response.getheader("Date"))

    def _judge(self, answer: _Answer) -> None:
        status = answer.status
        if 200 <= status < 300:
            return
        said = f"{self._shown}: HTTP {status}" + (f" {answer.reason}" if answer.reason else "")
        if 300 <= status < 400:
            where = "(no Location header)"
            if answer.location:
                where = _clean(answer.location.partition("?")[0], ERROR_BODY_CHARS)
                where = where if self.error_detail else _origin_of(answer.location)
            raise WebhookRefused(f"{said}: redirected to {where}; redirects are not followed, point the topic there")
        said += f": {answer.body}" if answer.body and self.error_detail else ""
        if status in RETRIED_4XX or 500 <= status < 600:
            wait = retry_after_s(answer.retry_after, date=answer.date) if status in RETRY_AFTER_STATUSES else None
            if wait is not None:
                raise WebhookRetryAfter(f"{said} (Retry-After: {wait:g}s)", wait)
            raise WebhookError(said)
        if 400 <= status < 500:
            raise WebhookRefused(said)
        raise WebhookError(f"{said} (unexpected status)")


def _describe(exc: BaseException, detail: bool) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {exc.reason or exc}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, http.client.HTTPException):  # its text quotes the answer
        said = f": {_clean(str(exc), ERROR_BODY_CHARS)}" if detail else ""
        return f"bad response: {type(exc).__name__}{said}"
    return f"{type(exc).__name__}: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)


def _clean(text: str, limit: int) -> str:
    """``text`` on one line, without control characters, cut at ``limit`` characters."""
    flat = " ".join(_UNPRINTABLE.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def webhook_target(url: str, config: TopicConfig, settings: Settings) -> Callable[[Job, float], None]:
    """The target for a webhook URL. Raises ``ConfigError`` when the URL is not a usable http(s) URL;
    the http rule and the address guard apply at each delivery (as ``PermanentFailure``)."""
    return Webhook(
        Endpoint.parse(url),
        allow_http=config.allow_http,
        allow_private=config.allow_private,
        key=signing_key(settings),
        error_detail=config.error_detail,
    )


__all__ = [
    "SIGNATURE_HEADER",
    "USER_AGENT",
    "Endpoint",
    "Webhook",
    "WebhookError",
    "WebhookRefused",
    "refusal",
    "resolve",
    "sign",
    "signing_key",
    "verify_signature",
    "webhook_target",
]
