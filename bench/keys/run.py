"""Flow keys: what a job's key costs, and how one key's backlog delays another's jobs; on one server or
a 3-master Redis Cluster; this checkout's engine and, with ``--compare``, another's, side by side.

    .venv/bin/python bench/keys/run.py                               every scenario, full size (minutes)
    .venv/bin/python bench/keys/run.py --quick                       small numbers (under 3 minutes)
    .venv/bin/python bench/keys/run.py --scenarios noisy --backlog 20000 --seconds 10
    .venv/bin/python bench/keys/run.py --quick --compare ../before   both engines, run by run
    .venv/bin/python bench/keys/run.py --quick --cluster             on a 3-master cluster, 3 partitions
    .venv/bin/python bench/keys/run.py --scenarios concurrency,rate  the per-key limits, full size (minutes)

Scenarios (``--scenarios``, ``scenarios.py``): ``noisy`` (key B's lateness behind key A's backlog, and
alone), ``cost`` (Redis commands and CPU per job with a key per job and without), ``many`` (memory and
one key's take cost among a million keys, and whether a key whose jobs are done leaves anything in
Redis; then a take's Redis cost with a million keys each holding a job due, or idle, against one key,
and the memory idle keys leave), ``concurrency`` (``key_concurrency`` 1, then 2, then none, over 4
consume processes: two jobs of one key ever running at once, from each handler's start and end), ``rate`` (a
key's ``key_rate`` against a backlog for a minute: the starts per second achieved; then set by
``Queue.set_key`` beside a key without limits). Each run gets a fresh private Redis, one sweep and one
consume process (``concurrency``: ``--consumers``). Reports, never asserts.
Writes ``.bench/results/keys-<date>-<machine>.{json,md}``; the raw records stay under ``.bench/runs``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from report import markdown
from scenarios import SCENARIOS, Row
from shared import log
from shared.checkout import Checkout
from shared.machine import machine_facts
from shared.paths import REPO, RESULTS, RUNS

# (the full run's, --quick's) values of the options whose default depends on --quick
SIZES: dict[str, tuple[int | float, int | float]] = {
    "backlog": (100_000, 5_000),
    "seconds": (30, 8),
    "many_keys": (1_000_000, 20_000),
    "many_seconds": (20, 8),
    "key_jobs": (100_000, 10_000),
    "rate_seconds": (60, 15),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    def numbers(kind: type) -> Any:
        return lambda text: [kind(v.replace("_", "")) for v in text.split(",") if v.strip()]

    def names(text: str) -> list[str]:
        chosen = [name.strip() for name in text.split(",") if name.strip()]
        unknown = set(chosen) - set(SCENARIOS)
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(sorted(unknown))}: of {', '.join(SCENARIOS)}")
        return chosen

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--scenarios", type=names, default=list(SCENARIOS), help=f"comma-separated, of {','.join(SCENARIOS)} (all)")
    add("--quick", action="store_true", help="small numbers: " + ", ".join(f"{k} {v[1]:,}" for k, v in SIZES.items()))
    add("--backlog", type=int, help="noisy: key A's jobs, all due at once (100,000)")
    add("--seconds", type=float, help="noisy: B's trickle; cost: the load at each rate (30)")
    add("--trickle-rate", type=float, default=10, help="noisy: key B's jobs/s, each due 1 s later (10)")
    add("--concurrency", type=int, default=8, help="noisy: the topic's concurrency (8)")
    add("--handler-ms", type=float, default=2, help="noisy: how long the handler takes (2)")
    add("--rates", type=numbers(float), default=[200, 1000], help="cost: jobs/s (200,1000)")
    add("--keys", type=int, default=1000, help="cost: the keys the jobs go to, job i to key i %% keys (1000)")
    add("--many-keys", type=int, help="many: keys, each holding one job due in a day (1,000,000)")
    add("--many-seconds", type=float, help="many: the one key's steady load of 200 jobs/s (20)")
    add("--fill-procs", type=int, default=2, help="many: processes filling the keys (2)")
    add("--take-count", type=int, default=100, help="many: jobs a take asks for, in the takes' cost (100)")
    add("--key-jobs", type=int, help="concurrency: jobs, all due at once (100,000)")
    add("--bounded-keys", type=int, default=16, help="concurrency: the keys, job i of key c{i %% keys} (16)")
    add(
        "--key-limits",
        type=numbers(int),
        default=[1, 2, 0],
        help="concurrency: key_concurrency, a run each, 0 none (1,2,0)",
    )
    add("--consumers", type=int, default=4, help="concurrency: consume processes (4)")
    add("--workers", type=int, default=16, help="concurrency, rate: the topic's concurrency, a process (16)")
    add("--key-handler-ms", type=float, default=1, help="concurrency: how long the handler takes (1)")
    add("--rate-seconds", type=float, help="rate: how long the limited key is watched (60)")
    add("--key-rate", type=float, default=50, help="rate: the limited key's starts/s (50)")
    add("--key-burst", type=int, default=1, help="rate: its burst (1)")
    add("--free-rate", type=float, default=100, help="rate: the key without limits' jobs/s, beside it (100)")
    add("--cluster", action="store_true", help="on a 3-master Redis Cluster instead of one redis-server")
    add("--partitions", type=int, default=3, help="DELAYQ_PARTITIONS on the cluster (3)")
    add("--compare", type=Path, action="append", default=[], help="another checkout to measure")
    add("--settle", type=float, default=1.0, help="s after the last start before reading Redis (1)")
    add("--drain-timeout", type=float, default=300, help="s to wait after the last due time (300)")
    add("--stall-timeout", type=float, default=60, help="give up when nothing starts this long (60)")
    add("--machine", help="machine name in the result file names (default: cores and CPU model)")
    add("--out-dir", type=Path, default=RESULTS, help="where the results go (.bench/results)")
    args = parser.parse_args(argv)
    for option, (full, quick) in SIZES.items():
        if getattr(args, option) is None:
            setattr(args, option, quick if args.quick else full)
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    sides = [Checkout(REPO), *(Checkout.of(path) for path in args.compare)]
    run: dict[str, Any] = {
        "meta": meta(args, argv),
        "sides": [{"name": side.name, "root": str(side.root)} for side in sides],
        "scenarios": {},
    }
    log(f"load average at the start: {', '.join(f'{x:.2f}' for x in run['meta']['loadavg_at_start'])}")
    rundir = REPO / run["meta"]["raw_records"]
    for n, scenario in enumerate(args.scenarios):
        rows: list[Row] = []
        # The sides one after the other (the machine's drift hits both), the first in turn: whichever
        # code goes first shows the worse tail.
        for side in sides[n % len(sides) :] + sides[: n % len(sides)]:
            log(f"--- {scenario}: {side.name}")
            rows += SCENARIOS[scenario](side, args, rundir / scenario / side.name)
        run["scenarios"][scenario] = rows
    write(run, args)


def meta(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    facts = machine_facts()
    started = datetime.now(UTC)
    machine = args.machine or facts.pop("slug")
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False).stdout
    return {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "command": " ".join([".venv/bin/python bench/keys/run.py", *([shlex.join(argv)] if argv else [])]),
        "params": {k: v for k, v in vars(args).items() if k not in ("compare", "out_dir", "machine")},
        "redis_version": version.split("v=")[-1].split()[0],
        "raw_records": str((RUNS / f"keys-{started.strftime('%Y-%m-%dT%H%M%S')}-{machine}").relative_to(REPO)),
        **facts,
    }


def write(run: dict[str, Any], args: argparse.Namespace) -> None:
    args.out_dir.mkdir(parents=True, exist_ok=True)
    base = args.out_dir / Path(run["meta"]["raw_records"]).name
    base.with_suffix(".json").write_text(json.dumps(run, indent=1, default=str) + "\n")
    base.with_suffix(".md").write_text(markdown(run))
    print()
    print(base.with_suffix(".md").read_text())
    log(f"wrote {base.with_suffix('.json')}, {base.with_suffix('.md')}")


if __name__ == "__main__":
    main()
