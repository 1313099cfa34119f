"""The failover harness (issue 26): what delayq does while a Redis primary fails over, as an operator
would see it. ``run_scenario`` runs one setup and returns its row (``Row``); the fault tier
(``test_faults_failover.py``) asserts on rows, ``bench/failover/run.py`` prints them as a table, for this
checkout and others.

The setups (``SETUPS``):

- ``cluster``: a Redis Cluster of 3 masters and 3 replicas, ``cluster-node-timeout`` 2000 ms, Redis'
  defaults otherwise; the master owning partition 0's slot is SIGKILLed and its replica takes over.
  ``cluster-aof``: the same with ``appendonly yes``; ``cluster-partial``: with
  ``cluster-require-full-coverage no``; ``cluster-frozen``: the master is SIGSTOPped first and
  SIGKILLed ``FROZEN_S`` later (a hung machine, then a dead one). delayq's URL names a master that
  survives (the one owning partition 1), as a configuration endpoint would.
- ``pair``: a primary and its replica; delayq reaches the primary through a TCP forwarder, which
  stands for a DNS name that moves. At the failover the primary is SIGKILLed and, ``PROMOTE_AFTER_S``
  later (as Sentinel or ElastiCache would), the replica is sent ``REPLICAOF NO ONE`` and the forwarder
  is pointed at it. ``pair-lag``: the replica's replication link runs through a forwarder that holds
  every byte ``LINK_DELAY_S`` each way, so the replica is that far behind. ``pair-lag-min-replicas``:
  the same, with ``DELAYQ_MIN_REPLICAS=1`` in the environment of the loops and the API.

A run: the servers; one ``python -m delayq sweep`` and one ``python -m delayq consume`` process
(``DELAYQ_PARTITIONS=3``, the default tick); an idle window (no traffic: the consumer's idle CPU); the
producer (``failover_producer.py``, a process of its own: ``POST /jobs`` through the API handler, one
request at a time, ``RATE`` jobs/s, each due in 1-5 s); the failover ``kill_after_s`` into the traffic;
``after_s`` more traffic (with ``keys``, every job carries one of that many flow keys, each key held
to ``KEY_CONCURRENCY`` jobs at once); then the drain, until every acknowledged job was delivered, or is
gone from Redis, and Redis holds nothing unsettled (or ``drain_timeout_s`` passed); then SIGTERM to the
loops. The processes run this ``.venv``'s Python with the ``functions/`` directory given first on
PYTHONPATH: the code under test is that checkout's. The harness reads Redis itself (keys.py's
layout), not through delayq.

Every instant is the machine's wall clock in ms: the servers, the processes and the harness share it,
and ``fault_target`` records each delivery's start by Redis' ``TIME`` (asked of a server that survives).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from delayq.store.keys import TOPIC_KEYS, Keyspace

from support.fault_target import REDIS_ENV as CLOCK_ENV
from support.faults import LOG_ENV, TESTS, Fleet, LoopProcess, percentile, topics_json, wait_until
from support.servers import Forwarder, RedisClusterServers, ReplicaPair

SETUPS = ("cluster", "cluster-aof", "cluster-partial", "cluster-frozen", "pair", "pair-lag", "pair-lag-min-replicas")
LABELS = {
    "cluster": "cluster, master killed",
    "cluster-aof": "cluster with AOF, master killed",
    "cluster-partial": "cluster, `cluster-require-full-coverage no`",
    "cluster-frozen": "cluster, master frozen (SIGSTOP) then killed",
    "pair": "primary + replica, promoted",
    "pair-lag": "primary + replica, replication link 50 ms behind",
    "pair-lag-min-replicas": "primary + replica 50 ms behind, `DELAYQ_MIN_REPLICAS=1`",
}
PARTITIONS = 3
TOPIC = "failover"
TOPIC_CONFIG = {"timeout": 3, "backoff": [0.5]}  # a lease lost in the failover comes back within seconds
KEY_CONCURRENCY = 2  # with flow keys: each key's leases are counted (busy), through the failover
RATE = 200.0  # jobs/s
MIN_DELAY_S, MAX_DELAY_S = 1.0, 5.0
NODE_TIMEOUT_MS = 2000  # cluster-node-timeout
FROZEN_S = 3.0  # cluster-frozen: SIGSTOP, then SIGKILL this long after
PROMOTE_AFTER_S = 1.0  # pair: the primary's death to the replica's promotion, as a Sentinel would take
PAIR_OUTAGE_TAIL_S = 1.0  # pair: the outage, for the CPU figure, lasts until the promotion plus this
LINK_DELAY_S = 0.05  # pair-lag: each byte of the replication link, each way
MIN_REPLICAS_ENV = {"DELAYQ_MIN_REPLICAS": "1"}
IDLE_S = 5.0
STEADY_FROM_S = 5.0  # the steady window opens this long into the traffic (at most halfway to the kill):
# by then jobs fall due as fast as they are made (the longest delay is 5 s)
DRAIN_TIMEOUT_S = 30.0
STARTUP_TIMEOUT_S = 30.0
CPU_SAMPLE_S = 0.1
TAIL_LINES = 5
LOG_LEVEL = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (WARNING|ERROR|CRITICAL)\s")  # __main__'s format
PRODUCER = TESTS / "faults" / "failover_producer.py"


def now_ms() -> float:
    return time.time() * 1000


# ------------------------------------------------------------------------------------ the servers


class ClusterStack:
    """3 masters + 3 replicas; the victim is the master owning partition 0's slot.

    A stack (this or ``PairStack``) gives: ``mode`` (DELAYQ_REDIS_MODE), ``namespace``, ``url`` (delayq's),
    ``clock_url`` (a server that survives, for fault_target's TIME), ``victim_partitions``, ``admin()``
    (a client of the harness's own), ``fail()`` (the failover, in a thread; each step's wall ms in
    ``events``, ``"kill"`` first) and ``recovered_ms()`` (when the failover is over)."""

    mode = "cluster"

    def __init__(self, setup: str) -> None:
        args = {"cluster-aof": ("--appendonly", "yes"), "cluster-partial": ("--cluster-require-full-coverage", "no")}
        self.setup = setup
        self.servers = RedisClusterServers(3, replicas=1, node_timeout_ms=NODE_TIMEOUT_MS, args=args.get(setup, ()))
        self.events: dict[str, float] = {}

    def start(self) -> None:
        self.servers.start()
        self.namespace = spread_namespace(cache(self.servers.master_of_slot))
        keys = Keyspace(self.namespace, PARTITIONS)
        masters = [self.servers.master_process_of_slot(keys.slot(p)) for p in keys.partitions]
        self.victim, self.survivor = masters[0], masters[1]
        self.replica = self.servers.replica_of(self.victim)
        self.slot = keys.slot(keys.partitions[0])
        self.victim_partitions = {i for i, master in enumerate(masters) if master is self.victim}

    @property
    def url(self) -> str:
        return self.survivor.url

    @property
    def clock_url(self) -> str:
        return self.survivor.url

    def admin(self) -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=self.survivor.port, decode_responses=True)

    def fail(self) -> threading.Thread:
        def run() -> None:
            if self.setup == "cluster-frozen":
                self.events["kill"] = now_ms()  # the outage starts with the freeze
                os.kill(self.victim.pid, signal.SIGSTOP)
                time.sleep(FROZEN_S)
                self.events["sigkill"] = now_ms()
            else:
                self.events["kill"] = now_ms()
            self.victim.kill()

        return _started(run)

    def recovered_ms(self, timeout: float) -> float | None:
        """When the survivor says ``cluster_state:ok`` with the victim's slot on another master."""
        seen = self.servers.wait_serving(self.slot, ask=self.survivor, instead_of=self.victim, timeout=timeout)
        return None if seen is None else now_ms() - (time.monotonic() - seen) * 1000

    def describe(self) -> str:
        return (
            f"victim master :{self.victim.port} (partitions {sorted(self.victim_partitions)}), its replica "
            f":{self.replica.port}; delayq's URL :{self.survivor.port}; namespace {self.namespace}"
        )

    def close(self) -> None:
        self.servers.close()


class PairStack:
    """A primary and its replica behind a forwarder (a DNS name); the victim is the primary."""

    mode = "standalone"
    namespace = TOPIC

    def __init__(self, setup: str) -> None:
        self.setup = setup
        self.victim_partitions = set(range(PARTITIONS))  # one server: every partition
        self.pair = ReplicaPair(link_delay_s=LINK_DELAY_S if "lag" in setup else 0.0)
        self.front: Forwarder | None = None
        self.events: dict[str, float] = {}
        self._failing: threading.Thread | None = None

    def start(self) -> None:
        self.pair.start()
        self.front = Forwarder(self.pair.primary.port).start()

    @property
    def url(self) -> str:
        assert self.front is not None
        return self.front.url

    @property
    def clock_url(self) -> str:
        return self.pair.replica.url

    def admin(self) -> redis.Redis:
        """The replica, directly: it holds what delayq wrote (a little behind), and then is the primary."""
        return self.pair.replica.client()

    def fail(self) -> threading.Thread:
        def run() -> None:
            assert self.front is not None
            self.events["kill"] = now_ms()
            self.pair.primary.kill()
            time.sleep(PROMOTE_AFTER_S)
            self.pair.promote()
            self.front.switch(self.pair.replica.port)
            self.events["promoted"] = now_ms()

        self._failing = _started(run)
        return self._failing

    def recovered_ms(self, timeout: float) -> float | None:
        assert self._failing is not None
        self._failing.join(timeout)
        promoted = self.events.get("promoted")
        return None if promoted is None else promoted + PAIR_OUTAGE_TAIL_S * 1000

    def describe(self) -> str:
        link = f", its link {LINK_DELAY_S * 1000:g} ms behind" if self.pair.link else ""
        return f"primary :{self.pair.primary.port}, replica :{self.pair.replica.port}{link}; delayq's URL {self.url}"

    def close(self) -> None:
        if self.front is not None:
            self.front.close()
        self.pair.close()


def make_stack(setup: str) -> ClusterStack | PairStack:
    if setup not in SETUPS:
        raise ValueError(f"unknown setup {setup!r}: one of {', '.join(SETUPS)}")
    return ClusterStack(setup) if setup.startswith("cluster") else PairStack(setup)


def spread_namespace(master_of_slot: Callable[[int], int], base: str = TOPIC) -> str:
    """The first of ``base``, ``base1``, ``base2`` ... whose partitions' hash tags land on as many
    masters as there are partitions: the victim then holds partition 0 only, the others are healthy."""
    for n in range(1000):
        namespace = f"{base}{n or ''}"
        keys = Keyspace(namespace, PARTITIONS)
        if len({master_of_slot(keys.slot(p)) for p in keys.partitions}) == PARTITIONS:
            return namespace
    raise RuntimeError(f"no namespace {base}<n> spreads {PARTITIONS} partitions over {PARTITIONS} masters")


Stack = ClusterStack | PairStack


def _started(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True, name="failover")
    thread.start()
    return thread


# ------------------------------------------------------------------------------------ measuring


class CpuSampler:
    """utime + stime of each process (``/proc/<pid>/stat``) every ``CPU_SAMPLE_S``, and when each was
    first seen exited (wall ms)."""

    def __init__(self, processes: Mapping[str, LoopProcess]) -> None:
        self.processes = dict(processes)
        self.samples: dict[str, list[tuple[float, float]]] = {name: [] for name in processes}
        self.exited_ms: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-sampler")

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(CPU_SAMPLE_S):
            for name, process in self.processes.items():
                if name in self.exited_ms:
                    continue
                if not process.alive:
                    self.exited_ms[name] = now_ms()
                    continue
                cpu = _proc_cpu_s(process.pid)
                if cpu is not None:
                    self.samples[name].append((now_ms(), cpu))

    def cores(self, name: str, begin_ms: float, end_ms: float) -> float | None:
        """CPU seconds per second between two instants (the samples nearest inside), or None."""
        inside = [(t, cpu) for t, cpu in self.samples[name] if begin_ms <= t <= end_ms]
        if len(inside) < 2 or inside[-1][0] - inside[0][0] < 200:
            return None
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return (c1 - c0) / ((t1 - t0) / 1000)


def _proc_cpu_s(pid: int) -> float | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # from field 3 (state) on
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class JsonLines:
    """A JSON lines file another process appends to, read as it grows (whole lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        self._offset = 0

    def read(self) -> list[dict[str, Any]]:
        if self.path.exists():
            with self.path.open("rb") as stream:
                stream.seek(self._offset)
                data = stream.read()
            whole = data[: data.rfind(b"\n") + 1]
            self._offset += len(whole)
            self.records += [json.loads(line) for line in whole.splitlines() if line.strip()]
        return self.records


def stored_states(admin: redis.Redis | RedisCluster, keys: Keyspace, ids: Iterable[str]) -> dict[str, str]:
    """The state letter of each of ``ids`` that Redis holds (``q`` queued, ``l`` leased, ``x`` dead, ``d``
    done: its receipt), from the meta hash of its partition (keys.py; meta: ``state|attempts|...``)."""
    groups: dict[int, list[str]] = defaultdict(list)
    for job_id in ids:
        groups[keys.for_job(TOPIC, job_id).index].append(job_id)
    states: dict[str, str] = {}
    for index, group in groups.items():
        metas = keys.partitions[index].metas
        for first in range(0, len(group), 1000):
            chunk = group[first : first + 1000]
            values = admin.hmget(metas, [f"{TOPIC}/{job_id}" for job_id in chunk])
            states |= {job_id: value[0] for job_id, value in zip(chunk, values, strict=True) if value}
    return states


def unsettled_in_redis(admin: redis.Redis | RedisCluster, keys: Keyspace) -> Counter[str]:
    """Jobs of the topic neither done nor dead, by state letter, over every partition."""
    found: Counter[str] = Counter()
    for partition in keys.partitions:
        found.update(value[0] for field, value in admin.hgetall(partition.metas).items()
                     if field.startswith(f"{TOPIC}/") and value[0] not in "dx")  # fmt: skip
    return found


def counted_leases(admin: redis.Redis | RedisCluster, keys: Keyspace) -> dict[str, int]:
    """Each flow key's leases counted against its concurrency (the topic's ``busy`` hash), over every
    partition: nothing once every job is settled."""
    counted: Counter[str] = Counter()
    for partition in keys.partitions:
        busy = partition.topic_keys(TOPIC)[TOPIC_KEYS.index("busy")]
        counted.update({key: int(n) for key, n in admin.hgetall(busy).items()})
    return dict(+counted)  # the keys counted above zero


def locks_without_ttl(admin: redis.Redis | RedisCluster, keys: Keyspace) -> int:
    return sum(1 for partition in keys.partitions if admin.ttl(partition.lock) == -1)


def widest_gap(instants_ms: Iterable[float], begin_ms: float, end_ms: float) -> tuple[float, float]:
    """The widest gap between successive instants inside [begin, end], the window's edges counted as
    instants (a stall from the window's start shows whole): (its length, where it starts), in ms."""
    points = [begin_ms, *sorted(t for t in instants_ms if begin_ms <= t <= end_ms), end_ms]
    return max(((b - a, a) for a, b in pairwise(points)), default=(0.0, begin_ms))


def warning_lines(path: Path) -> tuple[int, list[tuple[str, int]]]:
    """A loop's log lines at WARNING or above, and the 3 most frequent of them with digits masked."""
    lines = [line for line in _read(path).splitlines() if LOG_LEVEL.match(line)]
    shapes = Counter(re.sub(r"\d+", "N", line.split(" ", 2)[2])[:160] for line in lines)
    return len(lines), shapes.most_common(3)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


# ------------------------------------------------------------------------------------ the row


@dataclass
class Row:
    """What one run measured. Times in s, CPU in cores (CPU seconds per second)."""

    setup: str
    side: str = ""  # which checkout's delayq (bench/failover/run.py)
    offered: int = 0  # jobs the producer was to send
    sent: int = 0
    acknowledged: int = 0  # 201s
    answers_500: int = 0
    answers_503: int = 0
    other_answers: dict[str, int] = field(default_factory=dict)  # by status (0: the handler raised)
    delivered: int = 0  # acknowledged jobs delivered (a successful handler run)
    lost: int = 0  # acknowledged, never delivered by the end of the drain, and not in Redis either
    lost_answered_ms_before_kill: list[float] = field(default_factory=list)  # the lost ones' 201s: earliest, latest
    undelivered_in_redis: dict[str, int] = field(default_factory=dict)  # acknowledged, never delivered, in Redis
    redis_read: bool = True  # False: Redis could not be read at the end; lost counts every undelivered job
    written_anyway: int = 0  # not acknowledged (503, 500), delivered all the same
    early: int = 0
    duplicates: int = 0  # jobs whose handler started more than once
    duplicates_same_attempt: int = 0  # ... of those, twice with the same attempt number
    loop_exits: dict[str, str] = field(default_factory=dict)  # loops that exited before the harness stopped them
    warnings: dict[str, int] = field(default_factory=dict)  # per loop: log lines at WARNING or above
    top_warnings: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    consumer_cpu: dict[str, float | None] = field(default_factory=dict)  # idle, steady, outage
    sweeper_cpu: dict[str, float | None] = field(default_factory=dict)
    healthy_gap_s: float | None = None  # partitions on surviving masters, kill to end of traffic
    healthy_gap_from_s: float | None = None  # where that gap starts, after the kill
    resumed_after_s: float | None = None  # the victim's partitions: first delivery start after their stall
    outage_s: float | None = None  # kill to cluster_state:ok with the slot served again (pair: promotion + 1 s)
    drained: bool = False
    drain_s: float = 0.0
    stuck: dict[str, int] = field(default_factory=dict)  # after the drain: jobs neither done nor dead, by state
    keys_counted: dict[str, int] = field(default_factory=dict)  # after the drain: leases still counted, by key
    locks_without_ttl: int = 0
    producer_behind_s: float = 0.0
    answer_ms: dict[str, float] = field(default_factory=dict)  # the API's answers: p50, p99, max
    offset_clock_starts: int = 0  # starts timed by the process clock (Redis' TIME did not answer)
    lateness_ms: dict[str, float] = field(default_factory=dict)  # every start: p50, p99, max
    redis_errors: dict[str, int | None] = field(default_factory=dict)  # the loops' summaries
    events_s: dict[str, float] = field(default_factory=dict)  # the failover's steps, after the kill
    notes: str = ""
    error: str = ""  # the run failed (no row): why

    def line(self) -> str:
        """One line for the fault tier's report."""
        return (
            f"[faults] failover {self.setup}: acknowledged={self.acknowledged}/{self.sent} lost={self.lost} "
            f"(answered {self.lost_answered_ms_before_kill} ms before the kill) "
            f"undelivered_in_redis={self.undelivered_in_redis} early={self.early} loop_exits={self.loop_exits} "
            f"500s={self.answers_500} 503s={self.answers_503} other={self.other_answers} "
            f"healthy_gap_s={_fmt(self.healthy_gap_s)} warnings={self.warnings} "
            f"consumer_cpu={ {k: _fmt(v) for k, v in self.consumer_cpu.items()} } "
            f"duplicates={self.duplicates}(same attempt {self.duplicates_same_attempt}) "
            f"resumed_after_s={_fmt(self.resumed_after_s)} outage_s={_fmt(self.outage_s)} "
            f"drained={self.drained} in {self.drain_s:.1f}s stuck={self.stuck} keys_counted={self.keys_counted} "
            f"written_anyway={self.written_anyway} "
            f"producer_behind_s={self.producer_behind_s} answer_ms={self.answer_ms} "
            f"redis_errors={self.redis_errors} | {self.notes}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# ------------------------------------------------------------------------------------ a run


def process_env(
    stack: Stack, functions: Path, deliveries: Path, extra: Mapping[str, str], *, keys: int = 0
) -> dict[str, str]:
    """The environment of the loops and the producer: ``functions`` first on PYTHONPATH (the code under
    test), then ``tests/`` (the target, ``support.fault_target``); with ``keys``, the topic holds each
    flow key to ``KEY_CONCURRENCY``."""
    config = TOPIC_CONFIG | ({"key_concurrency": KEY_CONCURRENCY} if keys else {})
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_") and k != "PYTHONPATH"}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(functions), str(TESTS)]),
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",  # nothing written into another checkout's tree
        "DELAYQ_REDIS_URL": stack.url,
        "DELAYQ_REDIS_MODE": stack.mode,
        "DELAYQ_NAMESPACE": stack.namespace,
        "DELAYQ_PARTITIONS": str(PARTITIONS),
        "DELAYQ_TOPICS": topics_json(**{TOPIC: config}),
        LOG_ENV: str(deliveries),
        CLOCK_ENV: stack.clock_url,
        **extra,
    }
    return env


def run_scenario(
    setup: str,
    *,
    kill_after_s: float,
    after_s: float,
    functions: Path,
    workdir: Path,
    env_extra: Mapping[str, str] | None = None,
    idle_s: float = IDLE_S,
    rate: float = RATE,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
    keys: int = 0,
) -> Row:
    """One run of ``setup`` with the code of ``functions`` (a checkout's ``functions/``); its row. The
    servers, the processes' logs and records stay in ``workdir``. ``pair-lag-min-replicas`` adds
    ``MIN_REPLICAS_ENV`` to ``env_extra``. ``keys``: how many flow keys the jobs carry (0: none)."""
    workdir.mkdir(parents=True, exist_ok=True)
    extra = {**(MIN_REPLICAS_ENV if setup.endswith("min-replicas") else {}), **(env_extra or {})}
    stack = make_stack(setup)
    stack.start()
    try:
        with stack.admin() as admin:
            return _run(
                stack,
                admin,
                setup,
                kill_after_s=kill_after_s,
                after_s=after_s,
                functions=functions,
                workdir=workdir,
                extra=extra,
                idle_s=idle_s,
                rate=rate,
                drain_timeout_s=drain_timeout_s,
                flow_keys=keys,
            )
    finally:
        stack.close()


def _run(
    stack: Stack,
    admin: redis.Redis | RedisCluster,
    setup: str,
    *,
    kill_after_s: float,
    after_s: float,
    functions: Path,
    workdir: Path,
    extra: Mapping[str, str],
    idle_s: float,
    rate: float,
    drain_timeout_s: float,
    flow_keys: int,
) -> Row:
    keys = Keyspace(stack.namespace, PARTITIONS)
    deliveries, requests = JsonLines(workdir / "deliveries.jsonl"), JsonLines(workdir / "requests.jsonl")
    env = process_env(stack, functions, deliveries.path, extra, keys=flow_keys)
    fleet = Fleet(env, workdir)
    producer: subprocess.Popen[bytes] | None = None
    sampler: CpuSampler | None = None
    try:
        with fleet.running():
            loops = {"sweep": fleet.sweeper("sweep"), "consume": fleet.consumer("consume")}
            _wait_started(loops, admin, keys)
            sampler = CpuSampler(loops).start()
            time.sleep(1.0)  # the loops' first passes, not idle yet
            idle = (now_ms(), now_ms() + idle_s * 1000)
            time.sleep(idle_s)

            producer = _start_producer(env, workdir, rate, kill_after_s + after_s, flow_keys)
            ready = wait_until(lambda: next((r for r in requests.read() if r.get("ev") == "ready"), None), 60)
            if not ready:
                raise RuntimeError(f"the producer never got ready:\n{_read(workdir / 'producer.err')[-3000:]}")
            traffic_ms = float(ready["wall_ms"])
            time.sleep(max(0.0, (traffic_ms + kill_after_s * 1000 - now_ms()) / 1000))
            failing = stack.fail()
            wait_until(lambda: "kill" in stack.events, 5)
            kill_ms = stack.events["kill"]
            recovered_ms = stack.recovered_ms(timeout=after_s + 30)
            failing.join(30)
            producer.wait(after_s + 120)
            traffic_end_ms = traffic_ms + (kill_after_s + after_s) * 1000

            acknowledged = {r["id"]: int(r["run_at_ms"]) for r in requests.read() if r.get("status") == 201}
            drain_began = now_ms()
            drained = _drain(acknowledged, deliveries, admin, keys, drain_began + drain_timeout_s * 1000)
            drain_s = (now_ms() - drain_began) / 1000

            exits = _exits(loops, sampler, kill_ms)
            sampler.stop()
            summaries = _stop(loops)
            steady_from = traffic_ms + min(STEADY_FROM_S, kill_after_s / 2) * 1000
            outage_end = recovered_ms if recovered_ms is not None else traffic_end_ms
            windows = {"idle": idle, "steady": (steady_from, kill_ms), "outage": (kill_ms, outage_end)}
            cpu = {name: {window: sampler.cores(name, *span) for window, span in windows.items()} for name in loops}
    finally:
        if sampler is not None:
            sampler.stop()
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait(10)

    row = Row(setup=setup, drained=drained, drain_s=round(drain_s, 1), loop_exits=exits, notes=stack.describe())
    if recovered_ms is None:
        row.notes += "; never seen recovered"
    _count_requests(row, requests.read())
    _count_deliveries(
        row,
        deliveries.read(),
        acknowledged=acknowledged,
        keys=keys,
        victim_partitions=stack.victim_partitions,
        kill_ms=kill_ms,
        traffic_end_ms=traffic_end_ms,
    )
    _count_redis(
        row,
        deliveries.read(),
        requests=requests.read(),
        acknowledged=acknowledged,
        admin=admin,
        keys=keys,
        kill_ms=kill_ms,
    )
    for name, process in loops.items():
        row.warnings[name], row.top_warnings[name] = warning_lines(process.err)
        summary = summaries.get(name) or {}
        row.redis_errors[name] = summary.get("redis_errors")
    row.consumer_cpu, row.sweeper_cpu = cpu["consume"], cpu["sweep"]
    row.outage_s = None if recovered_ms is None else round((recovered_ms - kill_ms) / 1000, 2)
    row.events_s = {name: round((at - kill_ms) / 1000, 2) for name, at in stack.events.items() if name != "kill"}
    return row


def _wait_started(loops: Mapping[str, LoopProcess], admin: redis.Redis | RedisCluster, keys: Keyspace) -> None:
    """Until both loops caught SIGTERM (their start-up is over) and the sweeper holds every partition's
    lock; a RuntimeError with their logs if one exits or the time runs out first."""

    def started() -> bool:
        if not all(process.alive for process in loops.values()):
            raise RuntimeError("a loop exited at start-up:\n" + "\n".join(p.tail() for p in loops.values()))
        try:
            locked = all(admin.exists(partition.lock) for partition in keys.partitions)
        except redis.RedisError:
            return False
        return locked and all(process.catches_sigterm() for process in loops.values())

    if not wait_until(started, STARTUP_TIMEOUT_S, interval=0.1):
        raise RuntimeError("the loops did not start:\n" + "\n".join(p.tail() for p in loops.values()))


def _start_producer(
    env: Mapping[str, str], workdir: Path, rate: float, seconds: float, keys: int
) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(PRODUCER), "--rate", f"{rate:g}", "--seconds", f"{seconds:g}"]
    command += ["--keys", str(keys)] if keys else []
    command += ["--out", str(workdir / "requests.jsonl"), "--topic", TOPIC]
    command += ["--min-delay", f"{MIN_DELAY_S:g}", "--max-delay", f"{MAX_DELAY_S:g}"]
    with (workdir / "producer.out").open("ab") as out, (workdir / "producer.err").open("ab") as err:
        return subprocess.Popen(command, env=dict(env), stdout=out, stderr=err, cwd=workdir)


def _drain(
    acknowledged: Mapping[str, int],
    deliveries: JsonLines,
    admin: redis.Redis | RedisCluster,
    keys: Keyspace,
    deadline_ms: float,
) -> bool:
    """Until every acknowledged job was delivered or is gone from Redis, and Redis holds no job of the
    topic still to run (a redelivery, a job written though its create was not acknowledged); whether
    that came before ``deadline_ms``."""
    checked_ms = 0.0
    while now_ms() < deadline_ms:
        delivered = {r["id"] for r in deliveries.read() if r["ev"] == "end"}
        missing = [job_id for job_id in acknowledged if job_id not in delivered]
        if now_ms() - checked_ms >= 1000:  # Redis is asked once a second, the file read every 0.2 s
            checked_ms = now_ms()
            try:
                waiting = stored_states(admin, keys, missing)
                if not any(state in "ql" for state in waiting.values()) and not unsettled_in_redis(admin, keys):
                    return True
            except redis.RedisError:
                pass
        time.sleep(0.2)
    return False


def _exits(loops: Mapping[str, LoopProcess], sampler: CpuSampler, kill_ms: float) -> dict[str, str]:
    """The loops that exited by themselves: name -> code, when (after the kill) and the last lines of
    stderr (the last first: the exception, for a traceback)."""
    exits = {}
    for name, process in loops.items():
        if process.alive:
            continue
        assert process.process is not None
        at = sampler.exited_ms.get(name)
        when = "" if at is None else f" {(at - kill_ms) / 1000:+.1f} s after the kill"
        tail = _read(process.err).strip().splitlines()[-TAIL_LINES:][::-1]
        exits[name] = f"exited {process.process.returncode}{when}: " + " <- ".join(line.strip() for line in tail)
    return exits


def _stop(loops: Mapping[str, LoopProcess]) -> dict[str, dict[str, Any] | None]:
    """SIGTERM to the loops still running; each one's summary (its last line of stdout), if it printed one."""
    live = [process for process in loops.values() if process.alive]
    for process in live:
        process.terminate()
    for process in live:
        assert process.process is not None
        try:
            process.process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
    summaries: dict[str, dict[str, Any] | None] = {}
    for name, process in loops.items():
        lines = _read(process.out).strip().splitlines()
        try:
            summaries[name] = json.loads(lines[-1]) if lines else None
        except ValueError:
            summaries[name] = None
    return summaries


def _count_requests(row: Row, records: list[dict[str, Any]]) -> None:
    answers = [r for r in records if "status" in r]
    statuses = Counter(r["status"] for r in answers)
    row.sent = len(answers)
    row.acknowledged = statuses.pop(201, 0)
    row.answers_500 = statuses.pop(500, 0)
    row.answers_503 = statuses.pop(503, 0)
    row.other_answers = {str(status): n for status, n in sorted(statuses.items())}
    done = next((r for r in records if r.get("ev") == "done"), {})
    row.offered = int(done.get("offered", row.sent))
    row.producer_behind_s = float(done.get("max_behind_s", 0.0))
    took = [r["answered_ms"] - r["sent_ms"] for r in answers]
    row.answer_ms = {"p50": round(percentile(took, 50), 1), "p99": round(percentile(took, 99), 1)}
    row.answer_ms["max"] = round(max(took, default=0.0), 1)


def _count_deliveries(
    row: Row,
    records: list[dict[str, Any]],
    *,
    acknowledged: Mapping[str, int],
    keys: Keyspace,
    victim_partitions: set[int],
    kill_ms: float,
    traffic_end_ms: float,
) -> None:
    """Early starts, duplicates, the healthy partitions' widest gap and when the victim's resumed."""
    starts = [r for r in records if r["ev"] == "start" and r["topic"] == TOPIC]
    attempts: dict[str, Counter[int]] = defaultdict(Counter)
    healthy: list[float] = []
    victim: list[float] = []
    lateness: list[float] = []
    for record in starts:
        job_id, at = record["id"], float(record["redis_ms"])
        attempts[job_id][int(record["attempt"])] += 1
        # Early by the run-at of the attempt, and by the run-at the create was answered with.
        if at < max(int(record["run_at_ms"]), acknowledged.get(job_id, 0)):
            row.early += 1
        lateness.append(at - int(record["run_at_ms"]))
        row.offset_clock_starts += record.get("clock") == "offset"
        (victim if keys.for_job(TOPIC, job_id).index in victim_partitions else healthy).append(at)
    row.duplicates = sum(1 for counts in attempts.values() if counts.total() > 1)
    row.duplicates_same_attempt = sum(1 for counts in attempts.values() if max(counts.values()) > 1)
    ends = {r["id"] for r in records if r["ev"] == "end"}
    row.delivered = sum(1 for job_id in acknowledged if job_id in ends)
    row.written_anyway = len(ends - set(acknowledged))
    if len(victim_partitions) < PARTITIONS:
        gap, begins = widest_gap(healthy, kill_ms, traffic_end_ms)
        row.healthy_gap_s, row.healthy_gap_from_s = round(gap / 1000, 3), round((begins - kill_ms) / 1000, 3)
    after = [at for at in victim if at > kill_ms]
    if after:
        gap, begins = widest_gap(after, kill_ms, max(after))
        row.resumed_after_s = round((begins + gap - kill_ms) / 1000, 3)
    row.lateness_ms = {
        "p50": round(percentile(lateness, 50), 1),
        "p99": round(percentile(lateness, 99), 1),
        "max": round(max(lateness, default=0.0), 1),
    }


def _count_redis(
    row: Row,
    records: list[dict[str, Any]],
    *,
    requests: list[dict[str, Any]],
    acknowledged: Mapping[str, int],
    admin: redis.Redis | RedisCluster,
    keys: Keyspace,
    kill_ms: float,
) -> None:
    """Lost: acknowledged, no successful delivery recorded, and no trace in Redis (its meta gone: a
    job is kept as a receipt for an hour once done); and how long before the kill those were answered.
    Stuck: what Redis still holds to run once the loops stopped."""
    ends = {r["id"] for r in records if r["ev"] == "end"}
    undelivered = [job_id for job_id in acknowledged if job_id not in ends]
    try:
        states = stored_states(admin, keys, undelivered)
        row.stuck = dict(unsettled_in_redis(admin, keys))
        row.keys_counted = counted_leases(admin, keys)
        row.locks_without_ttl = locks_without_ttl(admin, keys)
    except redis.RedisError as exc:
        row.redis_read, row.lost = False, len(undelivered)
        row.notes += f"; Redis unreadable at the end: {exc}"
        return
    lost = [job_id for job_id in undelivered if job_id not in states]
    row.lost = len(lost)
    row.undelivered_in_redis = dict(Counter(states.values()))
    if lost:
        answered = {r["id"]: r["answered_ms"] for r in requests if r.get("status") == 201}
        before = sorted(round(kill_ms - answered[job_id], 1) for job_id in lost)
        row.lost_answered_ms_before_kill = [before[-1], before[0]]
