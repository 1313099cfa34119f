"""The https:// webhook target against real local HTTP and HTTPS servers: the request and its
signature, the outcome rule, TLS (SNI and host name checks while connecting to the vetted IP), the
address guard (which must refuse before any connection), the deadline, and delivery by the consumer.

Certificates are made here with ``cryptography`` (a CA, and leaves for ``localhost`` and for another
name) and trusted through ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from moto import mock_aws

from delayq import Job, PermanentFailure, Queue, RetryAfter, Settings, TopicConfig
from delayq.core.errors import ConfigError
from delayq.core.job import RESULT_MAX_BYTES, Meta, decode_result, encode_result
from delayq.core.settings import WEBHOOK_MIN_BACKOFF_S
from delayq.loops import workers as workers_module
from delayq.loops.consumer import Consumer
from delayq.targets import payload, resolve_target, webhook
from delayq.targets.webhook import (
    USER_AGENT,
    Webhook,
    WebhookError,
    WebhookRefused,
    WebhookRetryAfter,
    delivery,
    refusal,
    retry_after_s,
    sign,
    verify_signature,
    webhook_target,
)

from support.loops import running, state, wait_until
from support.scripts import job_meta

SECRET = "whsec-test-5e3f1a"
MakeQueue = Callable[..., Queue]


# --------------------------------------------------------------------------------- local servers


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)


class _Handler(BaseHTTPRequestHandler):
    """Answers by path: ``/status/<code>``, ``/redirect``, ``/hold`` (never: it holds the request
    until the server stops), ``/drip``, ``/big``, ``/json`` (200 and JSON), ``/huge`` (200 and 10
    MB), ``/busy/<code>/<seconds>`` (the code with ``Retry-After: <seconds>``),
    ``/busy-until/<code>/<seconds>`` (``Retry-After`` an HTTP date that many seconds after the
    answer's ``Date``, which is 2020-01-01); anything else is 200."""

    server: LocalServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(5)
            self.request.do_handshake()
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.record(Received(self.command, self.path, dict(self.headers.items()), body))
        route = self.path.partition("?")[0].strip("/").split("/")
        if route[0] == "status":
            self._answer(int(route[1]), f"status {route[1]} body".encode())
        elif route[0] == "redirect":
            self._answer(301, b"moved", location=self.server.url("/status/200?token=hush-hush"))
        elif route[0] == "hold":
            self.server.stopping.wait()
        elif route[0] == "drip":  # a byte every 50 ms until the server stops: each read is quick, the whole never ends
            for byte in itertools.chain(b"HTTP/1.1 200 OK\r\nX-Slow: ", itertools.repeat(ord("a"))):
                if self.server.stopping.wait(0.05):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        elif route[0] == "big":
            self._answer(500, b"0123456789" * 1000)
        elif route[0] == "json":
            self._answer(200, b'{"accepted": true, "ticket": 7}')
        elif route[0] == "huge":  # 10 MB of answer to a success
            self._answer(200, b"0123456789" * 1_048_576)
        elif route[0] == "busy":
            self._answer(int(route[1]), b"busy", headers={"Retry-After": route[2]})
        elif route[0] == "busy-until":
            date = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
            until = date + dt.timedelta(seconds=int(route[2]))
            headers = {"Date": format_datetime(date, usegmt=True), "Retry-After": format_datetime(until, usegmt=True)}
            self._answer(int(route[1]), b"busy", headers=headers)
        else:
            self._answer(200, b"ok")

    def _answer(
        self, status: int, body: bytes, *, location: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response_only(status)  # no Date of its own: a route may send one
        if location is not None:
            self.send_header("Location", location)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class LocalServer(ThreadingHTTPServer):
    """An HTTP (or, given a context, HTTPS) server on 127.0.0.1 that records what it receives."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.tls = tls
        self.host = host
        self.received: list[Received] = []
        self.server_names: list[str | None] = []  # SNI sent by each TLS client
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        if tls is not None:
            tls.sni_callback = self._sni
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def _sni(self, sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        with self._lock:
            self.server_names.append(name)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.tls is not None:  # the handshake happens in the handler's thread (setup)
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up (timeouts, refused certificates) are expected here

    def record(self, received: Received) -> None:
        with self._lock:
            self.received.append(received)

    def requests(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def url(self, path: str = "/hook") -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.host}:{self.port}{path}"

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
        self._thread.join(5)


@pytest.fixture
def server() -> Iterator[LocalServer]:
    httpd = LocalServer()
    yield httpd
    httpd.stop()


# --------------------------------------------------------------------------------- certificates


@dataclass
class Pki:
    ca: Path  # the CA certificate, to trust through SSL_CERT_FILE
    other_ca: Path  # a CA that signed nothing used here
    chains: dict[str, tuple[Path, Path]] = field(default_factory=dict)  # host name -> (cert, key)

    def context(self, hostname: str) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert, key = self.chains[hostname]
        context.load_cert_chain(cert, key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, hostname: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hostname))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca_key, ca = _ca("delayq test CA")
    _, other = _ca("delayq other CA")
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "other-ca.pem").write_bytes(other.public_bytes(serialization.Encoding.PEM))
    made = Pki(folder / "ca.pem", folder / "other-ca.pem")
    for hostname in ("localhost", "other.example"):
        cert, key = _leaf(ca_key, ca, hostname)
        (folder / f"{hostname}.pem").write_bytes(cert)
        (folder / f"{hostname}.key").write_bytes(key)
        made.chains[hostname] = (folder / f"{hostname}.pem", folder / f"{hostname}.key")
    return made


@pytest.fixture
def https_server(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalServer]:
    """An HTTPS server on 127.0.0.1 with a certificate for ``localhost``, trusted via SSL_CERT_FILE."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    httpd = LocalServer(pki.context("localhost"), host="localhost")
    yield httpd
    httpd.stop()


# --------------------------------------------------------------------------------- helpers


def make_job(attempt: int = 1, *, job_id: str = "job-1", enqueued_at_ms: int = 1_760_000_000_000) -> Job:
    return Job(
        topic="hooks",
        id=job_id,
        body={"order": 1042, "note": "héllo ✓"},
        attempt=attempt,
        run_at_ms=enqueued_at_ms + 5000,
        enqueued_at_ms=enqueued_at_ms,
    )


def target(
    url: str,
    *,
    allow_http: bool = True,
    allow_private: bool = True,
    secret: str | None = None,
    error_detail: bool = False,
) -> Callable[[Job, float], None]:
    config = TopicConfig(target=url, allow_http=allow_http, allow_private=allow_private, error_detail=error_detail)
    return webhook_target(url, config, Settings(webhook_secret=secret))


def failure(deliver: Callable[[Job, float], None], timeout: float = 5.0, job: Job | None = None) -> Exception:
    """The exception one delivery raises (the test fails if it succeeds)."""
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the kind is asserted by each test
        deliver(job or make_job(), timeout)
    assert isinstance(caught.value, Exception)
    return caught.value


def retryable(exc: Exception) -> bool:
    return isinstance(exc, WebhookError) and not isinstance(exc, PermanentFailure)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def no_connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Fails any connection attempt (recorded, for the test to assert none happened)."""
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise AssertionError(f"a connection was attempted: {args}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(delivery, "_connect", refuse)
    return attempts


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[list[str]]]) -> list[str]:
    """``socket.getaddrinfo`` answers ``answers[host]`` (one list of IPs per lookup, the last repeated);
    other hosts resolve for real. Returns the hosts looked up, in order."""
    real = socket.getaddrinfo
    lookups: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in answers:
            return real(host, port, *args, **kwargs)
        lookups.append(host)
        ips = answers[host][min(len(lookups), len(answers[host])) - 1]
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (ip, port, 0, 0))
            if ":" in ip
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))
            for ip in ips
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups


# --------------------------------------------------------------------------------- the request


def test_post_carries_the_payload_headers_and_a_signature(server: LocalServer) -> None:
    job = make_job(attempt=2)
    before = int(time.time())
    target(server.url("/hook?source=delayq"), secret=SECRET)(job, 5)

    [request] = server.requests()
    assert request.method == "POST"
    assert request.path == "/hook?source=delayq"
    assert request.body == payload(job).encode("utf-8")
    assert json.loads(request.body) == job.to_dict()
    headers = request.headers
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"] == USER_AGENT
    assert USER_AGENT.startswith("delayq/")
    assert headers["Host"] == f"127.0.0.1:{server.port}"
    assert headers["Content-Length"] == str(len(request.body))
    assert headers["Delayq-Topic"] == "hooks"
    assert headers["Delayq-Id"] == "job-1"
    assert headers["Delayq-Attempt"] == "2"
    assert headers["Idempotency-Key"] == f"hooks/job-1/{job.enqueued_at_ms}"

    signature = headers["Delayq-Signature"]
    t = int(signature.split(",")[0].removeprefix("t="))
    assert before <= t <= time.time() + 1
    assert verify_signature(SECRET, signature, request.body)
    assert verify_signature(SECRET, signature, request.body.decode("utf-8"))
    assert not verify_signature("another-secret", signature, request.body)
    assert not verify_signature(SECRET, signature, request.body.replace(b"1042", b"1043"))
    assert not verify_signature(SECRET, signature, request.body, now=t + 301)
    assert verify_signature(SECRET, signature, request.body, now=t + 299)
    assert SECRET not in json.dumps(headers)


def test_idempotency_key_is_the_same_for_every_attempt_of_a_job(server: LocalServer) -> None:
    deliver = target(server.url())
    deliver(make_job(attempt=1), 5)
    deliver(make_job(attempt=2), 5)
    deliver(make_job(attempt=1, enqueued_at_ms=1_760_000_099_000), 5)  # a new job reusing the id
    keys = [r.headers["Idempotency-Key"] for r in server.requests()]
    attempts = [r.headers["Delayq-Attempt"] for r in server.requests()]
    assert keys[0] == keys[1] != keys[2]
    assert attempts == ["1", "2", "1"]


def test_no_signature_without_a_secret(server: LocalServer) -> None:
    target(server.url())(make_job(), 5)
    [request] = server.requests()
    assert "Delayq-Signature" not in request.headers
    assert request.headers["Delayq-Id"] == "job-1"


# --------------------------------------------------------------------------------- verify_signature


def test_verify_signature_checks_secret_body_and_age() -> None:
    body = b'{"id":"a"}'
    header = sign(SECRET, body, 1_700_000_000)
    assert header.startswith("t=1700000000,v1=")
    assert verify_signature(SECRET, header, body, now=1_700_000_000)
    assert verify_signature(SECRET, header, body.decode(), now=1_700_000_300)
    assert not verify_signature(SECRET, header, body, now=1_700_000_301)  # stale
    assert not verify_signature(SECRET, header, body, now=1_699_999_000)  # from the future
    assert verify_signature(SECRET, header, body, now=1_700_000_900, tolerance_s=1000)
    assert not verify_signature(SECRET, header, body + b" ", now=1_700_000_000)
    assert not verify_signature(SECRET + "x", header, body, now=1_700_000_000)
    assert not verify_signature("", header, body, now=1_700_000_000)
    # t is signed too: moving it to look fresh breaks the signature
    forged = header.replace("t=1700000000", "t=1700000500")
    assert not verify_signature(SECRET, forged, body, now=1_700_000_500)
    # a receiver rotating secrets may get several v1 entries: any one may match
    rotated = f"t=1700000000,v1={'0' * 64},{header.split(',')[1]}"
    assert verify_signature(SECRET, rotated, body, now=1_700_000_000)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        "t=1700000000",
        "v1=abc",
        "t=abc,v1=00",
        "t=1700000000,v1=é",
        "t=1,t=1700000000,v1=00",
        "t=-5,v1=0",
    ],
)
def test_verify_signature_refuses_malformed_headers(header: str) -> None:
    assert verify_signature(SECRET, header, b"{}", now=1_700_000_000) is False


# --------------------------------------------------------------------------------- the outcome rule


@pytest.mark.parametrize("status", [200, 201, 204])
def test_2xx_is_success_and_its_body_the_result(server: LocalServer, status: int) -> None:
    answered = target(server.url(f"/status/{status}"))(make_job(), 5)
    assert answered == (None if status == 204 else f"status {status} body")  # a 204 has no body
    assert [r.path for r in server.requests()] == [f"/status/{status}"]


def test_a_json_answer_is_the_result_as_json(server: LocalServer) -> None:
    assert target(server.url("/json"))(make_job(), 5) == {"accepted": True, "ticket": 7}


def test_a_huge_answer_is_read_only_as_far_as_a_result_keeps(server: LocalServer) -> None:
    answered = target(server.url("/huge"))(make_job(), 5)
    assert isinstance(answered, str)
    assert len(answered) == RESULT_MAX_BYTES + 1  # one byte more: enough to know it is cut
    assert decode_result(encode_result(answered)) == (answered[:RESULT_MAX_BYTES], True)


@pytest.mark.parametrize("status", [500, 503, 429, 408, 425])
def test_retryable_statuses(server: LocalServer, status: int) -> None:
    exc = failure(target(server.url(f"/status/{status}"), error_detail=True))
    assert retryable(exc)
    assert f"HTTP {status}" in str(exc)
    assert f"status {status} body" in str(exc)  # the start of the response body, with error_detail


@pytest.mark.parametrize("status", [400, 404, 410, 422])
def test_other_4xx_are_permanent(server: LocalServer, status: int) -> None:
    exc = failure(target(server.url(f"/status/{status}"), error_detail=True))
    assert isinstance(exc, WebhookRefused)
    assert isinstance(exc, PermanentFailure)
    assert f"HTTP {status}" in str(exc)
    assert f"status {status} body" in str(exc)


def test_redirect_is_permanent_and_not_followed(server: LocalServer) -> None:
    exc = failure(target(server.url("/redirect"), error_detail=True))
    assert isinstance(exc, PermanentFailure)
    assert "HTTP 301" in str(exc)
    assert f"redirected to {server.url('/status/200')};" in str(exc)  # the path, never the query
    assert "hush-hush" not in str(exc)
    assert [r.path for r in server.requests()] == ["/redirect"]  # the Location was not requested


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/status/503", "HTTP 503 Service Unavailable"),
        ("/status/404", "HTTP 404 Not Found"),
        ("/big", "HTTP 500 Internal Server Error"),
        ("/redirect", "HTTP 301 Moved Permanently: redirected to {origin};"),
    ],
)
def test_by_default_the_error_names_the_status_but_neither_the_path_nor_the_answer(
    server: LocalServer, path: str, said: str
) -> None:
    """A job's last error is readable by every API caller; a webhook URL's path may be its only
    secret (Slack's are), and the answer may echo one. Without ``error_detail``: the origin, the
    status and its reason phrase."""
    secret_path = f"{path}/s3cr3t-path-T0K3N"
    exc = failure(target(server.url(secret_path)))
    origin = f"http://127.0.0.1:{server.port}"
    assert str(exc) == f"{origin}: {said.format(origin=origin)}" + (
        " redirects are not followed, point the topic there" if "redirect" in path else ""
    )
    assert "s3cr3t" not in str(exc)
    assert "body" not in str(exc)
    assert "0123456789" not in str(exc)
    assert server.requests()[0].path == secret_path


def test_error_text_is_short_and_keeps_secrets_out(server: LocalServer) -> None:
    exc = failure(target(server.url("/big?token=hush-hush"), secret=SECRET, error_detail=True))
    text = str(exc)
    assert retryable(exc)
    assert ("0123456789" * 20) in text
    assert len(text) < 300
    assert "hush-hush" not in text  # the URL's query may hold a token
    assert SECRET not in text
    assert "héllo" not in text  # nor the payload
    assert text.startswith(f"http://127.0.0.1:{server.port}/big: HTTP 500")


# --------------------------------------------------------------------------------- timeouts, connections


def test_a_server_that_does_not_answer_times_out(server: LocalServer) -> None:
    """The server never answers: only the delivery's own deadline ends the call (no timing asserted
    beyond the wait itself: a loaded machine may end it late)."""
    started = time.monotonic()
    exc = failure(target(server.url("/hold")), timeout=0.5)
    assert time.monotonic() - started >= 0.45
    assert retryable(exc)
    assert "timed out after 0.5s" in str(exc)


def test_a_server_that_trickles_bytes_is_cut_at_the_deadline(server: LocalServer) -> None:
    # each byte comes well within any per-read timeout, and they never end: only a deadline on the
    # whole exchange ends the call
    started = time.monotonic()
    exc = failure(target(server.url("/drip")), timeout=0.6)
    assert time.monotonic() - started >= 0.55
    assert retryable(exc)
    assert "timed out after 0.6s" in str(exc)


def test_connection_refused_is_retried() -> None:
    exc = failure(target(f"http://127.0.0.1:{free_port()}/hook"))
    assert retryable(exc)
    assert "refused" in str(exc).lower()


def test_dns_failure_is_retried(monkeypatch: pytest.MonkeyPatch, no_connections: list[Any]) -> None:
    def getaddrinfo(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    exc = failure(target("https://nowhere.example/hook", allow_http=False, allow_private=False))
    assert retryable(exc)
    assert "cannot resolve nowhere.example" in str(exc)
    assert no_connections == []


# --------------------------------------------------------------------------------- TLS


def test_https_connects_to_the_vetted_ip_with_sni_and_host_of_the_name(
    https_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    connected: list[webhook.Address] = []
    real_connect = delivery._connect

    def spy(address: webhook.Address, timeout: float) -> socket.socket:
        connected.append(address)
        return real_connect(address, timeout)

    monkeypatch.setattr(delivery, "_connect", spy)
    job = make_job()
    target(https_server.url(), secret=SECRET)(job, 5)

    assert [str(a.ip) for a in connected] == ["127.0.0.1"]  # the socket went to the resolved IP ...
    assert https_server.server_names == ["localhost"]  # ... and TLS named the host (SNI)
    [request] = https_server.requests()
    assert request.headers["Host"] == f"localhost:{https_server.port}"
    assert request.body == payload(job).encode("utf-8")
    assert verify_signature(SECRET, request.headers["Delayq-Signature"], request.body)


def test_https_server_that_does_not_answer_times_out(https_server: LocalServer) -> None:
    started = time.monotonic()
    exc = failure(target(https_server.url("/hold")), timeout=0.5)
    assert time.monotonic() - started >= 0.45
    assert retryable(exc)
    assert "timed out after 0.5s" in str(exc)
    assert [r.path for r in https_server.requests()] == ["/hold"]  # TLS went through; no answer ever comes


def test_https_refuses_a_certificate_for_another_host(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    httpd = LocalServer(pki.context("other.example"), host="localhost")
    try:
        exc = failure(target(httpd.url()))
        assert retryable(exc)
        assert "TLS certificate of localhost" in str(exc)
        assert "mismatch" in str(exc).lower()
        assert httpd.requests() == []
    finally:
        httpd.stop()


def test_https_refuses_a_certificate_from_an_untrusted_ca(https_server: LocalServer, pki: Pki, monkeypatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.other_ca))
    exc = failure(target(https_server.url()))
    assert retryable(exc)
    assert "TLS certificate of localhost" in str(exc)
    assert https_server.requests() == []


# --------------------------------------------------------------------------------- the address guard


def test_plain_http_is_refused_by_default(no_connections: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    lookups = fake_dns(monkeypatch, {"example.com": [["93.184.216.34"]]})
    exc = failure(target("http://example.com/hook", allow_http=False, allow_private=False))
    assert isinstance(exc, PermanentFailure)
    assert "http://" in str(exc)
    assert "allow_http" in str(exc)
    assert no_connections == []
    assert lookups == []  # refused before any lookup


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://127.0.0.1/hook", "loopback"),
        ("https://localhost/hook", "loopback"),
        ("https://10.0.0.1/hook", "private"),
        ("https://172.16.5.4/hook", "private"),
        ("https://192.168.1.1/hook", "private"),
        ("https://169.254.169.254/latest/meta-data", "metadata"),
        ("https://[fd00:ec2::254]/", "metadata"),
        ("https://169.254.10.10/", "link-local"),
        ("https://[fe80::1]/", "link-local"),
        ("https://[::1]/hook", "loopback"),
        ("https://[fc00::5]/hook", "private"),
        ("https://100.64.0.1/hook", "carrier-grade NAT"),
        ("https://0.0.0.0/hook", "unspecified"),
        ("https://224.0.0.1/hook", "multicast"),
        ("https://240.0.0.1/hook", "reserved"),
        ("https://[::ffff:127.0.0.1]/hook", "loopback"),
        ("https://2130706433/hook", "loopback"),  # 127.0.0.1 spelt as one number
    ],
)
def test_guard_refuses_non_public_addresses_without_connecting(
    url: str, reason: str, no_connections: list[Any]
) -> None:
    exc = failure(target(url, allow_http=False, allow_private=False))
    assert isinstance(exc, PermanentFailure)
    assert reason in str(exc)
    assert "allow_private" in str(exc)
    assert no_connections == []


def test_guard_refuses_a_name_that_resolves_to_a_private_address(
    no_connections: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups = fake_dns(monkeypatch, {"evil.example": [["10.0.0.5"]]})
    exc = failure(target("https://evil.example/hook", allow_http=False, allow_private=False))
    assert isinstance(exc, PermanentFailure)
    assert "evil.example" in str(exc)
    assert "resolves to 10.0.0.5" in str(exc)
    assert "private" in str(exc)
    assert lookups == ["evil.example"]
    assert no_connections == []


def test_guard_refuses_when_any_address_is_private(no_connections: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"mixed.example": [["93.184.216.34", "127.0.0.1"]]})
    exc = failure(target("https://mixed.example/hook", allow_http=False, allow_private=False))
    assert isinstance(exc, PermanentFailure)
    assert "127.0.0.1" in str(exc)
    assert no_connections == []


def test_a_public_name_passes_and_the_vetted_ip_is_what_gets_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    # The second lookup answers a loopback address, as a rebinding DNS would: one lookup per delivery,
    # each answer vetted, and the connection goes to the address vetted in that same delivery.
    lookups = fake_dns(monkeypatch, {"public.example": [["93.184.216.34"], ["127.0.0.1"]]})
    connected: list[tuple[str, Any, float]] = []

    def record(address: webhook.Address, timeout: float) -> socket.socket:
        connected.append((str(address.ip), address.sockaddr, timeout))
        raise ConnectionRefusedError(111, "Connection refused")  # stop before the network

    monkeypatch.setattr(delivery, "_connect", record)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("create_connection was used"))
    deliver = target("https://public.example/hook", allow_http=False, allow_private=False)

    first = failure(deliver, timeout=3)
    assert retryable(first)  # passed the guard; the (fake) connection failure is worth a retry
    assert "93.184.216.34" in str(first)
    assert lookups == ["public.example"]
    assert [(ip, sockaddr) for ip, sockaddr, _ in connected] == [("93.184.216.34", ("93.184.216.34", 443))]
    assert 0 < connected[0][2] <= 3

    second = failure(deliver, timeout=3)
    assert isinstance(second, PermanentFailure)
    assert "resolves to 127.0.0.1" in str(second)
    assert lookups == ["public.example", "public.example"]
    assert len(connected) == 1


def test_allow_private_lets_a_loopback_address_through(monkeypatch: pytest.MonkeyPatch) -> None:
    connected: list[str] = []

    def record(address: webhook.Address, timeout: float) -> socket.socket:
        connected.append(str(address.ip))
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(delivery, "_connect", record)
    exc = failure(target("https://127.0.0.1:9/hook", allow_http=False, allow_private=True))
    assert retryable(exc)
    assert connected == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("ip", "refused"),
    [
        ("93.184.216.34", False),
        ("8.8.8.8", False),
        ("1.1.1.1", False),
        ("223.255.255.254", False),
        ("192.0.1.1", False),  # just past 192.0.0.0/24
        ("192.31.196.1", False),  # AS112: globally reachable
        ("2606:4700:4700::1111", False),
        ("2a00:1450:4001::200e", False),
        ("::ffff:8.8.8.8", False),
        ("64:ff9b::808:808", False),  # NAT64 of 8.8.8.8
        ("2002:808:808::1", False),  # 6to4 of 8.8.8.8
        ("64:ff9b::a00:1", True),  # NAT64 of 10.0.0.1
        ("2002:a00:1::", True),  # 6to4 of 10.0.0.1
        ("2002:7f00:1::", True),  # 6to4 of 127.0.0.1
        ("192.0.2.1", True),  # documentation
        ("198.18.0.1", True),  # benchmarking
        ("255.255.255.255", True),
        ("ff02::1", True),
        # Issue 15: site-local and the whole of 192.0.0.0/24, whatever the interpreter's tables say.
        ("fec0::1", True),
        ("feff:ffff::1", True),
        *((f"192.0.0.{last}", True) for last in (0, 1, 8, 9, 10, 170, 171, 255)),
        ("192.88.99.1", True),  # 6to4 relay anycast
        ("::7f00:1", True),  # IPv4-compatible ::127.0.0.1 (Python 3.11 calls it global)
        ("::808:808", True),  # IPv4-compatible, deprecated: never a webhook
        ("100::1", True),  # discard-only
        ("2001::1", True),  # Teredo
        ("2001:20::1", True),  # ORCHIDv2
        ("2001:db8::1", True),  # documentation
        ("3fff::1", True),  # documentation (RFC 9637)
        ("64:ff9b:1::808:808", True),  # local-use NAT64
        ("4000::1", True),  # not global unicast
    ],
)
def test_refusal_table(ip: str, refused: bool) -> None:
    assert (refusal(ipaddress.ip_address(ip)) is not None) is refused


def test_refusal_does_not_ask_the_interpreter_s_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ipaddress``'s ``is_global``, ``is_private`` ... differ between Python versions: the guard's
    own tables decide, so the same address gets the same answer everywhere."""

    def asked(self: Any) -> bool:
        raise AssertionError("the guard asked ipaddress's tables")

    for kind in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        for name in ("is_global", "is_private", "is_reserved", "is_loopback", "is_link_local", "is_multicast"):
            monkeypatch.setattr(kind, name, property(asked))
    answers = {ip: refusal(ipaddress.ip_address(ip)) for ip in ("8.8.8.8", "fec0::1", "192.0.0.9", "::ffff:10.0.0.1")}
    assert answers == {
        "8.8.8.8": None,
        "fec0::1": "site-local (deprecated)",
        "192.0.0.9": "IETF protocol assignment (192.0.0.0/24)",
        "::ffff:10.0.0.1": "private (embedded in IPv6)",
    }


def test_the_tables_are_written_out_and_consistent() -> None:
    """Every refused network lies in what the guard checks (IPv4, or IPv6); global unicast is IPv4
    below multicast and IPv6 2000::/3, exactly."""
    assert [str(n) for n in webhook.GLOBAL_UNICAST] == ["0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3", "2000::/3"]
    refused = {str(network): reason for network, reason in webhook.REFUSED}
    assert refused["192.0.0.0/24"].startswith("IETF protocol assignment")
    assert refused["fec0::/10"].startswith("site-local")
    assert len(refused) == len(webhook.REFUSED)  # no network listed twice


@pytest.mark.parametrize("url", ["https://[fec0::1]/hook", "https://192.0.0.9/hook", "https://192.0.0.170/hook"])
def test_guard_refuses_site_local_and_ietf_assignments_without_connecting(url: str, no_connections: list[Any]) -> None:
    exc = failure(target(url, allow_http=False, allow_private=False))
    assert isinstance(exc, PermanentFailure)
    assert "allow_private" in str(exc)
    assert no_connections == []


# --------------------------------------------------------------------------------- non-ASCII paths


def test_a_non_ascii_path_is_percent_encoded_when_the_target_is_made() -> None:
    endpoint = webhook.Endpoint.parse("https://hooks.example/café/ünïcode?q=ü&x=1")
    assert endpoint.target == "/caf%C3%A9/%C3%BCn%C3%AFcode?q=%C3%BC&x=1"
    assert endpoint.target.isascii()
    assert webhook.Endpoint.parse("https://hooks.example/caf%C3%A9").target == "/caf%C3%A9"  # kept as given


def test_a_non_ascii_path_is_delivered(server: LocalServer) -> None:
    """Issue 15: ``UnicodeEncodeError`` at every delivery before; now the request goes out, its path
    as UTF-8 percent-encoded, as a browser sends it."""
    assert target(server.url("/status/200/café"))(make_job(), 5) == "status 200 body"
    assert [r.path for r in server.requests()] == ["/status/200/caf%C3%A9"]


# --------------------------------------------------------------------------------- retry spacing


def test_a_webhook_topic_s_backoff_has_a_floor_and_other_topics_do_not() -> None:
    hooks = TopicConfig(target="https://hooks.example/x", backoff=[0, 0.25, 5])
    python = TopicConfig(target="python:support.recorder:deliver", backoff=[0, 0.25, 5])
    assert WEBHOOK_MIN_BACKOFF_S == 1.0
    assert hooks.backoff_csv == "1000,1000,5000"
    assert python.backoff_csv == "0,250,5000"
    assert hooks.backoff == (0, 0.25, 5)  # the config keeps what was written; the Lua gets the floor


def test_retries_25_with_backoff_0_are_spaced_a_second_apart(make_queue: MakeQueue, server: LocalServer) -> None:
    """Issue 15: ``retries: 25`` with ``backoff: [0]`` was 26 POSTs at once. The job's own backoff
    is raised to the floor when it is written, the topic's when the Lua gets it: each retry of a
    webhook job waits a second at least (measured at the receiving server, whose clock only the
    machine's load can stretch)."""
    topics = _hooks(server.url("/status/503"), retries=0, backoff=[0])
    queue = make_queue(topics=topics, tick=0.05)
    queue.enqueue("hooks", {"n": 1}, id="hammer", retries=2, backoff=[0])  # its own backoff, and retries
    meta = job_meta(queue.redis, queue.keys.for_job("hooks", "hammer"), "hooks", "hammer")
    assert Meta.decode(meta).backoff_ms == (1000,)
    with running(Consumer(queue)):
        assert wait_until(lambda: state(queue, "hooks", "hammer") == "dead", timeout=15)
    times = [r.at for r in server.requests()]
    assert len(times) == 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(gap >= WEBHOOK_MIN_BACKOFF_S for gap in gaps), gaps


def test_the_topic_s_own_zero_backoff_is_raised_too(make_queue: MakeQueue, server: LocalServer) -> None:
    queue = make_queue(topics=_hooks(server.url("/status/503"), retries=1, backoff=[0]), tick=0.05)
    queue.enqueue("hooks", {"n": 2}, id="topic-backoff")
    with running(Consumer(queue)):
        assert wait_until(lambda: state(queue, "hooks", "topic-backoff") == "dead", timeout=15)
    first, second = (r.at for r in server.requests())
    assert second - first >= WEBHOOK_MIN_BACKOFF_S


# --------------------------------------------------------------------------------- the signing key


@pytest.fixture
def secrets_manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }.items():
        monkeypatch.setenv(name, value)
    parameters.clear_caches()
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="eu-west-1")
    parameters.clear_caches()


def test_the_signing_key_is_read_from_secrets_manager_at_run_time(
    server: LocalServer, secrets_manager: Any, make_queue: MakeQueue
) -> None:
    arn = secrets_manager.create_secret(Name="delayq/webhook", SecretString=SECRET)["ARN"]
    settings = Settings(webhook_secret_id=arn)
    assert SECRET not in repr(settings)
    deliver = webhook_target(
        server.url("/status/204"), TopicConfig(target="x", allow_http=True, allow_private=True), settings
    )
    deliver(make_job(), 5)
    secrets_manager.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
    deliver(make_job(attempt=2), 5)  # cached: no second read
    for request in server.requests():
        assert verify_signature(SECRET, request.headers["Delayq-Signature"], request.body)


def test_a_signing_key_that_cannot_be_read_fails_the_attempt_and_sends_nothing(
    server: LocalServer, secrets_manager: Any
) -> None:
    missing = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:nope-AbCdEf"
    deliver = webhook_target(
        server.url("/status/204"),
        TopicConfig(target="x", allow_http=True, allow_private=True),
        Settings(webhook_secret_id=missing),
    )
    exc = failure(deliver)
    assert retryable(exc)
    assert "DELAYQ_WEBHOOK_SECRET_ID" in str(exc)
    assert "ResourceNotFoundException" in str(exc)
    assert server.requests() == []  # never unsigned


def test_a_plain_key_and_a_secret_id_together_are_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"DELAYQ_WEBHOOK_SECRET": SECRET, "DELAYQ_WEBHOOK_SECRET_ID": "delayq/webhook"})
    assert "DELAYQ_WEBHOOK_SECRET_ID" in caught.value.message
    assert SECRET not in caught.value.message


# --------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "url",
    [
        "https://",
        "https:///path",
        "https://exa mple.com/",
        "https://example.com:99999/",
        "https://example.com:0/",
        "https://[::1/",
        "https://bad_host!.example/",
        "https://user:pa55word@example.com/",
        "https://example.com/\r\nX-Injected: 1",
    ],
)
def test_invalid_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        target(url)
    assert "pa55word" not in caught.value.message


def test_resolve_target_makes_webhooks_for_http_urls() -> None:
    for url in ("https://hooks.example.com/delayq", "http://hooks.example.com/delayq"):
        made = resolve_target(TopicConfig(target=url), Settings())
        assert isinstance(made, Webhook)
        assert made.endpoint.display == url


def test_the_host_header_and_display_of_an_idn_and_an_ipv6_url() -> None:
    idn = webhook.Endpoint.parse("https://bücher.example:8443/a?b=c")
    assert (idn.host, idn.port, idn.target, idn.netloc) == ("xn--bcher-kva.example", 8443, "/a?b=c", idn.netloc)
    assert idn.netloc == "xn--bcher-kva.example:8443"
    assert idn.display == "https://xn--bcher-kva.example:8443/a"
    six = webhook.Endpoint.parse("https://[2001:db8::1]/")
    assert (six.host, six.port, six.netloc) == ("2001:db8::1", 443, "[2001:db8::1]")


# --------------------------------------------------------------------------------- through the consumer


def _hooks(url: str, **config: Any) -> dict[str, Any]:
    return {"hooks": {"target": url, "allow_http": True, "allow_private": True, "timeout": 2, **config}}


def test_a_batch_of_webhook_deliveries_goes_out_at_once(
    make_queue: MakeQueue, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A webhook waits on the network: each delivery of a batch gets a thread at once, rather than one
    thread sending them in turn until ``spread`` (here an hour away) adds threads."""
    monkeypatch.setattr(workers_module, "SPREAD_S", 3600.0)
    queue = make_queue(topics=_hooks(server.url("/hold"), timeout=3, retries=0, concurrency=4), tick=0.1)
    queue.enqueue_many([{"topic": "hooks", "id": f"held{n}", "body": {}} for n in range(3)])
    with running(Consumer(queue)):
        # In turn, the second would go once the first timed out, 3 s on.
        assert wait_until(lambda: len(server.requests()) == 3, timeout=2)
        assert wait_until(lambda: all(state(queue, "hooks", f"held{n}") == "dead" for n in range(3)), timeout=10)


def test_consumer_delivers_to_the_webhook_exactly_once(make_queue: MakeQueue, server: LocalServer) -> None:
    queue = make_queue(topics=_hooks(server.url("/status/204")), tick=0.1, webhook_secret=SECRET)
    scheduled = queue.enqueue("hooks", {"order": 7}, id="e2e-1", delay=0.2)
    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "hooks", "e2e-1") == "done", timeout=5)
        time.sleep(0.3)  # room for a duplicate to show up
    [request] = server.requests()
    sent = json.loads(request.body)
    assert (sent["topic"], sent["id"], sent["body"], sent["attempt"]) == ("hooks", "e2e-1", {"order": 7}, 1)
    assert sent["run_at_ms"] == scheduled.run_at_ms
    assert request.headers["Idempotency-Key"] == f"hooks/e2e-1/{sent['enqueued_at_ms']}"
    assert verify_signature(SECRET, request.headers["Delayq-Signature"], request.body)
    assert consumer.summary is not None
    assert (consumer.summary["acked"], consumer.summary["failed"], consumer.summary["dead"]) == (1, 0, 0)


def test_consumer_retries_a_500_then_dead_letters_it(make_queue: MakeQueue, server: LocalServer) -> None:
    queue = make_queue(topics=_hooks(server.url("/status/500"), retries=2, backoff=[0.1]), tick=0.1)
    queue.enqueue("hooks", {"order": 8}, id="e2e-500")
    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "hooks", "e2e-500") == "dead", timeout=8)
    requests = server.requests()
    assert [r.headers["Delayq-Attempt"] for r in requests] == ["1", "2", "3"]
    assert len({r.headers["Idempotency-Key"] for r in requests}) == 1
    [dead] = queue.dead("hooks")
    assert dead.attempts == 3
    assert "WebhookError" in dead.last_error
    assert "HTTP 500" in dead.last_error
    assert consumer.summary is not None
    assert (consumer.summary["retried"], consumer.summary["dead"]) == (2, 1)


def test_consumer_dead_letters_a_404_at_the_first_attempt(make_queue: MakeQueue, server: LocalServer) -> None:
    queue = make_queue(topics=_hooks(server.url("/status/404"), retries=5, backoff=[0.1]), tick=0.1)
    queue.enqueue("hooks", {"order": 9}, id="e2e-404")
    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "hooks", "e2e-404") == "dead", timeout=5)
    assert len(server.requests()) == 1
    [dead] = queue.dead("hooks")
    assert dead.attempts == 1
    assert "HTTP 404" in dead.last_error
    assert consumer.summary is not None
    assert (consumer.summary["retried"], consumer.summary["dead"]) == (0, 1)


# --------------------------------------------------------------------------------- Retry-After

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC).timestamp()


@pytest.mark.parametrize(
    ("value", "date", "seconds"),
    [
        ("120", None, 120.0),
        (" 5 ", None, 5.0),
        ("0", None, 0.0),
        ("9" * 40, None, 86_400.0),  # more digits than any wait: as long as the cap
        ("-5", None, None),
        ("1.5", None, None),
        ("\u0663", None, None),  # an Arabic-Indic 3: a digit to Python, not to HTTP
        ("soon", None, None),
        ("", None, None),
        (None, None, None),
        ("Wed, 25 Nov 2026 12:01:30 GMT", None, 90.0),  # IMF-fixdate, from this machine's clock
        ("Wed, 25 Nov 2026 11:59:00 GMT", None, 0.0),  # the past: now
        ("Wednesday, 25-Nov-26 12:00:10 GMT", None, 10.0),  # RFC 850
        ("Wed Nov 25 12:00:20 2026", None, 20.0),  # asctime
        ("Wed, 01 Jan 2020 00:01:00 GMT", "Wed, 01 Jan 2020 00:00:00 GMT", 60.0),  # from the answer's Date
        ("Wed, 01 Jan 2020 00:01:00 GMT", "not a date", 0.0),  # an unreadable Date: this machine's clock
    ],
)
def test_retry_after_reads_seconds_and_http_dates(value: str | None, date: str | None, seconds: float | None) -> None:
    assert retry_after_s(value, date=date, now=NOW) == seconds


def test_retry_after_waits_are_capped_at_a_day() -> None:
    assert RetryAfter("x", 30).wait_ms == 30_000
    assert RetryAfter("x", 10 * 86_400).wait_ms == 86_400_000
    assert RetryAfter("x", -3).wait_ms == 0


@pytest.mark.parametrize("status", [429, 503])
def test_a_429_or_503_with_retry_after_asks_for_a_later_retry(server: LocalServer, status: int) -> None:
    exc = failure(target(server.url(f"/busy/{status}/120")))
    assert isinstance(exc, WebhookRetryAfter)
    assert retryable(exc)
    assert (exc.seconds, exc.wait_ms) == (120.0, 120_000)
    assert f"HTTP {status}" in str(exc)
    assert "Retry-After: 120s" in str(exc)
    until = failure(target(server.url(f"/busy-until/{status}/45")))
    assert isinstance(until, RetryAfter)
    assert until.seconds == 45.0  # counted from the answer's Date (2020), not from this machine's clock


@pytest.mark.parametrize("path", ["/busy/500/120", "/busy/408/120", "/busy/429/later", "/status/503"])
def test_other_answers_are_retried_on_the_backoff_alone(server: LocalServer, path: str) -> None:
    exc = failure(target(server.url(path)))
    assert retryable(exc)
    assert not isinstance(exc, RetryAfter)


def test_consumer_holds_a_retry_back_as_long_as_retry_after_asks(make_queue: MakeQueue, server: LocalServer) -> None:
    queue = make_queue(topics=_hooks(server.url("/busy/429/3"), retries=1, backoff=[0.1]), tick=0.05)
    queue.enqueue("hooks", {"n": 1}, id="busy")
    with running(Consumer(queue)):
        assert wait_until(lambda: len(server.requests()) == 1, timeout=5)
        waiting = queue.get("hooks", "busy")
        assert (waiting.state, waiting.attempts) == ("delayed", 1)
        assert "Retry-After: 3s" in (waiting.last_error or "")
        assert wait_until(lambda: state(queue, "hooks", "busy") == "dead", timeout=15)
    first, second = (r.at for r in server.requests())
    assert second - first >= 3.0  # not the topic's 0.1 s (nor the webhook floor of 1 s)


def test_a_retry_after_holds_the_whole_key(make_queue: MakeQueue, server: LocalServer) -> None:
    """A 429 with Retry-After for a job with a key: the key's other jobs wait, ready, until then; the
    other keys' jobs go on."""
    queue = make_queue(topics=_hooks(server.url("/busy/429/2"), retries=0, backoff=[0.1]), tick=0.05)
    queue.enqueue("hooks", {"n": 1}, id="d1", key="dest")
    with running(Consumer(queue)):
        assert wait_until(lambda: len(server.requests()) == 1, timeout=5)
        # The answer's verdict reaches Redis with the consumer's next settle, a moment after the request.
        assert wait_until(lambda: queue.key("hooks", "dest").held_until_ms is not None, timeout=5)
        queue.enqueue_many([{"topic": "hooks", "id": f"d{n}", "key": "dest"} for n in (2, 3)])
        queue.enqueue("hooks", {}, id="o1", key="other")
        assert wait_until(lambda: len(server.requests()) == 2, timeout=5)  # the other key's job
        assert queue.key("hooks", "dest").ready == 2  # held: not asked again
        assert wait_until(lambda: len(server.requests()) == 4, timeout=10)
    asked = [r.at for r in server.requests()]
    assert asked[2] - asked[0] >= 1.9  # the key's next request waited out the Retry-After
