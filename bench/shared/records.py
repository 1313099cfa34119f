"""Handler starts, as every harness records them (one ``{"id", "start_ms", ...}`` line per start): read
them, wait for them, and turn them into lateness and delivery faults. Standard library only, so that
a report can be rewritten with any Python 3.11."""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from shared import log

QUANTILES = 200  # lateness quantiles kept per scenario in the JSON, for the plot


def percentile(ordered: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), of sorted values."""
    if not ordered:
        return math.nan
    k = (len(ordered) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def read_jsonl(paths: Iterable[Path]) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        if not path.exists():
            continue
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if line:
                with contextlib.suppress(json.JSONDecodeError):  # a line cut by a kill -9 mid-write
                    rows.append(json.loads(line))
    return rows


def deliveries(expected: dict[str, float], starts: list[dict[str, Any]], early_tolerance_ms: float) -> dict[str, Any]:
    """Lateness (handler start - due, ms) of each job's first delivery, and lost / duplicated / early.

    ``expected``: id -> due_ms; ``starts``: the workers' {id, start_ms} lines (every delivery).
    Early counts every delivery (first or not) that started more than ``early_tolerance_ms`` before due.
    """
    by_id: dict[str, list[float]] = {}
    unexpected = 0
    for row in starts:
        job_id = row["id"]
        if job_id not in expected:
            unexpected += 1
            continue
        by_id.setdefault(job_id, []).append(float(row["start_ms"]))
    lateness = sorted(min(times) - expected[job_id] for job_id, times in by_id.items())
    early = sum(1 for job_id, times in by_id.items() for t in times if t < expected[job_id] - early_tolerance_ms)
    earliest_ms = min((min(times) - expected[j] for j, times in by_id.items()), default=math.nan)
    first_due = min(expected.values()) if expected else math.nan
    last_start = max((max(times) for times in by_id.values()), default=math.nan)
    return {
        "jobs": len(expected),
        "delivered": len(by_id),
        "lost": len(expected) - len(by_id),
        "duplicated": sum(len(times) - 1 for times in by_id.values()),
        "early": early,
        "unexpected": unexpected,
        "earliest_ms": earliest_ms,
        "lateness_ms": summary(lateness),
        "quantiles_ms": [round(percentile(lateness, 100 * i / QUANTILES), 3) for i in range(QUANTILES + 1)]
        if lateness
        else [],
        "last_start_after_first_due_s": (last_start - first_due) / 1000 if by_id else math.nan,
    }


def summary(ordered: Sequence[float]) -> dict[str, float]:
    if not ordered:
        return {}
    return {
        "min": ordered[0],
        "p50": percentile(ordered, 50),
        "p95": percentile(ordered, 95),
        "p99": percentile(ordered, 99),
        "max": ordered[-1],
        "mean": sum(ordered) / len(ordered),
    }


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
