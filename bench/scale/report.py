"""The scale run's figures and its Markdown report.

    .venv/bin/python bench/scale/report.py .bench/results/scale-<run>.json    rewrites <run>.md from the JSON

Standard library only (``shared.records``' ``deliveries`` turns handler starts into lateness and faults).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.records import deliveries

COLUMNS = (
    ("server", "server"),
    ("topics", "topics"),
    ("backlog", "backlog"),
    ("rate", "jobs/s"),
    ("side", "delayq"),
    ("idle_redis_cpu_ms_per_s", "idle Redis CPU ms/s"),
    ("idle_commands_per_s", "idle cmds/s"),
    ("lateness", "lateness p50 / p99 / max ms"),
    ("redis_cpu_us_per_job", "Redis CPU µs/job"),
    ("commands_per_job", "cmds/job"),
    ("script_calls_per_job", "script calls/job"),
    ("script_us_per_job", "in scripts µs/job"),
    ("memory_bytes_per_job", "memory B/job"),
    ("faults", "lost / dup / early"),
    ("idle_loops_cpu_ms_per_s", "loops' idle CPU ms/s"),
    ("consumer_threads", "consumer threads"),
    ("loadavg", "machine load"),
)


def faults_and_lateness(
    steady: dict[str, float], seeds: dict[str, float], starts: list[dict[str, Any]]
) -> dict[str, Any]:
    """Lateness of the steady jobs' first starts; lost, duplicated and early over every job: the steady
    ones, the seeds, and the backlog (due in a day: any start of one is early)."""
    load = deliveries(steady, starts, 0)
    seeded = deliveries(seeds, starts, 0)
    backlog_started = sum(1 for row in starts if row["id"].startswith("b"))
    return {
        "jobs": load["jobs"],
        "lateness_ms": load["lateness_ms"],
        "quantiles_ms": load["quantiles_ms"],
        "lost": load["lost"] + seeded["lost"],
        "duplicated": load["duplicated"] + seeded["duplicated"],
        "early": load["early"] + seeded["early"] + backlog_started,
    }


def _num(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def cell(row: dict[str, Any], key: str) -> str:
    if "error" in row and key not in ("server", "topics", "backlog", "rate", "side"):
        return "failed" if key == "idle_redis_cpu_ms_per_s" else ""
    if key == "lateness":
        lat = row.get("lateness_ms") or {}
        return " / ".join(_num(lat.get(q), 1) for q in ("p50", "p99", "max"))
    if key == "faults":
        return " / ".join(str(row.get(k, "-")) for k in ("lost", "duplicated", "early"))
    digits = {"commands_per_job": 1, "script_calls_per_job": 2}
    if key in ("topics", "backlog", "rate", "consumer_threads", "idle_commands_per_s", *digits):
        return _num(row.get(key), digits.get(key, 0))
    if key in ("server", "side"):
        return str(row[key])
    return _num(row.get(key), 1 if key.endswith("_per_s") or key == "loadavg" else 0)


def markdown(run: dict[str, Any]) -> str:
    meta = run["meta"]
    lines = [
        f"# delayq at scale, {meta['date']}, {meta['machine']}",
        "",
        f"`{meta['command']}`: {meta['cpu']}, {meta['cores']} cores, {meta['os']}, Python {meta['python']}, "
        f"Redis {meta['redis_version']}. One sweep and one consume process (`python -m delayq sweep|consume`), "
        f"every topic under `*` (defaults: concurrency 8, batch 100), DELAYQ_TICK 1 s; the cluster: 3 masters, "
        f"{meta['params']['partitions']} partitions. Idle: {meta['params']['idle_seconds']:g} s with every topic "
        f"known and nothing due. Steady: {meta['params']['steady_seconds']:g} s of load, delays "
        f"{meta['params']['min_delay']:g}-{meta['params']['max_delay']:g} s, one producer process "
        f"({producer_note(meta['params'])}); Redis CPU and commands per job over the load and its "
        "drain. Memory per job: `used_memory` after the backlog's fill minus before, / backlog jobs. Machine load: "
        "the 1-minute load average as the point started.",
        "",
        "Sides: " + "; ".join(f"`{s['name']}` ({s['root']})" for s in run["sides"]) + ".",
        "",
    ]
    if meta.get("load_note"):
        lines += [meta["load_note"], ""]
    lines += ["| " + " | ".join(title for _, title in COLUMNS) + " |"]
    lines += ["|" + "|".join("---" if key in ("server", "side") else "---:" for key, _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(cell(row, key) for key, _ in COLUMNS) + " |" for row in run["points"]]
    notes = [f"- {row['side']}, {row['label']}: {warning}" for row in run["points"] for warning in row["warnings"]]
    if notes:
        lines += ["", "Warnings:", "", *notes]
    lines += ["", f"Raw records: `{meta['raw_records']}`.", ""]
    return "\n".join(lines)


def producer_note(params: dict[str, Any]) -> str:
    return (
        f"`Queue.enqueue`, one call per job, up to {params['batch_above']:,g} jobs/s; above that, "
        f"`Queue.enqueue_many` of the jobs whose time has come, up to {params['producer_batch']} a call"
    )


if __name__ == "__main__":
    path = Path(sys.argv[1])
    path.with_suffix(".md").write_text(markdown(json.loads(path.read_text())))
