"""Helpers for the compatibility tier: one full lifecycle of a queue (Queue API, Sweeper, Consumer),
run the same way on a Redis Cluster, behind twemproxy and under MONITOR, and what the tests check
about the Redis commands delayq sends."""

from __future__ import annotations

import itertools
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from redis.connection import AbstractConnection
from redis.crc import key_slot

from delayq import JobExists, JobInfo, JobNotFound, Queue, Settings, Topics
from delayq.core.job import EnqueueResult
from delayq.core.loop import Budget
from delayq.core.recurring import occurrence_id
from delayq.core.settings import RedisMode
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper
from delayq.store import calls
from delayq.store.connection import client_options

from support import recorder
from support.recorder import RECORDER

TOPIC = "jobs"
# One retry after 0.2 s, then dead: a failing job goes through retry and dead in well under a second.
TOPICS: dict[str, Any] = {TOPIC: {"target": RECORDER, "retries": 1, "backoff": [0.2], "timeout": 10}}
CALLBACK_TOPICS: dict[str, Any] = {  # callback_lifecycle's: a topic with callbacks, and where they go
    "calls": {"target": RECORDER, "retries": 0, "on_done": "calls-done", "on_dead": "calls-dead"},
    "calls-done": {"target": RECORDER},
    "calls-dead": {"target": RECORDER},
}
CONSUME_RUN_S = 0.05  # each consume run of ``drive``: a few passes
MANY = 30  # jobs of the enqueue_many batch: enough to land in every partition
MANY_IDS = [f"m{i:02d}" for i in range(MANY)]
OK_IDS = ["a", "later", "put", *MANY_IDS]  # every job that succeeds: delivered exactly once

# What the contract says the data path never sends (EVAL/EVALSHA with zero keys are checked apart).
FORBIDDEN = frozenset(
    ("HELLO", "BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BZPOPMIN", "BZPOPMAX", "SUBSCRIBE", "PSUBSCRIBE",
     "PUBLISH", "MULTI", "EXEC", "WATCH", "DISCARD", "SCRIPT", "TIME", "KEYS", "SCAN", "INFO", "CONFIG",
     "CLIENT", "FLUSHDB", "FLUSHALL", "RENAME")
)  # fmt: skip


def new_namespace() -> str:
    return f"c-{uuid.uuid4().hex[:12]}"


def make_settings(
    url: str,
    *,
    partitions: int,
    mode: RedisMode = "standalone",
    namespace: str | None = None,
    topics: dict[str, Any] = TOPICS,
) -> Settings:
    return Settings(
        redis_url=url,
        redis_mode=mode,
        namespace=namespace or new_namespace(),
        partitions=partitions,
        topics=Topics.parse(topics),
        tick=0.1,
    )


@dataclass
class Report:
    """What one lifecycle did: the loops' summed summaries, the enqueue_many answers."""

    sweep: dict[str, Any] = field(default_factory=dict)
    consume: Counter[str] = field(default_factory=Counter)
    batch: list[EnqueueResult] = field(default_factory=list)


def drive(queue: Queue, done: Callable[[], bool], report: Report, *, timeout: float = 15.0) -> None:
    """Alternates one sweep pass (lock taken, renewed by the sweep call, released) and a short consume
    run (take, deliver, settle) until ``done()``. The consume run is a few passes, not one: a single
    pass gives all of a topic's free workers to the take of its first partition, so with partitions > 1
    it never takes from the others (Consumer._take_calls)."""
    sweeper = Sweeper(queue)
    deadline = time.monotonic() + timeout
    try:
        while True:
            sweeper.run(Budget.of(0))
            report.consume.update(Consumer(queue).run(Budget.of(CONSUME_RUN_S)))
            if done():
                return
            assert time.monotonic() < deadline, f"not done within {timeout} s: {queue.stats(TOPIC)}"
            time.sleep(0.03)
    finally:
        for key, value in sweeper.summary().items():
            report.sweep[key] = report.sweep.get(key, 0) + value


def attempts(job_id: str) -> list[int]:
    return [d.attempt for d in recorder.of(TOPIC, job_id)]


def lifecycle(queue: Queue, *, after_enqueue: Callable[[], None] | None = None) -> Report:
    """The whole life of a topic through ``queue``: enqueue (create, create-or-replace, a batch over
    every partition with a duplicate and an invalid item), get, stats, cancel, reschedule, sweep,
    consume with a retry then dead, the dead listing, replay by id and of all, purge. Asserts every
    job is delivered as it should be (the good ones exactly once), never before its run-at."""
    report = Report()
    a = queue.enqueue(TOPIC, {"n": "a"}, id="a", delay=0.3)
    assert a.created
    with pytest.raises(JobExists):
        queue.enqueue(TOPIC, {"n": "again"}, id="a")
    queue.enqueue(TOPIC, {"n": "gone"}, id="gone", delay=60)
    queue.enqueue(TOPIC, {"n": "later"}, id="later", delay=60)
    assert queue.put(TOPIC, "put", {"n": "old"}, delay=60).created
    replaced = queue.put(TOPIC, "put", {"n": "new"}, delay=0.2)
    assert not replaced.created
    queue.enqueue(TOPIC, {"fail": True}, id="f1")  # fails twice (retries 1): retried, then dead
    queue.enqueue(TOPIC, {"fail": True}, id="f2", retries=0)  # dead at its first failure

    items: list[dict[str, Any]] = [
        {"topic": TOPIC, "id": job_id, "body": {"i": i}, "delay": 0.1 + (i % 5) * 0.05}
        for i, job_id in enumerate(MANY_IDS)
    ]
    items += [{"topic": TOPIC, "id": "a"}, {"topic": TOPIC, "id": "bad", "delay": -1}]
    report.batch = queue.enqueue_many(items)
    assert [r.status for r in report.batch] == [201] * MANY + [409, 422]
    assert {queue.keys.for_job(TOPIC, job_id).index for job_id in MANY_IDS} == set(range(len(queue.keys)))

    info = queue.get(TOPIC, "a")
    assert (info.state, info.attempts, info.body, info.run_at_ms) == ("delayed", 0, {"n": "a"}, a.run_at_ms)
    assert queue.get(TOPIC, "put").body == {"n": "new"}
    stats = queue.stats(TOPIC)
    assert (stats.delayed, stats.ready, stats.reserved, stats.dead) == (MANY + 4, 2, 0, 0)
    assert stats.next_run_at_ms is not None
    see_and_steer(queue)
    if after_enqueue is not None:
        after_enqueue()

    queue.cancel(TOPIC, "gone")
    with pytest.raises(JobNotFound):
        queue.get(TOPIC, "gone")
    with pytest.raises(JobNotFound):
        queue.cancel(TOPIC, "gone")
    later = queue.reschedule(TOPIC, "later", delay=0.3)
    assert queue.get(TOPIC, "later").run_at_ms == later.run_at_ms
    time.sleep(0.4)  # everything falls due before the first sweep: the sweeper, not a take, moves it

    def settled() -> bool:
        s = queue.stats(TOPIC)
        return (s.delayed, s.ready, s.reserved, s.dead) == (0, 0, 0, 2)

    drive(queue, settled, report)
    assert report.sweep["moved"] > 0, report.sweep  # the sweeper moved due jobs, not only the takes
    assert report.sweep["locks_taken"] > 0
    assert attempts("f1") == [1, 2]
    assert attempts("f2") == [1]
    dead = queue.dead(TOPIC)
    assert [job.id for job in dead] == ["f1", "f2"]  # newest first
    assert all("planned failure" in (job.last_error or "") for job in dead)
    assert dead[0].body == {"fail": True}

    assert queue.replay(TOPIC, ["f1", "a"]) == 1  # "a" is not dead: skipped
    replayed = queue.get(TOPIC, "f1")
    assert (replayed.state, replayed.attempts) == ("ready", 0)
    assert "planned failure" in (replayed.last_error or "")
    drive(queue, lambda: len(attempts("f1")) == 4 and settled(), report)
    assert queue.replay(TOPIC) == 2
    drive(queue, lambda: len(attempts("f2")) == 2 and len(attempts("f1")) == 6 and settled(), report)
    assert attempts("f1") == [1, 2, 1, 2, 1, 2]
    assert attempts("f2") == [1, 1]
    assert queue.purge(TOPIC) == 2
    assert queue.dead(TOPIC) == []
    stats = queue.stats(TOPIC)
    assert (stats.delayed, stats.ready, stats.reserved, stats.dead, stats.next_run_at_ms) == (0, 0, 0, 0, None)

    check_deliveries(OK_IDS)
    # Each job that succeeded is a receipt now, in its own partition: seen, counted, listed, a dedupe
    # window for creates, forgotten by a cancel.
    assert {queue.get(TOPIC, job_id).state for job_id in OK_IDS} == {"done"}
    assert stats.done == len(OK_IDS)
    assert {job.id for job in queue.jobs(TOPIC, "done", limit=1000).jobs} == set(OK_IDS)
    with pytest.raises(JobExists):
        queue.enqueue(TOPIC, {}, id=OK_IDS[0])
    for job_id in OK_IDS:
        queue.cancel(TOPIC, job_id)
        with pytest.raises(JobNotFound):
            queue.get(TOPIC, job_id)
    assert recorder.of(TOPIC, "put")[0].body == {"n": "new"}
    assert recorder.of(TOPIC, "later")[0].run_at_ms == later.run_at_ms
    assert report.sweep["redis_errors"] == 0, report.sweep
    assert report.consume["redis_errors"] == 0, report.consume
    assert report.consume["acked"] == len(OK_IDS)
    assert report.consume["dead"] + report.sweep["dead"] == 5
    return report


def see_and_steer(queue: Queue) -> None:
    """The topic seen (its delayed jobs page by page across every partition, its ready ones, the
    topics, the forecast) and steered (paused: takes lease nothing; resumed), without changing a job."""
    delayed: list[JobInfo] = []
    cursor = None
    while True:
        page = queue.jobs(TOPIC, "delayed", limit=7, cursor=cursor)
        delayed += page.jobs
        if page.next is None:
            break
        cursor = page.next
    assert [job.id for job in delayed] == [
        job.id for job in sorted(delayed, key=lambda job: (job.run_at_ms, job.id))
    ]  # soonest first, ties by id
    assert {job.id for job in delayed} == {"a", "gone", "later", "put", *MANY_IDS}
    assert {job.id for job in queue.jobs(TOPIC, "ready").jobs} == {"f1", "f2"}
    assert [topic.topic for topic in queue.topics().topics] == [TOPIC]
    # Jobs already due at the forecast's now are in no bucket: on a loaded machine the batch's may be.
    buckets = queue.forecast(TOPIC, minutes=2, bucket=30).buckets
    ahead = {job.id for job in delayed if job.run_at_ms >= buckets[0].from_ms}
    assert {"gone", "later"} <= ahead
    assert sum(bucket.count for bucket in buckets) == len(ahead)
    queue.pause(TOPIC)
    assert queue.stats(TOPIC).paused
    for partition in queue.keys.partitions:
        assert calls.take(partition, TOPIC, count=10, timeout_ms=1000, grace_ms=0).run(queue.redis).paused
    queue.resume(TOPIC)
    assert not queue.stats(TOPIC).paused


def one_name_per_partition(queue: Queue, topic: str) -> list[str]:
    """Schedule names ``tick-N``, the first that lands in each partition of ``queue``."""
    names: dict[int, str] = {}
    for i in itertools.count():
        names.setdefault(queue.keys.for_schedule(topic, f"tick-{i}").index, f"tick-{i}")
        if len(names) == len(queue.keys):
            return sorted(names.values())
    raise AssertionError("unreachable")


def schedule_lifecycle(queue: Queue) -> Report:
    """Recurring schedules through ``queue``: created (the first occurrence of each made by the PUT),
    read, listed, replaced; their occurrences made by the sweeps and delivered, each once, never early;
    deleted, their pending occurrences with them."""
    report = Report()
    names = one_name_per_partition(queue, TOPIC)  # every: 1, one in each partition
    infos = {name: queue.schedule(TOPIC, name, every=1, body={"s": name}) for name in names}
    daily = queue.schedule(TOPIC, "daily", cron="0 8 * * *", timezone="Europe/Paris")
    assert queue.get_schedule(TOPIC, "daily").next_runs_ms == daily.next_runs_ms
    replaced = queue.schedule(TOPIC, "daily", cron="30 8 * * *", timezone="Europe/Paris")
    assert not replaced.created
    with pytest.raises(JobNotFound):  # the old calendar's pending occurrence, cancelled
        queue.get(TOPIC, occurrence_id("daily", daily.next_runs_ms[0]))
    assert queue.get(TOPIC, occurrence_id("daily", replaced.next_runs_ms[0])).state == "delayed"
    assert [s.name for s in queue.schedules(TOPIC)] == sorted([*names, "daily"])

    def each_delivered_twice() -> bool:
        return all(len({d.id for d in recorder.of(TOPIC) if d.id.startswith(f"{n}@")}) >= 2 for n in names)

    drive(queue, each_delivered_twice, report)
    assert report.sweep["occurrences"] >= len(names), report.sweep
    for name in [*names, "daily"]:
        queue.unschedule(TOPIC, name)
    assert queue.schedules() == []
    with pytest.raises(JobNotFound):
        queue.get(TOPIC, occurrence_id("daily", replaced.next_runs_ms[0]))
    deliveries = recorder.of(TOPIC)
    assert Counter(d.id for d in deliveries if d.ok) == Counter({d.id for d in deliveries})  # each once
    assert [d.id for d in deliveries if d.started_ms < d.run_at_ms] == []
    for name, info in infos.items():
        times = sorted(d.run_at_ms for d in deliveries if d.id.startswith(f"{name}@"))
        assert times == [info.created_at_ms + k * 1000 for k in range(1, len(times) + 1)], name
    assert report.sweep["redis_errors"] == report.consume["redis_errors"] == 0
    return report


def callback_lifecycle(queue: Queue) -> Report:
    """Callbacks through ``queue`` (made with ``CALLBACK_TOPICS``): jobs in every partition, one that
    succeeds and one that goes dead each, make one callback job per outcome, wherever its partition
    is; each delivered once with the job it reports on, and the outboxes left empty."""
    report = Report()
    ids = one_name_per_partition(queue, "calls")  # a job id per partition
    for job_id in ids:
        queue.enqueue("calls", {"n": job_id}, id=job_id, delay=0)
        queue.enqueue("calls", {"fail": True}, id=f"{job_id}-x", delay=0)

    def each_called_back() -> bool:
        return len(recorder.of("calls-done")) >= len(ids) and len(recorder.of("calls-dead")) >= len(ids)

    drive(queue, each_called_back, report)
    done = {d.body["id"]: d for d in recorder.of("calls-done")}
    dead = {d.body["id"]: d for d in recorder.of("calls-dead")}
    assert sorted(done) == sorted(ids)
    assert sorted(dead) == sorted(f"{job_id}-x" for job_id in ids)
    assert {d.body["outcome"] for d in done.values()} == {"done"}
    assert all(d.body["error"] == "RuntimeError: planned failure of attempt 1" for d in dead.values())
    made = [d.id for d in recorder.of("calls-done") + recorder.of("calls-dead")]
    assert len(made) == len(set(made)) == 2 * len(ids)  # each callback job made and delivered once
    assert {queue.keys.for_job("calls-done", d.id).index for d in done.values()} != {0}  # partitions differ
    assert all(queue.redis.llen(p.outbox) == 0 for p in queue.keys.partitions)
    assert report.sweep["callbacks"] == 2 * len(ids)
    assert report.sweep["redis_errors"] == report.consume["redis_errors"] == 0
    return report


def check_deliveries(ok_ids: list[str]) -> None:
    """Each of ``ok_ids`` delivered once, successfully; nothing (of any id) handed over before its run-at."""
    deliveries = recorder.of(TOPIC)
    counts = Counter(d.id for d in deliveries if d.ok)
    assert {job_id: counts[job_id] for job_id in ok_ids} == dict.fromkeys(ok_ids, 1)
    assert set(counts) == set(ok_ids)
    early = [(d.id, d.attempt, d.started_ms - d.run_at_ms) for d in deliveries if d.started_ms < d.run_at_ms]
    assert early == []


# ----------------------------------------------------------------------------- what the server saw

_MONITOR_LINE = re.compile(r"^\+(\d+\.\d+) \[(\d+) ([^\]]*)\] (.*)$")
_MONITOR_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Seen:
    """One command in the MONITOR stream: who sent it (``lua``, or the client's ``host:port``) and its
    arguments (still escaped as MONITOR prints them: enough for names, numbers and our keys)."""

    client: str
    args: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.args[0].upper() if self.args else ""

    @property
    def from_lua(self) -> bool:
        return self.client == "lua"


class Monitor:
    """A raw MONITOR connection, read by a thread until ``stop()`` sends a marker from a connection of
    its own. Neither connection sends anything else, so every other client in the stream is delayq's."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.marker = f"delayq-compat-end-{uuid.uuid4().hex}"
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.address = "{}:{}".format(*self.sock.getsockname()[:2])
        self._buffer = bytearray()
        try:
            self.sock.sendall(b"MONITOR\r\n")
            assert self._line() == "+OK"
        except BaseException:
            self.sock.close()
            raise
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, name="compat-monitor", daemon=True)
        self._thread.start()

    def _line(self) -> str | None:
        while b"\r\n" not in self._buffer:
            data = self.sock.recv(1 << 16)
            if not data:
                return None
            self._buffer += data
        line, _, rest = bytes(self._buffer).partition(b"\r\n")
        self._buffer = bytearray(rest)
        return line.decode("utf-8", errors="replace")

    def _read(self) -> None:
        while (line := self._line()) is not None:
            self.lines.append(line)
            if self.marker in line:
                return

    def stop(self) -> list[Seen]:
        """Ends the capture; every command seen, in order, but the marker."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as marker:
            payload = f"*2\r\n$4\r\nECHO\r\n${len(self.marker)}\r\n{self.marker}\r\n".encode()
            marker.sendall(payload)
            marker.recv(1024)
        self._thread.join(10)
        assert not self._thread.is_alive(), "the MONITOR stream never showed the end marker"
        self.sock.close()
        seen = []
        for line in self.lines:
            match = _MONITOR_LINE.match(line)
            assert match, f"unreadable MONITOR line: {line[:200]!r}"
            seen.append(Seen(match.group(3), tuple(_MONITOR_ARG.findall(match.group(4)))))
        # Only the marker's own line goes: its connection, opened last, may have the local port of a
        # delayq connection closed earlier (Linux reuses a loopback TIME_WAIT port), so its address
        # does not tell it apart.
        return [s for s in seen if s.args != ("ECHO", self.marker)]


def command_stats(client: redis.Redis) -> Counter[str]:
    """INFO commandstats as ``{"get": calls, "config|resetstat": calls, ...}``."""
    stats = client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items()})


def error_stats(client: redis.Redis) -> dict[str, int]:
    """INFO errorstats as ``{"NOSCRIPT": count, ...}``."""
    return {name.removeprefix("errorstat_"): int(stat["count"]) for name, stat in client.info("errorstats").items()}


def forbidden_in(names: Counter[str]) -> dict[str, int]:
    """The commands of ``names`` (``cmd`` or ``cmd|sub``) that the contract forbids on the data path."""
    return {name: n for name, n in names.items() if name.split("|")[0].upper() in FORBIDDEN and n}


def direct_client(port: int) -> redis.Redis:
    """A client of the test's own, set up like delayq's (nothing a proxy refuses, RESP2)."""
    return redis.Redis(host="127.0.0.1", port=port, **client_options())


class ScriptCalls:
    """Every EVAL/EVALSHA a connection was asked to send, alone or in a pipeline: (command, numkeys,
    keys). Spied where every command is packed for the wire (``AbstractConnection.pack_command`` and
    ``pack_commands``), so no path of redis-py's or delayq's (cluster client, pipelines, a node's own
    connection) goes unseen."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, tuple[str, ...]]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> ScriptCalls:
        pack_command, pack_commands = AbstractConnection.pack_command, AbstractConnection.pack_commands

        def one(connection: Any, *args: Any) -> Any:
            self._seen(args)
            return pack_command(connection, *args)

        def many(connection: Any, commands: Any) -> Any:
            commands = list(commands)
            for args in commands:
                self._seen(args)
            return pack_commands(connection, commands)

        monkeypatch.setattr(AbstractConnection, "pack_command", one)
        monkeypatch.setattr(AbstractConnection, "pack_commands", many)
        return self

    def _seen(self, args: Any) -> None:
        if args and str(args[0]).upper() in ("EVAL", "EVALSHA"):
            numkeys = int(args[2])
            self.calls.append((str(args[0]).upper(), numkeys, tuple(str(k) for k in args[3 : 3 + numkeys])))

    def slots(self) -> list[set[int]]:
        return [{key_slot(key.encode()) for key in keys} for _, _, keys in self.calls]
