"""Private servers for the tests that need their own: a redis-server (with AOF, TLS or ACL users), a
3-master Redis Cluster, twemproxy (nutcracker) in front of a Redis, and a TCP proxy that breaks
connections on purpose. Each starts on free ports in a temporary directory and is stopped by its pid
(the proxy: its threads) when the ``with`` block ends, whatever happened. A start that fails (no such
program, a server that never answers) leaves nothing behind either: no process, no directory.

``DELAYQ_TEST_SERVER`` chooses the server program: ``redis`` (redis-server, the default) or ``valkey``
(valkey-server, and valkey-cli to make a cluster)."""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from delayq.connection import client_options

Server = Literal["redis", "valkey"]
SERVER_ENV = "DELAYQ_TEST_SERVER"


def server_kind() -> Server:
    """The server the tests run on, from ``DELAYQ_TEST_SERVER`` (default ``redis``)."""
    kind = os.environ.get(SERVER_ENV) or "redis"
    if kind not in get_args(Server):
        raise ValueError(f"{SERVER_ENV}={kind!r}: must be one of {', '.join(get_args(Server))}")
    return kind  # type: ignore[return-value]


def server_program(part: Literal["server", "cli"] = "server") -> str:
    """The path of the chosen server's program (``redis-server``) or its client (``valkey-cli``), or
    its bare name when it is not on PATH (starting it then fails with FileNotFoundError, naming it)."""
    bare = f"{server_kind()}-{part}"
    return shutil.which(bare) or bare


def free_port(*, also_free: int | None = None) -> int:
    """A TCP port nobody listens on (and, with ``also_free``, that port + ``also_free`` too)."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if also_free is None:
            return port
        if port + also_free < 65536 and _is_free(port + also_free):
            return port
    raise RuntimeError("no free port")


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _wait(predicate: Any, what: str, log: Path, process: subprocess.Popen[bytes] | None, timeout: float = 15.0) -> None:
    """Until ``predicate()`` succeeds; a RuntimeError with the log's last lines if ``process`` exits
    or ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (redis.RedisError, OSError):
            pass
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}; its log ends:\n{_tail(log)}")
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up within {timeout} s; its log ends:\n{_tail(log)}")


def _tail(log: Path, lines: int = 10) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class RedisServer:
    """A redis-server (or valkey-server: ``program``, by default ``DELAYQ_TEST_SERVER``'s) on a free
    port. ``args`` are extra command-line options (``--appendonly yes``)."""

    def __init__(
        self, *args: str, port: int | None = None, directory: Path | None = None, program: str | None = None
    ) -> None:
        self.args = list(args)
        self.program = program or server_program()
        self.port = port or free_port(also_free=10000)
        self._tmp = None if directory else tempfile.TemporaryDirectory(prefix="delayq-test-redis-")
        self.dir = directory or Path(self._tmp.name)  # type: ignore[union-attr]
        self.process: subprocess.Popen[bytes] | None = None
        self.log = self.dir / f"redis-{self.port}.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def client(self, **options: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True, **options)

    def start(self, *, ready: Any = None, timeout: float = 15.0) -> RedisServer:
        """Starts the server and waits until ``ready()`` succeeds (by default, a PING answers). If it
        fails to start, however, the process is killed and the temporary directory removed."""
        command = [
            self.program,
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
            "--save", "", "--logfile", str(self.log), "--protected-mode", "no", *self.args,
        ]  # fmt: skip
        try:
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            what = f"{self.program} on port {self.port}"
            _wait(ready or self._answers, what, self.log, self.process, timeout)
        except BaseException:
            self.kill()
            self.close()
            raise
        return self

    def _answers(self) -> bool:
        """A PING answers, on a client that does not retry (redis-py's default one spends seconds
        retrying a refused connection, and a server that exited is seen only after that)."""
        with self.client(retry=Retry(NoBackoff(), 0), socket_connect_timeout=2) as client:
            return bool(client.ping())

    def stop(self) -> None:
        """SIGTERM (Redis writes its AOF and exits), then SIGKILL if it lingers."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def kill(self) -> None:
        """SIGKILL: the server dies at once, as in a crash."""
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> RedisServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RedisClusterServers:
    """A Redis Cluster of ``masters`` masters, no replicas, made with ``redis-cli --cluster create``
    (valkey-cli for valkey-server)."""

    def __init__(self, masters: int = 3, *, program: str | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="delayq-test-cluster-")
        self.dir = Path(self._tmp.name)
        self.nodes = [RedisServer(directory=self.dir, program=program) for _ in range(masters)]
        for node in self.nodes:
            node.args = ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{node.port}.conf",
                         "--cluster-node-timeout", "5000", "--appendonly", "no"]  # fmt: skip

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> RedisClusterServers:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        create = [server_program("cli"), "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"]
        subprocess.run(create, check=True, capture_output=True, timeout=60)
        for node in self.nodes:
            _wait(lambda node=node: "cluster_state:ok" in node.client().execute_command("CLUSTER", "INFO"),
                  f"cluster node {node.port}", node.log, node.process)  # fmt: skip

    def master_of_slot(self, slot: int) -> int:
        """The port of the master owning ``slot``."""
        for start, end, master, *_ in self.nodes[0].client().execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return int(master[1])
        raise LookupError(slot)

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        self._tmp.cleanup()

    def __enter__(self) -> RedisClusterServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class Twemproxy:
    """nutcracker (twemproxy, or ``program``) in front of the given Redis servers, with ``hash_tag: "{}"``."""

    def __init__(self, backends: Sequence[RedisServer], *, program: str | None = None) -> None:
        self.backends = list(backends)
        self.program = program or shutil.which("nutcracker") or "/usr/sbin/nutcracker"
        self.port = free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="delayq-test-twemproxy-")
        self.config = Path(self._tmp.name) / "nutcracker.yml"
        self.log = Path(self._tmp.name) / "nutcracker.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Twemproxy:
        """Starts nutcracker and waits until a SET goes through it. If it fails to start, however, the
        process is stopped and the temporary directory removed."""
        servers = "\n".join(f"    - 127.0.0.1:{b.port}:1 node{i}" for i, b in enumerate(self.backends))
        self.config.write_text(
            "delayq:\n"
            f"  listen: 127.0.0.1:{self.port}\n"
            "  hash: fnv1a_64\n"
            '  hash_tag: "{}"\n'
            "  distribution: ketama\n"
            "  redis: true\n"
            "  auto_eject_hosts: false\n"
            "  server_retry_timeout: 2000\n"
            "  timeout: 5000\n"
            "  servers:\n"
            f"{servers}\n"
        )
        command = [self.program, "-c", str(self.config), "-s", str(free_port()), "-o", str(self.log)]
        # A proxy-safe client: redis-py's default one sends CLIENT SETINFO, and twemproxy hangs up on it.
        probe = redis.Redis(port=self.port, **client_options())
        try:
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            what = f"{self.program} on port {self.port}"
            _wait(lambda: probe.set("delayq-probe", "1", ex=5), what, self.log, self.process)
        except BaseException:
            self.close()
            raise
        finally:
            probe.close()
        return self

    def close(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self._tmp.cleanup()

    def __enter__(self) -> Twemproxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def redis_server(*args: str) -> Iterator[RedisServer]:
    with RedisServer(*args) as server:
        yield server


class BreakingProxy:
    """A TCP proxy (threads in this process) in front of ``127.0.0.1:backend_port``, relaying both ways
    until told to break connections the ways a network does:

    - ``drop_after(marker)``: the next request holding ``marker`` (``b"EVALSHA"``) goes to the backend,
      which runs it; then the proxy closes that client connection before the reply comes back (the
      reply is read from the backend and thrown away). The client cannot tell whether it ran.
    - ``freeze()``: every connection open now stops relaying, both ways, without being closed (a
      connection dropped silently, as by a NAT or a failover): the client's writes still succeed and
      no answer ever comes. What such a connection is sent is kept in ``swallowed``. Later
      connections are relayed as usual.

    ``connections`` counts the client connections accepted so far.
    """

    def __init__(self, backend_port: int) -> None:
        self.backend_port = backend_port
        self.port = free_port()
        self.connections = 0
        self.dropped = 0
        self.swallowed = bytearray()
        self._lock = threading.Lock()
        self._drop_marker: bytes | None = None
        self._frozen: set[socket.socket] = set()
        self._open: set[socket.socket] = set()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def drop_after(self, marker: bytes) -> None:
        with self._lock:
            self._drop_marker = marker

    def freeze(self) -> None:
        with self._lock:
            self._frozen |= self._open

    def start(self) -> BreakingProxy:
        self._spawn(self._accept)
        return self

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> BreakingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"proxy-{self.port}")
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            backend = socket.create_connection(("127.0.0.1", self.backend_port))
            with self._lock:
                self.connections += 1
                self._open.add(client)
            self._spawn(self._relay, client, backend)

    def _relay(self, client: socket.socket, backend: socket.socket) -> None:
        with client, backend, selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ)
            selector.register(backend, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in selector.select(0.1):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    with self._lock:
                        frozen = client in self._frozen
                        drop = key.fileobj is client and self._drop_marker is not None and self._drop_marker in data
                        if drop:
                            self._drop_marker = None
                    if frozen:
                        if key.fileobj is client:
                            self.swallowed += data
                    elif key.fileobj is backend:
                        client.sendall(data)
                    else:
                        backend.sendall(data)
                        if drop:
                            self._drop(client, backend)
                            return

    def _drop(self, client: socket.socket, backend: socket.socket) -> None:
        """The request reached the backend: close the client's side now, then wait for the reply (so
        that the backend has run the request) and throw it away."""
        client.shutdown(socket.SHUT_RDWR)
        client.close()
        backend.settimeout(5)
        backend.recv(65536)
        with self._lock:
            self.dropped += 1
