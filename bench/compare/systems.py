"""The systems the bench compares (delayq and its peers), the delayq checkouts it measures, where the
bench keeps its files, and how each system's environment is installed: once, then again only when its
pins change.

To add a system: an adapter under ``bench/peers/`` (``bench/peers/common.py`` documents the protocol)
and an entry in ``SYSTEMS``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
PEERS = BENCH / "peers"
STATE = REPO / ".bench"
VENVS = STATE / "venvs"
NODE_DIR = PEERS / "bullmq_node"
PROJECT_PYTHON = REPO / ".venv" / "bin" / "python"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ------------------------------------------------------------------------------------- checkouts


@dataclass(frozen=True)
class Checkout:
    """A source tree whose delayq is measured. Its processes run this checkout's ``.venv`` with the
    tree's ``functions/`` first on PYTHONPATH (``pythonpath``), so the same harness measures the engine
    of any checkout, unchanged (``make bench --compare``, ``make bench-scale --compare``)."""

    root: Path

    @classmethod
    def of(cls, root: Path) -> Checkout:
        root = root.resolve()
        if not (root / "functions" / "delayq" / "__init__.py").exists():
            raise SystemExit(f"{root} holds no functions/delayq: not a delayq checkout")
        return cls(root)

    @cached_property
    def commit(self) -> str:
        """The short commit id, ``+dirty`` when its ``functions/`` has uncommitted changes."""
        commit = _git(self.root, "rev-parse", "--short", "HEAD") or "?"
        return commit + ("+dirty" if _git(self.root, "status", "--porcelain", "functions") else "")

    def pythonpath(self, *more: Path) -> str:
        """PYTHONPATH of this checkout's delayq processes: its ``functions/`` first, then ``more``."""
        return os.pathsep.join(str(path) for path in (self.root / "functions", *more))


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False).stdout.strip()


HERE = Checkout(REPO)


# ------------------------------------------------------------------------------------- systems


@dataclass
class System:
    name: str
    env: str  # "delayq" (the project's .venv), "node", or a venv under .bench/venvs
    adapter: str  # path under bench/peers
    worker_args: list[str] = field(default_factory=list)
    base: str | None = None  # a variant: same enqueue path as its base, another worker config
    label: str = ""
    notes: str = ""
    early_tolerance_ms: float = 0.0
    fed: bool = False  # has a bulk call: its enqueue figure is fed the run's JSON batches (enqueue --batches)
    checkout: Checkout = HERE  # env "delayq": whose functions/ its processes import

    def command(self) -> list[str]:
        if self.env == "node":
            return [shutil.which("node") or "node", str(PEERS / self.adapter)]
        python = PROJECT_PYTHON if self.env == "delayq" else VENVS / self.env / "bin" / "python"
        return [str(python), str(PEERS / self.adapter)]


SYSTEMS = [
    System(
        "delayq",
        "delayq",
        "delayq_peer.py",
        label="topic defaults: concurrency 8, batch 100",
        notes="one consume process (`Consumer`, as `python -m delayq consume` runs it) and one sweep process; "
        "DELAYQ_TICK 1 s (the default). Enqueue: one `Queue.enqueue_many` call per 1000-job JSON batch.",
        fed=True,
    ),
    System(
        "delayq-tuned",
        "delayq",
        "delayq_peer.py",
        ["--concurrency", "100", "--batch", "500"],
        base="delayq",
        label="concurrency 100 (as the peers), batch 500",
        notes="the same as delayq with the topic's knobs raised.",
    ),
    System(
        "delayq-2",
        "delayq",
        "delayq_peer.py",
        ["--concurrency", "100", "--batch", "500", "--consumers", "2"],
        base="delayq",
        label="delayq-tuned with 2 consume processes",
        notes="delayq-tuned, with a second consume process beside the first (`python -m delayq consume` run "
        "twice): not one worker process like the peers, but how a hot topic is scaled. Each takes only for its "
        "own free workers.",
    ),
    System(
        "arq",
        "arq",
        "arq_peer.py",
        label="max_jobs 100, poll_delay 0.5 s (default)",
        notes="no bulk enqueue in arq: `enqueue_job(_defer_until=...)` 1000 at a time with asyncio.gather. "
        "One `Worker`, max_jobs 100 (arq's default is 10), arq's default poll_delay 0.5 s; it keeps results "
        "for an hour (its default).",
    ),
    System(
        "arq-poll50ms",
        "arq",
        "arq_peer.py",
        ["--poll-delay", "0.05"],
        base="arq",
        label="poll_delay 0.05 s",
        notes="arq with a tuned poll_delay of 50 ms.",
    ),
    System(
        "rq",
        "rq",
        "rq_peer.py",
        label="Worker (fork per job) + scheduler",
        notes="rq's `enqueue_many` cannot schedule: `enqueue_at` 1000 at a time in one pipeline. One default "
        "`Worker` (forks a work horse per job) with its scheduler (`with_scheduler=True`, polls every 1 s). "
        "rq stores the scheduled time in whole seconds, so jobs may start up to 1 s early.",
    ),
    System(
        "rq-simple",
        "rq",
        "rq_peer.py",
        ["--worker-class", "simple"],
        base="rq",
        label="SimpleWorker (no fork) + scheduler",
        notes="rq with `SimpleWorker` (runs jobs in the worker process, no fork).",
    ),
    System(
        "bullmq-py",
        "bullmq",
        "bullmq_peer.py",
        label="Worker concurrency 100",
        notes="`Queue.addBulk`, 1000 jobs per call, `delay`; one `Worker`, concurrency 100 (BullMQ's default is 1).",
        fed=True,
    ),
    System(
        "bullmq-node",
        "node",
        "bullmq_node/peer.mjs",
        label="Worker concurrency 100",
        notes="`queue.addBulk`, 1000 jobs per call, `delay`; one `Worker`, concurrency 100 (BullMQ's default is 1).",
    ),
    System(
        "celery",
        "celery",
        "celery_peer.py",
        label="prefork, default concurrency and prefetch",
        notes="no bulk send: `apply_async(eta=...)` per task on one producer. ETA tasks are not delayed in Redis: "
        "the worker takes them at once and holds them until due (a copy in the transport's unacked hash, "
        "redelivered after visibility_timeout, 1 h by default). Worker: prefork pool, one child per core, "
        "default prefetch. Memory per job is the message waiting in the list, with no worker running.",
    ),
]
BY_NAME = {s.name: s for s in SYSTEMS}
PIP_ENVS = ("arq", "rq", "bullmq", "celery", "plot")


# ------------------------------------------------------------------------------------- installs


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()


def ensure_venv(name: str) -> Path:
    """``.bench/venvs/<name>`` with ``bench/peers/<name>/requirements.txt``, installed once per change."""
    requirements = PEERS / name / "requirements.txt"
    venv = VENVS / name
    stamp = venv / ".bench-installed"
    digest = _digest(requirements)
    if stamp.exists() and stamp.read_text() == digest and (venv / "bin" / "python").exists():
        return venv
    log(f"installing {name} into {venv.relative_to(REPO)} (pins: {requirements.relative_to(REPO)})")
    base = getattr(sys, "_base_executable", sys.executable)
    if not (venv / "bin" / "python").exists():
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "-r", str(requirements)], check=True)
    stamp.write_text(digest)
    return venv


def ensure_node() -> None:
    """``npm install`` of the locked versions in bench/peers/bullmq_node, once per change of its lock.

    Not ``npm ci``: npm 11 writes a lock without the other platforms' entries of msgpackr's optional
    native add-on, and then ``npm ci`` refuses that lock as out of sync; ``npm install`` installs the
    locked versions and leaves the lock as it is."""
    if not shutil.which("node") or not shutil.which("npm"):
        raise SystemExit("bullmq-node needs node and npm on PATH")
    lock = NODE_DIR / "package-lock.json"
    stamp = NODE_DIR / "node_modules" / ".bench-installed"
    digest = _digest(NODE_DIR / "package.json", lock)
    if stamp.exists() and stamp.read_text() == digest:
        return
    log("installing BullMQ (Node) into bench/peers/bullmq_node/node_modules (npm install of package-lock.json)")
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_DIR, check=True)
    stamp.write_text(digest)


def ensure(systems: list[System], plot: bool) -> None:
    if not PROJECT_PYTHON.exists():
        raise SystemExit(f"{PROJECT_PYTHON} is missing: run `make bench` (it builds .venv first)")
    for env in dict.fromkeys(s.env for s in systems):
        if env == "node":
            ensure_node()
        elif env != "delayq":
            ensure_venv(env)
    if plot:
        ensure_venv("plot")


def versions(systems: list[System]) -> dict[str, str]:
    found: dict[str, str] = {}
    wanted = {"arq": ["arq"], "rq": ["rq"], "bullmq": ["bullmq"], "celery": ["celery", "kombu"]}
    for env in dict.fromkeys(s.env for s in systems):
        if env in wanted:
            for line in (PEERS / env / "requirements.txt").read_text().splitlines():
                pkg, _, version = line.partition("==")
                if pkg.strip().lower() in [*wanted[env], "redis"]:
                    key = f"{pkg.strip()} ({env} env)" if pkg.strip().lower() == "redis" else pkg.strip()
                    found[key] = version.strip()
        elif env == "node":
            lock = json.loads((NODE_DIR / "package-lock.json").read_text())
            for pkg in ("bullmq", "ioredis"):
                found[f"{pkg} (node)"] = lock["packages"][f"node_modules/{pkg}"]["version"]
        elif env == "delayq":
            out = subprocess.run(
                [
                    str(PROJECT_PYTHON),
                    "-c",
                    "import importlib.metadata as m; print(m.version('delayq'), m.version('redis'))",
                ],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.split()
            if len(out) == 2:
                found["delayq"], found["redis (delayq env)"] = out
    return found
