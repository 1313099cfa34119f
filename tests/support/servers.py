"""Private servers for the tests that need their own: a redis-server (with AOF, TLS or ACL users), a
Redis Cluster (3 masters, with or without replicas), a primary and its replica, twemproxy (nutcracker)
in front of a Redis, a TCP proxy that breaks connections on purpose and a TCP forwarder that moves to
another backend or delays what it relays. Each starts on free ports in a temporary directory and is
stopped by its pid (the proxies: their threads) when the ``with`` block ends, whatever happened. A
start that fails (no such program, a server that never answers) leaves nothing behind either: no
process, no directory.

``DELAYQ_TEST_SERVER`` chooses the server program: ``redis`` (redis-server, the default) or ``valkey``
(valkey-server, and valkey-cli to make a cluster)."""

from __future__ import annotations

import contextlib
import os
import queue
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from delayq.store.connection import client_options

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


def _accept_each(listener: socket.socket, stop: threading.Event, connect: Callable[[socket.socket], None]) -> None:
    """A proxy's accept loop: each client to ``connect``, until ``stop`` is set or the listener closes."""
    listener.settimeout(0.1)
    while not stop.is_set():
        try:
            client, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        connect(client)


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
            # A frozen server (SIGSTOP, a failover test) acts on its SIGTERM only once continued.
            os.kill(self.process.pid, signal.SIGCONT)
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
    """A Redis Cluster of ``masters`` masters, each with ``replicas`` replicas, made with ``redis-cli
    --cluster create`` (valkey-cli for valkey-server). ``node_timeout_ms`` is ``cluster-node-timeout``
    (how long a master may not answer before its replica takes over); ``args`` are extra options for
    every node (``--appendonly yes``, ``--cluster-require-full-coverage no``).

    Each node has a directory of its own: a replica writes the RDB it syncs from as ``dump.rdb`` and
    an AOF node its ``appendonlydir``, names that nodes sharing a directory would overwrite."""

    def __init__(
        self,
        masters: int = 3,
        *,
        replicas: int = 0,
        node_timeout_ms: int = 5000,
        args: Sequence[str] = (),
        program: str | None = None,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="delayq-test-cluster-")
        self.dir = Path(self._tmp.name)
        self.replicas = replicas
        self.nodes: list[RedisServer] = []
        for n in range(masters * (1 + replicas)):
            directory = self.dir / f"node-{n}"
            directory.mkdir()
            node = RedisServer(directory=directory, program=program)
            node.args = ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{node.port}.conf",
                         "--cluster-node-timeout", str(node_timeout_ms), "--appendonly", "no",
                         *args]  # fmt: skip
            self.nodes.append(node)

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
        create = [server_program("cli"), "--cluster", "create", *addresses,
                  "--cluster-replicas", str(self.replicas), "--cluster-yes"]  # fmt: skip
        subprocess.run(create, check=True, capture_output=True, timeout=60)
        for node in self.nodes:
            _wait(lambda node=node: self._joined(node), f"cluster node {node.port}", node.log, node.process)
        # A replica takes over only once it has synced: else its master's death is an outage for good.
        for node in self.nodes:
            _wait(lambda node=node: _replica_synced(node), f"replica {node.port}", node.log, node.process, 30)

    def _joined(self, node: RedisServer) -> bool:
        """The node says ``cluster_state:ok`` and knows every other node."""
        with node.client() as client:
            info = client.execute_command("CLUSTER", "INFO")
        return "cluster_state:ok" in info and f"cluster_known_nodes:{len(self.nodes)}" in info

    def node(self, port: int) -> RedisServer:
        """The node listening on ``port``."""
        return next(node for node in self.nodes if node.port == port)

    def answering(self, *, excluding: Sequence[RedisServer] = ()) -> RedisServer:
        """A node that is running and not one of ``excluding`` (a dead or frozen one)."""
        for node in self.nodes:
            if node not in excluding and node.process is not None and node.process.poll() is None:
                return node
        raise LookupError("no node left to ask")

    def master_of_slot(self, slot: int, *, ask: RedisServer | None = None) -> int:
        """The port of the master owning ``slot``, as ``ask`` (by default the first node running) sees it."""
        with (ask or self.answering()).client() as client:
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    return int(master[1])
        raise LookupError(slot)

    def master_process_of_slot(self, slot: int) -> RedisServer:
        """The master owning ``slot``: its process, to kill or freeze."""
        return self.node(self.master_of_slot(slot))

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A replica of ``master`` (the first ``CLUSTER REPLICAS`` lists)."""
        with master.client() as client:
            node_id = client.execute_command("CLUSTER", "MYID")
            lines = client.execute_command("CLUSTER", "REPLICAS", node_id)
        if not lines:
            raise LookupError(f"master {master.port} has no replica")
        address = lines[0].split()[1]  # 127.0.0.1:port@cport
        return self.node(int(address.split("@")[0].rsplit(":", 1)[1]))

    def serving(self, slot: int, *, ask: RedisServer, instead_of: RedisServer) -> bool:
        """Whether ``ask`` says ``cluster_state:ok`` and gives ``slot`` to a master other than
        ``instead_of`` (the failover is over, as that node sees it)."""
        try:
            with ask.client(socket_timeout=1) as client:
                ok = "cluster_state:ok" in client.execute_command("CLUSTER", "INFO")
            return ok and self.master_of_slot(slot, ask=ask) != instead_of.port
        except (redis.RedisError, OSError):
            return False

    def wait_serving(
        self, slot: int, *, ask: RedisServer, instead_of: RedisServer, timeout: float = 30.0
    ) -> float | None:
        """Until ``serving``; the ``time.monotonic()`` it was seen so, or None after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.serving(slot, ask=ask, instead_of=instead_of):
                return time.monotonic()
            time.sleep(0.02)
        return None

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        self._tmp.cleanup()

    def __enter__(self) -> RedisClusterServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _replica_synced(node: RedisServer) -> bool:
    """A master, or a replica whose link to its master is up (its first sync done)."""
    with node.client() as client:
        info = client.info("replication")
    return info["role"] == "master" or info.get("master_link_status") == "up"


class ReplicaPair:
    """A primary and its replica (``--replicaof``), both with ``args``: what ElastiCache runs, to fail
    over by hand (``promote``). With ``link_delay_s``, the replica's replication link runs through a
    ``Forwarder`` that holds every byte that long, both ways: the replica lags that far behind."""

    def __init__(self, *args: str, link_delay_s: float = 0.0, program: str | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="delayq-test-pair-")
        self.dir = Path(self._tmp.name)
        (self.dir / "primary").mkdir()
        (self.dir / "replica").mkdir()
        self.primary = RedisServer(*args, directory=self.dir / "primary", program=program)
        self.replica = RedisServer(*args, directory=self.dir / "replica", program=program)
        self.link_delay_s = link_delay_s
        self.link: Forwarder | None = None

    def start(self) -> ReplicaPair:
        """Starts both and waits until the replica's link is up (its first sync done)."""
        try:
            self.primary.start()
            source = self.primary.port
            if self.link_delay_s:
                self.link = Forwarder(self.primary.port, delay_s=self.link_delay_s).start()
                source = self.link.port
            self.replica.args += ["--replicaof", "127.0.0.1", str(source)]
            self.replica.start(ready=lambda: _replica_synced(self.replica), timeout=30)
        except BaseException:
            self.close()
            raise
        return self

    def promote(self) -> None:
        """``REPLICAOF NO ONE`` on the replica: it becomes a primary, with what it holds."""
        with self.replica.client() as client:
            client.execute_command("REPLICAOF", "NO", "ONE")

    def close(self) -> None:
        for server in (self.replica, self.primary):
            server.stop()
        if self.link is not None:
            self.link.close()
        self._tmp.cleanup()

    def __enter__(self) -> ReplicaPair:
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
        _accept_each(self._listener, self._stop, self._connect)

    def _connect(self, client: socket.socket) -> None:
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


class Forwarder:
    """A TCP forwarder (threads in this process) to ``127.0.0.1:backend_port``, for the failover tests:

    - ``switch(port)``: a DNS name that moves. New connections go to ``port``; those open now are
      closed (their backend is the one that went away).
    - ``delay_s``: a slow link. Every byte is held that long, each way, before it is passed on. When
      either side closes or fails, the connection is closed at once, both ways, and what it still
      held is dropped: a primary that dies loses what its replica had not received yet.

    A connection whose backend refuses is closed at once, as a client of a dead server sees it.
    """

    def __init__(self, backend_port: int, *, delay_s: float = 0.0) -> None:
        self.backend_port = backend_port
        self.delay_s = delay_s
        self.port = free_port()
        self.connections = 0
        self._lock = threading.Lock()
        self._open: set[_Link] = set()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._acceptor = threading.Thread(target=self._accept, daemon=True, name=f"forwarder-{self.port}")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Forwarder:
        self._acceptor.start()
        return self

    def switch(self, backend_port: int) -> None:
        with self._lock:
            self.backend_port = backend_port
            links, self._open = self._open, set()
        for link in links:
            link.close()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        if self._acceptor.is_alive():
            self._acceptor.join(5)
        self.switch(self.backend_port)

    def __enter__(self) -> Forwarder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        _accept_each(self._listener, self._stop, self._connect)

    def _connect(self, client: socket.socket) -> None:
        with self._lock:
            port = self.backend_port
        try:
            backend = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            client.close()
            return
        backend.settimeout(None)
        link = _Link(client, backend, self._forget)
        with self._lock:
            self.connections += 1
            self._open.add(link)
        link.start(self.delay_s)

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._open.discard(link)


class _Link:
    """One forwarded connection: a pump each way (and, delayed, a sender each way)."""

    def __init__(self, client: socket.socket, backend: socket.socket, closed: Callable[[_Link], None]) -> None:
        self.client, self.backend = client, backend
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._on_close = closed
        for sock in (client, backend):
            # Nagle's wait against delayed ACKs would add up to 40 ms a reply: Redis and redis-py turn it off too.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def start(self, delay_s: float) -> None:
        for source, sink in ((self.client, self.backend), (self.backend, self.client)):
            threading.Thread(target=self._pump, args=(source, sink, delay_s), daemon=True).start()

    def close(self) -> None:
        with self._lock:  # both pumps may see the end at once: close once
            if self._closed.is_set():
                return
            self._closed.set()
        for sock in (self.client, self.backend):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in the other thread; close alone does not
            sock.close()
        self._on_close(self)

    def _pump(self, source: socket.socket, sink: socket.socket, delay_s: float) -> None:
        held: queue.SimpleQueue[tuple[float, bytes] | None] | None = None
        if delay_s:
            held = queue.SimpleQueue()
            threading.Thread(target=self._send_held, args=(held, sink), daemon=True).start()
        try:
            while not self._closed.is_set():
                data = source.recv(65536)
                if not data:
                    return
                if held is None:
                    sink.sendall(data)
                else:
                    held.put((time.monotonic() + delay_s, data))
        except OSError:
            return
        finally:
            self.close()
            if held is not None:
                held.put(None)

    def _send_held(self, held: queue.SimpleQueue[tuple[float, bytes] | None], sink: socket.socket) -> None:
        """Passes each chunk on once its time comes, in order; stops when the link closes."""
        while (item := held.get()) is not None:
            due, data = item
            if self._closed.wait(max(0.0, due - time.monotonic())):
                return
            try:
                sink.sendall(data)
            except OSError:
                self.close()
                return
