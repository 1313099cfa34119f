"""delayq against the physical limit of its Redis and against peer queues, in one run on one server.

    make bench                                   everything, the issue's figures (about half an hour)
    make bench BENCH_ARGS="--only delayq,arq --jobs 2000 --steady-seconds 5 --mem-jobs 10000"

Starts a private redis-server (a free port, no persistence, a temporary directory; stopped by pid at
the end), measures the primitives a delay queue uses with redis-benchmark, then runs each system's
scenarios one system at a time, FLUSHALL between them, each system's producer and worker in processes
of their own, with that system's own interpreter. Installs the peers itself the first time, each in
an environment of its own under ``.bench/`` (pins in ``bench/peers/*/requirements.txt`` and
``bench/peers/bullmq_node/package-lock.json``). Writes ``bench/results/<date>-<machine>.{json,md,png}``.
``bench/README.md`` says what each figure means.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from report import deliveries, markdown, read_jsonl

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
PEERS = BENCH / "peers"
STATE = REPO / ".bench"
VENVS = STATE / "venvs"
NODE_DIR = PEERS / "bullmq_node"
PROJECT_PYTHON = REPO / ".venv" / "bin" / "python"
RESULT_PREFIX = "BENCH-RESULT "


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
        "DELAYQ_TICK 1 s (the default). Enqueue: one `Queue.enqueue_many` call.",
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


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


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


# ------------------------------------------------------------------------------------- Redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server of the bench's own: a free port, no persistence, a temporary directory."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if not binary or not shutil.which("redis-benchmark"):
            raise SystemExit(
                "the bench needs redis-server and redis-benchmark on PATH (Debian: apt-get install redis-server)"
            )
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-bench-redis-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.dir), "--logfile", str(self.dir / "redis.log"), "--daemonize", "no"]
        self.proc = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis.from_url(self.url, decode_responses=True)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if self.client.ping():
                    break
            time.sleep(0.05)
        else:
            self.stop()
            raise SystemExit("the private redis-server did not start")
        self.version = str(self.client.info("server")["redis_version"])
        log(f"private redis-server {self.version} (pid {self.proc.pid}) on 127.0.0.1:{self.port}, dir {self.dir}")

    def flush(self) -> None:
        self.client.execute_command("FLUSHALL", "SYNC")
        self.client.execute_command("SCRIPT", "FLUSH", "SYNC")
        time.sleep(0.1)

    def snapshot(self) -> dict[str, Any]:
        info = self.client.info("everything")
        info["_at"] = time.monotonic()
        return info

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # by pid: the server this bench started
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def delta(before: dict[str, Any], after: dict[str, Any], jobs: int) -> dict[str, Any]:
    """Redis' side of a scenario, per job: CPU (user + sys), commands (those inside Lua scripts too),
    requests (socket reads: a pipeline is one while under 16 KB) and replies (socket writes). The
    orchestrator's own INFO of the window is taken out."""

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


# ------------------------------------------------------------------------------------- limits

LIMIT_SCRIPT = "return redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])"
BATCH_ELEMENTS = 100


def physical_limits(server: PrivateRedis, requests: int) -> dict[str, Any]:
    """redis-benchmark on the bench's Redis: each primitive unpipelined (-P 1) and with 16 commands per
    pipeline (-P 16); and ZADD, HSET, RPUSH with 100 elements per command (-P 1), the ceiling of a
    queue that batches its writes, as element/s. Redis' CPU per command is read around each test."""
    sha = server.client.script_load(LIMIT_SCRIPT)
    rand = ["-r", "1000000"]

    def many(*pair: str) -> list[str]:
        return [part for _ in range(BATCH_ELEMENTS) for part in pair]

    tests: list[tuple[str, int, int, list[str]]] = []  # name, pipeline, elements per command, arguments
    for pipeline in (1, 16):
        tests += [
            ("ZADD", pipeline, 1, ["-t", "zadd"]),
            ("HSET", pipeline, 1, ["-t", "hset"]),
            ("RPUSH", pipeline, 1, ["-t", "rpush"]),
            ("LRANGE_100", pipeline, 100, ["-t", "lrange_100"]),
            ("EVAL", pipeline, 1, ["EVAL", LIMIT_SCRIPT, "1", "bench:eval", "__rand_int__", "m:__rand_int__"]),
            ("EVALSHA", pipeline, 1, ["EVALSHA", sha, "1", "bench:evalsha", "__rand_int__", "m:__rand_int__"]),
        ]
    tests += [
        ("ZADD", 1, BATCH_ELEMENTS, ["ZADD", "bench:zb", *many("__rand_int__", "m:__rand_int__")]),
        ("HSET", 1, BATCH_ELEMENTS, ["HSET", "bench:hb", *many("f:__rand_int__", "v:__rand_int__")]),
        ("RPUSH", 1, BATCH_ELEMENTS, ["RPUSH", "bench:lb", *many("v:__rand_int__")]),
    ]
    results: dict[str, Any] = {}
    for name, pipeline, elements, test in tests:
        batched = elements > 1 and name != "LRANGE_100"
        n = max(1000, requests // 20) if batched else requests
        command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(server.port), "-q", "--csv", "-n", str(n), *rand]
        command += ["-P", str(pipeline), *test]
        before = server.snapshot()
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        after = server.snapshot()
        rows = [line for line in out.splitlines() if line.startswith('"') and not line.startswith('"test"')]
        row = next(r for r in rows if "needed to benchmark" not in r)
        fields = [cell.strip('"') for cell in row.split('","')]
        cpu = (after["used_cpu_user"] - before["used_cpu_user"]) + (after["used_cpu_sys"] - before["used_cpu_sys"])
        ops = float(fields[1])
        stat = f"cmdstat_{name.lower()}"
        calls = after.get(stat, {}).get("calls", 0) - before.get(stat, {}).get("calls", 0)
        key = f"{name} x{elements} -P {pipeline}" if batched else f"{name} -P {pipeline}"
        shown = [*test[:2], "...", f"({elements} elements)"] if batched else test
        results[key] = {
            "name": name,
            "pipeline": pipeline,
            "elements_per_command": elements,
            "ops_per_s": ops,
            "elements_per_s": ops * elements,
            "p50_latency_ms": float(fields[4]) if len(fields) > 4 else None,
            # LRANGE's window also holds redis-benchmark's LPUSH fill: no CPU figure for it.
            "redis_cpu_us_per_op": cpu * 1e6 / calls if calls and name != "LRANGE_100" else None,
            "command": " ".join(
                f'"{a}"' if " " in a else a
                for a in ["redis-benchmark", "-q", "-n", str(n), *rand, "-P", str(pipeline), *shown]
            ),
        }
        log(f"limit {key:<18}: {ops:>12,.0f} ops/s" + (f" = {ops * elements:,.0f} elements/s" if elements > 1 else ""))
        server.flush()
        server.client.script_load(LIMIT_SCRIPT)
    server.flush()
    return results


# ------------------------------------------------------------------------------------- processes


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    out: Path
    log_path: Path


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DELAYQ_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_adapter(system: System, url: str, args: list[str], log_path: Path, timeout: float) -> dict[str, Any]:
    """Runs one adapter command to its end; its BENCH-RESULT, with the CPU it and its children used."""
    command = [*system.command(), "--redis-url", url, *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log_path.open("ab") as out:
        out.write(("$ " + shlex.join(command) + "\n").encode())
        out.flush()
        proc = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=out, env=child_env(), timeout=timeout, check=False
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
    proc = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True)
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


def wait_for(expected: set[str], out: Path, deadline: float, stall_s: float) -> float:
    """Reads the worker's starts as they come until every expected id started, the deadline (epoch s)
    passes, or nothing new starts for ``stall_s`` past the due times. The time the last one arrived."""
    seen: set[str] = set()
    offset, rest = 0, b""
    last_new = time.time()
    while True:
        if out.exists():
            with out.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
            offset += len(chunk)
            data = rest + chunk
            lines = data.split(b"\n")
            rest = lines.pop()
            for line in lines:
                match = re.search(rb'"id":"([^"]+)"', line)
                if match:
                    job_id = match.group(1).decode()
                    if job_id in expected and job_id not in seen:
                        seen.add(job_id)
                        last_new = time.time()
        if len(seen) >= len(expected):
            return last_new
        now = time.time()
        if now > deadline or now - last_new > stall_s:
            log(f"stopped waiting: {len(seen)}/{len(expected)} delivered")
            return last_new
        time.sleep(0.2)


# ------------------------------------------------------------------------------------- scenarios


@dataclass
class Context:
    args: argparse.Namespace
    server: PrivateRedis
    rundir: Path
    enqueue_rates: dict[str, float] = field(default_factory=dict)


def scenario_enqueue(ctx: Context, system: System, out: dict[str, Any]) -> None:
    """Bulk enqueue of --mem-jobs jobs due in 1 h, no worker: enqueue jobs/s and Redis memory per job."""
    server, n = ctx.server, ctx.args.mem_jobs
    workdir = ctx.rundir / system.name / "enqueue"
    workdir.mkdir(parents=True)
    server.flush()
    before = server.snapshot()
    answer = run_adapter(
        system,
        server.url,
        ["enqueue", "--jobs", str(n), "--delay-s", "3600", "--prefix", "m"],
        workdir / "producer.log",
        1800,
    )
    time.sleep(0.3)  # the producer's connection is gone
    after = server.snapshot()
    redis_side = delta(before, after, n)
    rate = n / answer["seconds"]
    ctx.enqueue_rates[system.name] = rate
    out["enqueue"] = {
        "jobs": n,
        "seconds": answer["seconds"],
        "jobs_per_s": rate,
        "memory_bytes_per_job": redis_side["used_memory_delta"] / n,
        "keys": server.client.dbsize(),
        "producer_cpu_us_per_job": answer["cpu_s"] * 1e6 / n,
        "round_trips_per_job": answer["round_trips"] / n if "round_trips" in answer else None,
        **{k: v for k, v in redis_side.items() if k != "used_memory_delta"},
    }
    log(
        f"{system.name}: enqueue {n:,} jobs in {answer['seconds']:.2f} s = {rate:,.0f} jobs/s; "
        f"{out['enqueue']['memory_bytes_per_job']:.0f} B/job in Redis"
    )
    if system.name != "delayq":
        return
    # delayq: the same through the API handler, and the sweep rate.
    server.flush()
    before = server.snapshot()
    answer = run_adapter(
        system, server.url, ["enqueue-api", "--jobs", str(n), "--delay-s", "3600"], workdir / "api.log", 1800
    )
    after = server.snapshot()
    out["enqueue_api"] = {
        "jobs": n,
        "seconds": answer["seconds"],
        "jobs_per_s": n / answer["seconds"],
        "requests": answer["requests"],
        "round_trips_per_job": answer["round_trips"] / n,
        "memory_bytes_per_job": (int(after["used_memory"]) - int(before["used_memory"])) / n,
    }
    log(f"delayq: API handler POST /jobs/batch: {n / answer['seconds']:,.0f} jobs/s")
    server.flush()
    jobs = ctx.args.sweep_jobs
    lead = 2 + 1.5 * jobs / rate
    before = server.snapshot()
    answer = run_adapter(
        system, server.url, ["sweep-rate", "--jobs", str(jobs), "--lead-s", f"{lead:.2f}"], workdir / "sweep.log", 600
    )
    after = server.snapshot()
    out["sweep"] = {
        "jobs": jobs,
        "moved": answer["moved"],
        "seconds": answer["seconds"],
        "moved_per_s": answer["moved"] / answer["seconds"] if answer["seconds"] else None,
        "round_trips": answer["round_trips"],
        "left_delayed": answer["delayed_after"],
    }
    if answer["moved"] != jobs or answer["delayed_after"]:
        out.setdefault("warnings", []).append(f"sweep moved {answer['moved']} of {jobs} due jobs")
    log(f"delayq: sweep moved {answer['moved']:,} due jobs in {answer['seconds'] * 1000:.1f} ms")


def _finish(
    ctx: Context,
    system: System,
    workdir: Path,
    worker: Worker,
    *,
    expected: dict[str, float],
    before: dict[str, Any],
    worker_cpu_before: float,
    producer: dict[str, Any],
) -> dict[str, Any]:
    """After the deliveries: settle, read Redis, stop the worker, and the figures."""
    time.sleep(ctx.args.settle)  # acks land; a duplicate would show up here
    after = ctx.server.snapshot()
    worker_cpu = group_cpu_s(worker.proc.pid) - worker_cpu_before
    stop_worker(worker)
    n = len(expected)
    figures = deliveries(expected, read_jsonl([worker.out]), system.early_tolerance_ms)
    figures.update({k: v for k, v in delta(before, after, n).items() if k != "used_memory_delta"})
    figures["producer_cpu_us_per_job_with_startup"] = producer["cpu_s"] * 1e6 / n
    figures["worker_cpu_us_per_job"] = worker_cpu * 1e6 / n
    stats = [json.loads(p.read_text()) for p in sorted(workdir.glob("stats*")) if p.read_text().strip()]
    if system.env == "delayq" and stats:
        worker_trips = sum(s["round_trips"] for s in stats)
        figures["worker_round_trips_per_job"] = worker_trips / n
        figures["enqueue_round_trips_per_job"] = producer.get("round_trips", 0) / n
        figures["client_round_trips_per_job"] = (worker_trips + producer.get("round_trips", 0)) / n
        figures["delayq_loops"] = {k: v for s in stats for k, v in s.items() if k != "round_trips"}
    return figures


def scenario_burst(ctx: Context, system: System, out: dict[str, Any]) -> None:
    """--jobs jobs due at one instant, one worker running: drain time and lateness. Run up to
    --burst-runs times while a burst drains within --repeat-under seconds (a shared machine's speed
    drifts from one second to the next); the run with the median drain is reported, the others' drains
    beside it, and lost, duplicated and early deliveries are summed over every run."""
    a = ctx.args
    runs: list[dict[str, Any]] = []
    while len(runs) < a.burst_runs:
        runs.append(_burst_once(ctx, system, out, len(runs) + 1))
        if not runs[-1].get("drain_s") or runs[-1]["drain_s"] > a.repeat_under:
            break
    drained = sorted((r for r in runs if r.get("drain_s")), key=lambda r: r["drain_s"])
    figures = dict(drained[(len(drained) - 1) // 2] if drained else runs[-1])
    figures["runs"] = len(runs)
    figures["drain_s_runs"] = [r.get("drain_s") for r in runs]
    for fault in ("lost", "duplicated", "early", "unexpected"):
        figures[fault] = sum(r.get(fault) or 0 for r in runs)
    out["burst"] = figures
    if len(runs) > 1:
        log(f"{system.name}: burst drains {', '.join(f'{d:.2f}' for d in figures['drain_s_runs'] if d)} s")


def _burst_once(ctx: Context, system: System, out: dict[str, Any], attempt: int) -> dict[str, Any]:
    server, n = ctx.server, ctx.args.jobs
    workdir = ctx.rundir / system.name / ("burst" if attempt == 1 else f"burst-{attempt}")
    workdir.mkdir(parents=True)
    server.flush()
    stats = ["--stats", str(workdir / "stats")] if system.env == "delayq" else []
    rate = ctx.enqueue_rates.get(system.base or system.name, ctx.args.assumed_enqueue_rate)
    lead = max(ctx.args.min_lead, 2.0 + 1.5 * n / rate)
    with running_worker(system, server.url, workdir, stats) as worker:
        before = server.snapshot()
        worker_cpu_before = group_cpu_s(worker.proc.pid)
        due = round(time.time() * 1000 + lead * 1000)
        producer = run_adapter(
            system,
            server.url,
            ["enqueue", "--jobs", str(n), "--due-ms", str(due), "--prefix", "b", "--ids", str(workdir / "ids.jsonl")],
            workdir / "producer.log",
            1800,
        )
        enqueued_at = time.time() * 1000
        expected = {row["id"]: float(row["due_ms"]) for row in read_jsonl([workdir / "ids.jsonl"])}
        wait_for(set(expected), worker.out, due / 1000 + ctx.args.drain_timeout, ctx.args.stall_timeout + lead)
        figures = _finish(
            ctx,
            system,
            workdir,
            worker,
            expected=expected,
            before=before,
            worker_cpu_before=worker_cpu_before,
            producer=producer,
        )
    figures.update(
        {
            "lead_s": lead,
            "enqueue_seconds": producer["seconds"],
            "enqueue_done_before_due_ms": due - enqueued_at,
        }
    )
    if enqueued_at > due:
        out.setdefault("warnings", []).append(
            f"burst: the enqueue ended {enqueued_at - due:.0f} ms after the jobs fell due; lateness includes it"
        )
    lat = figures.get("lateness_ms") or {}
    if figures["lost"] == 0 and lat:
        figures["drain_s"] = lat["max"] / 1000
        figures["drain_jobs_per_s"] = n / (lat["max"] / 1000) if lat["max"] > 0 else None
    log(
        f"{system.name}: burst of {n:,}: drain {figures.get('drain_s', math.nan):.2f} s, "
        f"p50 {lat.get('p50', math.nan):.1f} ms, p99 {lat.get('p99', math.nan):.1f} ms; "
        f"lost {figures['lost']} dup {figures['duplicated']} early {figures['early']}"
    )
    return figures


def scenario_steady(ctx: Context, system: System, out: dict[str, Any]) -> None:
    """--rate jobs/s for --steady-seconds, delays uniform in [--min-delay, --max-delay]: lateness."""
    server, a = ctx.server, ctx.args
    workdir = ctx.rundir / system.name / "steady"
    workdir.mkdir(parents=True)
    server.flush()
    stats = ["--stats", str(workdir / "stats")] if system.env == "delayq" else []
    with running_worker(system, server.url, workdir, stats) as worker:
        before = server.snapshot()
        worker_cpu_before = group_cpu_s(worker.proc.pid)
        ids = workdir / "ids.jsonl"
        producer = run_adapter(
            system,
            server.url,
            [
                "produce-steady",
                *("--rate", f"{a.rate:g}", "--seconds", f"{a.steady_seconds:g}"),
                *("--min-delay", f"{a.min_delay:g}", "--max-delay", f"{a.max_delay:g}", "--ids", str(ids)),
            ],
            workdir / "producer.log",
            a.steady_seconds * 10 + 120,
        )
        expected = {row["id"]: float(row["due_ms"]) for row in read_jsonl([ids])}
        last_due = max(expected.values()) / 1000
        wait_for(set(expected), worker.out, last_due + a.drain_timeout, a.stall_timeout + a.max_delay)
        figures = _finish(
            ctx,
            system,
            workdir,
            worker,
            expected=expected,
            before=before,
            worker_cpu_before=worker_cpu_before,
            producer=producer,
        )
    figures["producer_seconds"] = producer["seconds"]
    figures["producer_max_behind_s"] = producer.get("max_behind_s")
    if producer.get("max_behind_s", 0) > 0.5:
        out.setdefault("warnings", []).append(
            f"steady: the producer fell {producer['max_behind_s']:.1f} s behind its rate"
        )
    out["steady"] = figures
    lat = figures.get("lateness_ms") or {}
    log(
        f"{system.name}: steady {len(expected):,} jobs: p50 {lat.get('p50', math.nan):.1f} ms, "
        f"p99 {lat.get('p99', math.nan):.1f} ms, max {lat.get('max', math.nan):.1f} ms; "
        f"lost {figures['lost']} dup {figures['duplicated']} early {figures['early']}"
    )


def run_system(ctx: Context, system: System) -> dict[str, Any]:
    out: dict[str, Any] = {"label": system.label, "notes": system.notes, "worker_args": system.worker_args}
    scenarios = ctx.args.scenarios
    steps = []
    if system.base is None and "enqueue" in scenarios:
        steps.append(scenario_enqueue)
    elif system.base:
        out["same_as"] = system.base
    if "burst" in scenarios:
        steps.append(scenario_burst)
    if "steady" in scenarios:
        steps.append(scenario_steady)
    for step in steps:
        try:
            step(ctx, system, out)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            log(f"{system.name}: {step.__name__} failed: {exc}")
            out.setdefault("warnings", []).append(f"{step.__name__} failed: {str(exc).splitlines()[0]}")
    for scenario in ("burst", "steady"):
        figures = out.get(scenario) or {}
        faults = {k: figures[k] for k in ("lost", "duplicated", "early", "unexpected") if figures.get(k)}
        if system.env == "delayq" and faults:
            warning = f"{scenario}: {faults}: delayq must start every job once, never before it is due"
            log(f"{system.name}: {warning}")
            out.setdefault("warnings", []).append(warning)
    ctx.server.flush()
    return out


# ------------------------------------------------------------------------------------- main


def machine_facts() -> dict[str, Any]:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    cores = os.cpu_count() or 0
    node = (
        subprocess.run(["node", "--version"], capture_output=True, text=True, check=False).stdout.strip()
        if shutil.which("node")
        else "-"
    )
    slug = re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-")
    return {
        "cpu": cpu,
        "cores": cores,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "node": node.lstrip("v"),
        "slug": f"{cores}c-{slug}",
        "loadavg_at_start": os.getloadavg(),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated systems (default: all): " + ", ".join(BY_NAME))
    parser.add_argument("--skip", help="comma-separated systems to leave out")
    parser.add_argument("--scenarios", default="limits,enqueue,burst,steady", help="any of limits,enqueue,burst,steady")
    parser.add_argument("--jobs", type=int, default=20_000, help="burst size (20,000)")
    parser.add_argument("--mem-jobs", type=int, default=100_000, help="jobs of the enqueue and memory figure (100,000)")
    parser.add_argument("--sweep-jobs", type=int, help="due jobs of delayq's sweep figure (default: --jobs)")
    parser.add_argument("--burst-runs", type=int, default=3, help="bursts per system, the median reported (3)")
    parser.add_argument(
        "--repeat-under", type=float, default=30, help="repeat a burst only while it drains within this many s (30)"
    )
    parser.add_argument("--rate", type=float, default=500, help="steady jobs/s (500)")
    parser.add_argument("--steady-seconds", type=float, default=30, help="steady duration (30)")
    parser.add_argument("--min-delay", type=float, default=1)
    parser.add_argument("--max-delay", type=float, default=5)
    parser.add_argument("--limit-requests", type=int, default=200_000, help="requests per redis-benchmark test")
    parser.add_argument("--drain-timeout", type=float, default=1200, help="s to wait after the (last) due time")
    parser.add_argument("--stall-timeout", type=float, default=60, help="give up when nothing starts for this long")
    parser.add_argument("--settle", type=float, default=1.0, help="s to wait after the last start before reading Redis")
    parser.add_argument(
        "--min-lead", type=float, default=3.0, help="least s between the burst's enqueue and its due time"
    )
    parser.add_argument("--assumed-enqueue-rate", type=float, default=2000, help=argparse.SUPPRESS)
    parser.add_argument("--machine", help="machine name in the result file names (default: cores and CPU model)")
    parser.add_argument("--out-dir", type=Path, default=BENCH / "results")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    args.scenarios = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    args.sweep_jobs = args.sweep_jobs or args.jobs
    return args


def select(args: argparse.Namespace) -> list[System]:
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BY_NAME)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown system(s) {unknown}; known: {', '.join(BY_NAME)}")
    skip = {n.strip() for n in (args.skip or "").split(",") if n.strip()}
    return [BY_NAME[n] for n in names if n not in skip]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    systems = select(args)
    facts = machine_facts()
    ensure(systems, plot=not args.no_plot)
    started = datetime.now(UTC)
    stamp = started.strftime("%Y-%m-%dT%H%M%S")
    machine = args.machine or facts["slug"]
    rundir = STATE / "runs" / f"{stamp}-{machine}"
    rundir.mkdir(parents=True)  # to the second: two runs never share their raw records
    small = args.jobs < 20_000 or args.mem_jobs < 100_000 or args.steady_seconds < 30
    load = facts["loadavg_at_start"][0]
    run: dict[str, Any] = {
        "meta": {
            "date": started.strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine,
            "command": "make bench"
            + (f' BENCH_ARGS="{shlex.join(argv or sys.argv[1:])}"' if (argv or sys.argv[1:]) else ""),
            "params": {
                "jobs": args.jobs,
                "burst_runs": args.burst_runs,
                "repeat_under": args.repeat_under,
                "mem_jobs": args.mem_jobs,
                "sweep_jobs": args.sweep_jobs,
                "rate": args.rate,
                "steady_seconds": args.steady_seconds,
                "min_delay": args.min_delay,
                "max_delay": args.max_delay,
                "limit_requests": args.limit_requests,
            },
            "small_run": small,
            "load_note": f"The machine's load average was {load:.1f} at the start: figures are noisy."
            if load > 0.5
            else "",
            **{k: v for k, v in facts.items() if k != "slug"},
            "versions": versions(systems),
            "raw_records": str(rundir.relative_to(REPO)),
        },
        "limits": {},
        "systems": {},
    }
    server = PrivateRedis()
    run["meta"]["redis_version"] = server.version
    try:
        if "limits" in args.scenarios:
            run["limits"] = physical_limits(server, args.limit_requests)
        ctx = Context(args, server, rundir)
        for system in systems:
            log(f"--- {system.name} ({system.label})")
            run["systems"][system.name] = run_system(ctx, system)
    finally:
        server.stop()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    base = args.out_dir / f"{stamp}-{machine}"
    base.with_suffix(".json").write_text(json.dumps(run, indent=1, default=str) + "\n")
    base.with_suffix(".md").write_text(markdown(run))
    written = [base.with_suffix(".json"), base.with_suffix(".md")]
    if not args.no_plot:
        plot = [str(VENVS / "plot" / "bin" / "python"), str(BENCH / "plot.py"), str(base.with_suffix(".json"))]
        if subprocess.run([*plot, str(base.with_suffix(".png"))], check=False).returncode == 0:
            written.append(base.with_suffix(".png"))
    print()
    print(base.with_suffix(".md").read_text())
    log(f"wrote {', '.join(str(p) for p in written)}; raw records in {rundir}")


if __name__ == "__main__":
    main()
