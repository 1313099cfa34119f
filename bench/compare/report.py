"""The peers compare's Markdown report of a run's JSON.

    .venv/bin/python bench/compare/report.py .bench/results/<run>.json    rewrites <run>.md from the JSON

Standard library only: ``run.py`` imports it; it runs with any Python 3.11.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any


def _num(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, str):
        return value
    if abs(value) >= 1000 and digits == 0:
        return f"{value:,.0f}"
    if digits == 0 and abs(value) < 10 and value != int(value):
        return f"{value:.1f}"
    return f"{value:,.{digits}f}"


def _ms(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}"


def _lateness(scenario: dict[str, Any] | None) -> str:
    if not scenario or not scenario.get("lateness_ms"):
        return "-"
    lat = scenario["lateness_ms"]
    return " / ".join(_ms(lat[k]) for k in ("p50", "p95", "p99", "max"))


def _faults(*scenarios: dict[str, Any] | None) -> str:
    cells = []
    for s in scenarios:
        if not s or "lost" not in s:
            cells.append("-")
            continue
        cells.append(f"{s['lost']}/{s['duplicated']}/{s['early']}")
    return " · ".join(cells)


def _per_job(scenario: dict[str, Any] | None, key: str, digits: int = 1) -> str:
    if not scenario or scenario.get(key) is None:
        return "-"
    return _num(scenario[key], digits)


def _drain(burst: dict[str, Any]) -> str:
    """The median run's drain, with the range of every run's when there were several."""
    if not burst:
        return "-"
    runs = [d for d in burst.get("drain_s_runs") or [] if d]
    text = _num(burst.get("drain_s"), 2)
    if len(runs) > 1:
        text += f" ({_num(min(runs), 2)}-{_num(max(runs), 2)})"
    return text


def _rate(enqueue: dict[str, Any]) -> str:
    """The median run's enqueue rate, with the range of every run's when there were several."""
    runs = enqueue.get("jobs_per_s_runs") or []
    text = _num(enqueue.get("jobs_per_s"))
    if len(runs) > 1:
        text += f" ({_num(min(runs))}-{_num(max(runs))})"
    return text


def markdown(run: dict[str, Any]) -> str:
    meta = run["meta"]
    p = meta["params"]
    lines = [
        f"# delayq benchmark, {meta['date']}, {meta['machine']}",
        "",
        f"{meta['cpu']} ({meta['cores']} cores), {meta['os']}; Redis {meta['redis_version']} "
        f"(private, no persistence), Python {meta['python']}, Node {meta['node']}. Command: `{meta['command']}`.",
        "",
        f"Burst: {p['jobs']:,} jobs due at the same instant; "
        f"run {p.get('burst_runs', 1)} times where it drains within {p.get('repeat_under', 0):g} s, the run with "
        "the median drain reported (the range of the drains beside it; lost, duplicated and early summed over "
        "every run). "
        f"Steady: {p['rate']:g} jobs/s for {p['steady_seconds']:g} s, "
        f"delays uniform in {p['min_delay']:g}-{p['max_delay']:g} s. "
        f"Enqueue and memory: {p['mem_jobs']:,} jobs due in 1 h, 100-byte body, the systems with a bulk call fed "
        f"the same 1000-job JSON batches; run {p.get('enqueue_runs', 1)} times where it takes under "
        f"{p.get('repeat_under', 0):g} s, the run with the median rate reported (the range beside it). "
        "Lateness = handler start - due, ms (p50 / p95 / p99 / max).",
    ]
    if meta.get("small_run"):
        lines += [
            "",
            "**A small run (fewer jobs than the defaults): a check of the harness, not a measurement.**",
        ]
    if meta.get("load_note"):
        lines += ["", f"**{meta['load_note']}**"]
    lines += [
        "",
        "| system | enqueue jobs/s | burst drain s | burst lateness ms | steady lateness ms | memory B/job "
        "| Redis CPU µs/job | Redis cmds/job | requests/job | worker CPU µs/job | lost/dup/early (burst · steady) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, s in run["systems"].items():
        enqueue = s.get("enqueue") or {}
        burst = s.get("burst") or {}
        steady = s.get("steady") or {}
        rate = enqueue.get("jobs_per_s")
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{name}" + (f" ({s['label']})" if s.get("label") else ""),
                    _rate(enqueue) if rate else ("= " + s["same_as"] if s.get("same_as") else "-"),
                    _drain(burst),
                    _lateness(burst),
                    _lateness(steady),
                    _num(enqueue.get("memory_bytes_per_job")) if enqueue else "-",
                    _per_job(burst, "redis_cpu_us_per_job"),
                    _per_job(burst, "commands_per_job"),
                    _per_job(burst, "requests_per_job"),
                    _per_job(burst, "worker_cpu_us_per_job", 0),
                    _faults(burst, steady),
                ]
            )
            + " |"
        )
    lines += [
        "",
        "Redis CPU, commands, requests and worker CPU per job are over the burst's whole lifecycle (enqueue, "
        "due, delivery, ack, 1 s after the last start). Commands count those run inside Lua scripts too; "
        "requests are the server's socket reads (a pipeline is one, unless longer than 16 KB).",
    ]
    delayq = run["systems"].get("delayq")
    if delayq:
        lines += ["", "## delayq's own figures", "", *_delayq_lines(run, delayq)]
    for other in meta.get("compare", []):
        if delayq and other in run["systems"]:
            checkouts = meta.get("checkouts", {})
            lines += [
                "",
                f"## delayq against {other}",
                "",
                f"delayq: {checkouts.get('delayq', 'this checkout')}; {other}: {checkouts.get(other, '?')}.",
                "",
                *_ab_lines(delayq, run["systems"][other], other),
            ]
    lines += ["", "## The physical limit: redis-benchmark on the same Redis", "", *_limit_lines(run)]
    notes = [f"- **{name}**: {s['notes']}" for name, s in run["systems"].items() if s.get("notes")]
    if notes:
        lines += ["", "## Notes per system", "", *notes]
    problems = [(name, w) for name, s in run["systems"].items() for w in s.get("warnings", [])]
    if problems:
        lines += ["", "## Warnings", "", *[f"- {name}: {w}" for name, w in problems]]
    versions = meta.get("versions", {})
    if versions:
        lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "."]
    return "\n".join(lines) + "\n"


def _limit(run: dict[str, Any], key: str, what: str = "ops_per_s") -> float | None:
    entry = run.get("limits", {}).get(key)
    return entry[what] if entry else None


def _delayq_lines(run: dict[str, Any], d: dict[str, Any]) -> list[str]:
    rows = []

    def add(label: str, value: float | None, one: str, batched: str) -> None:
        one_ref = _limit(run, one)
        many_ref = _limit(run, batched, "elements_per_s")
        cells = [label, _num(value)]
        for name, ref in ((one, one_ref), (batched, many_ref)):
            cells += [f"{name}: {_num(ref)}", f"{value / ref:.1%}" if value and ref else "-"]
        rows.append("| " + " | ".join(cells) + " |")

    burst = d.get("burst") or {}
    cpu = burst.get("redis_cpu_us_per_job")
    add(
        "enqueue, Python client `enqueue_many` (jobs/s)",
        (d.get("enqueue") or {}).get("jobs_per_s"),
        "ZADD -P 16",
        "ZADD x100 -P 1",
    )
    add(
        "enqueue, API handler POST /jobs/batch (jobs/s)",
        (d.get("enqueue_api") or {}).get("jobs_per_s"),
        "ZADD -P 16",
        "ZADD x100 -P 1",
    )
    add("sweep: due jobs moved (jobs/s)", (d.get("sweep") or {}).get("moved_per_s"), "RPUSH -P 16", "RPUSH x100 -P 1")
    add("burst drain: jobs started (jobs/s)", burst.get("drain_jobs_per_s"), "EVALSHA -P 16", "LRANGE_100 -P 1")
    add(
        "1 s / Redis CPU per job (jobs/s, if Redis were the bottleneck)",
        1e6 / cpu if cpu else None,
        "ZADD -P 16",
        "ZADD x100 -P 1",
    )
    lines = [
        "| figure | delayq | one command per job: ops/s | ratio | 100 elements per command: elements/s | ratio |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "A ratio above 100% means delayq does better than one command per job: it writes many jobs per command.",
        "",
        f"Round trips to Redis per job, counted at the client over the burst's lifecycle: "
        f"{_per_job(burst, 'client_round_trips_per_job', 2)} "
        f"(enqueue {_per_job(burst, 'enqueue_round_trips_per_job', 3)}, "
        f"sweeper and consumer {_per_job(burst, 'worker_round_trips_per_job', 2)}); steady: "
        f"{_per_job(d.get('steady'), 'client_round_trips_per_job', 2)} (one enqueue call per job).",
    ]
    tuned = run["systems"].get("delayq-tuned")
    if tuned and tuned.get("burst"):
        lines.append(
            f"Tuned topic ({tuned.get('label', '')}): burst drain {_num(tuned['burst'].get('drain_s'), 2)} s, "
            f"{_per_job(tuned['burst'], 'client_round_trips_per_job', 2)} round trips per job."
        )
    return lines


AB_FIGURES = (  # (scenario, figure, what), for the A/B table of delayq against a --compare checkout
    ("enqueue", "jobs_per_s", "enqueue, `enqueue_many` (jobs/s)"),
    ("enqueue_api", "jobs_per_s", "enqueue, API handler (jobs/s)"),
    ("sweep", "moved_per_s", "sweep: due jobs moved (jobs/s)"),
    ("enqueue", "memory_bytes_per_job", "memory (B/job)"),
    ("burst", "drain_jobs_per_s", "burst drain (jobs/s)"),
    ("burst", "p50", "burst lateness p50 (ms)"),
    ("burst", "p99", "burst lateness p99 (ms)"),
    ("burst", "redis_cpu_us_per_job", "burst Redis CPU (µs/job)"),
    ("burst", "commands_per_job", "burst Redis cmds/job"),
    ("burst", "worker_cpu_us_per_job", "burst worker CPU (µs/job)"),
    ("steady", "p50", "steady lateness p50 (ms)"),
    ("steady", "p99", "steady lateness p99 (ms)"),
    ("steady", "redis_cpu_us_per_job", "steady Redis CPU (µs/job)"),
    ("steady", "commands_per_job", "steady Redis cmds/job"),
)


def _figure(system: dict[str, Any], scenario: str, key: str) -> float | None:
    figures = system.get(scenario) or {}
    value = (figures.get("lateness_ms") or {}).get(key) if key in ("p50", "p99") else figures.get(key)
    return float(value) if isinstance(value, int | float) and not math.isnan(value) else None


def _ab(value: float | None) -> str:
    return _num(value, 1 if value is not None and abs(value) < 100 else 0)


def _ab_lines(delayq: dict[str, Any], other: dict[str, Any], name: str) -> list[str]:
    """delayq (this checkout) against another checkout's, figure by figure, with their ratio."""
    rows = [f"| figure | delayq | {name} | delayq / {name} |", "|---|---:|---:|---:|"]
    for scenario, key, what in AB_FIGURES:
        a, b = _figure(delayq, scenario, key), _figure(other, scenario, key)
        ratio = f"{a / b:.2f}" if a is not None and b else "-"
        rows.append(f"| {what} | {_ab(a)} | {_ab(b)} | {ratio} |")
    faults = f"lost/dup/early (burst · steady): delayq {_faults(delayq.get('burst'), delayq.get('steady'))}, "
    return [
        *rows,
        "",
        "Both sides ran the same adapter, `.venv`, settings and jobs, one after the other on the same Redis; "
        "only the `functions/` they import differ. The burst's and the enqueue's ranges over the runs are in the "
        "table above: a ratio within them is noise. "
        + faults
        + f"{name} {_faults(other.get('burst'), other.get('steady'))}.",
    ]


def _limit_lines(run: dict[str, Any]) -> list[str]:
    limits = run.get("limits", {})
    if not limits:
        return ["(not measured in this run)"]
    names = list(dict.fromkeys(entry["name"] for entry in limits.values()))
    lines = [
        "| primitive | ops/s -P 1 | ops/s -P 16 | elements/s, 100 per command, -P 1 | Redis CPU µs/op -P 1 "
        "| µs/op -P 16 | µs/element, 100 per command |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        one, many = limits.get(f"{name} -P 1", {}), limits.get(f"{name} -P 16", {})
        batched = limits.get(f"{name} x100 -P 1") or (one if one.get("elements_per_command", 1) > 1 else {})
        per_element = batched.get("redis_cpu_us_per_op")
        lines.append(
            f"| {name} | {_num(one.get('ops_per_s'))} | {_num(many.get('ops_per_s'))} "
            f"| {_num(batched.get('elements_per_s'))} "
            f"| {_num(one.get('redis_cpu_us_per_op'), 2)} | {_num(many.get('redis_cpu_us_per_op'), 2)} "
            f"| {_num(per_element / batched['elements_per_command'], 3) if per_element else '-'} |"
        )
    commands = "; ".join(f"`{entry['command']}`" for key, entry in limits.items() if key.endswith("-P 1"))
    lines += [
        "",
        "redis-benchmark with its default 50 clients; -P 16 runs the same commands 16 to a pipeline. " + commands,
    ]
    return lines


def main(argv: list[str]) -> None:
    for arg in argv:
        path = Path(arg)
        run = json.loads(path.read_text())
        path.with_suffix(".md").write_text(markdown(run))
        print(path.with_suffix(".md"))


if __name__ == "__main__":
    main(sys.argv[1:])
