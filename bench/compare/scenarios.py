"""The scenarios each system runs, one after the other on the bench's Redis: enqueue and memory (with
delayq's API handler and sweep rate), burst, and steady. Each writes its figures into the system's
part of the run; ``bench/README.md`` says what each figure means.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from peers.common import PAYLOAD, QUEUE_NAME
from processes import Worker, group_cpu_s, run_adapter, running_worker, stop_worker
from shared import log
from shared.records import deliveries, read_jsonl, wait_for
from shared.servers import PrivateRedis, delta
from systems import System

BATCH = 1000  # jobs per JSON batch of the enqueue figure: the API's limit, and BullMQ's addBulk chunk


@dataclass
class Context:
    args: argparse.Namespace
    server: PrivateRedis
    rundir: Path
    enqueue_rates: dict[str, float] = field(default_factory=dict)
    batches: Path | None = None  # the enqueue figure's JSON batches, written once, fed to every system with a bulk call

    def enqueue_batches(self) -> Path:
        """--mem-jobs jobs due in 1 h, a 100-byte body, as 1000-job JSON batches (``POST /jobs/batch``
        bodies), one a line: every fed system's producer reads the same bytes."""
        if self.batches is None:
            due_s = round(time.time() + 3600, 3)
            n = self.args.mem_jobs
            self.batches = self.rundir / "batches.jsonl"
            with self.batches.open("w") as out:
                for start in range(0, n, BATCH):
                    jobs = [
                        {"topic": QUEUE_NAME, "id": f"m{i}", "body": PAYLOAD, "run_at": due_s}
                        for i in range(start, min(n, start + BATCH))
                    ]
                    out.write(json.dumps({"jobs": jobs}, separators=(",", ":")) + "\n")
        return self.batches


def scenario_enqueue(ctx: Context, system: System, out: dict[str, Any]) -> None:
    """Bulk enqueue of --mem-jobs jobs due in 1 h, no worker: enqueue jobs/s and Redis memory per job.
    Systems with a bulk call are fed the same 1000-job JSON batches (``Context.enqueue_batches``). Run
    up to --enqueue-runs times while a run takes under --repeat-under seconds (a shared machine's speed
    drifts from one second to the next): the run with the median rate is reported, every run's beside it."""
    runs: list[dict[str, Any]] = []
    while len(runs) < ctx.args.enqueue_runs:
        runs.append(_enqueue_once(ctx, system, len(runs) + 1))
        if runs[-1]["seconds"] > ctx.args.repeat_under:
            break
    figures = dict(sorted(runs, key=lambda r: r["jobs_per_s"])[(len(runs) - 1) // 2])
    figures["runs"] = len(runs)
    figures["jobs_per_s_runs"] = [r["jobs_per_s"] for r in runs]
    out["enqueue"] = figures
    ctx.enqueue_rates[system.name] = figures["jobs_per_s"]
    if len(runs) > 1:
        log(f"{system.name}: enqueue runs {', '.join(f'{r:,.0f}' for r in figures['jobs_per_s_runs'])} jobs/s")
    if system.env == "delayq":  # delayq, and each --compare checkout's
        workdir = ctx.rundir / system.name / "enqueue"
        _enqueue_api(ctx, system, workdir, out)
        _sweep_rate(ctx, system, workdir, out)


def _enqueue_once(ctx: Context, system: System, attempt: int) -> dict[str, Any]:
    server, n = ctx.server, ctx.args.mem_jobs
    workdir = ctx.rundir / system.name / ("enqueue" if attempt == 1 else f"enqueue-{attempt}")
    workdir.mkdir(parents=True)
    server.flush()
    before = server.snapshot()
    feed = ["--batches", str(ctx.enqueue_batches())] if system.fed else ["--jobs", str(n), "--delay-s", "3600"]
    answer = run_adapter(system, server.url, ["enqueue", *feed, "--prefix", "m"], workdir / "producer.log", 1800)
    time.sleep(0.3)  # the producer's connection is gone
    after = server.snapshot()
    redis_side = delta(before, after, n)
    rate = n / answer["seconds"]
    figures = {
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
        f"{figures['memory_bytes_per_job']:.0f} B/job in Redis"
    )
    return figures


def _enqueue_api(ctx: Context, system: System, workdir: Path, out: dict[str, Any]) -> None:
    """delayq's enqueue through its API handler: jobs/s, round trips, memory."""
    server, n = ctx.server, ctx.args.mem_jobs
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
    log(f"{system.name}: API handler POST /jobs/batch: {n / answer['seconds']:,.0f} jobs/s")


def _sweep_rate(ctx: Context, system: System, workdir: Path, out: dict[str, Any]) -> None:
    """delayq's sweep: --sweep-jobs jobs fall due, one sweep pass moves them: jobs moved per second."""
    server, jobs = ctx.server, ctx.args.sweep_jobs
    server.flush()
    lead = 2 + 1.5 * jobs / ctx.enqueue_rates[system.name]
    answer = run_adapter(
        system, server.url, ["sweep-rate", "--jobs", str(jobs), "--lead-s", f"{lead:.2f}"], workdir / "sweep.log", 600
    )
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
    log(f"{system.name}: sweep moved {answer['moved']:,} due jobs in {answer['seconds'] * 1000:.1f} ms")


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
