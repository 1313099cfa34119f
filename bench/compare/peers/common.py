"""What every Python adapter of the benchmark shares (standard library only: each adapter runs in its
own system's environment).

The protocol, the same for every system (``bench/README.md``):

    <adapter> enqueue --jobs N (--due-ms T | --delay-s D) [--prefix b] [--ids FILE]
        bulk enqueue of N jobs with a 100-byte body, all due at T (epoch ms); ``--ids`` gets one
        ``{"id", "due_ms"}`` line per job
    <adapter> enqueue --batches FILE
        the same, fed: FILE holds one JSON batch per line, ``{"jobs": [{"topic", "id", "body",
        "run_at"}, ...]}`` (the body of delayq's ``POST /jobs/batch``, ``run_at`` in epoch seconds);
        the lines are read before the clock starts, then each is parsed and handed to the system's
        bulk call in turn (adapters of systems with one: ``System.fed``)
    <adapter> worker --out FILE [--ready FILE]
        one worker with a no-op handler that appends ``{"id", "start_ms"}`` per delivery to FILE
        (one write(2) per line on an O_APPEND file: nothing is lost on SIGTERM or SIGKILL); runs
        until SIGTERM; touches ``--ready`` once it takes jobs
    <adapter> produce-steady --rate R --seconds S --min-delay 1 --max-delay 5 --ids FILE
        one job at a time at a steady rate, each due a uniform random delay after it is sent

Each command prints one line ``BENCH-RESULT {json}`` for the orchestrator.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PAYLOAD = "x" * 100  # the job's body: a 100-character string, the same for every system
QUEUE_NAME = "bench"  # topic / queue name in every system
RESULT_PREFIX = "BENCH-RESULT "


def now_ms() -> float:
    return time.time() * 1000


def result(**fields: Any) -> None:
    """The command's answer to the orchestrator: the last line it reads with the prefix."""
    sys.stdout.write(RESULT_PREFIX + json.dumps(fields) + "\n")
    sys.stdout.flush()


class Recorder:
    """Appends one JSON line per delivery. Safe across threads and forked processes (O_APPEND)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._fd: int | None = None
        self._pid = -1

    def record(self, job_id: str) -> None:
        start = now_ms()  # first thing: the handler has started
        if self._fd is None or self._pid != os.getpid():  # a forked child opens its own descriptor
            self._fd = os.open(self.path or os.environ["BENCH_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._pid = os.getpid()
        os.write(self._fd, f'{{"id":"{job_id}","start_ms":{start:.3f}}}\n'.encode())


class IdsWriter:
    """The ids file: one ``{"id", "due_ms"}`` line per job enqueued."""

    def __init__(self, path: str | None) -> None:
        self._file = open(path, "a", buffering=1 << 16) if path else None  # noqa: SIM115 - closed in close()

    def add(self, job_id: str, due_ms: float) -> None:
        if self._file is not None:
            self._file.write(f'{{"id":"{job_id}","due_ms":{due_ms:.0f}}}\n')

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def touch(path: str | None) -> None:
    if path:
        Path(path).write_text(str(os.getpid()))


def due_of(args: argparse.Namespace) -> int:
    """The burst's due time in whole epoch ms (every system keeps ms): ``--due-ms``, else now + ``--delay-s``."""
    if args.due_ms is not None:
        return round(args.due_ms)
    return round(now_ms() + args.delay_s * 1000)


def read_batches(path: str) -> list[str]:
    """The lines of an ``enqueue --batches`` file: each a JSON batch, parsed by the adapter while timed."""
    return Path(path).read_text().splitlines()


def job_ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def steady_plan(rate: float, seconds: float, min_delay: float, max_delay: float, seed: int) -> list[float]:
    """Per job, its delay in ms: uniform in [min, max] seconds, the same sequence for every system."""
    rng = random.Random(seed)
    return [rng.uniform(min_delay, max_delay) * 1000 for _ in range(round(rate * seconds))]


def paced(count: int, rate: float) -> Iterator[int]:
    """Yields 0..count-1, job i no sooner than i / rate after the start (catching up when behind)."""
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        yield i


def stop_on_sigterm(callback: Callable[[], None]) -> threading.Event:
    """SIGTERM and SIGINT set the returned event and call ``callback`` (once)."""
    stop = threading.Event()

    def handler(*_: Any) -> None:
        if not stop.is_set():
            stop.set()
            callback()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)
    return stop


def parser(description: str) -> tuple[argparse.ArgumentParser, Any, dict[str, argparse.ArgumentParser]]:
    """The protocol's argument parser, its sub-parsers action (for a system's own commands) and the
    protocol's sub-parsers by name (for a system's own knobs)."""
    top = argparse.ArgumentParser(description=description)
    top.add_argument("--redis-url", required=True)
    commands = top.add_subparsers(dest="command", required=True)
    subs: dict[str, argparse.ArgumentParser] = {}

    enqueue = subs["enqueue"] = commands.add_parser("enqueue", help="bulk enqueue N jobs due at one instant")
    enqueue.add_argument("--jobs", type=int, help="how many jobs (without --batches)")
    enqueue.add_argument("--batches", help="a file of JSON batches to enqueue, one per line, instead of --jobs")
    enqueue.add_argument("--due-ms", type=float)
    enqueue.add_argument("--delay-s", type=float, default=3600)
    enqueue.add_argument("--prefix", default="b")
    enqueue.add_argument("--ids", help="write one {id, due_ms} line per job here")
    enqueue.add_argument("--chunk", type=int, help="jobs per bulk call (each adapter has its default)")

    worker = subs["worker"] = commands.add_parser("worker", help="one worker process with a no-op handler")
    worker.add_argument("--out", required=True)
    worker.add_argument("--ready")

    steady = subs["produce-steady"] = commands.add_parser("produce-steady", help="enqueue at a steady rate")
    steady.add_argument("--rate", type=float, default=500)
    steady.add_argument("--seconds", type=float, default=30)
    steady.add_argument("--min-delay", type=float, default=1)
    steady.add_argument("--max-delay", type=float, default=5)
    steady.add_argument("--seed", type=int, default=1)
    steady.add_argument("--prefix", default="s")
    steady.add_argument("--ids", required=True)
    return top, commands, subs
