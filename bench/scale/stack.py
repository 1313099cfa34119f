"""What one point of the scale run runs on: a side's delayq (a checkout) on the point's private Redis
(``shared.servers``: one server, or a 3-master Redis Cluster), its producers, and its two loops as
processes of their own.

Every process of a side runs with this checkout's ``.venv`` and the side's ``functions/`` first on
PYTHONPATH (``shared.checkout``), so the same harness measures the engine of any checkout.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.checkout import Checkout, base_env
from shared.paths import PROJECT_PYTHON as PYTHON
from shared.servers import PrivateRedis

HERE = Path(__file__).resolve().parent
NAMESPACE = "scale"
TARGET = "python:scale_target:deliver"  # scale_target.py, here
TICK_S = 1.0  # the loops' DELAYQ_TICK


def side_env(side: Checkout, store: PrivateRedis, partitions: int, out: Path) -> dict[str, str]:
    """The environment of ``side``'s processes on ``store``; handler starts go to ``out``."""
    env = base_env()
    env["PYTHONPATH"] = side.pythonpath(HERE)
    env["DELAYQ_REDIS_URL"] = store.url
    env["DELAYQ_REDIS_MODE"] = "cluster" if store.cluster else "standalone"
    env["DELAYQ_PARTITIONS"] = str(partitions)
    env["DELAYQ_NAMESPACE"] = NAMESPACE
    env["DELAYQ_TOPICS"] = json.dumps({"*": {"target": TARGET}})
    env["DELAYQ_TICK"] = f"{TICK_S:g}"
    env["BENCH_OUT"] = str(out)
    return env


def load(env: dict[str, str], workdir: Path, *args: str) -> subprocess.Popen[bytes]:
    """Starts ``load.py`` with ``args``; its answer is the last line of ``workdir/<command>.out``."""
    out = (workdir / f"{args[0]}.out").open("ab")
    err = (workdir / f"{args[0]}.log").open("ab")
    with out, err:
        return subprocess.Popen([str(PYTHON), str(HERE / "load.py"), *args], env=env, stdout=out, stderr=err)


def answer(proc: subprocess.Popen[bytes], workdir: Path, command: str, timeout: float) -> dict[str, Any]:
    """Waits for a ``load`` process; its JSON answer, or RuntimeError with its log."""
    if proc.wait(timeout) != 0:
        raise RuntimeError(f"load.py {command} failed: {_tail(workdir / f'{command}.log')}")
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
