"""What one point of the scale benchmark runs on: a private Redis (one server, or a 3-master Redis
Cluster), one side's delayq (a source tree), and that delayq's two loops as processes of their own.

The servers are the tests' own (``tests/servers.py``): free ports, no persistence, a temporary
directory, stopped by pid. Every process of a side runs with this checkout's ``.venv`` and the side's
``functions/`` first on PYTHONPATH (``systems.Checkout``, as ``make bench --compare`` runs its sides),
so the same harness measures the engine of any checkout.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO / "tests"))
from processes import child_env  # noqa: E402 - the benchmark's environment for its processes
from systems import PROJECT_PYTHON as PYTHON  # noqa: E402 - this checkout's .venv runs every side
from systems import Checkout  # noqa: E402 - a side's source tree, and its PYTHONPATH

from servers import RedisClusterServers, RedisServer  # noqa: E402 - the tests' private servers

NAMESPACE = "scale"
TARGET = "python:scale_target:deliver"
TICK_S = 1.0  # the loops' DELAYQ_TICK
COUNTERS = ("used_cpu_user", "used_cpu_sys", "total_commands_processed", "used_memory")


class Store:
    """The private Redis under test; ``info()`` sums the figures over its masters."""

    def __init__(self, cluster: bool, partitions: int) -> None:
        self.cluster = cluster
        self.partitions = partitions
        self.servers: RedisClusterServers | RedisServer = (
            RedisClusterServers(3) if cluster else RedisServer("--appendonly", "no")
        )
        self.servers.start()
        nodes = self.servers.nodes if isinstance(self.servers, RedisClusterServers) else [self.servers]
        self.clients = [node.client() for node in nodes]

    @property
    def url(self) -> str:
        return self.servers.url

    def info(self) -> dict[str, float]:
        """CPU (s), commands and memory (B), summed over the masters, less this call's own INFO."""
        infos = [client.info() for client in self.clients]
        totals = {key: sum(float(info[key]) for info in infos) for key in COUNTERS}
        totals["total_commands_processed"] -= len(infos)
        return totals

    def command_stats(self) -> dict[str, tuple[int, int]]:
        """Calls and µs spent so far by command (``INFO commandstats``: those scripts made too; a script's
        µs include its commands'), summed over the masters."""
        stats: dict[str, tuple[int, int]] = {}
        for client in self.clients:
            for name, stat in client.info("commandstats").items():
                calls, usec = stats.get(name.removeprefix("cmdstat_"), (0, 0))
                stats[name.removeprefix("cmdstat_")] = (calls + int(stat["calls"]), usec + int(stat["usec"]))
        return stats

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.servers.close()


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {
        "cpu_s": (after["used_cpu_user"] - before["used_cpu_user"]) + (after["used_cpu_sys"] - before["used_cpu_sys"]),
        "commands": after["total_commands_processed"] - before["total_commands_processed"],
        "memory": after["used_memory"] - before["used_memory"],
    }


@dataclass(frozen=True)
class Side:
    """One source tree whose delayq is measured (``systems.Checkout``), named ``<directory>@<commit>``."""

    checkout: Checkout

    @classmethod
    def of(cls, root: Path) -> Side:
        return cls(Checkout.of(root))

    @property
    def root(self) -> Path:
        return self.checkout.root

    @property
    def name(self) -> str:
        return f"{self.root.name}@{self.checkout.commit}"

    def env(self, store: Store, out: Path) -> dict[str, str]:
        """The environment of this side's processes on ``store``; handler starts go to ``out``."""
        env = child_env()
        env["PYTHONPATH"] = self.checkout.pythonpath(BENCH)
        env["DELAYQ_REDIS_URL"] = store.url
        env["DELAYQ_REDIS_MODE"] = "cluster" if store.cluster else "standalone"
        env["DELAYQ_PARTITIONS"] = str(store.partitions)
        env["DELAYQ_NAMESPACE"] = NAMESPACE
        env["DELAYQ_TOPICS"] = json.dumps({"*": {"target": TARGET}})
        env["DELAYQ_TICK"] = f"{TICK_S:g}"
        env["BENCH_OUT"] = str(out)
        return env


def load(env: dict[str, str], workdir: Path, *args: str) -> subprocess.Popen[bytes]:
    """Starts ``scale_load.py`` with ``args``; its answer is the last line of ``workdir/<command>.out``."""
    out = (workdir / f"{args[0]}.out").open("ab")
    err = (workdir / f"{args[0]}.log").open("ab")
    with out, err:
        return subprocess.Popen([str(PYTHON), str(BENCH / "scale_load.py"), *args], env=env, stdout=out, stderr=err)


def answer(proc: subprocess.Popen[bytes], workdir: Path, command: str, timeout: float) -> dict[str, Any]:
    """Waits for a ``load`` process; its JSON answer, or RuntimeError with its log."""
    if proc.wait(timeout) != 0:
        raise RuntimeError(f"scale_load.py {command} failed: {_tail(workdir / f'{command}.log')}")
    lines = (workdir / f"{command}.out").read_text().splitlines()
    return dict(json.loads(lines[-1]))


class Loops:
    """One sweep and one consume process, ``python -m delayq sweep|consume`` as a deployment runs them
    outside Lambda, each stopped by its pid."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for loop in ("sweep", "consume"):
            with (workdir / f"{loop}.log").open("ab") as log:
                command = [str(PYTHON), "-m", "delayq", loop]
                self.procs[loop] = subprocess.Popen(command, env=env, cwd=workdir, stdout=log, stderr=log)
        self.workdir = workdir

    def check(self) -> None:
        for loop, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"the {loop} loop exited ({proc.returncode}): {_tail(self.workdir / f'{loop}.log')}")

    def cpu_s(self) -> float:
        """CPU seconds (user + system) both loops used so far."""
        return sum(_proc_cpu_s(proc.pid) for proc in self.procs.values())

    def consumer_threads(self) -> int:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.procs['consume'].pid}/status").read_text().splitlines():
                if line.startswith("Threads:"):
                    return int(line.split()[1])
        return 0

    def stop(self, grace: float = 30) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> Loops:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _tail(log: Path) -> str:
    """A failed process's last line (its error), then the end of its log."""
    text = log.read_text(errors="replace").strip()
    return f"{text.splitlines()[-1] if text else '(no output)'}\n{text[-3000:]}"


def _proc_cpu_s(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()  # from field 3 (state) on
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
