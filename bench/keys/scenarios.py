"""The flow keys run's scenarios, one function each, called once per side: each run of a scenario gets
a fresh private Redis (``stage.Stage``) and answers one row of figures.

- ``noisy``: key A's backlog, all due at once, then a trickle of key B behind it; and B alone.
- ``cost``: a steady load with a key per job (among ``--keys``) against the same without keys.
- ``many``: ``--many-keys`` keys each holding one job due in a day, against as many jobs without a key:
  memory per job, then a steady load of one key, and where Redis still names that key once it is done;
  then what a take costs Redis with ``--many-keys`` keys each holding a job due, against one key holding
  as many, and against one key once those keys are idle, and the memory the idle keys leave.
- ``concurrency``: ``key_concurrency`` 1 (then 2, then none: the control) over ``--consumers`` consume
  processes: whether two jobs of one key (three) ever ran at once, from each handler's start and end.
- ``rate``: one key's ``key_rate`` against a backlog bigger than the run: the starts per second it
  achieves; then the same set by ``Queue.set_key``, beside a key without limits.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import redis
from shared import log
from shared.checkout import Checkout
from shared.records import deliveries, read_jsonl, summary
from shared.servers import spent
from stage import INTERVAL_TARGET, TARGET, Stage

KEY_A, KEY_B = "tenant-a", "tenant-b"  # the noisy scenario's keys; no job id or Redis key name holds them
STEADY_KEY = "steady-key"  # the many scenario's steady key
ENQUEUE_JOBS_PER_S = 15_000  # a cautious guess of enqueue_many's rate beside the loops: A's lead time
MANY_RATE = 200.0  # the many scenario's steady jobs/s
MANY_DELAYS = ("1", "3")  # its jobs' delays, uniform, s
COST_DELAYS = ("1", "5")
BOUNDED_KEY = "c"  # the concurrency scenario's keys: c0, c1, ...
LIMITED_KEY, FREE_KEY = "limited", "free"  # the rate scenario's keys
RATE_BACKLOG = 1.25  # the limited key's backlog: this many times what its rate starts in the run
LEAD_S = 2.0  # concurrency, rate: from the start of the enqueue to the due instant, beyond its own time
WARM_JOBS, WARM_FIRST = 10, 10**9  # the takes' warm-up: jobs, and the first's number (no fill's ids)
TAKE_SETTLE_S = 2.0  # after a drain, before reading used_memory: Redis' cron shrinks its emptied tables

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
    return rows + many_takes(side, args, workdir / "takes")


def many_run(side: Checkout, args: argparse.Namespace, workdir: Path, row: Row, *, distinct: bool) -> Row:
    topic = "many"
    with Stage(side, args, workdir, {topic: {"target": TARGET}}) as stage:
        jobs = args.many_keys
        before = stage.store.info()
        fill_s = fill(stage, args, topic, jobs, *(("--distinct-keys",) if distinct else ()))
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


def fill(stage: Stage, args: argparse.Namespace, topic: str, jobs: int, *options: str, first: int = 0) -> float:
    """``jobs`` jobs (ids ``m{first}`` ..) by ``--fill-procs`` processes, each ``producers.py fill``
    with ``options``. The fill's time: the slowest producer's own, its start left out."""
    procs, fillers = args.fill_procs, []
    for i, (lo, hi) in enumerate((jobs * i // procs, jobs * (i + 1) // procs) for i in range(procs)):
        part = ("--jobs", str(hi - lo), "--first", str(first + lo), *options)
        fillers.append((f"fill{i}", stage.produce("fill", "--topic", topic, *part, name=f"fill{i}")))
    return float(max(stage.answer(proc, name)["seconds"] for name, proc in fillers))


# ---------------------------------------------------------------------------------------- many: takes


def many_takes(side: Checkout, args: argparse.Namespace, workdir: Path) -> list[Row]:
    """What a take costs Redis: ``--many-keys`` jobs due, one key's, then each of a key of its own, then
    one key's again once those keys are idle (their jobs done); each drained ``--take-count`` jobs a
    take (``producers.py takes``, no loop running), and the memory left once drained."""
    jobs = args.many_keys
    one = run_row(side, f"1 key, {jobs:,} jobs due", partial(takes_run, side, args, workdir / "one", keys=False))
    rows = [one | {"part": "takes", "distinct_keys": False}]
    variant = f"{jobs:,} keys, a job each due"
    both = run_row(side, variant, partial(takes_run, side, args, workdir / "keys", keys=True))
    idle = both.pop("idle_then_one", None)
    rows.append(both | {"part": "takes", "distinct_keys": True})
    if idle is not None:
        variant = f"{jobs:,} idle keys, then 1 key's {jobs:,} jobs"
        rows.append(both | idle | {"variant": variant, "part": "takes", "distinct_keys": False, "after_idle": True})
    return rows


def takes_run(side: Checkout, args: argparse.Namespace, workdir: Path, row: Row, *, keys: bool) -> Row:
    topic = "takes"
    with Stage(side, args, workdir, {topic: {"target": TARGET, "keep_done": 0}}) as stage:
        # Every script the run calls loaded (enqueue_many's of one job and of many, take, ack), the
        # topic's keys made: a few jobs, taken and acked.
        stage.answer(stage.produce("seed", "--topic", topic, "--ids", stage.ids("seed")), "seed", 60)
        fill(stage, args, topic, WARM_JOBS, "--key", "warm", "--delay", "0", first=WARM_FIRST)
        stage.answer(stage.produce("takes", "--topic", topic, "--count", str(args.take_count), name="warm"), "warm")
        time.sleep(TAKE_SETTLE_S)
        base = {"info": stage.store.info(), "keys": dbsize(stage)}
        jobs = args.many_keys
        figures = drain(stage, args, topic, base, ("--distinct-keys",) if keys else ("--key", "one"))
        if keys:
            again = drain(stage, args, topic, base, ("--key", "one"), first=jobs)
            figures["idle_then_one"] = again
    return figures


def drain(
    stage: Stage, args: argparse.Namespace, topic: str, base: Row, keyed: tuple[str, ...], *, first: int = 0
) -> Row:
    """``--many-keys`` jobs due now (of ``keyed``), drained by takes: Redis' cost per take, and what is
    left in Redis once done against ``base`` (used_memory and key names before any job)."""
    jobs = args.many_keys
    fill_s = fill(stage, args, topic, jobs, *keyed, "--delay", "0", first=first)
    waiting = spent(base["info"], stage.store.info())["memory"]
    before = stage.counters()
    said = stage.answer(stage.produce("takes", "--topic", topic, "--count", str(args.take_count)), "takes")
    after = stage.store.command_stats()
    used = spent(before["info"], stage.store.info())
    time.sleep(TAKE_SETTLE_S)
    left = spent(base["info"], stage.store.info())["memory"]
    scripts = [after.get(name, (0, 0)) for name in ("evalsha", "eval")]
    scripts_before = [before["commands"].get(name, (0, 0)) for name in ("evalsha", "eval")]
    made = max(said["takes"], 1)
    log(f"{said['jobs']:,} jobs in {said['takes']:,} takes: {used['cpu_s'] * 1e6 / made:.0f} µs of Redis CPU a take")
    return {
        "jobs": jobs,
        "fill_jobs_per_s": jobs / fill_s,
        "memory_bytes_per_job": waiting / jobs,
        "taken": said["jobs"],
        "takes": said["takes"],
        "jobs_per_take": said["jobs"] / made,
        "takes_per_s": said["takes"] / said["seconds"],
        "commands_per_take": used["commands"] / made,
        "script_calls_per_take": (sum(n for n, _ in scripts) - sum(n for n, _ in scripts_before)) / made,
        "redis_cpu_us_per_take": used["cpu_s"] * 1e6 / made,
        "script_us_per_take": (sum(us for _, us in scripts) - sum(us for _, us in scripts_before)) / made,
        "left_bytes": left,
        "left_keys": dbsize(stage) - base["keys"],
    }


def dbsize(stage: Stage) -> int:
    return sum(int(client.dbsize()) for client in stage.store.clients)


# ---------------------------------------------------------------------------------------- concurrency


def concurrency(side: Checkout, args: argparse.Namespace, workdir: Path) -> list[Row]:
    """For each of ``--key-limits``: ``--key-jobs`` jobs over ``--bounded-keys`` keys, all due at one
    instant, in a topic of that ``key_concurrency`` (0: none, the control: the overlaps a run finds
    without a limit) and ``--workers`` workers a process, taken by ``--consumers`` consume processes;
    each job's handler takes ``--key-handler-ms``. Fewer keys than workers in all: each key's limit binds."""
    rows = []
    for limit in args.key_limits:
        setting = f"key_concurrency {limit}" if limit else "no key_concurrency"
        variant = f"{setting}, {args.consumers} consumers of {args.workers} workers"
        measure = partial(concurrency_run, side, args, workdir / f"limit{limit}", limit=limit)
        rows.append(run_row(side, variant, measure) | {"limit": limit, "in_force": in_force(args, limit)})
    return rows


def in_force(args: argparse.Namespace, limit: int) -> int | None:
    """The most jobs of one key that may run at once: each partition enforces its share, rounded up.
    None: no limit."""
    partitions = args.partitions if args.cluster else 1
    return partitions * math.ceil(limit / partitions) if limit else None


def concurrency_run(side: Checkout, args: argparse.Namespace, workdir: Path, row: Row, *, limit: int) -> Row:
    topic = "bounded"
    config = {"target": INTERVAL_TARGET, "concurrency": args.workers} | ({"key_concurrency": limit} if limit else {})
    with (
        Stage(side, args, workdir, {topic: config}, handler_ms=args.key_handler_ms) as stage,
        stage.loops(topic, args.consumers) as loops,
    ):
        at_ms = round((time.time() + LEAD_S + args.key_jobs / ENQUEUE_JOBS_PER_S) * 1000)
        spread = ("--jobs", str(args.key_jobs), "--key", BOUNDED_KEY, "--keys", str(args.bounded_keys))
        spread += ("--id-prefix", "c", "--at", str(at_ms), "--ids", stage.ids("bounded"))
        said = stage.answer(stage.produce("backlog", "--topic", topic, *spread), "backlog")
        jobs = stage.jobs("bounded")
        stage.wait(jobs)
        time.sleep(args.settle)
        loops.check()
    if said["ended_ms"] > at_ms:
        row["warnings"].append(f"the enqueue ended {(said['ended_ms'] - at_ms) / 1000:.1f} s after the jobs fell due")
    runs = [start for start in read_jsonl([stage.starts]) if start["id"] in jobs]
    delivered = deliveries(jobs, runs, 0)
    wall_s = (max((run["end_ns"] for run in runs), default=0) / 1e6 - at_ms) / 1000
    overlap = overlaps(runs, in_force(args, limit))
    if overlap["over_limit"]:
        row["warnings"].append(f"{overlap['over_limit']:,} starts beyond the limit in force: {overlap['examples']}")
    return {
        "jobs": len(jobs),
        "keys": args.bounded_keys,
        "wall_s": wall_s,
        "jobs_per_s": delivered["delivered"] / wall_s if wall_s > 0 else None,
        "lateness_ms": delivered["lateness_ms"],
        **faults(delivered),
        **overlap,
    }


def overlaps(runs: list[dict[str, Any]], limit: int | None) -> dict[str, Any]:
    """Of each key's runs (handler start to end, ns): the starts while another job of the key ran
    (overlaps), the starts that made more run than ``limit`` (None: none), the most that ran at once,
    and the first few starts beyond the limit (the key, the job, those running)."""
    by_key: dict[str, list[tuple[int, int, str]]] = {}
    for run in runs:
        # An end sorts before a start at the same ns: one job ending as another starts is no overlap.
        by_key.setdefault(run["key"], []).extend([(run["start_ns"], 1, run["id"]), (run["end_ns"], 0, run["id"])])
    found: Counter[str] = Counter()
    over_keys: set[str] = set()
    most, examples = 0, []
    for key, events in by_key.items():
        running: set[str] = set()
        for _, starts, job_id in sorted(events):
            if not starts:
                running.discard(job_id)
                continue
            found["overlaps"] += bool(running)
            running.add(job_id)
            most = max(most, len(running))
            if limit is not None and len(running) > limit:
                found["over_limit"] += 1
                over_keys.add(key)
                if len(examples) < 3:
                    examples.append({"key": key, "started": job_id, "running": sorted(running - {job_id})})
    return {
        "overlaps": found["overlaps"],
        "over_limit": found["over_limit"],
        "keys_over_limit": len(over_keys),
        "most_at_once": most,
        "examples": examples,
    }


# ---------------------------------------------------------------------------------------- rate


def rate(side: Checkout, args: argparse.Namespace, workdir: Path) -> list[Row]:
    """Key ``limited``'s backlog, all due at one instant, ``RATE_BACKLOG`` times what ``--key-rate``
    starts in ``--rate-seconds``, the rate set by the topic's ``key_rate``; then set by
    ``Queue.set_key``, beside key ``free`` sending ``--free-rate`` jobs/s, each due 1 s later."""
    rows = []
    for how in ("config", "set_key"):
        variant = (
            f"key_rate {args.key_rate:g}/s, burst {args.key_burst}, in the topic's config"
            if how == "config"
            else f"set_key rate {args.key_rate:g}/s, burst {args.key_burst}, beside a key without limits"
        )
        measure = partial(rate_run, side, args, workdir / how, set_key=how == "set_key")
        rows.append(run_row(side, variant, measure) | {"how": how, "key_rate": args.key_rate})
    return rows


def rate_run(side: Checkout, args: argparse.Namespace, workdir: Path, row: Row, *, set_key: bool) -> Row:
    topic = "paced"
    config: dict[str, Any] = {"target": TARGET, "concurrency": args.workers}
    if not set_key:
        config |= {"key_rate": args.key_rate, "key_burst": args.key_burst}
    with Stage(side, args, workdir, {topic: config}) as stage, stage.loops(topic) as loops:
        if set_key:
            limits = ("--key", LIMITED_KEY, "--rate", f"{args.key_rate:g}", "--burst", str(args.key_burst))
            stage.answer(stage.produce("set-key", "--topic", topic, *limits), "set-key")
        backlog = math.ceil(args.key_rate * args.rate_seconds * RATE_BACKLOG) + args.key_burst
        at_ms = round((time.time() + LEAD_S + backlog / ENQUEUE_JOBS_PER_S) * 1000)
        of_limited = ("--jobs", str(backlog), "--key", LIMITED_KEY, "--id-prefix", "r", "--at", str(at_ms))
        procs = {"backlog": stage.produce("backlog", "--topic", topic, *of_limited, "--ids", stage.ids("limited"))}
        if set_key:
            free = (
                *("--rate", f"{args.free_rate:g}", "--seconds", f"{args.rate_seconds:g}", "--min-delay", "1"),
                *("--max-delay", "1", "--keys", "1", "--key-prefix", FREE_KEY, "--id-prefix", "f"),
                *("--start-at", str(at_ms), "--ids", stage.ids("free")),
            )
            procs["free"] = stage.produce("steady", "--topic", topic, *free, name="free")
        said = {name: stage.answer(proc, name) for name, proc in procs.items()}
        free_jobs = stage.jobs("free") if set_key else {}
        time.sleep(max(0.0, at_ms / 1000 + args.rate_seconds + 1 + args.settle - time.time()))
        stage.wait(free_jobs)
        loops.check()
    if said["backlog"]["ended_ms"] > at_ms:
        row["warnings"].append(f"the backlog's enqueue ended {(said['backlog']['ended_ms'] - at_ms) / 1000:.1f} s late")
    if set_key and said["free"]["max_behind_s"] > 0.5:
        row["warnings"].append(f"the free key's producer fell {said['free']['max_behind_s']:.1f} s behind its rate")
    starts = read_jsonl([stage.starts])
    limited = stage.jobs("limited")
    paced = deliveries(limited, starts, 0)
    figures = achieved(sorted(start["start_ms"] for start in starts if start["id"] in limited), args)
    free = deliveries(free_jobs, starts, 0) if set_key else None
    return {
        "backlog": backlog,
        **figures,
        "deviation": figures["achieved_per_s"] / args.key_rate - 1 if figures["achieved_per_s"] else None,
        "duplicated": paced["duplicated"],
        "early": paced["early"],
        "free_jobs": len(free_jobs),
        "free_lateness_ms": free["lateness_ms"] if free else None,
        "free_faults": faults(free) if free else None,
    }


def achieved(times: list[float], args: argparse.Namespace) -> dict[str, Any]:
    """Of the limited key's starts (ms, sorted): those in its first second, then the rate over the rest
    of ``--rate-seconds`` from its first start, and the fewest and most in one of those seconds."""
    if not times:
        return {"started": 0, "first_second": 0, "achieved_per_s": None, "per_second": []}
    first = times[0]
    seconds = int(args.rate_seconds) - 1
    per_second = Counter(int((t - first) // 1000) - 1 for t in times)
    counts = [per_second[n] for n in range(seconds)]
    return {
        "started": len(times),
        "first_second": sum(1 for t in times if t < first + 1000),
        "window_s": seconds,
        "achieved_per_s": sum(counts) / seconds,
        "per_second": counts,
        "per_second_min": min(counts),
        "per_second_max": max(counts),
    }


SCENARIOS: dict[str, Callable[[Checkout, argparse.Namespace, Path], list[Row]]] = {
    "noisy": noisy,
    "cost": cost,
    "many": many,
    "concurrency": concurrency,
    "rate": rate,
}
