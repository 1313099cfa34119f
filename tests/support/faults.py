"""Helpers of the fault tier: delayq loops as real processes, private Redis servers, and the checker.

``Fleet`` starts ``python -m delayq sweep|consume`` processes (each in a session of its own, killed by
its pid), with the environment of one scenario; their deliveries go to ``fault_target`` which appends
JSON lines to one file. ``check`` reads that file against the jobs that were enqueued and counts
lost, duplicated and early deliveries, by Redis' clock; it prints its totals and appends them to
``tests/faults/.report/faults.log`` (gitignored).
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis

from delayq import Queue, Scheduled, Settings
from delayq.core.job import EnqueueResult

from support import fault_target
from support.events import FakeContext, api_event

TESTS = Path(__file__).resolve().parents[1]  # on the processes' PYTHONPATH: the targets are support.*
ROOT = TESTS.parent
FUNCTIONS = ROOT / "functions"
REPORT = TESTS / "faults" / ".report" / "faults.log"
TARGET = "python:support.fault_target:deliver"
LOG_ENV = fault_target.LOG_ENV
T = TypeVar("T")


# ------------------------------------------------------------------------------------ time, polling


def redis_ms(client: redis.Redis) -> float:
    """The Redis server's time, in ms."""
    seconds, micros = client.time()
    return seconds * 1000 + micros / 1000


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.05) -> T:
    """Polls ``predicate`` until it is truthy; returns its last value (falsy on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def busiest_window(times_ms: Iterable[float], window_ms: float = 1000) -> int:
    """The most of ``times_ms`` in any window of ``window_ms`` (each window opening at one of them)."""
    ordered = sorted(times_ms)
    most, last = 0, 0
    for first, opened in enumerate(ordered):
        while last < len(ordered) and ordered[last] < opened + window_ms:
            last += 1
        most = max(most, last - first)
    return most


# ------------------------------------------------------------------------------------ environment


def topics_json(**topics: Mapping[str, Any]) -> str:
    """``DELAYQ_TOPICS`` with every topic delivered to the fault target."""
    return json.dumps({name: {"target": TARGET, **config} for name, config in topics.items()})


def loop_env(
    redis_url: str,
    namespace: str,
    topics: str,
    deliveries: Path,
    *,
    tick: float = 0.1,
    partitions: int = 1,
    **extra: str,
) -> dict[str, str]:
    """The environment of a loop process (and of the in-test Queue: ``make_queue(env)``)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("DELAYQ_")}
    path = [str(TESTS), str(FUNCTIONS), *filter(None, [os.environ.get("PYTHONPATH")])]
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(path),
            "PYTHONUNBUFFERED": "1",
            "DELAYQ_REDIS_URL": redis_url,
            "DELAYQ_NAMESPACE": namespace,
            "DELAYQ_TOPICS": topics,
            "DELAYQ_TICK": str(tick),
            "DELAYQ_PARTITIONS": str(partitions),
            LOG_ENV: str(deliveries),
            **extra,
        }
    )
    return env


def faketime_library() -> str:
    """The libfaketime preload library (what the ``faketime`` command puts in LD_PRELOAD)."""
    patterns = (
        "/usr/lib/*/faketime/libfaketime.so.1",
        "/usr/lib*/faketime/libfaketime.so.1",
        "/usr/local/lib*/faketime/libfaketime.so.1",
    )
    found = sorted(path for pattern in patterns for path in glob.glob(pattern))
    assert shutil.which("faketime"), "the fault tier needs libfaketime (apt-get install faketime)"
    assert found, "libfaketime.so.1 not found (apt-get install faketime)"
    return found[0]


def faketime_env(offset: str) -> dict[str, str]:
    """What ``faketime -f OFFSET`` sets, set directly so that the pid we signal is Python's own (the
    ``faketime`` command forks and waits), plus two switches without which Python cannot run under
    libfaketime 0.9.10 (Debian/Ubuntu), found by trying:

    - ``FAKETIME_DONT_FAKE_MONOTONIC=1``: with CLOCK_MONOTONIC faked, Python's timed waits
      (``Event.wait(t)``, ``Lock.acquire(timeout=t)``, absolute CLOCK_MONOTONIC deadlines) never return.
      In this mode ``time.sleep`` fails with EINVAL instead: the delayq loops never call it, and the
      fault target waits on an Event.
    - ``FAKETIME_FORCE_MONOTONIC_FIX=0``: else a threaded Python process stalls for up to a second
      now and then (jobs handed over ~1 s late even with a +0 s offset; most likely its
      ``pthread_cond_timedwait`` wrapper stretching the GIL's 5 ms waits).

    The wall clock (``time.time()``), the one a machine gets wrong, is offset; the monotonic clock,
    which only measures durations, is left alone.
    """
    return {
        "LD_PRELOAD": faketime_library(),
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
    }


# ------------------------------------------------------------------------------------ processes


class LoopProcess:
    """``python -m delayq <command>`` in a session of its own; stdout (the summary) and stderr (logs)
    go to files in ``workdir``."""

    def __init__(self, name: str, command: str, env: Mapping[str, str], workdir: Path, *args: str) -> None:
        self.name = name
        self.command = [sys.executable, "-m", "delayq", command, *args]
        self.env = dict(env)
        self.out = workdir / f"{name}.out"
        self.err = workdir / f"{name}.err"
        self.process: subprocess.Popen[bytes] | None = None
        self.summary: dict[str, Any] | None = None
        self.terminated = False  # SIGTERM sent: one only, since a second one, during the interpreter's
        # exit (when Python has put back the default handlers), would kill it

    def start(self) -> LoopProcess:
        with self.out.open("ab") as out, self.err.open("ab") as err:
            self.process = subprocess.Popen(
                self.command, env=self.env, stdout=out, stderr=err, cwd=ROOT, start_new_session=True
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the process dies at once, mid-whatever."""
        if self.alive:
            os.kill(self.pid, signal.SIGKILL)
            assert self.process is not None
            self.process.wait(10)

    def catches_sigterm(self) -> bool:
        """Whether the loop has installed its SIGTERM handler (before, SIGTERM just kills it)."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return True  # no /proc here, or gone: nothing to wait for
        caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
        return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))

    def terminate(self) -> None:
        if self.alive and not self.terminated:
            wait_until(lambda: self.catches_sigterm() or not self.alive, 15, interval=0.02)
            os.kill(self.pid, signal.SIGTERM)
            self.terminated = True

    def stop(self, timeout: float = 20.0) -> dict[str, Any]:
        """SIGTERM: the loop finishes what it started, releases its locks and prints its summary."""
        assert self.process is not None
        self.terminate()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not stop within {timeout} s\n{self.tail()}") from None
        assert code == 0, f"{self.name} exited with {code}\n{self.tail()}"
        lines = self.out.read_text().strip().splitlines()
        assert lines, f"{self.name} printed no summary\n{self.tail()}"
        self.summary = json.loads(lines[-1])
        return self.summary

    def tail(self, lines: int = 25) -> str:
        text = self.err.read_text(errors="replace") if self.err.exists() else ""
        return f"--- {self.name} (pid {self.pid}) stderr, last {lines} lines:\n" + "\n".join(text.splitlines()[-lines:])


class Fleet:
    """The loop processes of one scenario. Whatever happens, each is killed (by its pid) on the way out;
    when the scenario fails, the tail of each one's log is printed."""

    def __init__(self, env: Mapping[str, str], workdir: Path) -> None:
        self.env = dict(env)
        self.workdir = workdir
        self.processes: list[LoopProcess] = []

    def start(self, command: str, *args: str, name: str | None = None, **env: str) -> LoopProcess:
        name = name or f"{command}-{len(self.processes) + 1}"
        process = LoopProcess(name, command, {**self.env, **env}, self.workdir, *args).start()
        self.processes.append(process)
        return process

    def sweeper(self, name: str | None = None, **env: str) -> LoopProcess:
        return self.start("sweep", name=name, **env)

    def consumer(self, name: str | None = None, **env: str) -> LoopProcess:
        return self.start("consume", name=name, **env)

    def stop_all(self) -> dict[str, dict[str, Any]]:
        """SIGTERM to every live one, then each one's summary."""
        live = [p for p in self.processes if p.alive]
        for process in live:
            process.terminate()
        return {process.name: process.stop() for process in live}

    def tails(self) -> str:
        return "\n".join(process.tail() for process in self.processes if process.process is not None)

    @contextmanager
    def running(self) -> Iterator[Fleet]:
        try:
            yield self
        except BaseException:
            print(self.tails())
            raise
        finally:
            for process in self.processes:
                process.kill()


# ------------------------------------------------------------------------------------ the checker


@dataclass(frozen=True)
class Enqueued:
    topic: str
    id: str
    run_at_ms: int

    @classmethod
    def from_results(cls, results: Iterable[EnqueueResult | Mapping[str, Any]]) -> list[Enqueued]:
        """From ``enqueue_many`` results, or ``POST /jobs/batch`` ones as JSON (each must be a 201)."""
        jobs = []
        for result in results:
            if isinstance(result, Mapping):
                assert result["status"] == 201, result
                jobs.append(cls(result["topic"], result["id"], int(result["run_at_ms"])))
            else:
                assert isinstance(result, Scheduled), result
                jobs.append(cls(result.topic, result.id, result.run_at_ms))
        return jobs


def read_records(path: Path) -> list[dict[str, Any]]:
    """The fault target's lines; every one must be whole JSON (O_APPEND, one write per line)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


@dataclass
class Totals:
    scenario: str
    enqueued: int
    delivered: int  # jobs with at least one successful delivery
    lost: int
    duplicated: int
    early: int
    attempts: int  # delivery starts
    failures: int  # planned failures recorded by the target
    redelivered: int  # jobs started more than once
    unexpected: int  # deliveries of jobs nobody enqueued
    lateness_ms: list[float] = field(repr=False)  # start - the attempt's run-at, by Redis' clock
    duration_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    lost_ids: list[str] = field(default_factory=list, repr=False)
    duplicated_ids: list[str] = field(default_factory=list, repr=False)
    early_ids: list[str] = field(default_factory=list, repr=False)

    def line(self) -> str:
        late = self.lateness_ms
        parts = [
            f"[faults] {self.scenario}:",
            f"enqueued={self.enqueued}",
            f"delivered={self.delivered}",
            f"lost={self.lost}",
            f"duplicated={self.duplicated}",
            f"early={self.early}",
            f"attempts={self.attempts}",
            f"failures={self.failures}",
            f"redelivered={self.redelivered}",
            f"unexpected={self.unexpected}",
            f"lateness_ms(p50/p99/max)={percentile(late, 50):.0f}/{percentile(late, 99):.0f}"
            f"/{max(late, default=0):.0f}",
        ]
        if self.duration_s is not None:
            parts.append(f"duration={self.duration_s:.1f}s")
        parts += [f"{key}={value}" for key, value in self.extra.items()]
        return " ".join(parts)

    def assert_clean(self, *, duplicated_at_most: int = 0) -> None:
        assert self.lost == 0, f"{self.lost} lost: {self.lost_ids[:20]}"
        assert self.early == 0, f"{self.early} early: {self.early_ids[:20]}"
        assert self.duplicated <= duplicated_at_most, (
            f"{self.duplicated} duplicated (at most {duplicated_at_most}): {self.duplicated_ids[:20]}"
        )
        assert self.unexpected == 0


def check(
    scenario: str,
    enqueued: Iterable[Enqueued],
    records: list[dict[str, Any]],
    *,
    never_succeed: Iterable[str] = (),
    duration_s: float | None = None,
    **extra: Any,
) -> Totals:
    """Counts, prints and reports the totals of a scenario.

    lost: an enqueued job never delivered successfully (``never_succeed`` ids: never delivered at all);
    duplicated: delivered successfully more than once; early: a delivery started, by Redis' clock,
    before the run-at of its attempt or before the run-at it was enqueued with.
    """
    jobs = {(job.topic, job.id): job for job in enqueued}
    failing = set(never_succeed)
    starts: Counter[tuple[str, str]] = Counter()
    ends: Counter[tuple[str, str]] = Counter()
    failures = 0
    early: list[str] = []
    lateness: list[float] = []
    unexpected = 0
    for record in records:
        key = (record["topic"], record["id"])
        if key not in jobs:
            unexpected += 1
            continue
        if record["ev"] == "start":
            starts[key] += 1
            due = max(int(record["run_at_ms"]), jobs[key].run_at_ms)
            if record["redis_ms"] < due:
                early.append(f"{key[0]}/{key[1]}#{record['attempt']} {due - record['redis_ms']:.1f} ms early")
            lateness.append(record["redis_ms"] - int(record["run_at_ms"]))
        elif record["ev"] == "end":
            ends[key] += 1
        elif record["ev"] == "fail":
            failures += 1
    lost = [
        f"{topic}/{job_id}" for (topic, job_id) in jobs if (starts if job_id in failing else ends)[(topic, job_id)] == 0
    ]
    duplicated = [f"{topic}/{job_id}" for (topic, job_id), n in ends.items() if n > 1]
    totals = Totals(
        scenario=scenario,
        enqueued=len(jobs),
        delivered=sum(1 for n in ends.values() if n > 0),
        lost=len(lost),
        duplicated=len(duplicated),
        early=len(early),
        attempts=sum(starts.values()),
        failures=failures,
        redelivered=sum(1 for n in starts.values() if n > 1),
        unexpected=unexpected,
        lateness_ms=lateness,
        duration_s=duration_s,
        extra=dict(extra),
        lost_ids=lost,
        duplicated_ids=duplicated,
        early_ids=early,
    )
    report(totals.line())
    return totals


def report(line: str) -> None:
    """Prints ``line`` (shown with ``-s`` and in a failure's captured output) and appends it to the report."""
    print(line)
    REPORT.parent.mkdir(exist_ok=True)
    with REPORT.open("a") as out:
        out.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")


def by_job(records: Iterable[dict[str, Any]], event: str | None = None) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Records grouped per job, in attempt order (then time)."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if event is None or record["ev"] == event:
            grouped[(record["topic"], record["id"])].append(record)
    for group in grouped.values():
        group.sort(key=lambda r: (r["attempt"], r["redis_ms"]))
    return grouped


def summary_stats(values: list[float]) -> str:
    if not values:
        return "-"
    return f"min={min(values):.0f} median={statistics.median(values):.0f} max={max(values):.0f}"


def make_queue(env: Mapping[str, str]) -> Queue:
    """A ``delayq.Queue`` with the scenario's settings (the same environment as its processes)."""
    return Queue(Settings.from_env(env))


class HandlerApi:
    """The HTTP API through the real Lambda handler ``functions/enqueue.py``, reloaded so that it reads
    the scenario's environment (set with ``monkeypatch``). Calls answer (status, JSON, seconds taken)."""

    def __init__(self, monkeypatch: Any, env: Mapping[str, str]) -> None:
        for name, value in env.items():
            if name.startswith("DELAYQ_"):
                monkeypatch.setenv(name, value)
        self.module = importlib.reload(importlib.import_module("enqueue"))

    def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, Any, float]:
        began = time.monotonic()
        response = self.module.lambda_handler(api_event(method, path, body), FakeContext())
        elapsed = time.monotonic() - began
        text = response.get("body")
        assert "Traceback" not in (text or ""), text
        return int(response["statusCode"]), json.loads(text) if text else None, elapsed
