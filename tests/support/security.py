"""Helpers of the security tier: the exact Redis ACL delayq needs, a command recorder (MONITOR), test
certificates (a CA, a server and a client certificate, made here with ``cryptography``), and the
lifecycle every security test runs through the real handlers against a private redis-server.

Every step of the lifecycle goes through delayq's own code with the URL under test in
``DELAYQ_REDIS_URL``: the Python client (``Queue.from_env``), the HTTP API (``functions/enqueue.py``),
the sweep and the consume handlers (``functions/sweep.py``, ``functions/consume.py``).
"""

from __future__ import annotations

import datetime as dt
import importlib
import ipaddress
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from delayq import JobNotFound, Queue
from delayq.core.recurring import occurrence_id
from delayq.core.settings import Settings, TopicConfig
from delayq.store import calls
from delayq.store import connection as delayq_connection

from support import recorder
from support.events import FakeContext, api_event
from support.recorder import RECORDER

LUA_DIR = Path(__file__).resolve().parents[2] / "functions" / "delayq" / "store" / "lua"

# ------------------------------------------------------------------------------------------ the ACL

# What delayq sends itself: scripts (EVALSHA, and EVAL on NOSCRIPT), PING (health, the client's
# health check), SET NX PX (the sweeper's lock), SMEMBERS (the topics of a namespace: listing, and
# the sweeper's one walk of a partition whose topic index is not built yet). AUTH needs no permission.
CLIENT_COMMANDS = ("evalsha", "eval", "ping", "set", "smembers", "wait")
WITH_MIN_REPLICAS = ("wait",)  # sent only with DELAYQ_MIN_REPLICAS
# What the Lua scripts call (an ACL applies inside scripts too): every redis.call in lua/.
SCRIPT_COMMANDS = (
    "del", "exists", "get", "hdel", "hget", "hgetall", "hincrby", "hlen", "hmget", "hscan", "hset", "hsetnx", "incrby",
    "llen", "lpop", "lpos", "lpush", "lrange", "lset", "ltrim", "pexpire", "pexpireat", "rpush", "sadd", "set", "srem",
    "time",
    "zadd", "zcard", "zcount", "zlexcount", "zmscore", "zrange", "zrangebyscore", "zrank", "zrem",
    "zremrangebyrank", "zremrangebyscore", "zrevrange", "zscore",
)  # fmt: skip
ACL_COMMANDS = tuple(sorted({*CLIENT_COMMANDS, *SCRIPT_COMMANDS}))
USER = "delayq"


def acl_rules(namespace: str, password: str) -> list[str]:
    """The ``ACL SETUSER`` rules of delayq's user: only its commands, only its namespace's keys."""
    return ["on", f">{password}", "resetkeys", f"~{namespace}:*", "resetchannels", "-@all"] + [
        f"+{command}" for command in ACL_COMMANDS
    ]


def acl_line(namespace: str = "delayq", password: str = "<password>") -> str:
    """The ``ACL SETUSER`` line for the README."""
    return f"ACL SETUSER {USER} " + " ".join(acl_rules(namespace, password))


def script_commands_in_source() -> set[str]:
    """Every command name the Lua sources pass to ``redis.call``/``redis.pcall``."""
    pattern = re.compile(r"redis\.p?call\(\s*['\"](\w+)['\"]")
    found: set[str] = set()
    for path in LUA_DIR.rglob("*.lua"):
        found.update(name.lower() for name in pattern.findall(path.read_text()))
    return found


# ------------------------------------------------------------------------------------------ MONITOR


@dataclass
class Monitor:
    """Every command a redis-server runs while the ``with`` block lasts (MONITOR, on a connection of
    its own), by client kind: ``client`` (sent by a client) or ``lua`` (called by a script)."""

    client: redis.Redis
    seen: list[tuple[str, str]] = field(default_factory=list)
    _marker: str = ""
    _thread: threading.Thread | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def __enter__(self) -> Monitor:
        self._marker = f"monitor-stop-{time.monotonic_ns()}"
        self._thread = threading.Thread(target=self._listen, name="monitor", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._ready.is_set():  # MONITOR is on once it reports a command sent after it
            assert time.monotonic() < deadline, f"MONITOR did not start: {self.error!r}"
            self.client.echo("monitor-start")
            self._ready.wait(0.05)
        return self

    def _listen(self) -> None:
        try:
            with self.client.monitor() as monitor:
                for entry in monitor.listen():
                    command = str(entry["command"])
                    if command.startswith("ECHO monitor-start"):
                        self._ready.set()
                        continue
                    if command.startswith(f"ECHO {self._marker}"):
                        return
                    if self._ready.is_set():
                        kind = "lua" if entry.get("client_type") == "lua" else "client"
                        self.seen.append((kind, command.split(" ", 1)[0].lower()))
        except BaseException as exc:  # reported by __exit__
            self.error = exc

    def __exit__(self, *exc: object) -> None:
        self.client.echo(self._marker)
        assert self._thread is not None
        self._thread.join(10)
        assert not self._thread.is_alive(), "the MONITOR thread did not stop"
        if self.error is not None:
            raise self.error

    def commands(self, kind: str | None = None) -> set[str]:
        return {name for who, name in self.seen if kind is None or who == kind}


# ------------------------------------------------------------------------------------------ certificates


@dataclass(frozen=True)
class Pki:
    """A CA and what it signed, as PEM files in ``directory``."""

    directory: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)
    return path


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_pki(directory: Path, name: str, *, server_names: tuple[str, ...] = ("localhost",)) -> Pki:
    """A CA called ``name``, a server certificate for ``server_names`` (DNS names; IP addresses too
    when they parse as such) and a client certificate, all valid for a day."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = _key()
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"{name} test CA"))
        .issuer_name(_name(f"{name} test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common_name: str, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]) -> tuple[Any, Any]:
        key = _key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    sans: list[x509.GeneralName] = []
    for server_name in server_names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(server_name)))
        except ValueError:
            sans.append(x509.DNSName(server_name))
    server_key, server_cert = leaf(server_names[0], ExtendedKeyUsageOID.SERVER_AUTH, sans)
    client_key, client_cert = leaf("delayq test client", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    return Pki(
        directory=directory,
        ca=_write_cert(directory / f"{name}-ca.pem", ca_cert),
        server_cert=_write_cert(directory / f"{name}-server.pem", server_cert),
        server_key=_write_key(directory / f"{name}-server.key", server_key),
        client_cert=_write_cert(directory / f"{name}-client.pem", client_cert),
        client_key=_write_key(directory / f"{name}-client.key", client_key),
    )


# ------------------------------------------------------------------------------------------ the lifecycle

LIFECYCLE_TOPICS: dict[str, Any] = {
    "orders": {"target": RECORDER},
    "flaky": {"target": RECORDER, "retries": 1, "backoff": [0]},
    "doomed": {"target": RECORDER, "retries": 0},
    "leases": {"target": RECORDER, "retries": 0},
    "*": {"target": RECORDER},
}


@dataclass
class Handlers:
    """The three Lambda handlers, reloaded so that they read the environment the test set."""

    enqueue: ModuleType
    sweep: ModuleType
    consume: ModuleType

    def api(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        raw = None if body is None else json.dumps(body)
        response = self.enqueue.lambda_handler(api_event(method, path, None, raw_body=raw, **kw), FakeContext())
        text = response.get("body")
        assert "Traceback" not in json.dumps(response), response
        return int(response["statusCode"]), json.loads(text) if text else None

    def sweep_once(self) -> dict[str, Any]:
        summary: dict[str, Any] = self.sweep.lambda_handler({"seconds": 0}, FakeContext())
        return summary

    def consume_once(self, remaining_ms: int = 60_000) -> dict[str, Any]:
        summary: dict[str, Any] = self.consume.lambda_handler({"seconds": 0}, FakeContext(remaining_ms))
        return summary

    def close(self) -> None:
        for module in (self.sweep, self.consume):
            if module.queue._redis is not None:
                module.queue.close()


def use_redis(monkeypatch: pytest.MonkeyPatch, url: str, namespace: str) -> None:
    """Point delayq's environment at ``url`` and ``namespace``, with the lifecycle's topics."""
    monkeypatch.setenv("DELAYQ_REDIS_URL", url)
    monkeypatch.setenv("DELAYQ_NAMESPACE", namespace)
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps(LIFECYCLE_TOPICS))
    monkeypatch.setenv("DELAYQ_TICK", "0.2")
    monkeypatch.delenv("DELAYQ_REDIS_SECRET", raising=False)
    monkeypatch.delenv("DELAYQ_REDIS_MODE", raising=False)
    monkeypatch.delenv("DELAYQ_PARTITIONS", raising=False)


@contextmanager
def handlers() -> Iterator[Handlers]:
    """The handlers, reloaded for the current environment; their connections closed afterwards."""
    loaded = Handlers(*(importlib.reload(importlib.import_module(name)) for name in ("enqueue", "sweep", "consume")))
    try:
        yield loaded
    finally:
        loaded.close()


def _state(queue: Queue, topic: str, job_id: str) -> str | None:
    try:
        return queue.get(topic, job_id).state
    except JobNotFound:
        return None


LIFECYCLE_CONFIG = TopicConfig(target=RECORDER, retries=2, backoff=(0,))


def full_lifecycle(queue: Queue, h: Handlers) -> None:
    """Every operation of delayq, through its client and its three handlers: enqueue, batch, put,
    get, stats, reschedule, cancel; every HTTP route; sweep with its lock; consume with success, a
    retry and a dead letter; dead listing, replay, purge; a lease taken back by the sweeper; schedules
    written, read, listed, advanced by the sweep and deleted; health."""
    # ---- the Python client
    assert queue.ping()
    assert queue.enqueue("orders", {"n": 1}, id="o1", delay=600).created
    results = queue.enqueue_many(
        [{"topic": "orders", "id": "o2", "delay": 600}, {"topic": "orders", "id": "o1"}, {"topic": "-bad-"}]
    )
    assert [r.status for r in results] == [201, 409, 422], results
    assert queue.put("orders", "o3", {"n": 3}, delay=600).created
    assert not queue.put("orders", "o3", {"n": 33}, delay=900).created  # replaced
    assert queue.get("orders", "o3").body == {"n": 33}
    before = queue.get("orders", "o1").run_at_ms
    assert queue.reschedule("orders", "o1", delay=1200).run_at_ms > before
    queue.cancel("orders", "o2")
    assert _state(queue, "orders", "o2") is None
    assert queue.stats("orders").delayed == 2
    queue.enqueue("once", {}, id="only", delay=600)
    queue.cancel("once", "only")  # its last job: the topic holds nothing and leaves _topics

    # ---- every HTTP route
    assert h.api("GET", "/health") == (200, {"status": "ok"})
    assert h.api("GET", "/openapi.json")[0] == 200
    soon = 0.3  # due in 0.3 s: the sweeper moves them
    assert h.api("POST", "/jobs", {"topic": "orders", "id": "ok1", "delay": soon, "body": {}})[0] == 201
    status, batch = h.api(
        "POST",
        "/jobs/batch",
        {
            "jobs": [
                {"topic": "flaky", "id": "f1", "delay": soon, "body": {"fail_until": 1}},
                {"topic": "doomed", "id": "d1", "delay": soon, "body": {"fail": True}},
                {"topic": "orders", "id": "ok1"},
            ]
        },
    )
    assert status == 200
    assert [r["status"] for r in batch["results"]] == [201, 201, 409], batch
    assert h.api("PUT", "/jobs/orders/p1", {"delay": 60, "body": [1]})[0] == 201
    assert h.api("PUT", "/jobs/orders/p1", {"delay": 90, "body": [2]})[0] == 200
    status, job = h.api("GET", "/jobs/orders/p1")
    assert (status, job["state"], job["body"]) == (200, "delayed", [2])
    assert h.api("PATCH", "/jobs/orders/p1", {"delay": 30})[0] == 200
    assert h.api("DELETE", "/jobs/orders/p1") == (204, None)
    assert h.api("GET", "/jobs/orders/p1")[0] == 404
    status, stats = h.api("GET", "/topics/orders")
    assert (status, stats["delayed"], stats["ready"]) == (200, 3, 0), stats

    # ---- sweep (lock, discovery, move), then consume: success, retry, dead letter
    time.sleep(soon + 0.05)
    summary = h.sweep_once()
    assert (summary["locks_taken"], summary["moved"], summary["redis_errors"]) == (1, 3, 0), summary
    summary = h.consume_once()
    assert (summary["taken"], summary["acked"], summary["retried"], summary["dead"]) == (3, 1, 1, 1), summary
    assert summary["redis_errors"] == 0, summary
    assert _state(queue, "orders", "ok1") == "done"
    summary = h.consume_once()  # the retry (backoff 0) is due at once
    assert (summary["acked"], summary["redis_errors"]) == (1, 0), summary
    assert _state(queue, "flaky", "f1") == "done"
    assert [(d.id, d.attempt, d.ok) for d in recorder.of("flaky")] == [("f1", 1, False), ("f1", 2, True)]

    # ---- dead letters: listing, replay (by id, then all), purge
    status, dead = h.api("GET", "/topics/doomed/dead", query={"limit": "10"})
    assert status == 200
    assert [(j["id"], j["last_error"]) for j in dead["jobs"]] == [("d1", "RuntimeError: planned failure of attempt 1")]
    assert h.api("POST", "/topics/doomed/dead/replay", {"ids": ["d1"]}) == (200, {"replayed": 1})
    assert h.consume_once()["dead"] == 1
    assert queue.replay("doomed") == 1
    assert h.consume_once()["dead"] == 1
    assert [job.id for job in queue.dead("doomed")] == ["d1"]
    assert h.api("DELETE", "/topics/doomed/dead") == (200, {"purged": 1})
    assert queue.purge("doomed") == 0
    assert _state(queue, "doomed", "d1") is None

    # ---- a lease that expires: the sweeper takes it back (a dead letter: no retries)
    queue.enqueue("leases", {}, id="l1", delay=0)
    partition = queue.keys.for_job("leases", "l1")
    taken = calls.take(partition, "leases", count=1, timeout_ms=1, grace_ms=0).run(queue.redis)
    assert taken.ids == ["l1"], taken
    time.sleep(0.02)
    summary = h.sweep_once()
    assert (summary["dead"], summary["redis_errors"]) == (1, 0), summary
    assert queue.get("leases", "l1").last_error == "lease expired: no answer from the consumer within the timeout"
    assert queue.known_topics() == {"orders", "flaky", "doomed", "leases"}

    # ---- a ready job cancelled (out of the ready list); one too long for the time a consumer has
    # left, put back at the head of the ready list for a consumer with more time; one too long for
    # any consume run (its own timeout of 900 s, a run of 40 s), a dead letter that says why
    queue.enqueue("orders", {}, id="r1", delay=0)
    assert queue.get("orders", "r1").state == "ready"
    assert h.api("DELETE", "/jobs/orders/r1") == (204, None)
    queue.enqueue("orders", {}, id="later", delay=0)
    partition = queue.keys.for_job("orders", "later")
    taken = calls.take(partition, "orders", count=1, timeout_ms=30_000, grace_ms=0, longest_ms=1_000).run(queue.redis)
    assert (taken.ids, taken.dead) == ([], []), taken  # 30 s do not fit in the 1 s left
    assert queue.get("orders", "later").state == "ready"
    queue.cancel("orders", "later")
    queue.enqueue("orders", {}, id="long", delay=0, timeout=900)
    summary = h.consume_once(remaining_ms=40_000)  # 38 s to work with: the topic's 30 s fit, 900 s never
    assert (summary["taken"], summary["dead"], summary["redis_errors"]) == (0, 1, 0), summary
    long = queue.get("orders", "long")
    assert long.state == "dead"
    assert long.last_error is not None
    assert long.last_error.startswith("timeout 900s is longer than a consume run can last"), long.last_error
    queue.cancel("orders", "long")

    # ---- seeing and steering: listings by state (a cursor whose job is still there, one whose job
    # has gone), a forecast, the topics, a pause; ready jobs cancelled at the head and in the middle
    for job_id in ("s1", "s2", "s3"):
        queue.enqueue("orders", {}, id=job_id, delay=0)
    queue.cancel("orders", "s2")  # in the middle: a hole
    queue.cancel("orders", "s1")  # the head: popped
    assert [job.id for job in queue.jobs("orders", "ready").jobs] == ["s3"]
    first = queue.jobs("orders", "delayed", limit=1)
    assert first.next is not None
    assert [job.id for job in queue.jobs("orders", "delayed", cursor=first.next).jobs] == ["o1"]
    queue.cancel("orders", first.jobs[0].id)
    assert [job.id for job in queue.jobs("orders", "delayed", cursor=first.next).jobs] == ["o1"]
    assert sum(bucket.count for bucket in queue.forecast("orders", minutes=60).buckets) == 1
    assert [topic.topic for topic in queue.topics().topics] == ["doomed", "flaky", "leases", "orders"]
    queue.pause("orders")
    assert h.consume_once()["taken"] == 0
    queue.resume("orders")
    assert h.consume_once()["acked"] == 1

    # ---- flow keys: a key's own limits (its jobs parked, then back), a Retry-After holding it, the
    # keys walked and listed, one key's jobs listed and cancelled
    assert h.api("PUT", "/topics/orders/keys/acme", {"concurrency": 1, "rate": 1000})[0] == 200
    queue.enqueue_many([{"topic": "orders", "id": f"k{n}", "key": "acme", "delay": 0} for n in range(3)])
    (partition,) = queue.keys.partitions
    taken = calls.take(partition, "orders", count=10, timeout_ms=30_000, grace_ms=0).run(queue.redis)
    assert taken.ids == ["k0"], taken  # k1 and k2 parked: the key is at its concurrency
    held = calls.Failure("k0", taken.tokens[0], "HTTP 429", permanent=False, retry_after_ms=60_000)
    assert calls.fail(partition, "orders", LIFECYCLE_CONFIG, [held]).run(queue.redis)[:2] == (1, 0)
    assert calls.take(partition, "orders", count=10, timeout_ms=30_000, grace_ms=0).run(queue.redis).ids == []
    status, keys = h.api("GET", "/topics/orders/keys")
    assert (status, [(k["key"], k["ready"], k["delayed"]) for k in keys["keys"]]) == (200, [("acme", 2, 1)]), keys
    assert keys["keys"][0]["held_until_ms"] is not None
    assert [job.id for job in queue.jobs("orders", "ready", key="acme").jobs] == ["k1", "k2"]
    assert queue.cancel_all("orders", "ready", key="acme") == 2
    assert h.api("DELETE", "/topics/orders/keys/acme") == (204, None)
    queue.cancel("orders", "k0")

    # ---- schedules, through the client and the API; the sweep makes the next occurrence
    tick = queue.schedule("orders", "tick", every=1, body={"s": 1})
    paris = {"cron": "0 8 * * *", "timezone": "Europe/Paris"}
    assert h.api("PUT", "/schedules/orders/daily", paris)[0] == 201
    assert h.api("PUT", "/schedules/orders/daily", paris | {"cron": "0 9 * * *"})[0] == 200
    status, shown = h.api("GET", "/schedules/orders/daily")
    assert (status, shown["cron"]) == (200, "0 9 * * *")
    status, listed = h.api("GET", "/schedules", query={"topic": "orders"})
    assert (status, [s["name"] for s in listed["schedules"]]) == (200, ["daily", "tick"])
    time.sleep(max(0.0, (tick.next_run_at_ms or 0) / 1000 - time.time()) + 0.05)  # this machine's clock is Redis'
    summary = h.sweep_once()
    assert (summary["occurrences"], summary["redis_errors"]) == (1, 0), summary
    assert queue.get("orders", occurrence_id("tick", (tick.next_run_at_ms or 0) + 1000)).state == "delayed"
    assert h.api("DELETE", "/schedules/orders/daily") == (204, None)
    queue.unschedule("orders", "tick")
    assert queue.schedules() == []
    assert h.api("GET", "/health") == (200, {"status": "ok"})


def small_lifecycle(queue: Queue, h: Handlers) -> None:
    """Enough to show a transport works: the API, the client, one sweep and one consume."""
    assert h.api("GET", "/health") == (200, {"status": "ok"})
    assert h.api("POST", "/jobs", {"topic": "orders", "id": "t1", "delay": 0, "body": {"tls": True}})[0] == 201
    assert h.api("POST", "/jobs", {"topic": "orders", "id": "t2", "delay": 600})[0] == 201
    assert h.api("PATCH", "/jobs/orders/t2", {"delay": 900})[0] == 200
    assert queue.get("orders", "t1").body == {"tls": True}
    summary = h.sweep_once()
    assert (summary["locks_taken"], summary["redis_errors"]) == (1, 0), summary
    summary = h.consume_once()
    assert (summary["acked"], summary["redis_errors"]) == (1, 0), summary
    assert [d.id for d in recorder.of("orders")] == ["t1"]
    assert h.api("DELETE", "/jobs/orders/t2") == (204, None)
    assert h.api("GET", "/topics/orders")[1]["delayed"] == 0


# ------------------------------------------------------------------------------------------ TLS 1.3

# redis-py 8's hiredis parser checks a pooled connection for unread data before its first command. A
# TLS 1.3 server's session tickets make a new socket look readable until something is read, so
# delayq.store.connection reads past them with a PING (see read_past_tls_handshake there).


def new_tls_connection_looks_dirty(url: str, *, delayq_connect: bool = True) -> bool:
    """Whether a new connection made by delayq's ``connect`` (or, with ``delayq_connect=False``, by
    redis-py alone: the bug) looks as if it held unread data once the server's post-handshake messages
    have arrived (the bug above).

    It waits for those messages, the TLS 1.3 session tickets, rather than for a while: until they
    arrive a connection looks clean either way, and the answer would prove nothing. They have arrived
    once the TLS layer has read them (the session holds a ticket: a PING was read past them) or once
    they wait unread on the socket (it is readable: what the bug's pool trips on)."""
    if delayq_connect:
        client = delayq_connection.connect(Settings(redis_url=url))
    else:
        client = redis.Redis.from_url(url, **delayq_connection.client_options())
    connection = client.connection_pool.make_connection()  # type: ignore[union-attr]
    try:
        connection.connect()
        sock = connection._sock
        assert sock is not None
        assert sock.version() == "TLSv1.3", f"{sock.version()}: no session tickets after the handshake to check"
        deadline = time.monotonic() + 5
        while not (sock.session is not None and sock.session.has_ticket) and not connection.can_read():
            assert time.monotonic() < deadline, "no session ticket within 5 s: the check would prove nothing"
            time.sleep(0.005)
        return bool(connection.can_read())
    finally:
        connection.disconnect()
        client.close()
