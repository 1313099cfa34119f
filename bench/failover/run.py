"""The failover table: what delayq does while a Redis primary fails over (a cluster master killed,
frozen, with AOF, without full coverage; a primary and its replica promoted, the replica in step or
50 ms behind, with and without min replicas), for this checkout and, with ``--compare``, others.

    .venv/bin/python bench/failover/run.py                               every setup (about 8 minutes)
    .venv/bin/python bench/failover/run.py --setups cluster --kill-after 8 --after 10        a quick look
    .venv/bin/python bench/failover/run.py --compare ../before --runs 3                      before and after
    .venv/bin/python bench/failover/run.py --setups pair-lag --keys 20      jobs with flow keys

Each run is the fault tier's harness (``run_scenario`` in ``tests/support/failover.py``): private
servers on free ports, one sweep and one consume process, the API's handler in a producer process at
200 jobs/s, the failover ``--kill-after`` s into the traffic, ``--after`` s more, the drain. The
processes of a side run this ``.venv`` with that side's ``functions/`` first on PYTHONPATH
(``shared.checkout``), so the harness measures any checkout's code, unchanged. For each setup and run,
the sides go one after the other, the first in turn. Prints a markdown table and writes it, with the
rows as JSON, to ``.bench/results/failover-<date>-<machine>.{md,json}`` (``--out``: the JSON
elsewhere); the processes' logs go to a temporary directory, removed, or to ``--workdir``, kept.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared import log
from shared.checkout import Checkout
from shared.machine import machine_facts
from shared.paths import REPO, RESULTS

sys.path.insert(0, str(REPO / "functions"))  # this checkout's delayq
sys.path.insert(0, str(REPO / "tests"))  # the tests' helpers, the package support
from support.failover import KEY_CONCURRENCY, LABELS, SETUPS, Row, run_scenario  # the fault tier's harness


def cell(value: float | None, unit: str = " s", digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def cpu_cell(cpu: dict[str, float | None]) -> str:
    return " / ".join(cell(cpu.get(window), "", 2) for window in ("idle", "steady", "outage"))


def exits_cell(row: Row) -> str:
    """``sweep (exited 1 +4.3 s after the kill: ClusterDownError: The cluster is down)``: each loop that
    exited, and its last line of stderr (the exception, for a traceback), modules left out."""
    if not row.loop_exits:
        return "none"
    parts = []
    for name, text in row.loop_exits.items():
        last = re.sub(r"\b(?:\w+\.)+(\w+(?:Error|Exception)\b)", r"\1", text.split(" <- ")[0])
        parts.append(f"{name} ({last[:100]})")
    return ", ".join(parts)


def markdown(rows: list[Row]) -> str:
    """The table's columns, then the extra measurements, then a note per row (exits, warnings, what died)."""
    head = (
        "| run | acknowledged | lost | early | loop exits | 500s | 503s | healthy partitions' widest delivery gap "
        "| warnings sweep / consume | consumer CPU idle / steady / outage (cores) | ran twice (same attempt) "
        "| victim's partitions resumed after | outage | drained, stuck |"
    )
    lines = [head, "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        label = f"{LABELS[row.setup]}, {row.side}"
        if row.error:
            lines.append(f"| {label} | failed: {row.error[:100]} |" + " |" * 12)
            continue
        warnings = " / ".join(f"{row.warnings.get(name, 0):,}" for name in ("sweep", "consume"))
        stuck = ", ".join(f"{n} {state}" for state, n in row.stuck.items()) or "nothing"
        drained = f"{'yes' if row.drained else 'no'} ({row.drain_s:.0f} s), {stuck}"
        lines.append(
            f"| {label} | {row.acknowledged:,} of {row.sent:,} | {row.lost} | {row.early} | {exits_cell(row)} "
            f"| {row.answers_500} | {row.answers_503} | {cell(row.healthy_gap_s)} | {warnings} "
            f"| {cpu_cell(row.consumer_cpu)} | {row.duplicates} ({row.duplicates_same_attempt}) "
            f"| {cell(row.resumed_after_s, ' s', 2)} | {cell(row.outage_s)} | {drained} |"
        )
    lines.append("")
    for row in rows:
        if row.error:
            continue
        notes = [row.notes]
        if row.lost:
            earliest, latest = row.lost_answered_ms_before_kill
            notes.append(f"the {row.lost} lost were answered 201 {latest:g}-{earliest:g} ms before the kill")
        if row.undelivered_in_redis:
            notes.append(f"acknowledged, undelivered, still in Redis: {row.undelivered_in_redis}")
        if row.written_anyway:
            notes.append(f"{row.written_anyway} jobs not acknowledged were delivered all the same")
        if row.offered != row.sent:
            notes.append(
                f"the producer sent {row.sent:,} of {row.offered:,}: the others' turn came while it waited on an "
                f"answer (at worst {row.producer_behind_s:.1f} s)"
            )
        notes.append(f"answers p50 / p99 / max {row.answer_ms.get('p50')} / {row.answer_ms.get('p99')} / "
                     f"{row.answer_ms.get('max')} ms")  # fmt: skip
        notes += [f"{name} {text}" for name, text in row.loop_exits.items()]
        for name, top in row.top_warnings.items():
            if top:
                notes.append(f"{name}'s commonest warnings: " + "; ".join(f"{n:,} x `{line}`" for line, n in top))
        lines.append(f"- {LABELS[row.setup]}, {row.side}: " + ". ".join(notes))
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--setups",
        type=lambda text: [s.strip() for s in text.split(",") if s.strip()],
        default=list(SETUPS),
        help=f"comma-separated, of {', '.join(SETUPS)} (all)",
    )
    parser.add_argument("--runs", type=int, default=1, help="runs of each setup, per side (1)")
    parser.add_argument("--kill-after", type=float, default=20, help="s of traffic before the failover (20)")
    parser.add_argument("--after", type=float, default=30, help="s of traffic after it (30)")
    parser.add_argument("--idle", type=float, default=5, help="s of the idle window before the traffic (5)")
    parser.add_argument("--rate", type=float, default=200, help="jobs/s (200)")
    parser.add_argument(
        "--keys",
        type=int,
        default=0,
        help=f"jobs carry one of this many flow keys, each held to {KEY_CONCURRENCY} at once (0: none)",
    )
    parser.add_argument("--drain-timeout", type=float, default=30, help="s to wait for the last deliveries (30)")
    parser.add_argument("--compare", type=Path, action="append", default=[], help="another checkout to measure")
    parser.add_argument("--out", type=Path, help="the rows as JSON there (default: .bench/results/failover-*.json)")
    parser.add_argument("--workdir", type=Path, help="keep the runs' logs and records there (default: removed)")
    args = parser.parse_args(argv)
    unknown = set(args.setups) - set(SETUPS)
    if unknown:
        parser.error(f"unknown setups {', '.join(sorted(unknown))}: of {', '.join(SETUPS)}")
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    sides = [Checkout(REPO), *(Checkout.of(path) for path in args.compare)]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="delayq-failover-"))
    rows: list[Row] = []
    turn = 0
    try:
        for setup in args.setups:
            for run in range(args.runs):
                # Whichever side goes first turns from one run to the next: the machine drifts.
                for side in sides[turn % len(sides) :] + sides[: turn % len(sides)]:
                    name = side.name
                    log(f"--- {setup}, run {run + 1} of {args.runs}: {name}")
                    try:
                        row = run_scenario(
                            setup,
                            kill_after_s=args.kill_after,
                            after_s=args.after,
                            functions=side.root / "functions",
                            workdir=workdir / f"{setup}-{run + 1}-{name}",
                            idle_s=args.idle,
                            rate=args.rate,
                            drain_timeout_s=args.drain_timeout,
                            keys=args.keys,
                        )
                    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                        log(f"failed: {exc}")
                        row = Row(setup=setup, error=str(exc).strip().splitlines()[0])
                    row = replace(row, side=name)
                    rows.append(row)
                    log(row.line().removeprefix("[faults] "))
                turn += 1
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    now = datetime.now(UTC)
    title = (
        f"Failover, {now:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}: the failover "
        f"{args.kill_after:g} s into {args.rate:g} jobs/s, {args.after:g} s more, then the drain "
        f"(`.venv/bin/python bench/failover/run.py {shlex.join(argv)}`)"
    )
    table = markdown(rows)
    print()
    print(title)
    print()
    print(table)
    base = RESULTS / f"failover-{now:%Y-%m-%dT%H%M%S}-{machine_facts()['slug']}"
    out = args.out or base.with_suffix(".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": now.isoformat(), "argv": argv, "sides": [side.name for side in sides]}
    out.write_text(json.dumps({"meta": meta, "rows": [row.to_dict() for row in rows]}, indent=1) + "\n")
    written = [out]
    if args.out is None:
        base.with_suffix(".md").write_text(f"{title}\n\n{table}")
        written.append(base.with_suffix(".md"))
    log(f"wrote {', '.join(str(path) for path in written)}")


if __name__ == "__main__":
    main()
