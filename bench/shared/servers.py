"""The bench's private Redis, the one way every harness and probe reaches Redis: a ``redis-server`` of
its own on a free port (no persistence, a temporary directory, stopped by pid), a Redis Cluster of a
few masters, or a replica of another; and what a run cost it, from ``INFO``.

Nothing here imports delayq: a probe can measure another checkout's engine in its own process.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import redis

from shared import log

COUNTERS = ("used_cpu_user", "used_cpu_sys", "total_commands_processed", "used_memory")


def free_port() -> int:
    """A port nobody listens on, whose cluster bus port (+ 10000) is free too."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port + 10000 < 65536 and _is_free(port + 10000):
            return port
    raise RuntimeError("no free port")


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _program(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"the bench needs {name} on PATH (Debian: apt-get install redis-server)")
    return found


class _Node:
    """One ``redis-server`` on a free port, in ``directory``."""

    def __init__(self, directory: Path, args: Sequence[str]) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = directory / f"redis-{self.port}.log"
        command = [_program("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(directory), "--logfile", str(self.log), *args]  # fmt: skip
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)

    def wait(self, ready: Callable[[], bool], what: str, timeout: float = 30) -> None:
        """Until ``ready()``; RuntimeError with the end of the server's log if it exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError, OSError):
                if ready():
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else "(no log)"
        raise RuntimeError(f"{what} on port {self.port} did not come up; its log ends:\n{tail}")

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()  # by pid: the server this bench started
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class PrivateRedis:
    """A Redis of the bench's own for one run, stopped by ``stop()`` (or the ``with`` block's end):
    one ``redis-server``, or with ``masters`` > 1 a Redis Cluster of that many masters (``redis-cli
    --cluster create``, no replicas), or with ``replica_of`` a replica of that server, ready once its
    first sync is done. ``args`` are more options for every server.

    ``url``, ``port`` and ``client`` reach the first master, ``clients`` every master. A start that
    fails leaves no process and no directory behind."""

    def __init__(self, *args: str, masters: int = 1, replica_of: PrivateRedis | None = None) -> None:
        self.cluster = masters > 1
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-bench-redis-"))
        self.nodes: list[_Node] = []
        try:
            self._start(list(args), masters, replica_of)
        except BaseException:
            self.stop()
            raise
        self.version = str(self.client.info("server")["redis_version"])
        kind = f"cluster of {masters} masters" if self.cluster else "redis-server"
        pids = ", ".join(str(node.proc.pid) for node in self.nodes)
        log(f"private {kind} {self.version} (pid {pids}) on 127.0.0.1:{self.port}, dir {self.dir}")

    def _start(self, args: list[str], masters: int, replica_of: PrivateRedis | None) -> None:
        if replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(replica_of.port)]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]
        for n in range(masters):
            directory = self.dir / f"node-{n}"
            directory.mkdir()
            options = [*args, "--cluster-config-file", "nodes.conf"] if self.cluster else args
            self.nodes.append(_Node(directory, options))
        for node in self.nodes:
            node.wait(node.client.ping, "redis-server")
        if replica_of is not None:
            node = self.nodes[0]
            node.wait(lambda: node.client.info("replication").get("master_link_status") == "up", "the replica")
        if self.cluster:
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            create = [_program("redis-cli"), "--cluster", "create", *addresses, "--cluster-replicas", "0"]
            subprocess.run([*create, "--cluster-yes"], check=True, capture_output=True, timeout=60)
            for node in self.nodes:
                node.wait(lambda node=node: self._joined(node), "cluster node")

    def _joined(self, node: _Node) -> bool:
        info = str(node.client.execute_command("CLUSTER", "INFO"))
        return "cluster_state:ok" in info and f"cluster_known_nodes:{len(self.nodes)}" in info

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def url(self) -> str:
        return self.nodes[0].url

    @property
    def client(self) -> redis.Redis:
        return self.nodes[0].client

    @property
    def clients(self) -> list[redis.Redis]:
        return [node.client for node in self.nodes]

    def flush(self) -> None:
        """Every key and every cached script gone, on every master."""
        for client in self.clients:
            client.execute_command("FLUSHALL", "SYNC")
            client.execute_command("SCRIPT", "FLUSH", "SYNC")
        time.sleep(0.1)

    def snapshot(self) -> dict[str, Any]:
        """``INFO everything`` of the first master (the only one, but on a cluster), and when it was read."""
        info = self.client.info("everything")
        info["_at"] = time.monotonic()
        return info

    def info(self) -> dict[str, float]:
        """CPU (s), commands and memory (B), summed over the masters, less this call's own INFO."""
        infos = [client.info() for client in self.clients]
        totals = {key: sum(float(info[key]) for info in infos) for key in COUNTERS}
        totals["total_commands_processed"] -= len(infos)
        return totals

    def command_stats(self) -> dict[str, tuple[int, int]]:
        """Calls and µs so far by command (``INFO commandstats``: those scripts made too; a script's µs
        include its commands'), summed over the masters."""
        stats: dict[str, tuple[int, int]] = {}
        for client in self.clients:
            for name, stat in client.info("commandstats").items():
                calls, usec = stats.get(name.removeprefix("cmdstat_"), (0, 0))
                stats[name.removeprefix("cmdstat_")] = (calls + int(stat["calls"]), usec + int(stat["usec"]))
        return stats

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrivateRedis:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def redis_url(given: str | None) -> Iterator[str]:
    """``given``, a Redis the caller names, or a private redis-server's URL for the ``with`` block."""
    if given:
        yield given
        return
    with PrivateRedis() as server:
        yield server.url


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What happened between two ``PrivateRedis.info()``: CPU (s), commands, memory (B)."""
    return {
        "cpu_s": (after["used_cpu_user"] - before["used_cpu_user"]) + (after["used_cpu_sys"] - before["used_cpu_sys"]),
        "commands": after["total_commands_processed"] - before["total_commands_processed"],
        "memory": after["used_memory"] - before["used_memory"],
    }


def delta(before: dict[str, Any], after: dict[str, Any], jobs: int) -> dict[str, Any]:
    """Redis' side of a scenario between two ``snapshot()``, per job: CPU (user + sys), commands (those
    inside Lua scripts too), requests (socket reads: a pipeline is one while under 16 KB) and replies
    (socket writes). The orchestrator's own INFO of the window is taken out."""

    def d(key: str) -> float:
        return float(after[key]) - float(before[key])

    cpu_s = d("used_cpu_user") + d("used_cpu_sys")
    commands = d("total_commands_processed") - 1
    reads = d("total_reads_processed") - 1
    writes = d("total_writes_processed") - 1
    stats = {}
    for key, value in after.items():
        if key.startswith("cmdstat_") and key != "cmdstat_info":
            calls = value["calls"] - before.get(key, {}).get("calls", 0)
            if calls:
                stats[key[len("cmdstat_") :]] = calls
    per = max(jobs, 1)
    return {
        "redis_cpu_s": cpu_s,
        "redis_cpu_us_per_job": cpu_s * 1e6 / per,
        "commands_per_job": commands / per,
        "requests_per_job": reads / per,
        "replies_per_job": writes / per,
        "commandstats": dict(sorted(stats.items(), key=lambda kv: -kv[1])),
        "used_memory_delta": int(after["used_memory"]) - int(before["used_memory"]),
        "connected_clients_after": int(after["connected_clients"]),
    }
