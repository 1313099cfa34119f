"""The flow keys run's Markdown report: a table per scenario, each run of a side a row, and a row of
ratios under each pair (with A / alone, keyed / keyless, many keys / no key, many keys / one key).

    .venv/bin/python bench/keys/report.py .bench/results/keys-<run>.json    rewrites <run>.md from the JSON

Standard library only.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Row = dict[str, Any]
RATE_BACKLOG_NOTE = "1.25"  # scenarios.RATE_BACKLOG, here as text: the report needs no scenario module


def num(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def lateness(summary: dict[str, float] | None) -> str:
    summary = summary or {}
    return " / ".join(num(summary.get(q), 1) for q in ("p50", "p99", "max"))


def faults(row: Row) -> str:
    return " / ".join(str(row.get(fault, "-")) for fault in ("lost", "duplicated", "early"))


def ratio(top: Any, bottom: Any) -> str:
    if not isinstance(top, int | float) or not isinstance(bottom, int | float) or not bottom:
        return "-"
    return f"{top / bottom:,.2f}x"


def lateness_ratio(top: dict[str, float] | None, bottom: dict[str, float] | None) -> str:
    top, bottom = top or {}, bottom or {}
    return " / ".join(ratio(top.get(q), bottom.get(q)) for q in ("p50", "p99", "max"))


def mentions(row: Row) -> str:
    """``tenant-a: 0 (receipts 10,000)``: each key's mentions in Redis once its jobs were done."""
    found = row.get("idle_mentions") or {}
    return "; ".join(f"{key}: {m['elsewhere']:,} (receipts {m['receipts']:,})" for key, m in found.items()) or "-"


def table(head: Sequence[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def failed(row: Row, width: int) -> list[str]:
    return [row["side"], row["variant"], f"failed: {row['error'][:120]}", *[""] * (width - 3)]


def rows_of(rows: list[Row], width: int, cells: Callable[[Row], list[str]]) -> list[list[str]]:
    """A table's rows: each row's ``cells``, or for a run that failed, what failed."""
    return [failed(row, width) if "error" in row else cells(row) for row in rows]


def noisy_table(rows: list[Row]) -> list[str]:
    head = (
        "delayq", "run", "B jobs", "B lateness p50 / p99 / max ms", "B due while A drained: jobs, p50 / max ms",
        "A's drain s", "A jobs/s", "lost / dup / early", "keys named once done: elsewhere (receipts)", "load",
    )  # fmt: skip
    out = rows_of(rows, len(head), noisy_cells)
    for side, pair in pairs(rows, lambda row: row["backlog"] > 0):
        with_a, alone = pair
        cell = lateness_ratio(with_a["b_lateness_ms"], alone["b_lateness_ms"])
        out.append([side, "**B with A / B alone**", "", cell, *[""] * (len(head) - 4)])
    return table(head, out)


def noisy_cells(row: Row) -> list[str]:
    behind = row["b_behind_a"]
    behind_cell = f"{behind['jobs']:,}, " + " / ".join(num(behind["lateness_ms"].get(q), 1) for q in ("p50", "max"))
    return [
        row["side"], row["variant"], num(row["b_jobs"]), lateness(row["b_lateness_ms"]),
        behind_cell if row["backlog"] else "-", num(row["a_drain_s"], 1), num(row["a_jobs_per_s"]),
        faults(row), mentions(row), num(row["loadavg"], 1),
    ]  # fmt: skip


def cost_table(rows: list[Row]) -> list[str]:
    head = (
        "delayq", "run", "jobs", "lateness p50 / p99 / max ms", "cmds/job", "script calls/job", "Redis CPU µs/job",
        "lost / dup / early", "load",
    )  # fmt: skip
    out = rows_of(rows, len(head), lambda row: [*cost_cells(row), num(row["loadavg"], 1)])
    for rate in dict.fromkeys(row["rate"] for row in rows):
        for side, (keyed, keyless) in pairs([r for r in rows if r["rate"] == rate], lambda row: row["keys"] > 0):
            out.append([side, f"**{rate:g} jobs/s: keyed / keyless**", *ratio_cells(keyed, keyless), "", ""])
    return table(head, out)


def cost_cells(row: Row) -> list[str]:
    return [
        row["side"], row["variant"], num(row["jobs"]), lateness(row["lateness_ms"]), num(row["commands_per_job"], 1),
        num(row["script_calls_per_job"], 2), num(row["redis_cpu_us_per_job"]), faults(row),
    ]  # fmt: skip


def ratio_cells(top: Row, bottom: Row) -> list[str]:
    return [
        "", lateness_ratio(top["lateness_ms"], bottom["lateness_ms"]),
        *(ratio(top[k], bottom[k]) for k in ("commands_per_job", "script_calls_per_job", "redis_cpu_us_per_job")),
    ]  # fmt: skip


def many_table(rows: list[Row]) -> list[str]:
    waiting = [row for row in rows if row.get("part") != "takes"]
    takes = [row for row in rows if row.get("part") == "takes"]
    out = waiting_table(waiting) if waiting else []
    if takes:
        out += ["", "### A take's cost, and what idle keys leave", "", TAKES_NOTE, "", *takes_table(takes)]
    return out


def waiting_table(rows: list[Row]) -> list[str]:
    head = (
        "delayq", "jobs waiting", "memory B/job", "fill jobs/s", "steady jobs", "lateness p50 / p99 / max ms",
        "cmds/job", "script calls/job", "Redis CPU µs/job", "lost / dup / early",
        "steady key named once done: elsewhere (receipts)", "load",
    )  # fmt: skip
    out = rows_of(rows, len(head), waiting_cells)
    for side, (keyed, keyless) in pairs(rows, lambda row: row["distinct_keys"]):
        memory = ratio(keyed["memory_bytes_per_job"], keyless["memory_bytes_per_job"])
        out.append([side, "**keys / no key**", memory, "", *ratio_cells(keyed, keyless), "", "", ""])
    return table(head, out)


def waiting_cells(row: Row) -> list[str]:
    return [
        row["side"], row["variant"], num(row["memory_bytes_per_job"]), num(row["fill_jobs_per_s"]),
        *cost_cells(row)[2:], mentions(row), num(row["loadavg"], 1),
    ]  # fmt: skip


TAKES_NOTE = (
    "A topic with `keep_done` 0 (no receipts); its jobs due now, filled by `enqueue_many`, then drained by "
    "`producers.py takes`: take.lua as the consume loop calls it (`store.calls.take`), the partitions in turn, each "
    "take carrying the acks of the one before it, no loop running; Redis CPU and commands (those inside scripts "
    "too) around the drain, per take. The idle keys' run: the same Redis after the keys' drain. Left: `used_memory` "
    "and key names 2 s after the drain, minus before the first fill (a few jobs taken and acked before it, so "
    "that every script is loaded and the topic's keys made)."
)


def takes_table(rows: list[Row]) -> list[str]:
    head = (
        "delayq", "run", "jobs", "takes", "jobs/take", "cmds/take", "script calls/take", "Redis CPU µs/take",
        "script µs/take", "takes/s", "waiting B/job", "left once drained: memory, key names", "load",
    )  # fmt: skip
    out = rows_of(rows, len(head), takes_cells)
    for side in dict.fromkeys(row["side"] for row in rows):
        mine = [row for row in rows if row["side"] == side and "error" not in row]
        one = next((row for row in mine if not row["distinct_keys"] and not row.get("after_idle")), None)
        for row in mine:
            if one is None or row is one:
                continue
            label = "idle keys, then 1 key / 1 key" if row.get("after_idle") else "keys / 1 key"
            cells = [ratio(row[k], one[k]) for k in ("commands_per_take", "script_calls_per_take")]
            cells += [ratio(row[k], one[k]) for k in ("redis_cpu_us_per_take", "script_us_per_take", "takes_per_s")]
            more = row["left_bytes"] - one["left_bytes"]
            extra = (
                f"{more:+,.0f} B ({more / max(row['jobs'], 1):+.2f} a key), {row['left_keys'] - one['left_keys']:+,}"
            )
            out.append([side, f"**{label}**", "", "", "", *cells, "", extra, ""])
    return table(head, out)


def takes_cells(row: Row) -> list[str]:
    left = f"{num(row['left_bytes'])} B, {num(row['left_keys'])}"
    taken = num(row["taken"]) + ("" if row["taken"] == row["jobs"] else f" of {row['jobs']:,}")
    return [
        row["side"], row["variant"], taken, num(row["takes"]), num(row["jobs_per_take"], 1),
        num(row["commands_per_take"], 1), num(row["script_calls_per_take"], 2), num(row["redis_cpu_us_per_take"]),
        num(row["script_us_per_take"]), num(row["takes_per_s"]), num(row["memory_bytes_per_job"]), left,
        num(row["loadavg"], 1),
    ]  # fmt: skip


def concurrency_table(rows: list[Row]) -> list[str]:
    head = (
        "delayq", "run", "jobs", "keys", "limit in force", "most of a key at once", "overlaps",
        "starts beyond the limit (keys)", "lost / dup / early", "wall s", "jobs/s", "lateness p50 / p99 / max ms",
        "load",
    )  # fmt: skip
    return table(head, rows_of(rows, len(head), concurrency_cells))


def concurrency_cells(row: Row) -> list[str]:
    return [
        row["side"], row["variant"], num(row["jobs"]), num(row["keys"]), num(row["in_force"]),
        num(row["most_at_once"]), num(row["overlaps"]),
        "-" if row["in_force"] is None else f"{row['over_limit']:,} ({row['keys_over_limit']:,})",
        faults(row), num(row["wall_s"], 1), num(row["jobs_per_s"]), lateness(row["lateness_ms"]),
        num(row["loadavg"], 1),
    ]  # fmt: skip


def rate_table(rows: list[Row]) -> list[str]:
    head = (
        "delayq", "run", "backlog", "started", "in its first s", "achieved /s", "off the limit", "a second: min / max",
        "dup / early", "free key: jobs", "free key: lateness p50 / p99 / max ms", "free key: lost / dup / early",
        "load",
    )  # fmt: skip
    return table(head, rows_of(rows, len(head), rate_cells))


def rate_cells(row: Row) -> list[str]:
    deviation = "-" if row["deviation"] is None else f"{100 * row['deviation']:+.1f}%"
    free = row["free_faults"]
    return [
        row["side"], row["variant"], num(row["backlog"]), num(row["started"]), num(row["first_second"]),
        f"{num(row['achieved_per_s'], 2)} over {row.get('window_s', '-')} s", deviation,
        f"{row.get('per_second_min', '-')} / {row.get('per_second_max', '-')}",
        f"{row['duplicated']} / {row['early']}", num(row["free_jobs"]) if free else "-",
        lateness(row["free_lateness_ms"]) if free else "-", faults(free) if free else "-", num(row["loadavg"], 1),
    ]  # fmt: skip


def pairs(rows: list[Row], is_top: Callable[[Row], bool]) -> list[tuple[str, tuple[Row, Row]]]:
    """Per side, its two rows that did not fail: the one ``is_top`` picks, then the other."""
    found = []
    for side in dict.fromkeys(row["side"] for row in rows):
        mine = [row for row in rows if row["side"] == side and "error" not in row]
        tops, bottoms = [r for r in mine if is_top(r)], [r for r in mine if not is_top(r)]
        if len(tops) == 1 and len(bottoms) == 1:
            found.append((side, (tops[0], bottoms[0])))
    return found


TABLES: dict[str, tuple[str, Callable[[list[Row]], list[str]]]] = {
    "noisy": ("A noisy key: key B's lateness behind key A's backlog", noisy_table),
    "cost": ("What a key costs a job", cost_table),
    "many": ("Many keys", many_table),
    "concurrency": ("One key's concurrency, over several consumers", concurrency_table),
    "rate": ("One key's rate", rate_table),
}


def notes(scenario: str, params: dict[str, Any]) -> str:
    if scenario == "noisy":
        return (
            f"One topic, concurrency {params['concurrency']}, a handler of {params['handler_ms']:g} ms. Key A: "
            f"{params['backlog']:,} jobs all due at one instant; from that instant key B: {params['trickle_rate']:g} "
            f"jobs/s for {params['seconds']:g} s, each due 1 s after it is sent. B's lateness: handler start minus "
            "run-at as Redis answered it. A's drain: A's due instant to A's last start."
        )
    if scenario == "cost":
        return (
            f"One topic (concurrency 8, batch 100), a no-op handler, {params['seconds']:g} s of load at each rate, one "
            f"`Queue.enqueue` a job, each due 1-5 s after it is sent; keyed: job i of key `k{{i % {params['keys']}}}`. "
            "Redis CPU and commands (those inside scripts too) from the producer's start to 1 s after the last start."
        )
    if scenario == "concurrency":
        cluster = params["cluster"] and params["partitions"] > 1
        return (
            f"One topic, `key_concurrency` as the run says, concurrency {params['workers']} (workers a process), "
            f"{params['consumers']} consume processes (`python -m delayq consume`) and one sweep; "
            f"{params['key_jobs']:,} jobs over {params['bounded_keys']:,} keys, all due at one instant; a handler of "
            f"{params['key_handler_ms']:g} ms that notes its start and end (`time.time_ns()`, one clock). Overlaps: "
            "starts while another job of the same key ran; most at once: the most jobs of one key running at one "
            "moment. Wall: the due instant to the last end. "
            + (
                f"With {params['partitions']} partitions each enforces its share, rounded up (`ceil(C / P)`): up to "
                f"{params['partitions']} times that may run at once, as the limit in force says."
                if cluster
                else "The limit in force is the setting."
            )
        )
    if scenario == "rate":
        return (
            f"One topic (concurrency {params['workers']}, a no-op handler, one consume process); key `limited`: a "
            f"backlog all due at one instant, {RATE_BACKLOG_NOTE} times what {params['key_rate']:g} starts/s start in "
            f"{params['rate_seconds']:g} s. Achieved: its starts from 1 s after its first start to "
            f"{params['rate_seconds']:g} s after it, per second; off the limit: achieved / limit - 1. The set_key run: "
            f"the same rate by `Queue.set_key`, the topic without key limits, beside key `free` sending "
            f"{params['free_rate']:g} jobs/s, each due 1 s later (its lateness: handler start minus run-at)."
        )
    return (
        f"{params['many_keys']:,} jobs due in a day filled by {params['fill_procs']} processes (`enqueue_many`), each "
        "of a key of its own or of none; memory: `used_memory` after minus before, / jobs; fill jobs/s: over the "
        "slowest process's own time. Then in the same topic one key's steady 200 jobs/s for "
        f"{params['many_seconds']:g} s, each due 1-3 s after it is sent, and once it is done every Redis key name, "
        "hash field and value, member and element searched for that key's name."
    )


def markdown(run: dict[str, Any]) -> str:
    meta = run["meta"]
    load = ", ".join(f"{x:.2f}" for x in meta["loadavg_at_start"])
    server = (
        f"a 3-master Redis Cluster, DELAYQ_PARTITIONS={meta['params']['partitions']}"
        if meta["params"]["cluster"]
        else "one redis-server"
    )
    lines = [
        f"# Flow keys, {meta['date']}, {meta['machine']}",
        "",
        f"`{meta['command']}`",
        "",
        f"{meta['cpu']}, {meta['cores']} cores, {meta['os']}, Python {meta['python']}, Redis {meta['redis_version']} "
        f"({server}). Load average at the start: {load}. Each run: a fresh private Redis, one sweep and one consume "
        "process (`python -m delayq sweep|consume`), DELAYQ_TICK 1 s. Lateness: handler start minus run-at as Redis "
        "answered it. Load: the 1-minute load average as the run started.",
        "",
        "Sides: " + "; ".join(f"`{s['name']}` ({s['root']})" for s in run["sides"]) + ".",
        "",
    ]
    for scenario, rows in run["scenarios"].items():
        title, render = TABLES[scenario]
        lines += [f"## {title} (`{scenario}`)", "", notes(scenario, meta["params"]), "", *render(rows), ""]
        lines += [f"- {row['side']}, {row['variant']}: {warning}" for row in rows for warning in row["warnings"]]
        for row in rows:
            for key, found in (row.get("idle_mentions") or {}).items():
                for where, n in found["where"].items():
                    lines.append(f"- {row['side']}, {row['variant']}: `{key}` named {n:,} times in {where}")
        lines += [""] if lines[-1] else []
    lines += [f"Raw records: `{meta['raw_records']}`.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    path = Path(sys.argv[1])
    path.with_suffix(".md").write_text(markdown(json.loads(path.read_text())))
