"""The systems the peers compare runs (delayq and its peers), and how each system's environment is
installed: once, then again only when its pins change.

To add a system: an adapter under ``bench/compare/peers/`` (``peers/common.py`` documents the protocol)
and an entry in ``SYSTEMS``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared import log
from shared.checkout import Checkout
from shared.paths import PROJECT_PYTHON, REPO, VENVS
from shared.venvs import digest, ensure_venv, plot_python

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
NODE_DIR = PEERS / "bullmq_node"
THIS = Checkout(REPO)  # the checkout the bench runs from


# ------------------------------------------------------------------------------------- systems


@dataclass
class System:
    name: str
    env: str  # "delayq" (the project's .venv), "node", or a venv under .bench/venvs
    adapter: str  # path under peers/
    worker_args: list[str] = field(default_factory=list)
    base: str | None = None  # a variant: same enqueue path as its base, another worker config
    label: str = ""
    notes: str = ""
    early_tolerance_ms: float = 0.0
    fed: bool = False  # has a bulk call: its enqueue figure is fed the run's JSON batches (enqueue --batches)
    checkout: Checkout = THIS  # env "delayq": whose functions/ its processes import

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


# ------------------------------------------------------------------------------------- installs


def ensure_peer(name: str) -> Path:
    """``.bench/venvs/<name>`` with ``peers/<name>/requirements.txt``."""
    return ensure_venv(name, PEERS / name / "requirements.txt")


def ensure_node() -> None:
    """``npm install`` of the locked versions in ``peers/bullmq_node``, once per change of its lock.

    Not ``npm ci``: npm 11 writes a lock without the other platforms' entries of msgpackr's optional
    native add-on, and then ``npm ci`` refuses that lock as out of sync; ``npm install`` installs the
    locked versions, and may add those entries to the lock, which is put back as it was."""
    if not shutil.which("node") or not shutil.which("npm"):
        raise SystemExit("bullmq-node needs node and npm on PATH")
    lock = NODE_DIR / "package-lock.json"
    stamp = NODE_DIR / "node_modules" / ".bench-installed"
    pins = digest(NODE_DIR / "package.json", lock)
    if stamp.exists() and stamp.read_text() == pins:
        return
    log(f"installing BullMQ (Node) into {NODE_DIR.relative_to(REPO)}/node_modules (npm install of package-lock.json)")
    pinned = lock.read_bytes()
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_DIR, check=True)
    lock.write_bytes(pinned)
    stamp.write_text(pins)


def ensure(systems: list[System], plot: bool) -> None:
    if not PROJECT_PYTHON.exists():
        raise SystemExit(f"{PROJECT_PYTHON} is missing: run `make bench` (it builds .venv first)")
    for env in dict.fromkeys(s.env for s in systems):
        if env == "node":
            ensure_node()
        elif env != "delayq":
            ensure_peer(env)
    if plot:
        plot_python()


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
