"""What one run of a flow keys scenario runs on: a side's delayq (a checkout) on a fresh private Redis
(``shared.servers``: one server, or a 3-master Redis Cluster), its producers (``producers.py``, as
processes), its loops (``scale.stack.Loops``: ``python -m delayq sweep|consume``; ``Consumers``: one sweep
and several consume processes), what a window cost Redis, and where Redis still names a flow key.

Every process of a side runs with this checkout's ``.venv`` and the side's ``functions/`` first on
PYTHONPATH (``shared.checkout``), so the same harness measures the engine of any checkout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/ and scale/
from scale.stack import Loops, answer
from shared.checkout import Checkout, base_env
from shared.paths import PROJECT_PYTHON as PYTHON
from shared.records import read_jsonl, wait_for
from shared.servers import PrivateRedis, spent

HERE = Path(__file__).resolve().parent
NAMESPACE = "keys"
TARGET = "python:keys_target:deliver"  # keys_target.py, here
INTERVAL_TARGET = "python:keys_target:interval"  # keys_target.py: a job's key, start and end
TICK_S = 1.0  # the loops' DELAYQ_TICK
SEED_SETTLE_S = 0.5  # after the seed's start: its ack lands before a window opens

# Counts, in one hash, the fields or values that name ARGV[1]: in receipts (a meta of a job done,
# 'd|...', core/job.py) and elsewhere. The harness' own look, run once the run is over.
HASH_MENTIONS = """
local cursor, receipts, other = '0', 0, 0
repeat
  local page = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', 1000)
  cursor = page[1]
  local items = page[2]
  for i = 1, #items, 2 do
    if string.find(items[i], ARGV[1], 1, true) or string.find(items[i + 1], ARGV[1], 1, true) then
      if string.sub(items[i + 1], 1, 2) == 'd|' then receipts = receipts + 1 else other = other + 1 end
    end
  end
until cursor == '0'
return {receipts, other}
"""


class Consumers(Loops):
    """One sweep and ``consumers`` consume processes (each its own ``Consumer``), each stopped by its pid."""

    def __init__(self, env: dict[str, str], workdir: Path, consumers: int) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.workdir = workdir
        for loop in ["sweep", *(f"consume{n}" for n in range(consumers))]:
            with (workdir / f"{loop}.log").open("ab") as log:
                command = [str(PYTHON), "-m", "delayq", loop.rstrip("0123456789")]
                self.procs[loop] = subprocess.Popen(command, env=env, cwd=workdir, stdout=log, stderr=log)


@dataclass
class Stage:
    """One run of a scenario on one side: a fresh Redis, the environment of the side's processes on
    it (``topics`` as DELAYQ_TOPICS), and a directory for its records and logs."""

    side: Checkout
    args: argparse.Namespace
    workdir: Path
    topics: dict[str, dict[str, Any]]
    handler_ms: float = 0
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True)
        self.store = PrivateRedis(masters=3) if self.args.cluster else PrivateRedis()
        env = base_env()
        env["PYTHONPATH"] = self.side.pythonpath(HERE)
        env["DELAYQ_REDIS_URL"] = self.store.url
        env["DELAYQ_REDIS_MODE"] = "cluster" if self.args.cluster else "standalone"
        env["DELAYQ_PARTITIONS"] = str(self.args.partitions if self.args.cluster else 1)
        env["DELAYQ_NAMESPACE"] = NAMESPACE
        env["DELAYQ_TOPICS"] = json.dumps(self.topics)
        env["DELAYQ_TICK"] = f"{TICK_S:g}"
        env["BENCH_OUT"] = str(self.starts)
        env["BENCH_HANDLER_MS"] = f"{self.handler_ms:g}"
        self.env = env

    @property
    def starts(self) -> Path:
        return self.workdir / "starts.jsonl"

    def __enter__(self) -> Stage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.stop()

    # ------------------------------------------------------------------------------ processes

    def produce(self, command: str, *args: str, name: str | None = None) -> subprocess.Popen[bytes]:
        """Starts ``producers.py command args``; its answer is the last line of ``<name>.out``."""
        name = name or command
        with (self.workdir / f"{name}.out").open("ab") as out, (self.workdir / f"{name}.log").open("ab") as err:
            argv = [str(PYTHON), str(HERE / "producers.py"), command, *args]
            return subprocess.Popen(argv, env=self.env, stdout=out, stderr=err)

    def answer(self, proc: subprocess.Popen[bytes], name: str, timeout: float = 900) -> dict[str, Any]:
        return answer(proc, self.workdir, name, timeout)

    def jobs(self, name: str) -> dict[str, float]:
        """The jobs a producer wrote to ``<name>.jsonl``: id -> due ms, as Redis answered it."""
        return {row["id"]: float(row["due_ms"]) for row in read_jsonl([self.workdir / f"{name}.jsonl"])}

    def ids(self, name: str) -> str:
        return str(self.workdir / f"{name}.jsonl")

    def loops(self, topic: str, consumers: int = 1) -> Loops:
        """One sweep and ``consumers`` consume processes, up and delivering: a job without a key, due now,
        started."""
        loops = Loops(self.env, self.workdir) if consumers == 1 else Consumers(self.env, self.workdir, consumers)
        try:
            self.answer(self.produce("seed", "--topic", topic, "--ids", self.ids("seed")), "seed", 60)
            self.wait(self.jobs("seed"), 60)
            if not self.started(self.jobs("seed")):
                raise RuntimeError("the seed never started: the loops are not delivering")
            time.sleep(SEED_SETTLE_S)
        except BaseException:
            loops.stop()
            raise
        return loops

    def wait(self, jobs: dict[str, float], after_last_due_s: float | None = None) -> None:
        """Until every job of ``jobs`` started, ``--drain-timeout`` s past the last due time, or nothing
        started for ``--stall-timeout`` s."""
        timeout = self.args.drain_timeout if after_last_due_s is None else after_last_due_s
        last_due = max(jobs.values(), default=time.time() * 1000) / 1000
        wait_for(set(jobs), self.starts, max(last_due, time.time()) + timeout, self.args.stall_timeout)

    def started(self, jobs: dict[str, float]) -> bool:
        seen = {row["id"] for row in read_jsonl([self.starts])}
        return all(job_id in seen for job_id in jobs)

    # ------------------------------------------------------------------------------ Redis

    def counters(self) -> dict[str, Any]:
        """Redis' counters now: CPU, commands, memory (summed over the masters), and by command."""
        return {"info": self.store.info(), "commands": self.store.command_stats()}

    def cost(self, before: dict[str, Any], jobs: int) -> dict[str, Any]:
        """What Redis did since ``before`` (``counters()``), per job."""
        used = spent(before["info"], self.store.info())
        calls = {
            name: n - before["commands"].get(name, (0, 0))[0] for name, (n, _) in self.store.command_stats().items()
        }
        per = max(jobs, 1)
        return {
            "redis_cpu_us_per_job": used["cpu_s"] * 1e6 / per,
            "commands_per_job": used["commands"] / per,
            "script_calls_per_job": (calls.get("evalsha", 0) + calls.get("eval", 0)) / per,
            "commands_by_name_per_job": {name: n / per for name, n in sorted(calls.items()) if n and name != "info"},
        }

    def mentions(self, needle: str) -> dict[str, Any]:
        """Where Redis still names ``needle`` (a flow key): key names, hash fields and values, set and
        sorted set members, list elements, strings, on every master. Receipts (metas of jobs done, kept
        for the topic's ``keep_done``) apart. ``where`` names each place with the key in it as ``<key>``."""
        where: Counter[str] = Counter()
        receipts = 0
        for node, client in zip(self.store.nodes, self.store.clients, strict=True):
            scan = ["redis-cli", "-p", str(node.port), "--scan", "--pattern", f"{NAMESPACE}:*"]
            names = subprocess.run(scan, capture_output=True, text=True, check=True).stdout.splitlines()
            others = [name for name in names if needle not in name]
            where.update("key name " + name.replace(needle, "<key>") for name in names if needle in name)
            mentions_in = client.register_script(HASH_MENTIONS)
            for start in range(0, len(others), 1000):
                chunk = others[start : start + 1000]
                with client.pipeline(transaction=False) as pipe:
                    for name in chunk:
                        pipe.type(name)
                    kinds = pipe.execute()
                for name, kind in zip(chunk, kinds, strict=True):
                    if kind == "hash":
                        in_receipts, other = mentions_in(keys=[name], args=[needle])
                        receipts += int(in_receipts)
                        n = int(other)
                    elif kind in ("set", "zset"):
                        scan_members = client.sscan_iter if kind == "set" else client.zscan_iter
                        n = sum(1 for _ in scan_members(name, match=f"*{needle}*", count=1000))
                    elif kind == "list":
                        n = sum(needle in item for item in client.lrange(name, 0, -1))
                    else:
                        n = int(needle in str(client.get(name) if kind == "string" else ""))
                    if n:
                        where[f"{kind} {name}"] += n
        return {"elsewhere": sum(where.values()), "receipts": receipts, "where": dict(where)}
