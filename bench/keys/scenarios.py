"""The flow keys run's scenarios, one function each, called once per side: each run of a scenario gets
a fresh private Redis (``stage.Stage``) and answers one row of figures.

- ``noisy``: key A's backlog, all due at once, then a trickle of key B behind it; and B alone.
- ``cost``: a steady load with a key per job (among ``--keys``) against the same without keys.
- ``many``: ``--many-keys`` keys each holding one job due in a day, against as many jobs without a key:
  memory per job, then a steady load of one key, and where Redis still names that key once it is done.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import redis
from shared import log
from shared.checkout import Checkout
from shared.records import deliveries, read_jsonl, summary
from shared.servers import spent
from stage import TARGET, Stage

KEY_A, KEY_B = "tenant-a", "tenant-b"  # the noisy scenario's keys; no job id or Redis key name holds them
STEADY_KEY = "steady-key"  # the many scenario's steady key
ENQUEUE_JOBS_PER_S = 15_000  # a cautious guess of enqueue_many's rate beside the loops: A's lead time
MANY_RATE = 200.0  # the many scenario's steady jobs/s
MANY_DELAYS = ("1", "3")  # its jobs' delays, uniform, s
COST_DELAYS = ("1", "5")

Row = dict[str, Any]


def run_row(side: Checkout, variant: str, measure: Callable[[Row], Row]) -> Row:
    """A row of ``side`` for ``variant``, its figures from ``measure(row)``; a run that fails is a row
    with its ``error``, and the scenario goes on."""
    row: Row = {"side": side.name, "variant": variant, "loadavg": os.getloadavg()[0], "warnings": []}
    log(f"{side.name}: {variant}")
    try:
        row |= measure(row)
    except (RuntimeError, OSError, subprocess.SubprocessError, redis.RedisError) as exc:
        log(f"failed: {exc}")
        row["error"] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return row


def faults(*figures: dict[str, Any]) -> dict[str, int]:
    return {fault: sum(f[fault] for f in figures) for fault in ("lost", "duplicated", "early")}


# ---------------------------------------------------------------------------------------- noisy


def noisy(side: Checkout, args: argparse.Namespace, workdir: Path) -> list[Row]:
    """Key A's ``--backlog`` jobs all due at one instant, and from that instant key B's trickle of
    ``--trickle-rate`` jobs/s, each due 1 s after it is sent, for ``--seconds``; then B alone."""
    rows = []
    for backlog in (args.backlog, 0):
        variant = f"A's {backlog:,} jobs, then B" if backlog else "B alone"
        directory = workdir / ("with-a" if backlog else "b-alone")
        rows.append(run_row(side, variant, partial(noisy_run, side, args, directory, backlog=backlog)))
    return rows


def noisy_run(side: Checkout, args: argparse.Namespace, workdir: Path, row: Row, *, backlog: int) -> Row:
    topic = "noisy"
    topics = {topic: {"target": TARGET, "concurrency": args.concurrency}}
    with Stage(side, args, workdir, topics, handler_ms=args.handler_ms) as stage, stage.loops(topic) as loops:
        at_ms = round((time.time() + 1 + backlog / ENQUEUE_JOBS_PER_S) * 1000)  # A's due instant, B's first send
        procs: dict[str, subprocess.Popen[bytes]] = {}
        if backlog:
            of_a = ("--jobs", str(backlog), "--key", KEY_A, "--at", str(at_ms), "--ids", stage.ids("a"))
            procs["backlog"] = stage.produce("backlog", "--topic", topic, *of_a)
        trickle = (
            *("--rate", f"{args.trickle_rate:g}", "--seconds", f"{args.seconds:g}", "--min-delay", "1"),
            *("--max-delay", "1", "--keys", "1", "--key-prefix", KEY_B, "--id-prefix", "b", "--start-at", str(at_ms)),
        )
        procs["trickle"] = stage.produce("steady", "--topic", topic, *trickle, "--ids", stage.ids("b"), name="trickle")
        said = {name: stage.answer(proc, name) for name, proc in procs.items()}
        a_jobs, b_jobs = stage.jobs("a") if backlog else {}, stage.jobs("b")
        stage.wait(a_jobs | b_jobs)
        time.sleep(args.settle)
        loops.check()
        idle = {key: stage.mentions(key) for key in ((KEY_A, KEY_B) if backlog else (KEY_B,))}
    if backlog and said["backlog"]["ended_ms"] > at_ms:
        late_s = (said["backlog"]["ended_ms"] - at_ms) / 1000
        row["warnings"].append(f"A's enqueue ended {late_s:.1f} s after A's jobs fell due")
    if said["trickle"]["max_behind_s"] > 0.5:
        row["warnings"].append(f"B's producer fell {said['trickle']['max_behind_s']:.1f} s behind its rate")
    starts = read_jsonl([stage.starts])
    a, b = deliveries(a_jobs, starts, 0), deliveries(b_jobs, starts, 0)
    drain_s = a["last_start_after_first_due_s"] if backlog else None
    return {
        "backlog": backlog,
        "b_jobs": len(b_jobs),
        "b_lateness_ms": b["lateness_ms"],
        "b_behind_a": behind(a_jobs, b_jobs, starts),
        "a_drain_s": drain_s,
        "a_jobs_per_s": backlog / drain_s if drain_s else None,
        **faults(a, b),
        "idle_mentions": idle,
    }


def behind(a_jobs: dict[str, float], b_jobs: dict[str, float], starts: list[dict[str, Any]]) -> dict[str, Any]:
    """B's jobs that fell due before A's last start (while A's backlog was draining), and their lateness."""
    first: dict[str, float] = {}
    for start in starts:
        first[start["id"]] = min(first.get(start["id"], start["start_ms"]), start["start_ms"])
    a_last = max((first[job_id] for job_id in a_jobs if job_id in first), default=0.0)
    late = sorted(first[job_id] - due for job_id, due in b_jobs.items() if due < a_last and job_id in first)
    return {"jobs": len(late), "lateness_ms": summary(late)}


# ---------------------------------------------------------------------------------------- cost


def cost(side: Checkout, args: argparse.Namespace, workdir: Path) -> list[Row]:
    """At each of ``--rates``: ``--seconds`` of load, each job due 1-5 s after it is sent, each of a key
    among ``--keys`` (job i: key ``k{i % keys}``), against the same without keys. Which of the two goes
    first turns from one rate to the next."""
    rows = []
    for n, rate in enumerate(args.rates):
        variants = [("keyless", 0), ("keyed", args.keys)]
        for name, keys in variants[n % 2 :] + variants[: n % 2]:
            directory = workdir / f"r{rate:g}-{name}"
            variant = f"{rate:g} jobs/s, " + (f"{keys:,} keys" if keys else "no key")
            measure = partial(cost_run, side, args, directory, rate=rate, keys=keys)
            rows.append(run_row(side, variant, measure) | {"rate": rate, "keys": keys})
    return rows


def cost_run(side: Checkout, args: argparse.Namespace, workdir: Path, row: Row, *, rate: float, keys: int) -> Row:
    topic = "cost"
    with Stage(side, args, workdir, {topic: {"target": TARGET}}) as stage, stage.loops(topic) as loops:
        before = stage.counters()
        load = (
            *("--rate", f"{rate:g}", "--seconds", f"{args.seconds:g}"),
            *("--min-delay", COST_DELAYS[0], "--max-delay", COST_DELAYS[1], "--keys", str(keys), "--key-prefix", "k"),
        )
        said = stage.answer(stage.produce("steady", "--topic", topic, *load, "--ids", stage.ids("steady")), "steady")
        jobs = stage.jobs("steady")
        stage.wait(jobs)
        time.sleep(args.settle)  # the acks land; a duplicate would show up here
        loops.check()
        spent_on = stage.cost(before, len(jobs))
    if said["max_behind_s"] > 0.5:
        row["warnings"].append(f"the producer fell {said['max_behind_s']:.1f} s behind its rate")
    delivered = deliveries(jobs, read_jsonl([stage.starts]), 0)
    return {"jobs": len(jobs), "lateness_ms": delivered["lateness_ms"], **spent_on, **faults(delivered)}


# ---------------------------------------------------------------------------------------- many


def many(side: Checkout, args: argparse.Namespace, workdir: Path) -> list[Row]:
    """``--many-keys`` jobs due in a day, each of a key of its own, then ``MANY_RATE`` jobs/s of one
    more key for ``--many-seconds``; against the same with as many jobs without a key."""
    rows = []
    for name, distinct in (("keys", True), ("keyless", False)):
        variant = f"{args.many_keys:,} " + ("keys, a job each" if distinct else "jobs without a key")
        directory = workdir / name
        rows.append(run_row(side, variant, partial(many_run, side, args, directory, distinct=distinct)))
    return rows


def many_run(side: Checkout, args: argparse.Namespace, workdir: Path, row: Row, *, distinct: bool) -> Row:
    topic = "many"
    with Stage(side, args, workdir, {topic: {"target": TARGET}}) as stage:
        jobs, procs = args.many_keys, args.fill_procs
        before = stage.store.info()
        fillers = []
        for i, (lo, hi) in enumerate((jobs * i // procs, jobs * (i + 1) // procs) for i in range(procs)):
            fill = ("--jobs", str(hi - lo), "--first", str(lo), *(("--distinct-keys",) if distinct else ()))
            fillers.append((f"fill{i}", stage.produce("fill", "--topic", topic, *fill, name=f"fill{i}")))
        # The fill's rate: the jobs over the slowest producer's own time, its start left out.
        fill_s = max(stage.answer(proc, name)["seconds"] for name, proc in fillers)
        used = spent(before, stage.store.info())
        log(f"{jobs:,} jobs in {fill_s:.1f} s: {used['memory'] / jobs:.0f} B/job")
        with stage.loops(topic) as loops:
            before = stage.counters()
            load = (
                *("--rate", f"{MANY_RATE:g}", "--seconds", f"{args.many_seconds:g}"),
                *("--min-delay", MANY_DELAYS[0], "--max-delay", MANY_DELAYS[1]),
                *("--keys", "1", "--key-prefix", STEADY_KEY, "--id-prefix", "h", "--ids", stage.ids("steady")),
            )
            said = stage.answer(stage.produce("steady", "--topic", topic, *load), "steady")
            steady = stage.jobs("steady")
            stage.wait(steady)
            time.sleep(args.settle)
            loops.check()
            spent_on = stage.cost(before, len(steady))
            idle = stage.mentions(STEADY_KEY)
    if said["max_behind_s"] > 0.5:
        row["warnings"].append(f"the producer fell {said['max_behind_s']:.1f} s behind its rate")
    starts = read_jsonl([stage.starts])
    delivered = deliveries(steady, starts, 0)
    filled_started = sum(1 for row in starts if row["id"].startswith("m"))  # due in a day: early
    return {
        "many_jobs": jobs,
        "distinct_keys": distinct,
        "memory_bytes_per_job": used["memory"] / jobs,
        "fill_jobs_per_s": jobs / fill_s,
        "jobs": len(steady),
        "lateness_ms": delivered["lateness_ms"],
        **spent_on,
        **faults(delivered),
        "early": delivered["early"] + filled_started,
        "idle_mentions": {STEADY_KEY: idle},
    }


SCENARIOS: dict[str, Callable[[Checkout, argparse.Namespace, Path], list[Row]]] = {
    "noisy": noisy,
    "cost": cost,
    "many": many,
}
