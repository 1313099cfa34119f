"""The webhook target: one attempt is a POST of the job to a vetted address of its URL, signed when a
key is set, within the attempt's deadline from the lookup to the last byte; its answer judged (2xx:
success; what the others mean: docs/topics.md, "webhooks")."""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import http.client
import re
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from delayq.core.errors import MAX_RETRY_AFTER_S
from delayq.core.job import RESULT_MAX_BYTES, Job
from delayq.core.settings import Settings, TopicConfig
from delayq.targets.payload import answer_of, payload
from delayq.version import VERSION

from .deadline import WATCHDOG, Attempt
from .endpoint import UNPRINTABLE, Endpoint
from .errors import WebhookError, WebhookRefused, WebhookRetryAfter
from .guard import Address, resolve, vet
from .signing import SIGNATURE_HEADER, SigningKey, sign, signing_key

ERROR_BODY_CHARS = 200  # of a failed response's body, in the error text
RETRIED_4XX = frozenset({408, 425, 429})
RETRY_AFTER_STATUSES = frozenset({429, 503})  # whose Retry-After holds the retry back
USER_AGENT = f"delayq/{VERSION}"  # the package's, in a Lambda bundle too (it has no package metadata)

_READ_BYTES = 2048  # read of a failed response's body, enough for ERROR_BODY_CHARS characters
_REASON_CHARS = 60
_DELAY_SECONDS = re.compile(r"^[0-9]+$")  # RFC 9110 delay-seconds: ASCII digits, nothing else


def _origin_of(location: str) -> str:
    """A redirect's ``Location`` as error texts show it: its origin, or that it was relative."""
    try:
        parts = urlsplit(location)
    except ValueError:
        return "(an unreadable Location)"
    if not parts.scheme or not parts.netloc:
        return "(a path on the same server)"
    return _clean(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}", ERROR_BODY_CHARS)


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
    result: Any = None  # a 2xx answer's body (``answer_of``), read up to just past what a result keeps


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


class Webhook:
    """The target: ``webhook(job, timeout_s)`` delivers one job."""

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

    def __call__(self, job: Job, timeout: float) -> Any:
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
        return answer.result

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
        attempt = Attempt(deadline)
        WATCHDOG.expire_at_deadline(attempt)
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
    def _open(addresses: list[Address], attempt: Attempt) -> tuple[socket.socket, Address]:
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
        text, result = "", None
        if 200 <= status < 300:
            # It answered 2xx: the job succeeded, with a result if its body can be read. One byte past
            # what a result keeps: a longer answer is kept cut, and marked so.
            with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
                result = answer_of(response.read(RESULT_MAX_BYTES + 1))
        else:
            try:
                text = response.read(_READ_BYTES).decode("utf-8", errors="replace")
            except (OSError, http.client.HTTPException, ValueError):
                text = "(the body could not be read)"
        reason, shown = _clean(response.reason or "", _REASON_CHARS), _clean(text, ERROR_BODY_CHARS)
        retry_after, date = response.getheader("Retry-After"), response.getheader("Date")
        return _Answer(status, reason, location, shown, retry_after, date, result)

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
    flat = " ".join(UNPRINTABLE.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def webhook_target(url: str, config: TopicConfig, settings: Settings) -> Callable[[Job, float], Any]:
    """The target for a webhook URL. Raises ``ConfigError`` when the URL is not a usable http(s) URL;
    the http rule and the address guard apply at each delivery (as ``PermanentFailure``)."""
    return Webhook(
        Endpoint.parse(url),
        allow_http=config.allow_http,
        allow_private=config.allow_private,
        key=signing_key(settings),
        error_detail=config.error_detail,
    )
