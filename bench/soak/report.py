"""The soak's figures and its Markdown report: per topic, the lateness of every attempt and
whether anything was lost, duplicated, early or leaked; the goal checked; the kills, replays, producer,
namespace, Redis and the loops' logs in a few lines.

    .venv/bin/python bench/soak/report.py .bench/results/soak-<run>.json    rewrites <run>.md from the JSON

(``.venv/bin/python bench/soak/run.py --markdown <run>.json`` does the same.) Standard library only
(``shared.records``' ``summary`` turns lateness into quantiles); ``run.py`` imports this module, never
the reverse.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.records import summary

KILL_WINDOW_MS = 8000  # attempts due within this long after a kill are in its window
AT_KILL_MS = 2000  # an attempt started this long before a consumer's kill may have been that consumer's
EARLY_TOLERANCE_MS = 1
GOAL_P99_MS = 10
# run.py's RESTART_AFTER_S and STILL_DELAYED_MS, which a run notes under "producer": a run noted before
# they were there had these.
OLDER_RESTART_AFTER_S, OLDER_STILL_DELAYED_MS = 2.0, 200


@dataclass
class Planned:
    """One job the producer created, and what the producer did to it."""

    id: str
    topic: str
    body: dict[str, Any]
    due_ms: int  # Redis' answer to the create, or to the reschedule
    failing: int  # attempts planned to fail: a fail body's count, a sleep past the timeout's
    cancelled_ms: float | None = None
    rescheduled: bool = False
    replayed_ms: list[float] = field(default_factory=list)  # just before each replay that revived it
    refused: str = ""  # a cancel or reschedule that delayq refused: why

    def attempts(self, retries: int) -> int:
        """Attempts planned per life (a replay starts a new one): the failures and one success, or as
        many as the retries allow."""
        return min(self.failing + 1, retries + 1)

    def dies(self, retries: int) -> bool:
        return self.failing > retries


@dataclass
class Kill:
    loop: str
    process: str
    pid: int
    at_ms: float  # epoch ms, the handler's clock
    at_s: float  # seconds into the load
    how: str  # how the process was chosen
    replaced_by: str = ""


@dataclass
class TopicFigures:
    created: int = 0
    cancelled: int = 0
    rescheduled: int = 0
    refused: int = 0  # cancels and reschedules delayq refused
    attempts: int = 0
    lateness: list[float] = field(default_factory=list)
    outside: list[float] = field(default_factory=list)  # attempts due outside every kill window
    replayed: list[float] = field(default_factory=list)  # the attempts of the lives a replay began
    ordinary: list[float] = field(default_factory=list)  # outside the kill windows, not of a replayed life
    early: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: int = 0  # an attempt of a job's life started a second time
    extra: int = 0  # starts beyond the plan (duplicates, and attempts a kill cost)
    extra_at_kill: int = 0  # ... of jobs that had an attempt running when a consumer was killed
    dead_planned: int = 0
    dead_other: list[str] = field(default_factory=list)
    ran_after_cancel: int = 0
    cancel_kept: int = 0  # a cancelled job that delayq still answers for

    def as_dict(self) -> dict[str, Any]:
        ordered, outside = sorted(self.lateness), sorted(self.outside)
        figures = {k: v for k, v in asdict(self).items() if k not in ("lateness", "outside", "replayed", "ordinary")}
        return figures | {
            "lateness_ms": summary(ordered),
            "lateness_outside_kill_windows_ms": summary(outside),
            "lateness_replayed_ms": summary(sorted(self.replayed)),
            "lateness_ordinary_ms": summary(sorted(self.ordinary)),
            "in_kill_windows": len(ordered) - len(outside),
            "replayed_attempts": len(self.replayed),
            "over_goal": sum(1 for late in ordered if late > GOAL_P99_MS),
        }


def figures(
    jobs: dict[str, Planned],
    kills: list[Kill],
    starts: list[dict[str, Any]],
    finals: dict[str, str],
    retries: dict[str, int],
) -> dict[str, dict[str, Any]]:
    """Per topic (and ``all``): what was created and done to the jobs, every attempt's lateness
    (its start minus its run-at), and the faults. ``retries``: each topic's, its keys the topics in the
    order of the table's rows."""
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    unexpected = 0
    for row in starts:
        if row.get("id") in jobs:
            by_job[row["id"]].append(row)
        else:
            unexpected += 1
    windows = [(kill.at_ms, kill.at_ms + KILL_WINDOW_MS) for kill in kills]
    consumer_kills = [kill.at_ms for kill in kills if kill.loop == "consume"]
    topics = {topic: TopicFigures() for topic in retries}
    for job in jobs.values():
        rows = sorted(by_job.get(job.id, []), key=lambda row: row["start_ms"])
        tally(topics[job.topic], job, rows, final=finals[job.id], retries=retries[job.topic], windows=windows,
              consumer_kills=consumer_kills)  # fmt: skip
    out = {topic: figs.as_dict() for topic, figs in topics.items()}
    every = TopicFigures()
    for figs in topics.values():
        for name, value in vars(figs).items():
            setattr(every, name, getattr(every, name) + value)
    out["all"] = every.as_dict() | {"unexpected_starts": unexpected}
    return out


def tally(
    figs: TopicFigures,
    job: Planned,
    rows: list[dict[str, Any]],
    *,
    final: str,
    retries: int,
    windows: list[tuple[float, float]],
    consumer_kills: list[float],
) -> None:
    """One job's part of its topic's figures; ``rows``: its attempts' starts, oldest first."""
    figs.created += 1
    figs.attempts += len(rows)
    figs.refused += bool(job.refused)
    for i, life in enumerate(lives(rows, job.replayed_ms)):
        lateness_of(figs, job, life, replayed=i > 0, windows=windows)
    if job.cancelled_ms is not None:
        figs.cancelled += 1
        figs.ran_after_cancel += sum(1 for row in rows if row["start_ms"] > job.cancelled_ms)
        figs.cancel_kept += final != "missing"
        return
    figs.rescheduled += job.rescheduled
    if final == "dead":
        if job.dies(retries):
            figs.dead_planned += 1
        else:
            figs.dead_other.append(job.id)
    elif final != "done" or not rows:
        figs.lost.append(f"{job.id}: {final}" + ("" if rows else ", never started"))
    for life in lives(rows, job.replayed_ms):
        if not life:
            continue
        figs.duplicated += sum(n - 1 for n in Counter(row["attempt"] for row in life).values())
        over = max(0, len(life) - job.attempts(retries))
        figs.extra += over
        if over and any(kill - AT_KILL_MS <= row["start_ms"] <= kill for row in life for kill in consumer_kills):
            figs.extra_at_kill += over


def lateness_of(
    figs: TopicFigures, job: Planned, life: list[dict[str, Any]], *, replayed: bool, windows: list[tuple[float, float]]
) -> None:
    """The lateness and the early starts of one life of a job (``replayed``: one that a replay began)."""
    for n, row in enumerate(life):
        start, run_at = float(row["start_ms"]), float(row["run_at_ms"])
        late = start - run_at
        figs.lateness.append(late)
        in_window = any(lo <= run_at <= hi for lo, hi in windows)
        if not in_window:
            figs.outside.append(late)
        if replayed:  # a burst: due the instant of the replay, then its retries due together after the backoff
            figs.replayed.append(late)
        elif not in_window:
            figs.ordinary.append(late)
        # The first start is checked against the due time the producer was told too (a reschedule's).
        due = max(run_at, job.due_ms) if not replayed and not n else run_at
        figs.early += start < due - EARLY_TOLERANCE_MS


def lives(rows: list[dict[str, Any]], replays: list[float]) -> list[list[dict[str, Any]]]:
    """A job's starts split by its replays (a replayed dead job starts again at attempt 1): the first
    life, then one per replay (empty when nothing started in it)."""
    bounds = [*sorted(replays), math.inf]
    out: list[list[dict[str, Any]]] = [[] for _ in bounds]
    for row in rows:
        out[next(i for i, bound in enumerate(bounds) if row["start_ms"] < bound)].append(row)
    return out


def _ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def _lateness(lat: dict[str, float]) -> str:
    return " / ".join(_ms(lat.get(k)) for k in ("p50", "p99", "max")) if lat else "-"


def table(per_topic: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| topic | created | cancelled | rescheduled | attempts | lateness p50 / p99 / max ms "
        "| p99 outside kill windows | ... and replays | early | lost | dup | extra starts (at a kill) "
        "| dead planned / other |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for topic, f in per_topic.items():
        name = f"**{topic}**" if topic == "all" else topic
        lines.append(
            f"| {name} | {f['created']:,} | {f['cancelled']:,} | {f['rescheduled']:,} | {f['attempts']:,} "
            f"| {_lateness(f['lateness_ms'])} | {_ms(f['lateness_outside_kill_windows_ms'].get('p99'))} "
            f"| {_ms(f['lateness_ordinary_ms'].get('p99'))} "
            f"| {f['early']} | {len(f['lost'])} | {f['duplicated']} | {f['extra']} ({f['extra_at_kill']}) "
            f"| {f['dead_planned']} / {len(f['dead_other'])} |"
        )
    return "\n".join(lines)


def verdict(result: dict[str, Any]) -> list[str]:
    """The goal, checked: p99 at most 10 ms on every topic; nothing lost, duplicated, early or
    leaked."""
    per_topic = {t: f for t, f in result["topics"].items() if t != "all"}
    every, found = result["topics"]["all"], []

    def over(key: str) -> list[str]:
        return [f"{t} {_ms(f[key].get('p99'))} ms" for t, f in per_topic.items() if f[key].get("p99", 0) > GOAL_P99_MS]

    def said(key: str, what: str) -> str:
        late = over(key)
        return f"{what}: " + ("yes" if not late else f"no ({', '.join(late)})")

    views = [said("lateness_ms", "every attempt")]
    if result["kills"]:
        views.append(said("lateness_outside_kill_windows_ms", "outside the kill windows"))
    if result["replays"]:
        views.append(said("lateness_ordinary_ms", "outside the kill windows, replays left out"))
    found.append(f"p99 at most {GOAL_P99_MS} ms on every topic: " + "; ".join(views))
    leaked = len(result["namespace"]["problems"]) + len(result["namespace"]["left"]) + every["cancel_kept"]
    faults = {
        "lost": len(every["lost"]),
        "duplicated": every["duplicated"],
        "early": every["early"],
        "leaked": leaked,
        "ran after a cancel": every["ran_after_cancel"],
        "starts of no job created": every["unexpected_starts"],
    }
    found.append(
        "nothing lost, duplicated, early or leaked: "
        + ("yes" if not any(faults.values()) else "no (" + ", ".join(f"{k} {v}" for k, v in faults.items() if v) + ")")
    )
    if "callbacks" in result:  # runs from before callbacks have none
        callbacks = result["callbacks"]
        exact = not callbacks["missing"] and not callbacks["doubled"]
        found.append(
            f"callbacks: 0 missing and 0 doubled: {'yes' if exact else 'no'} "
            f"({callbacks['missing']} missing, {callbacks['doubled']} doubled; done {callbacks['done']['made']:,} made "
            f"of {callbacks['done']['expected']:,} expected, dead {callbacks['dead']['made']:,} of "
            f"{callbacks['dead']['expected']:,})"
        )
    return found


def markdown(result: dict[str, Any]) -> str:
    meta, params = result["meta"], result["meta"]["params"]
    redis, ns, logs, producer = result["redis"], result["namespace"], result["logs"], result["producer"]
    restart_after_s = producer.get("restart_after_s", OLDER_RESTART_AFTER_S)
    still_delayed_ms = producer.get("still_delayed_ms", OLDER_STILL_DELAYED_MS)
    lines = [
        f"# delayq: a mixed soak, {meta['date']}",
        "",
        f"{meta['machine']} ({meta['cpu']}, {meta['cores']} cores), Redis {meta['redis_version']}, "
        f"Python {meta['python']}, delayq {meta.get('delayq', '?')}; `{meta['command']}`. "
        f"{params['minutes']:g} min at {params['rate']:g} jobs/s, "
        f"{params['partitions']} partitions, 2 consume and 2 sweep processes, tick 1 s. "
        f"Load average at the start: {meta['loadavg_at_start']:.1f}.",
        "",
        table(result["topics"]),
        "",
        "Lateness: every attempt's handler start minus that attempt's run-at (a retry's is its failure plus "
        f"the backoff). Kill windows: attempts due from a kill to {KILL_WINDOW_MS // 1000} s after it; "
        '"... and replays" leaves out the kill windows and the attempts of replayed lives too (a replay makes every '
        "dead letter due the instant of the replay, and as they fail again their retries fall due together: bursts "
        "of more jobs than the topic's workers). "
        "Extra starts: starts beyond the plan (each job's planned failures and one success, per life: a replay "
        "starts a new one); in brackets, those of jobs that had an attempt start within "
        f"{AT_KILL_MS // 1000} s before a consumer was killed.",
        "",
    ]
    lines += [f"- Goal: {line}" for line in verdict(result)]
    for kill in result["kills"]:
        lines.append(
            f"- At {kill['at_s']:g} s, kill -9 of {kill['process']} (pid {kill['pid']}, {kill['how']}); "
            f"{kill['replaced_by'] or 'nothing'} started {restart_after_s:g} s later."
        )
    if result["replays"]:
        done = ", ".join(f"{r['replayed']} at {r['at_s']:g} s" for r in result["replays"])
        payments = result["topics"]["payments"]
        lines.append(
            f"- Payments' dead letters replayed: {done}. A replayed job is due the instant of the replay and goes "
            f"straight to the ready list; the attempts of replayed lives ({payments['replayed_attempts']}: the first "
            f"after each replay and their retries): "
            f"lateness {_lateness(payments['lateness_replayed_ms'])} ms; payments' other attempts outside the kill "
            f"windows: {_lateness(payments['lateness_ordinary_ms'])} ms."
        )
    skipped = result["producer"]["skipped"]
    lines += [
        f"- Producer: {result['producer']['jobs']:,} jobs in {result['producer']['seconds']:.0f} s, at most "
        f"{result['producer']['max_behind_s']:.2f} s behind its pace; cancels and reschedules skipped because "
        f"the job was due within {still_delayed_ms} ms: {skipped.get('cancel', 0)} / {skipped.get('reschedule', 0)}; "
        f"refused by delayq: {result['topics']['all']['refused']}.",
        f"- Namespace after the run: {len(ns['problems'])} invariant problems; {len(ns['left'])} jobs left "
        f"neither done nor dead; {result['topics']['all']['cancel_kept']} cancelled jobs still there.",
        f"- Redis: {redis['cpu_ms_per_s']:.1f} ms of CPU a second over the load ({redis['load_seconds']:.0f} s, "
        f"{redis['commands_per_s']:,.0f} commands/s); used_memory {redis['memory_start'] / 1e6:.1f} MB before, "
        f"{redis['memory_end'] / 1e6:.1f} MB after (receipts of done jobs are kept an hour).",
        f"- The loops' logs: {logs['expected_warnings']:,} warnings the plan causes (failures, timeouts); "
        f"{len(logs['other'])} other warnings or errors, {logs['tracebacks']} tracebacks.",
    ]
    lines += [f"  - `{line}`" for line in logs["other"][:20]]
    lines += [f"- Warning: {warning}" for warning in result["warnings"]]
    return "\n".join(lines) + "\n"


def rewrite(path: Path) -> str:
    """Rewrites a run's ``.md`` beside its ``.json``, and returns it."""
    text = markdown(json.loads(path.read_text()))
    path.with_suffix(".md").write_text(text)
    return text


if __name__ == "__main__":
    rewrite(Path(sys.argv[1]))
