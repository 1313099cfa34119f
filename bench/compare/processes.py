"""The systems' processes: an adapter command run to its end, a worker started and stopped (its whole
process group), and the CPU a worker's processes used.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared import log
from shared.checkout import base_env
from systems import System

RESULT_PREFIX = "BENCH-RESULT "


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    out: Path
    log_path: Path


def child_env(system: System | None = None) -> dict[str, str]:
    """The environment of the bench's processes; delayq's import their checkout's ``functions/``
    (``System.checkout``: this one's, or a ``--compare`` checkout's) with this checkout's ``.venv``."""
    env = base_env()
    if system is not None and system.env == "delayq":
        env["PYTHONPATH"] = system.checkout.pythonpath()
    return env


def run_adapter(system: System, url: str, args: list[str], log_path: Path, timeout: float) -> dict[str, Any]:
    """Runs one adapter command to its end; its BENCH-RESULT, with the CPU it and its children used."""
    command = [*system.command(), "--redis-url", url, *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log_path.open("ab") as out:
        out.write(("$ " + shlex.join(command) + "\n").encode())
        out.flush()
        proc = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=out, env=child_env(system), timeout=timeout, check=False
        )
        out.write(proc.stdout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in proc.stdout.decode(errors="replace").splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{system.name}: `{' '.join(args[:1])}` failed (exit {proc.returncode}):\n{tail}")
    answer: dict[str, Any] = json.loads(lines[-1][len(RESULT_PREFIX) :])
    answer["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return answer


def start_worker(system: System, url: str, workdir: Path, extra: list[str]) -> Worker:
    out, ready, log_path = workdir / "starts.jsonl", workdir / "ready", workdir / "worker.log"
    command = [*system.command(), "--redis-url", url, *extra, "worker", "--out", str(out), "--ready", str(ready)]
    command += system.worker_args
    handle = log_path.open("ab")
    handle.write(("$ " + shlex.join(command) + "\n").encode())
    handle.flush()
    env = child_env(system)
    proc = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    handle.close()
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_worker(Worker(proc, out, log_path))
            raise RuntimeError(
                f"{system.name}: the worker did not start:\n{log_path.read_text(errors='replace')[-3000:]}"
            )
        time.sleep(0.05)
    time.sleep(0.5)  # its first poll or blocking read is out
    return Worker(proc, out, log_path)


def stop_worker(worker: Worker, grace: float = 30) -> None:
    """SIGTERM to the worker's process group (the processes this bench started), SIGKILL after ``grace``."""
    if worker.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.proc.pid, signal.SIGTERM)
        try:
            worker.proc.wait(grace)
        except subprocess.TimeoutExpired:
            log(f"worker {worker.proc.pid} ignored SIGTERM for {grace:g} s: SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(worker.proc.pid, signal.SIGKILL)  # what is left of the group (a pool child, a scheduler)


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system, with the children they reaped) of every live process in a group:
    the worker's processes. Read at both ends of a scenario, it leaves the start-up out."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        fields = text[text.rindex(")") + 2 :].split()  # from field 3 (state) on
        if int(fields[2]) == pgid:
            total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def running_worker(system: System, url: str, workdir: Path, extra: list[str]) -> Iterator[Worker]:
    worker = start_worker(system, url, workdir, extra)
    try:
        yield worker
    finally:
        stop_worker(worker)
