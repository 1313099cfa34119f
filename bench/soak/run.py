"""A mixed soak of delayq: several partitions and topics (some only under ``*``), planned failures and
timeouts, cancels, reschedules, replays of dead letters, a kill -9 of a consume and of a sweep process,
for minutes; per topic, the lateness of every attempt, and whether anything was lost, duplicated,
early or leaked; and whether each callback job (``payments``' ``on_done`` and ``on_dead``, ``slow``'s
``on_done``) was made exactly once per outcome of each life.

    .venv/bin/python bench/soak/run.py                          5 minutes at 150 jobs/s, 2 partitions
    .venv/bin/python bench/soak/run.py --minutes 12             a longer soak
    .venv/bin/python bench/soak/run.py --minutes 1 --rate 100   a quick run
    .venv/bin/python bench/soak/run.py --no-kills               the same load, no process killed
    .venv/bin/python bench/soak/run.py --markdown .bench/results/soak-<run>.json    rewrites <run>.md from the JSON

One private redis-server (``shared.servers``); on it, namespace ``soak`` with ``--partitions``
partitions, two ``python -m delayq consume`` and two ``python -m delayq sweep`` processes (tick 1 s), and
a producer in this process: one ``Queue.enqueue`` per job at ``--rate``, each job due 1-5 s later, in one
of eight topics (``orders``, ``reminders``, ``payments``, ``slow``, ``accounts`` whose jobs carry one of
40 flow keys, one job of a key at a time, and ``tenant-a``, ``-b``, ``-c`` that only ``*`` covers).
Every topic's target is ``python:soak_target:deliver``, which notes each attempt's start. Once the
producer stops, the run waits until no job is delayed, ready or reserved, stops the loops (SIGTERM),
checks the namespace (the tests' invariant, ``tests/support/invariants.py``, each key's count of
running jobs among it) and every job's final state. Writes
``.bench/results/soak-<date>-<machine>.{json,md}`` (the figures and the report: ``report.py``); the
raw records stay under ``.bench/runs``.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import random
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from report import Kill, Planned, figures, markdown, rewrite
from shared import log
from shared.checkout import Checkout, base_env
from shared.machine import machine_facts
from shared.paths import PROJECT_PYTHON, REPO, RESULTS, RUNS
from shared.records import read_jsonl
from shared.servers import PrivateRedis, spent

from delayq import DelayqError, JobNotFound, Queue, Settings, Topics
from delayq.store.keys import Keyspace

sys.path.insert(0, str(REPO / "tests"))  # the tests' helpers, the package support
from support.invariants import check, problems, read_atomic, unsettled

HERE = Path(__file__).resolve().parent
NAMESPACE = "soak"
TARGET = "python:soak_target:deliver"  # soak_target.py, here
MIX = {
    "orders": 30, "reminders": 20, "payments": 15, "slow": 5, "accounts": 15,
    "tenant-a": 10, "tenant-b": 10, "tenant-c": 10,
}  # fmt: skip
ACCOUNTS = 40  # flow keys of ``accounts``, one job of a key at a time (key_concurrency 1)
ACCOUNT_WORK_S = 0.02  # how long an ``accounts`` handler works: long enough for its key's next to wait
CALLBACKS = {"payments": {"on_done": "payments-done", "on_dead": "payments-dead"}, "slow": {"on_done": "slow-done"}}
FAIL_ONCE = 0.05  # payments jobs that fail their first attempt, then succeed
FAIL_ALWAYS = 0.02  # payments jobs that fail every attempt: dead letters (replayed, they die again)
SLEEPERS = 0.20  # slow jobs whose first attempt outlives the topic's 1 s timeout
SLEEP_S, SLEEP_ATTEMPTS = 1.5, 1  # their body: {"sleep": 1.5, "sleep_attempts": 1}
ACTION_AFTER_S = 0.3  # a cancel or a reschedule comes this long after its job's create
STILL_DELAYED_MS = 200  # ... and only while the job is due at least this far ahead (else skipped)
RESTART_AFTER_S = 2.0  # a killed loop's replacement starts this long after the kill
DEAD_PAGE = 1000  # dead letters read per replay (Queue.dead's limit)
EXPECTED_LOG = re.compile(r"planned failure|timed out after|finished after its timeout")
NOTEWORTHY_LOG = re.compile(r"WARNING|ERROR|CRITICAL|Traceback")


def topics_config(keep_done_max: int) -> dict[str, Any]:
    """DELAYQ_TOPICS: five configured topics and ``*``; each keeps up to ``keep_done_max`` receipts
    (default 10,000 per topic and partition) so that every success still has its receipt at the end."""
    common = {"target": TARGET, "keep_done_max": keep_done_max}
    callback_topics = {target: common for callbacks in CALLBACKS.values() for target in callbacks.values()}
    return {
        "orders": common,
        "reminders": common,
        "payments": common | {"retries": 2, "backoff": [1, 2]} | CALLBACKS["payments"],
        "slow": common | {"timeout": 1, "retries": 1, "backoff": [1]} | CALLBACKS["slow"],
        "accounts": common | {"key_concurrency": 1},
        "*": common,
    } | callback_topics


def loop_env(store: PrivateRedis, partitions: int, topics: dict[str, Any], out: Path) -> dict[str, str]:
    """The environment of the loops and the producer: this checkout's delayq on ``store``, the soak's
    namespace and topics (their target here, ``soak_target.py``); handler starts go to ``out``."""
    return base_env() | {
        "PYTHONPATH": Checkout(REPO).pythonpath(HERE),
        "DELAYQ_REDIS_URL": store.url,
        "DELAYQ_REDIS_MODE": "standalone",
        "DELAYQ_PARTITIONS": str(partitions),
        "DELAYQ_NAMESPACE": NAMESPACE,
        "DELAYQ_TOPICS": json.dumps(topics),
        "DELAYQ_TICK": "1",
        "BENCH_OUT": str(out),
    }


class Fleet:
    """The loops as processes, ``python -m delayq consume|sweep`` as a deployment outside Lambda runs them,
    each named ``<loop>-<n>`` with a log of its own, killed (SIGKILL) or stopped (SIGTERM) by its pid."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env, self.workdir = env, workdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[str] = set()
        self.started: Counter[str] = Counter()

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def start(self, loop: str) -> str:
        self.started[loop] += 1
        name = f"{loop}-{self.started[loop]}"
        with self.log(name).open("ab") as out:
            command = [str(PROJECT_PYTHON), "-m", "delayq", loop]
            self.procs[name] = subprocess.Popen(command, env=self.env, cwd=self.workdir, stdout=out, stderr=out)
        return name

    def live(self, loop: str) -> list[str]:
        return [
            name
            for name, proc in self.procs.items()
            if name.startswith(f"{loop}-") and name not in self.killed and proc.poll() is None
        ]

    def kill(self, name: str) -> int:
        proc = self.procs[name]
        proc.kill()  # SIGKILL
        proc.wait()
        self.killed.add(name)
        return proc.pid

    def check(self) -> None:
        for name, proc in self.procs.items():
            if name not in self.killed and proc.poll() is not None:
                tail = self.log(name).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{tail}")

    def stop(self, grace: float = 30) -> None:
        """SIGTERM to every loop still running (each finishes what it started, releases its locks and
        prints its summary), SIGKILL after ``grace``."""
        running = [proc for name, proc in self.procs.items() if name not in self.killed and proc.poll() is None]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + grace
        for proc in running:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def summaries(self) -> dict[str, Any]:
        """The JSON summary each loop stopped by SIGTERM printed last."""
        out: dict[str, Any] = {}
        for name in self.procs:
            lines = self.log(name).read_text(errors="replace").strip().splitlines()
            if name not in self.killed and lines and lines[-1].startswith("{"):
                try:
                    out[name] = json.loads(lines[-1])
                except json.JSONDecodeError:
                    continue
        return out


class Soak:
    """The producer and what it does besides creating jobs (cancels, reschedules, replays, kills), in
    one loop: jobs at their pace, the other actions from a heap of (when, ...) in between."""

    def __init__(self, args: argparse.Namespace, queue: Queue, store: PrivateRedis, fleet: Fleet) -> None:
        self.args, self.queue, self.store, self.fleet = args, queue, store, fleet
        self.rng = random.Random(args.seed)
        self.action_rng = random.Random(args.seed + 1)
        self.jobs: dict[str, Planned] = {}
        self.kills: list[Kill] = []
        self.replays: list[dict[str, Any]] = []
        self.skipped: Counter[str] = Counter()  # cancels and reschedules skipped: the job was due too soon
        self.refused_creates = 0
        self.warnings: list[str] = []
        self.max_behind_s = 0.0
        self.started = 0.0  # monotonic, at the first job
        self._actions: list[tuple[float, int, str, str]] = []
        self._order = itertools.count()

    def at(self, when: float, kind: str, arg: str = "") -> None:
        heapq.heappush(self._actions, (when, next(self._order), kind, arg))

    def produce(self) -> None:
        """Job i at ``i / --rate`` s, one ``enqueue`` call each; the actions as they fall due."""
        args, seconds = self.args, self.args.minutes * 60
        total = round(args.rate * seconds)
        self.started = time.monotonic()
        if not args.no_kills:
            self.at(self.started + seconds / 3, "kill", "consume")
            self.at(self.started + 2 * seconds / 3, "kill", "sweep")
        for k in range(1, int(seconds // args.replay_every) + 1):
            self.at(self.started + k * args.replay_every, "replay")
        actions: dict[str, Callable[[str], None]] = {
            "cancel": self.cancel,
            "reschedule": self.reschedule,
            "replay": lambda _: self.replay(),
            "kill": self.kill,
            "start": self.restart,
        }
        sent, checked = 0, self.started
        while sent < total or self._actions:
            now = time.monotonic()
            if now - checked > 5:
                self.fleet.check()
                checked = now
            if self._actions and self._actions[0][0] <= now:
                _, _, kind, arg = heapq.heappop(self._actions)
                actions[kind](arg)
                continue
            due = self.started + sent / args.rate if sent < total else math.inf
            if due <= now:
                self.max_behind_s = max(self.max_behind_s, now - due)
                self.create(sent)
                sent += 1
                continue
            time.sleep(max(0.0, min(due, self._actions[0][0] if self._actions else math.inf) - now))
        if self.max_behind_s > 0.5:
            self.warnings.append(f"the producer fell {self.max_behind_s:.1f} s behind its rate")

    def create(self, i: int) -> None:
        topic = self.rng.choices(list(MIX), weights=list(MIX.values()))[0]
        body: dict[str, Any] = {"n": i}
        failing, key = 0, None
        if topic == "payments":
            draw = self.rng.random()
            if draw < FAIL_ONCE + FAIL_ALWAYS:
                body["fail"] = failing = 1 if draw < FAIL_ONCE else 9
        elif topic == "slow" and self.rng.random() < SLEEPERS:
            body |= {"sleep": SLEEP_S, "sleep_attempts": SLEEP_ATTEMPTS}
            failing = SLEEP_ATTEMPTS
        elif topic == "accounts":
            body["sleep"], key = ACCOUNT_WORK_S, f"account-{self.rng.randrange(ACCOUNTS)}"
        delay = round(self.rng.uniform(self.args.min_delay, self.args.max_delay), 3)
        job_id = f"j{i}"
        try:
            scheduled = self.queue.enqueue(topic, body, id=job_id, delay=delay, key=key)
        except DelayqError as exc:
            self.refused_creates += 1
            if self.refused_creates == 1:
                self.warnings.append(f"a create was refused: {type(exc).__name__}: {exc}")
            return
        self.jobs[job_id] = Planned(job_id, topic, body, scheduled.run_at_ms, failing)
        draw = self.rng.random()
        if draw < self.args.cancel + self.args.reschedule:
            self.at(time.monotonic() + ACTION_AFTER_S, "cancel" if draw < self.args.cancel else "reschedule", job_id)

    def _still_delayed(self, job: Planned, what: str) -> bool:
        if job.due_ms - time.time() * 1000 >= STILL_DELAYED_MS:
            return True
        self.skipped[what] += 1
        return False

    def cancel(self, job_id: str) -> None:
        job = self.jobs[job_id]
        if not self._still_delayed(job, "cancel"):
            return
        at_ms = time.time() * 1000
        try:
            self.queue.cancel(job.topic, job.id)
        except DelayqError as exc:
            job.refused = f"cancel: {type(exc).__name__}"
            return
        job.cancelled_ms = at_ms

    def reschedule(self, job_id: str) -> None:
        job = self.jobs[job_id]
        if not self._still_delayed(job, "reschedule"):
            return
        delay = round(self.action_rng.uniform(self.args.min_delay, self.args.max_delay), 3)
        try:
            scheduled = self.queue.reschedule(job.topic, job.id, delay=delay)
        except DelayqError as exc:
            job.refused = f"reschedule: {type(exc).__name__}"
            return
        job.due_ms, job.rescheduled = scheduled.run_at_ms, True

    def replay(self) -> None:
        """Every dead letter of ``payments`` due again now, with fresh attempts."""
        at_ms = time.time() * 1000
        ids = [dead.id for dead in self.queue.dead("payments", limit=DEAD_PAGE)]
        replayed = self.queue.replay("payments", ids) if ids else 0
        for job_id in ids:
            if job_id in self.jobs:
                self.jobs[job_id].replayed_ms.append(at_ms)
        self.replays.append({"at_s": round(time.monotonic() - self.started, 1), "dead": len(ids), "replayed": replayed})
        if len(ids) == DEAD_PAGE:
            self.warnings.append(f"a replay found {DEAD_PAGE} dead letters or more: it replayed the first page only")
        log(f"replayed {replayed} of payments' {len(ids)} dead letters")

    def kill(self, loop: str) -> None:
        """kill -9 of a consume process (the first one running), or of the sweep process that holds
        partition 0's lock; its replacement starts ``RESTART_AFTER_S`` later."""
        live = self.fleet.live(loop)
        if not live:
            self.warnings.append(f"no {loop} process was running to kill")
            return
        name, how = live[0], "the first one running"
        if loop == "sweep":
            holder = self.lock_holder(0)
            if holder:
                name, how = holder, "the holder of partition 0's lock"
            else:
                how = "the first one running (partition 0's lock holder not found)"
        at_ms = time.time() * 1000
        pid = self.fleet.kill(name)
        self.kills.append(Kill(loop, name, pid, at_ms, round(time.monotonic() - self.started, 1), how))
        self.at(time.monotonic() + RESTART_AFTER_S, "start", loop)
        log(f"kill -9 {name} (pid {pid}, {how})")

    def restart(self, loop: str) -> None:
        name = self.fleet.start(loop)
        for kill in self.kills:
            if kill.loop == loop and not kill.replaced_by:
                kill.replaced_by = name
        log(f"started {name}")

    def lock_holder(self, partition: int) -> str | None:
        """The sweep process whose token holds ``partition``'s lock: the lock's value is the sweeper's
        token, whose first 8 characters it logs when it takes the lock."""
        lock = Keyspace(NAMESPACE, self.args.partitions).partitions[partition].lock
        token = self.store.clients[0].get(lock)
        if not token:
            return None
        said = f"sweeper {token[:8]} holds partition {partition}"
        for name in self.fleet.live("sweep"):
            if said in self.fleet.log(name).read_text(errors="replace"):
                return name
        return None

    def wait(self) -> None:
        """Until no job is delayed, ready or reserved in any topic (every job done, dead or cancelled),
        or nothing changed for ``--stall-timeout`` s, or ``--drain-timeout`` s after the last due time."""
        last_due_s = max((job.due_ms for job in self.jobs.values()), default=0) / 1000
        deadline = last_due_s + self.args.drain_timeout
        seen: tuple[Any, ...] = ()
        changed = time.time()
        while True:
            self.fleet.check()
            counts = pending_counts(self.queue)
            now = time.time()
            if sum(counts.values()) == 0 and now > last_due_s:
                return
            out = Path(self.fleet.env["BENCH_OUT"])
            state = (tuple(sorted(counts.items())), out.stat().st_size if out.exists() else 0)
            if state != seen:
                seen, changed = state, now
            elif now - changed > self.args.stall_timeout:
                self.warnings.append(f"stopped waiting: nothing changed for {self.args.stall_timeout:g} s: {counts}")
                return
            if now > deadline:
                self.warnings.append(
                    f"stopped waiting: {self.args.drain_timeout:g} s after the last due time: {counts}"
                )
                return
            time.sleep(1)


def pending_counts(queue: Queue) -> dict[str, int]:
    """Per topic (callback topics too), its jobs delayed, ready or reserved (0 for a topic that holds
    none yet), and the callback records no job was made of yet (``outbox``)."""
    counts = {"outbox": sum(int(queue.redis.llen(p.outbox)) for p in queue.keys.partitions)}
    for topic in [*MIX, *callback_topics()]:
        try:
            stats = queue.stats(topic)
        except DelayqError:
            counts[topic] = 0
            continue
        counts[topic] = stats.delayed + stats.ready + stats.reserved
    return counts


# ------------------------------------------------------------------------------------- after the load


def callback_topics() -> list[str]:
    return [target for callbacks in CALLBACKS.values() for target in callbacks.values()]


def callbacks_made(queue: Queue) -> Counter[tuple[str, str]]:
    """How many callback jobs were made per (``topic/id`` of the job they report on, outcome): their
    receipts' results (``soak_target.deliver`` answers what a callback job reports on), each receipt
    once however often its job was delivered."""
    made: Counter[tuple[str, str]] = Counter()
    for topic in callback_topics():
        cursor = None
        while True:
            page = queue.jobs(topic, "done", limit=1000, cursor=cursor)
            made.update((job.result["of"], job.result["outcome"]) for job in page.jobs if job.result)
            if page.next is None:
                break
            cursor = page.next
    return made


def callback_counts(jobs: dict[str, Planned], finals: dict[str, str], made: Counter[tuple[str, str]]) -> dict[str, Any]:
    """Callbacks expected against made: per job of a topic with callbacks, one ``done`` if it ended done,
    and one ``dead`` per life that ended dead (each replay revived a dead job; a job dead at the end
    died once more)."""
    expected: Counter[tuple[str, str]] = Counter()
    for job in jobs.values():
        callbacks = CALLBACKS.get(job.topic, {})
        of = f"{job.topic}/{job.id}"
        if "on_done" in callbacks and finals[job.id] == "done":
            expected[(of, "done")] += 1
        if "on_dead" in callbacks:
            deaths = len(job.replayed_ms) + (finals[job.id] == "dead")
            if deaths:
                expected[(of, "dead")] += deaths
    missing = sum(max(0, n - made[key]) for key, n in expected.items())
    doubled = sum(max(0, n - expected[key]) for key, n in made.items())
    by_outcome = {
        outcome: {
            "expected": sum(n for (_, o), n in expected.items() if o == outcome),
            "made": sum(n for (_, o), n in made.items() if o == outcome),
        }
        for outcome in ("done", "dead")
    }
    return {"missing": missing, "doubled": doubled, **by_outcome}


def final_states(queue: Queue, jobs: dict[str, Planned]) -> dict[str, str]:
    """Each job's state as ``Queue.get`` answers it at the end (``missing``: JobNotFound)."""
    states = {}
    for job in jobs.values():
        try:
            states[job.id] = queue.get(job.topic, job.id).state
        except JobNotFound:
            states[job.id] = "missing"
    return states


def namespace_check(store: PrivateRedis, partitions: int) -> dict[str, Any]:
    """The namespace invariant once the loops stopped: its problems (none expected), and the jobs left
    neither done nor dead (none expected: nothing delayed, ready or leased, nothing leaked)."""
    client = store.clients[0]
    snap = read_atomic(client, NAMESPACE, partitions)
    seconds, micros = client.time()
    found = problems(snap, NAMESPACE, partitions, now_ms=int(seconds) * 1000 + int(micros) // 1000)
    if found:
        return {"problems": found, "left": [], "keys": len(snap)}
    left = [
        f"{topic}/{job_id}: state {job.state} in {job.place}"
        for (topic, job_id), job in unsettled(check(snap, NAMESPACE, partitions)).items()
        if job.state != "x"
    ]
    return {"problems": [], "left": left, "keys": len(snap)}


def scan_logs(fleet: Fleet) -> dict[str, Any]:
    """The loops' warnings and errors: those the plan causes (failures, timeouts) counted, the rest
    kept."""
    expected, other, tracebacks = 0, [], 0
    for name in fleet.procs:
        for line in fleet.log(name).read_text(errors="replace").splitlines():
            tracebacks += line.startswith("Traceback")
            if not NOTEWORTHY_LOG.search(line):
                continue
            if EXPECTED_LOG.search(line):
                expected += 1
            else:
                other.append(f"{name}: {line}")
    return {"expected_warnings": expected, "other": other, "tracebacks": tracebacks}


# ------------------------------------------------------------------------------------- the run


def soak_run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    keep = min(10_000_000, max(10_000, round(args.rate * args.minutes * 60)))
    config = topics_config(keep)
    retries = {topic: Topics.parse(config).retrying(topic).retries for topic in MIX}
    store = PrivateRedis()
    try:
        out = workdir / "starts.jsonl"
        env = loop_env(store, args.partitions, config, out)
        queue = Queue(Settings.from_env(env))
        fleet = Fleet(env, workdir)
        soak = Soak(args, queue, store, fleet)
        try:
            for loop in ("sweep", "sweep", "consume", "consume"):
                fleet.start(loop)
            time.sleep(2)  # the loops are up: imported, connected, the locks taken
            fleet.check()
            before, started = store.info(), time.monotonic()
            log(f"soak: {args.minutes:g} min at {args.rate:g} jobs/s, {args.partitions} partitions; in {workdir}")
            soak.produce()
            produced_s = time.monotonic() - started
            log(f"produced {len(soak.jobs):,} jobs in {produced_s:.0f} s; waiting for them to settle")
            soak.wait()
            used, load_s = spent(before, store.info()), time.monotonic() - started
            time.sleep(args.settle)  # the last acks land; a duplicate would show up here
        finally:
            fleet.stop()
        memory_end = store.info()["used_memory"]
        with (workdir / "jobs.jsonl").open("w") as plan:  # the producer's side, beside the handler's starts
            plan.writelines(json.dumps(asdict(job)) + "\n" for job in soak.jobs.values())
        namespace = namespace_check(store, args.partitions)
        finals = final_states(queue, soak.jobs)
        callbacks = callback_counts(soak.jobs, finals, callbacks_made(queue))
        starts = [row for row in read_jsonl([out]) if row["topic"] not in callback_topics()]  # the jobs' own
        queue.close()
    finally:
        store.stop()
    return {
        "topics": figures(soak.jobs, soak.kills, starts, finals, retries),
        "kills": [asdict(kill) for kill in soak.kills],
        "replays": soak.replays,
        "callbacks": callbacks,
        "namespace": namespace,
        "redis": {
            "cpu_ms_per_s": used["cpu_s"] * 1000 / load_s,
            "commands_per_s": used["commands"] / load_s,
            "load_seconds": load_s,
            "memory_start": before["used_memory"],
            "memory_end": memory_end,
        },
        "producer": {
            "jobs": len(soak.jobs),
            "seconds": produced_s,
            "max_behind_s": soak.max_behind_s,
            "skipped": dict(soak.skipped),
            "refused_creates": soak.refused_creates,
            "still_delayed_ms": STILL_DELAYED_MS,  # for the report (report.markdown)
            "restart_after_s": RESTART_AFTER_S,
        },
        "logs": scan_logs(fleet),
        "loop_summaries": fleet.summaries(),
        "warnings": soak.warnings,
        "topics_config": config,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5, help="how long the producer runs (5)")
    parser.add_argument("--rate", type=float, default=150, help="jobs created a second (150)")
    parser.add_argument("--partitions", type=int, default=2, help="DELAYQ_PARTITIONS (2)")
    parser.add_argument("--min-delay", type=float, default=1, help="each job's delay: uniform from (1)")
    parser.add_argument("--max-delay", type=float, default=5, help="to (5) s; a reschedule's too")
    parser.add_argument("--cancel", type=float, default=0.03, help="share of jobs cancelled while delayed (0.03)")
    parser.add_argument("--reschedule", type=float, default=0.03, help="share rescheduled while delayed (0.03)")
    parser.add_argument("--replay-every", type=float, default=60, help="s between replays of payments' dead (60)")
    parser.add_argument("--no-kills", action="store_true", help="kill no consume or sweep process")
    parser.add_argument("--seed", type=int, default=17, help="the jobs' random draws (17)")
    parser.add_argument("--settle", type=float, default=3, help="s after the last job settled before stopping (3)")
    parser.add_argument("--stall-timeout", type=float, default=60, help="give up when nothing changes this long (60)")
    parser.add_argument("--drain-timeout", type=float, default=300, help="s to wait after the last due time (300)")
    parser.add_argument("--machine", help="machine name in the result file names (default: cores and CPU model)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the results go (.bench/results)")
    parser.add_argument("--markdown", type=Path, metavar="JSON", help="rewrite a run's .md from its .json; no run")
    args = parser.parse_args(argv)
    if args.min_delay * 1000 < ACTION_AFTER_S * 1000 + STILL_DELAYED_MS:
        parser.error(f"--min-delay must leave time for a cancel ({ACTION_AFTER_S + STILL_DELAYED_MS / 1000:g} s)")
    return args


def meta(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    facts = machine_facts()
    started = datetime.now(UTC)
    machine = args.machine or facts.pop("slug")
    facts.pop("slug", None)
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False).stdout
    return {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "command": ".venv/bin/python bench/soak/run.py" + (f" {shlex.join(argv)}" if argv else ""),
        "params": {k: v for k, v in vars(args).items() if k not in ("out_dir", "machine", "markdown")},
        "redis_version": version.split("v=")[-1].split()[0],
        "delayq": Checkout(REPO).name,  # the tree whose functions/ the loops run: <directory>@<commit>[+dirty]
        "raw_records": str((RUNS / f"soak-{started.strftime('%Y-%m-%dT%H%M%S')}-{machine}").relative_to(REPO)),
        **facts,
        "loadavg_at_start": facts["loadavg_at_start"][0],
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.markdown:
        print(rewrite(args.markdown))
        return
    result: dict[str, Any] = {"meta": meta(args, argv)}
    workdir = REPO / result["meta"]["raw_records"]
    workdir.mkdir(parents=True)
    result |= soak_run(args, workdir)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    base = args.out_dir / Path(result["meta"]["raw_records"]).name
    base.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    base.with_suffix(".md").write_text(markdown(result))
    print()
    print(base.with_suffix(".md").read_text())
    log(f"wrote {base.with_suffix('.json')}, {base.with_suffix('.md')}; raw records in {workdir}")


if __name__ == "__main__":
    main()
