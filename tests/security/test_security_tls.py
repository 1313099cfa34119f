"""TLS transport: delayq on a redis-server that speaks only TLS (``--port 0 --tls-port P``), with a CA
and certificates the test makes.

``rediss://localhost:P/0?ssl_ca_certs=<ca.pem>`` is all it takes: redis-py passes every query
parameter it does not parse itself (``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``) to the TLS
connection, verifies the certificate chain and the host name by default, and delayq adds nothing that
would weaken either. A server whose certificate another CA signed, a host name the certificate does
not name, no CA at all (the system's trust store) or plain ``redis://`` on the TLS port: the API
answers 503, and the server never ran a command. Mutual TLS (``--tls-auth-clients yes``) works with
``ssl_certfile`` and ``ssl_keyfile`` in the URL, and refuses a client without a certificate of its CA.
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from delayq import Queue, RedisUnavailable
from delayq.core.settings import Settings
from delayq.store.connection import connect

from support.security import (
    Monitor,
    Pki,
    full_lifecycle,
    handlers,
    make_pki,
    new_tls_connection_looks_dirty,
    small_lifecycle,
    use_redis,
)
from support.servers import RedisServer, free_port


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), "delayq")


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Another CA, with certificates for the same names: trusted by nobody here."""
    return make_pki(tmp_path_factory.mktemp("rogue"), "rogue")


def tls_server(pki: Pki, *, auth_clients: bool) -> RedisServer:
    port = free_port()
    server = RedisServer(
        "--port", "0", "--tls-port", str(port),
        "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
        "--tls-ca-cert-file", str(pki.ca), "--tls-auth-clients", "yes" if auth_clients else "no",
        port=port,
    )  # fmt: skip
    admin = tls_admin(server, pki)
    try:
        return server.start(ready=admin.ping)
    finally:
        admin.close()


def tls_admin(server: RedisServer, pki: Pki) -> redis.Redis:
    """A client that trusts ``pki``'s CA and shows its client certificate."""
    return redis.Redis(
        host="localhost", port=server.port, ssl=True, ssl_ca_certs=str(pki.ca), ssl_certfile=str(pki.client_cert),
        ssl_keyfile=str(pki.client_key), decode_responses=True, socket_connect_timeout=2,
    )  # fmt: skip


@pytest.fixture(scope="module")
def server(pki: Pki) -> Iterator[RedisServer]:
    running = tls_server(pki, auth_clients=False)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def mtls_server(pki: Pki) -> Iterator[RedisServer]:
    running = tls_server(pki, auth_clients=True)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def tls_namespace() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def url(server: RedisServer, ca: Path | None, *, host: str = "localhost", scheme: str = "rediss", **extra: Path) -> str:
    query = "&".join([*([f"ssl_ca_certs={ca}"] if ca else []), *(f"{name}={path}" for name, path in extra.items())])
    return f"{scheme}://{host}:{server.port}/0" + (f"?{query}" if query else "")


# ------------------------------------------------------------------------------------------ it works


def test_redis_py_takes_the_ca_from_the_url(server: RedisServer, pki: Pki):
    """What ``connect`` builds from the URL: a TLS connection that checks the chain against the CA
    file and the host name, with nothing of delayq's own overriding either."""
    client = connect(Settings(redis_url=url(server, pki.ca)))
    assert isinstance(client, redis.Redis)
    pool = client.connection_pool
    assert pool.connection_class is redis.SSLConnection
    assert pool.connection_kwargs["ssl_ca_certs"] == str(pki.ca)
    connection = pool.make_connection()
    try:
        assert connection.ca_certs == str(pki.ca)
        assert connection.cert_reqs == ssl.CERT_REQUIRED
        assert connection.check_hostname is True
    finally:
        connection.disconnect()
    client.close()


def test_a_new_tls_connection_is_ready_for_its_first_command(server: RedisServer, pki: Pki):
    """A connection made by delayq's ``connect``, once the server's session tickets are in, must not
    look as if it held an answer nobody asked for: redis-py's pool would throw it away."""
    assert not new_tls_connection_looks_dirty(url(server, pki.ca))


def test_the_dirty_connection_check_sees_the_bug(server: RedisServer, pki: Pki):
    """The check above is not vacuous: a connection made by redis-py alone, which does not read past
    the session tickets, looks dirty to it."""
    assert new_tls_connection_looks_dirty(url(server, pki.ca), delayq_connect=False)


def test_the_lifecycle_over_tls(monkeypatch: pytest.MonkeyPatch, server: RedisServer, pki: Pki, tls_namespace: str):
    use_redis(monkeypatch, url(server, pki.ca), tls_namespace)
    queue = Queue.from_env()
    try:
        with handlers() as h:
            full_lifecycle(queue, h)
    finally:
        queue.close()


def test_the_lifecycle_over_mutual_tls(
    monkeypatch: pytest.MonkeyPatch, mtls_server: RedisServer, pki: Pki, tls_namespace: str
):
    mtls_url = url(mtls_server, pki.ca, ssl_certfile=pki.client_cert, ssl_keyfile=pki.client_key)
    use_redis(monkeypatch, mtls_url, tls_namespace)
    queue = Queue.from_env()
    try:
        with handlers() as h:
            small_lifecycle(queue, h)
    finally:
        queue.close()


# ------------------------------------------------------------------------------------------ it refuses


def _refused(monkeypatch: pytest.MonkeyPatch, server: RedisServer, pki: Pki, redis_url: str, namespace: str) -> None:
    """With ``redis_url``, every way in answers 503 (or raises RedisUnavailable), and the server runs
    no command of delayq's: nothing was sent over a connection that was not verified."""
    use_redis(monkeypatch, redis_url, namespace)
    admin = tls_admin(server, pki)
    queue = Queue.from_env()
    try:
        with Monitor(admin) as monitor, handlers() as h:
            for method, path, body in [
                ("GET", "/health", None),
                ("POST", "/jobs", {"topic": "orders", "id": "x", "delay": 1}),
                ("GET", "/topics/orders", None),
            ]:
                status, answer = h.api(method, path, body)
                assert (status, answer["error"]) == (503, "unavailable"), (method, path, answer)
            with pytest.raises(RedisUnavailable):
                queue.ping()
            with pytest.raises(RedisUnavailable):
                queue.enqueue("orders", {}, id="y")
            summary = h.sweep_once()
            assert summary["redis_errors"] >= 1, summary
        assert monitor.seen == [], f"commands reached the server: {monitor.seen}"
        assert not list(admin.scan_iter(match=f"{namespace}:*")), "something was written"
    finally:
        queue.close()
        admin.close()


def test_a_server_certificate_from_another_ca_is_refused(
    monkeypatch: pytest.MonkeyPatch, server: RedisServer, pki: Pki, rogue: Pki, tls_namespace: str
):
    _refused(monkeypatch, server, pki, url(server, rogue.ca), tls_namespace)


def test_without_a_ca_file_the_system_trust_store_refuses_a_private_ca(
    monkeypatch: pytest.MonkeyPatch, server: RedisServer, pki: Pki, tls_namespace: str
):
    _refused(monkeypatch, server, pki, url(server, None), tls_namespace)


def test_a_host_name_the_certificate_does_not_name_is_refused(
    monkeypatch: pytest.MonkeyPatch, server: RedisServer, pki: Pki, tls_namespace: str
):
    """The certificate names ``localhost`` only: the right CA is not enough for 127.0.0.1."""
    _refused(monkeypatch, server, pki, url(server, pki.ca, host="127.0.0.1"), tls_namespace)


def test_plain_redis_on_the_tls_port_is_refused(
    monkeypatch: pytest.MonkeyPatch, server: RedisServer, pki: Pki, tls_namespace: str
):
    _refused(monkeypatch, server, pki, url(server, None, scheme="redis"), tls_namespace)


def test_mutual_tls_refuses_a_client_without_a_certificate(
    monkeypatch: pytest.MonkeyPatch, mtls_server: RedisServer, pki: Pki, tls_namespace: str
):
    _refused(monkeypatch, mtls_server, pki, url(mtls_server, pki.ca), tls_namespace)


def test_mutual_tls_refuses_a_client_certificate_from_another_ca(
    monkeypatch: pytest.MonkeyPatch, mtls_server: RedisServer, pki: Pki, rogue: Pki, tls_namespace: str
):
    redis_url = url(mtls_server, pki.ca, ssl_certfile=rogue.client_cert, ssl_keyfile=rogue.client_key)
    _refused(monkeypatch, mtls_server, pki, redis_url, tls_namespace)
