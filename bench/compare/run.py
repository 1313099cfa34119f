"""delayq against the physical limit of its Redis and against peer queues, in one run on one server.

    make bench                                   everything (about 18 minutes on 2 cores)
    make bench BENCH_ARGS="--only delayq,arq --jobs 2000 --steady-seconds 5 --mem-jobs 10000"
    make bench BENCH_ARGS="--only delayq --compare ../before"   this delayq and another checkout's, A/B

Starts a private redis-server (``shared.servers``), measures the primitives a delay queue uses with
redis-benchmark, then runs each system's scenarios one system at a time, FLUSHALL between them, each
system's producer and worker in processes of their own, with that system's own interpreter. Installs
the peers itself the first time, each in an environment of its own under ``.bench/`` (pins in
``peers/*/requirements.txt`` and ``peers/bullmq_node/package-lock.json``). Writes
``.bench/results/<date>-<machine>.{json,md,png}``; ``bench/README.md`` says what each figure means.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from limits import physical_limits
from report import markdown
from scenarios import Context, run_system
from shared import log
from shared.checkout import Checkout
from shared.machine import machine_facts
from shared.paths import REPO, RESULTS, RUNS
from shared.servers import PrivateRedis
from shared.venvs import plot_python
from systems import BY_NAME, System, ensure, versions

LABEL = re.compile(r"[A-Za-z0-9._+-]+")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated systems (default: all): " + ", ".join(BY_NAME))
    parser.add_argument("--skip", help="comma-separated systems to leave out")
    parser.add_argument(
        "--compare",
        type=Path,
        action="append",
        default=[],
        metavar="CHECKOUT",
        help="also measure the delayq of CHECKOUT (its functions/, this .venv) as system delayq@<label> (repeatable)",
    )
    parser.add_argument(
        "--compare-label",
        action="append",
        default=[],
        metavar="LABEL",
        help="the label of the n-th --compare (default: its short commit id)",
    )
    parser.add_argument("--scenarios", default="limits,enqueue,burst,steady", help="any of limits,enqueue,burst,steady")
    parser.add_argument("--jobs", type=int, default=20_000, help="burst size (20,000)")
    parser.add_argument("--mem-jobs", type=int, default=100_000, help="jobs of the enqueue and memory figure (100,000)")
    parser.add_argument("--sweep-jobs", type=int, help="due jobs of delayq's sweep figure (default: --jobs)")
    parser.add_argument("--burst-runs", type=int, default=3, help="bursts per system, the median reported (3)")
    parser.add_argument(
        "--enqueue-runs", type=int, default=3, help="enqueue figures per system, the median reported (3)"
    )
    parser.add_argument(
        "--repeat-under",
        type=float,
        default=30,
        help="repeat a burst or an enqueue only while it drains or runs within this many s (30)",
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
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the results go (.bench/results)")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    args.scenarios = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    args.sweep_jobs = args.sweep_jobs or args.jobs
    return args


def select(args: argparse.Namespace) -> list[System]:
    """The systems to run, in order; the ``--compare`` checkouts' delayq right after delayq."""
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BY_NAME)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown system(s) {unknown}; known: {', '.join(BY_NAME)}")
    skip = {n.strip() for n in (args.skip or "").split(",") if n.strip()}
    systems = [BY_NAME[n] for n in names if n not in skip]
    after = next((i + 1 for i, system in enumerate(systems) if system.name == "delayq"), 0)
    return [*systems[:after], *compared(args.compare, args.compare_label), *systems[after:]]


def compared(roots: list[Path], labels: list[str]) -> list[System]:
    """delayq as it is, but importing each other checkout's ``functions/``: ``delayq@<label>``, the label
    the checkout's short commit id unless ``--compare-label`` gives it (the n-th label the n-th checkout's)."""
    if len(labels) > len(roots):
        raise SystemExit(f"{len(labels)} --compare-label for {len(roots)} --compare")
    bad = [label for label in labels if not LABEL.fullmatch(label)]
    if bad:
        raise SystemExit(f"--compare-label {bad[0]!r}: letters, digits and . _ + - only")
    systems = []
    for n, root in enumerate(roots):
        checkout = Checkout.of(root)
        systems.append(
            replace(
                BY_NAME["delayq"],
                name=f"delayq@{labels[n] if n < len(labels) else checkout.commit}",
                checkout=checkout,
                label=f"{checkout.root}, {checkout.commit}",
                notes=f"delayq as above (the same adapter, .venv and settings), importing {checkout.root}/functions "
                f"(commit {checkout.commit}).",
            )
        )
    names = [system.name for system in systems]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise SystemExit(f"two --compare checkouts would both be {twice[0]}: tell them apart with --compare-label")
    return systems


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    systems = select(args)
    facts = machine_facts()
    ensure(systems, plot=not args.no_plot)
    started = datetime.now(UTC)
    stamp = started.strftime("%Y-%m-%dT%H%M%S")
    machine = args.machine or facts["slug"]
    rundir = RUNS / f"{stamp}-{machine}"
    rundir.mkdir(parents=True)  # to the second: two runs never share their raw records
    run: dict[str, Any] = {
        "meta": meta(args, argv, systems=systems, facts=facts, started=started, machine=machine, rundir=rundir),
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
    write(run, args, args.out_dir / f"{stamp}-{machine}")
    log(f"raw records in {rundir}")


def meta(
    args: argparse.Namespace,
    argv: list[str] | None,
    *,
    systems: list[System],
    facts: dict[str, Any],
    started: datetime,
    machine: str,
    rundir: Path,
) -> dict[str, Any]:
    """What the run was: when, where, with what parameters and versions."""
    given = argv or sys.argv[1:]
    load = facts["loadavg_at_start"][0]
    noisy = f"The machine's load average was {load:.1f} at the start: figures are noisy." if load > 0.5 else ""
    return {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "command": "make bench" + (f' BENCH_ARGS="{shlex.join(given)}"' if given else ""),
        "params": {
            "jobs": args.jobs,
            "burst_runs": args.burst_runs,
            "enqueue_runs": args.enqueue_runs,
            "repeat_under": args.repeat_under,
            "mem_jobs": args.mem_jobs,
            "sweep_jobs": args.sweep_jobs,
            "rate": args.rate,
            "steady_seconds": args.steady_seconds,
            "min_delay": args.min_delay,
            "max_delay": args.max_delay,
            "limit_requests": args.limit_requests,
        },
        "small_run": args.jobs < 20_000 or args.mem_jobs < 100_000 or args.steady_seconds < 30,
        "load_note": noisy,
        **{k: v for k, v in facts.items() if k != "slug"},
        "versions": versions(systems),
        "checkouts": {s.name: f"{s.checkout.root} ({s.checkout.commit})" for s in systems if s.env == "delayq"},
        "compare": [s.name for s in systems if s.name not in BY_NAME],  # the --compare checkouts
        "raw_records": str(rundir.relative_to(REPO)),
    }


def write(run: dict[str, Any], args: argparse.Namespace, base: Path) -> None:
    """The run's JSON, its tables (Markdown, also printed) and, unless --no-plot, its plot."""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".json").write_text(json.dumps(run, indent=1, default=str) + "\n")
    base.with_suffix(".md").write_text(markdown(run))
    written = [base.with_suffix(".json"), base.with_suffix(".md")]
    if not args.no_plot:
        plot = [str(plot_python()), str(Path(__file__).resolve().parent / "plot.py"), str(base.with_suffix(".json"))]
        if subprocess.run([*plot, str(base.with_suffix(".png"))], check=False).returncode == 0:
            written.append(base.with_suffix(".png"))
    print()
    print(base.with_suffix(".md").read_text())
    log(f"wrote {', '.join(str(p) for p in written)}")


if __name__ == "__main__":
    main()
