"""delayq's cost against the scale: topics, a backlog of waiting jobs, steady load; on one server or a
3-master Redis Cluster; this checkout's engine and, with ``--compare``, another's, side by side.

    make bench-scale                                            the default grid (about 4 minutes a side)
    make bench-scale SCALE_ARGS="--compare ../main"             the same, before and after, in one table
    make bench-scale SCALE_ARGS="--topics 1,1000,10000 --backlog 0,1000000 --rates 200,1000 --full --cluster"
    .venv/bin/python bench/scale/run.py --help                  the same command line, every option

Each point gets a fresh private Redis; on it, one side: the backlog filled (``enqueue_many`` from a few
processes, no loop running), one job due now in each topic, then one sweep and one consume process;
once the seeds ran and their recent lateness was written, Redis' CPU while nothing is due (idle), then a
steady load until every job started.
Writes ``.bench/results/scale-<date>-<machine>.{json,md,png}``; the raw records stay under ``.bench/runs``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import product
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from report import faults_and_lateness, markdown
from shared import log
from shared.checkout import Checkout
from shared.machine import machine_facts
from shared.paths import REPO, RESULTS, RUNS
from shared.records import read_jsonl, wait_for
from shared.servers import PrivateRedis, spent
from shared.venvs import plot_python
from stack import HERE, TICK_S, Loops, answer, load, side_env

from delayq.core.activity import FLUSH_S as ACTIVITY_FLUSH_S
from delayq.loops.consumer import ACTIVITY_CHUNK, LOOKS_PER_TICK

PRODUCER_BATCH = 20


@dataclass(frozen=True)
class Point:
    server: str  # "single" or "cluster"
    topics: int
    backlog: int
    rate: float

    @property
    def label(self) -> str:
        return f"{self.server}, {self.topics:,} topics, backlog {self.backlog:,}, {self.rate:g} jobs/s"

    @property
    def slug(self) -> str:
        return f"{self.server}-t{self.topics}-b{self.backlog}-r{self.rate:g}"


def grid(args: argparse.Namespace) -> list[Point]:
    """Every combination (``--full``), or the first value of each axis and, from there, each other value
    of one axis at a time: the default grid, a line per axis."""
    axes = (args.servers, args.topics, args.backlog, args.rates)
    if args.full:
        return [Point(*values) for values in product(*axes)]
    points = []
    for server in args.servers:
        base = (server, args.topics[0], args.backlog[0], args.rates[0])
        points.append(Point(*base))
        for axis in (1, 2, 3):
            for value in axes[axis][1:]:
                points.append(Point(*(value if i == axis else v for i, v in enumerate(base))))
    return points


@dataclass
class Stage:
    """One point on one side: what its steps share."""

    point: Point
    args: argparse.Namespace
    store: PrivateRedis
    env: dict[str, str]
    workdir: Path
    warnings: list[str] = field(default_factory=list)

    @property
    def starts(self) -> Path:
        return self.workdir / "starts.jsonl"


def run_point(point: Point, side: Checkout, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True)
    cluster = point.server == "cluster"
    store = PrivateRedis(masters=3) if cluster else PrivateRedis()
    env = side_env(side, store, args.partitions if cluster else 1, workdir / "starts.jsonl")
    stage = Stage(point, args, store, env, workdir)
    figures: dict[str, Any] = {"warnings": stage.warnings, "loadavg": os.getloadavg()[0]}
    try:
        figures |= fill(stage)
        seeds, _ = enqueue(stage, "seed", "--topics", str(point.topics))
        with Loops(stage.env, workdir) as loops:
            wait_for(set(seeds), stage.starts, time.time() + args.drain_timeout, args.stall_timeout)
            loops.check()
            started = {row["id"] for row in read_jsonl([stage.starts])}
            if len(started) < len(seeds):
                raise RuntimeError(f"{len(started)} of the {len(seeds)} seeds started: every topic must be known")
            time.sleep(seed_work_s(point.topics) + args.settle)
            figures |= idle(stage, loops)
            figures |= steady(stage)
            loops.check()
    finally:
        store.stop()
    figures |= faults_and_lateness(figures.pop("expected"), seeds, read_jsonl([stage.starts]))
    if figures["lost"] or figures["duplicated"] or figures["early"]:
        stage.warnings.append("delayq must start every job once, never before it is due")
    return figures


def seed_work_s(topics: int) -> float:
    """How long the seeds' delivery work may go on once the last seed started: their acks land, and so
    does their activity, which the consumer adds to the minute's hash of each partition
    at its first pass ``ACTIVITY_FLUSH_S`` after its last flush (within a tick), ``ACTIVITY_CHUNK``
    topics a pass while more wait, a pass at least every look (a tick / ``LOOKS_PER_TICK``), with half
    again as long for passes that come late. Once it is past, nothing is due and nothing is owed."""
    chunks = -(-topics // ACTIVITY_CHUNK)
    return ACTIVITY_FLUSH_S + TICK_S + 1.5 * chunks * TICK_S / LOOKS_PER_TICK


def fill(stage: Stage) -> dict[str, Any]:
    """The backlog: jobs due in a day, written by ``--fill-procs`` processes at once, no loop running."""
    jobs, procs = stage.point.backlog, stage.args.fill_procs
    if not jobs:
        return {"memory_bytes_per_job": None}
    before, started = stage.store.info(), time.monotonic()
    topics = str(stage.point.topics)
    fillers = [
        load(stage.env, stage.workdir, "fill", "--topics", topics, "--first", str(lo), "--jobs", str(hi - lo))
        for lo, hi in ((jobs * i // procs, jobs * (i + 1) // procs) for i in range(procs))
    ]
    for proc in fillers:
        answer(proc, stage.workdir, "fill", 600 + jobs / 1000)
    seconds, used = time.monotonic() - started, spent(before, stage.store.info())
    log(f"backlog of {jobs:,} in {seconds:.1f} s: {used['memory'] / jobs:.0f} B/job")
    return {"memory_bytes_per_job": used["memory"] / jobs, "fill_jobs_per_s": jobs / seconds}


def enqueue(stage: Stage, command: str, *args: str) -> tuple[dict[str, float], dict[str, Any]]:
    """Runs a producer command that writes an ids file: its jobs (id -> due ms), and its answer."""
    ids = stage.workdir / f"{command}.jsonl"
    timeout = stage.args.steady_seconds * 10 + stage.args.drain_timeout
    said = answer(load(stage.env, stage.workdir, command, *args, "--ids", str(ids)), stage.workdir, command, timeout)
    return {row["id"]: float(row["due_ms"]) for row in read_jsonl([ids])}, said


def idle(stage: Stage, loops: Loops) -> dict[str, Any]:
    """Redis' CPU and commands, and the loops' CPU, per second while every topic is known and none has
    anything due."""
    before, cpu, started = stage.store.info(), loops.cpu_s(), time.monotonic()
    time.sleep(stage.args.idle_seconds)
    used, elapsed = spent(before, stage.store.info()), time.monotonic() - started
    return {
        "idle_redis_cpu_ms_per_s": used["cpu_s"] * 1000 / elapsed,
        "idle_commands_per_s": used["commands"] / elapsed,
        "idle_loops_cpu_ms_per_s": (loops.cpu_s() - cpu) * 1000 / elapsed,
        "consumer_threads": loops.consumer_threads(),
    }


def steady(stage: Stage) -> dict[str, Any]:
    """The point's rate for ``--steady-seconds``, then the wait until every job started: Redis' CPU and
    commands over that window, per job."""
    args, before, stats_before = stage.args, stage.store.info(), stage.store.command_stats()
    expected, producer = enqueue(
        stage,
        "steady",
        *("--topics", str(stage.point.topics), "--rate", f"{stage.point.rate:g}"),
        *("--seconds", f"{args.steady_seconds:g}", "--max-batch", str(producer_batch(stage.point.rate, args))),
        *("--min-delay", f"{args.min_delay:g}", "--max-delay", f"{args.max_delay:g}"),
    )
    if producer["max_behind_s"] > 0.5:
        stage.warnings.append(f"the producer fell {producer['max_behind_s']:.1f} s behind its rate (--max-batch)")
    last_due = max(expected.values()) / 1000
    wait_for(set(expected), stage.starts, last_due + args.drain_timeout, args.stall_timeout)
    time.sleep(args.settle)  # the acks land; a duplicate would show up here
    used, jobs = spent(before, stage.store.info()), len(expected)
    stats = stage.store.command_stats()
    diff = {
        name: (n - stats_before.get(name, (0, 0))[0], us - stats_before.get(name, (0, 0))[1])
        for name, (n, us) in stats.items()
    }
    by_name = {name: n / jobs for name, (n, _) in sorted(diff.items()) if n and name != "info"}
    scripts_us = sum(diff.get(name, (0, 0))[1] for name in ("evalsha", "eval"))
    return {
        "expected": expected,
        "redis_cpu_us_per_job": used["cpu_s"] * 1e6 / jobs,
        "commands_per_job": used["commands"] / jobs,
        "script_calls_per_job": by_name.get("evalsha", 0) + by_name.get("eval", 0),
        "script_us_per_job": scripts_us / jobs,
        "commands_by_name_per_job": by_name,
        "producer": producer,
    }


def producer_batch(rate: float, args: argparse.Namespace) -> int:
    """Jobs per producer call: one (``Queue.enqueue``) up to ``--batch-above`` jobs/s. Above, the jobs
    whose time has come, up to ``PRODUCER_BATCH``, in one ``enqueue_many`` call: one process calling
    ``enqueue`` per job falls behind 5,000 jobs/s on a loaded 2-core machine (4,300 a second, measured)."""
    return 1 if rate <= args.batch_above else PRODUCER_BATCH


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    def numbers(kind: type) -> Any:
        return lambda text: [kind(v.replace("_", "")) for v in text.split(",") if v.strip()]

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=numbers(int), default=[1, 1000, 10000], help="(1,1000,10000)")
    parser.add_argument("--backlog", type=numbers(int), default=[0, 1_000_000], help="jobs waiting (0,1000000)")
    parser.add_argument("--rates", type=numbers(float), default=[200, 1000], help="steady jobs/s (200,1000)")
    parser.add_argument("--servers", type=lambda t: t.split(","), default=["single"], help="single, cluster or both")
    parser.add_argument("--cluster", action="store_true", help="the same as --servers single,cluster")
    parser.add_argument("--full", action="store_true", help="every combination, not one axis at a time")
    parser.add_argument("--compare", type=Path, action="append", default=[], help="another checkout to measure")
    parser.add_argument("--partitions", type=int, default=3, help="DELAYQ_PARTITIONS on the cluster (3)")
    parser.add_argument("--idle-seconds", type=float, default=10, help="the idle window (10)")
    parser.add_argument("--steady-seconds", type=float, default=15, help="the steady load's length (15)")
    parser.add_argument("--min-delay", type=float, default=1, help="each job's delay: uniform from (1)")
    parser.add_argument("--max-delay", type=float, default=3, help="to (3) s")
    parser.add_argument(
        "--batch-above",
        type=float,
        default=1000,
        help=f"above this rate the producer sends enqueue_many calls of up to {PRODUCER_BATCH} jobs (1000)",
    )
    parser.add_argument("--fill-procs", type=int, default=2, help="processes filling the backlog (2)")
    parser.add_argument("--settle", type=float, default=1.0, help="s after the last start before reading Redis")
    parser.add_argument("--drain-timeout", type=float, default=300, help="s to wait after the last due time")
    parser.add_argument("--stall-timeout", type=float, default=60, help="give up when nothing starts this long")
    parser.add_argument("--machine", help="machine name in the result file names (default: cores and CPU model)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the results go (.bench/results)")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    if args.cluster:
        args.servers = ["single", "cluster"]
    if set(args.servers) - {"single", "cluster"}:
        parser.error("--servers takes single, cluster or both")
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    sides = [Checkout(REPO), *(Checkout.of(path) for path in args.compare)]
    run: dict[str, Any] = {
        "meta": meta(args, argv),
        "sides": [{"name": side.name, "root": str(side.root)} for side in sides],
        "points": [],
    }
    rundir = REPO / run["meta"]["raw_records"]
    for n, point in enumerate(grid(args)):
        # The sides one after the other at each point (the machine's drift hits both), the first in
        # turn: whichever code goes first at a point shows the worse tail (measured 2026-11-27).
        for side in sides[n % len(sides) :] + sides[: n % len(sides)]:
            log(f"--- {point.label}: {side.name}")
            row: dict[str, Any] = {**asdict(point), "label": point.label, "side": side.name}
            try:
                row |= run_point(point, side, args, rundir / point.slug / side.name)
            except (RuntimeError, subprocess.SubprocessError) as exc:
                log(f"failed: {exc}")
                row |= {"error": str(exc).splitlines()[0], "warnings": [f"failed: {str(exc).splitlines()[0]}"]}
            run["points"].append(row)
            log(summary(row))
    write(run, args)


def meta(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    facts = machine_facts()
    started = datetime.now(UTC)
    machine = args.machine or facts.pop("slug")
    load = facts.pop("loadavg_at_start")[0]
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False).stdout
    return {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "command": "make bench-scale" + (f' SCALE_ARGS="{shlex.join(argv)}"' if argv else ""),
        "params": {k: v for k, v in vars(args).items() if k not in ("compare", "out_dir", "machine", "no_plot")}
        | {"producer_batch": PRODUCER_BATCH},
        "redis_version": version.split("v=")[-1].split()[0],
        "load_note": f"The machine's load average was {load:.1f} at the start (it is shared with other work): "
        "the figures are noisy; compare the sides within one run."
        if load > 0.5
        else "",
        "raw_records": str((RUNS / f"scale-{started.strftime('%Y-%m-%dT%H%M%S')}-{machine}").relative_to(REPO)),
        **facts,
    }


def summary(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['side']}: failed"
    lat = row["lateness_ms"]
    return (
        f"{row['side']}: idle {row['idle_redis_cpu_ms_per_s']:.1f} ms/s; lateness p50 {lat['p50']:.1f} p99 "
        f"{lat['p99']:.1f} max {lat['max']:.1f} ms; {row['redis_cpu_us_per_job']:.0f} µs, "
        f"{row['commands_per_job']:.1f} cmds/job; lost {row['lost']} dup {row['duplicated']} early {row['early']}"
        + "".join(f"; {warning}" for warning in row["warnings"])
    )


def write(run: dict[str, Any], args: argparse.Namespace) -> None:
    args.out_dir.mkdir(parents=True, exist_ok=True)
    base = args.out_dir / Path(run["meta"]["raw_records"]).name
    base.with_suffix(".json").write_text(json.dumps(run, indent=1, default=str) + "\n")
    base.with_suffix(".md").write_text(markdown(run))
    written = [base.with_suffix(".json"), base.with_suffix(".md")]
    if not args.no_plot:
        plot = [str(plot_python()), str(HERE / "plot.py"), str(base.with_suffix(".json"))]
        if subprocess.run(plot, check=False).returncode == 0:
            written.append(base.with_suffix(".png"))
    print()
    print(base.with_suffix(".md").read_text())
    log(f"wrote {', '.join(str(p) for p in written)}")


if __name__ == "__main__":
    main()
