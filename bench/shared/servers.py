"""The bench's own Redis: a private redis-server, what a scenario cost it (INFO before and after), and
its physical limit for the primitives a delay queue uses (redis-benchmark).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from systems import log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server of the bench's own: a free port, no persistence, a temporary directory."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if not binary or not shutil.which("redis-benchmark"):
            raise SystemExit(
                "the bench needs redis-server and redis-benchmark on PATH (Debian: apt-get install redis-server)"
            )
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-bench-redis-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.dir), "--logfile", str(self.dir / "redis.log"), "--daemonize", "no"]
        self.proc = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis.from_url(self.url, decode_responses=True)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if self.client.ping():
                    break
            time.sleep(0.05)
        else:
            self.stop()
            raise SystemExit("the private redis-server did not start")
        self.version = str(self.client.info("server")["redis_version"])
        log(f"private redis-server {self.version} (pid {self.proc.pid}) on 127.0.0.1:{self.port}, dir {self.dir}")

    def flush(self) -> None:
        self.client.execute_command("FLUSHALL", "SYNC")
        self.client.execute_command("SCRIPT", "FLUSH", "SYNC")
        time.sleep(0.1)

    def snapshot(self) -> dict[str, Any]:
        info = self.client.info("everything")
        info["_at"] = time.monotonic()
        return info

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # by pid: the server this bench started
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def delta(before: dict[str, Any], after: dict[str, Any], jobs: int) -> dict[str, Any]:
    """Redis' side of a scenario, per job: CPU (user + sys), commands (those inside Lua scripts too),
    requests (socket reads: a pipeline is one while under 16 KB) and replies (socket writes). The
    orchestrator's own INFO of the window is taken out."""

    def d(key: str) -> float:
        return float(after[key]) - float(before[key])

    cpu_s = d("used_cpu_user") + d("used_cpu_sys")
    commands = d("total_commands_processed") - 1
    reads = d("total_reads_processed") - 1
    writes = d("total_writes_processed") - 1
    stats = {}
    for key, value in after.items():
        if key.startswith("cmdstat_") and key != "cmdstat_info":
            calls = value["calls"] - before.get(key, {}).get("calls", 0)
            if calls:
                stats[key[len("cmdstat_") :]] = calls
    per = max(jobs, 1)
    return {
        "redis_cpu_s": cpu_s,
        "redis_cpu_us_per_job": cpu_s * 1e6 / per,
        "commands_per_job": commands / per,
        "requests_per_job": reads / per,
        "replies_per_job": writes / per,
        "commandstats": dict(sorted(stats.items(), key=lambda kv: -kv[1])),
        "used_memory_delta": int(after["used_memory"]) - int(before["used_memory"]),
        "connected_clients_after": int(after["connected_clients"]),
    }


# ------------------------------------------------------------------------------------- limits

LIMIT_SCRIPT = "return redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])"
BATCH_ELEMENTS = 100


def physical_limits(server: PrivateRedis, requests: int) -> dict[str, Any]:
    """redis-benchmark on the bench's Redis: each primitive unpipelined (-P 1) and with 16 commands per
    pipeline (-P 16); and ZADD, HSET, RPUSH with 100 elements per command (-P 1), the ceiling of a
    queue that batches its writes, as element/s. Redis' CPU per command is read around each test."""
    sha = server.client.script_load(LIMIT_SCRIPT)
    rand = ["-r", "1000000"]

    def many(*pair: str) -> list[str]:
        return [part for _ in range(BATCH_ELEMENTS) for part in pair]

    tests: list[tuple[str, int, int, list[str]]] = []  # name, pipeline, elements per command, arguments
    for pipeline in (1, 16):
        tests += [
            ("ZADD", pipeline, 1, ["-t", "zadd"]),
            ("HSET", pipeline, 1, ["-t", "hset"]),
            ("RPUSH", pipeline, 1, ["-t", "rpush"]),
            ("LRANGE_100", pipeline, 100, ["-t", "lrange_100"]),
            ("EVAL", pipeline, 1, ["EVAL", LIMIT_SCRIPT, "1", "bench:eval", "__rand_int__", "m:__rand_int__"]),
            ("EVALSHA", pipeline, 1, ["EVALSHA", sha, "1", "bench:evalsha", "__rand_int__", "m:__rand_int__"]),
        ]
    tests += [
        ("ZADD", 1, BATCH_ELEMENTS, ["ZADD", "bench:zb", *many("__rand_int__", "m:__rand_int__")]),
        ("HSET", 1, BATCH_ELEMENTS, ["HSET", "bench:hb", *many("f:__rand_int__", "v:__rand_int__")]),
        ("RPUSH", 1, BATCH_ELEMENTS, ["RPUSH", "bench:lb", *many("v:__rand_int__")]),
    ]
    results: dict[str, Any] = {}
    for name, pipeline, elements, test in tests:
        batched = elements > 1 and name != "LRANGE_100"
        n = max(1000, requests // 20) if batched else requests
        command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(server.port), "-q", "--csv", "-n", str(n), *rand]
        command += ["-P", str(pipeline), *test]
        before = server.snapshot()
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        after = server.snapshot()
        rows = [line for line in out.splitlines() if line.startswith('"') and not line.startswith('"test"')]
        row = next(r for r in rows if "needed to benchmark" not in r)
        fields = [cell.strip('"') for cell in row.split('","')]
        cpu = (after["used_cpu_user"] - before["used_cpu_user"]) + (after["used_cpu_sys"] - before["used_cpu_sys"])
        ops = float(fields[1])
        stat = f"cmdstat_{name.lower()}"
        calls = after.get(stat, {}).get("calls", 0) - before.get(stat, {}).get("calls", 0)
        key = f"{name} x{elements} -P {pipeline}" if batched else f"{name} -P {pipeline}"
        shown = [*test[:2], "...", f"({elements} elements)"] if batched else test
        results[key] = {
            "name": name,
            "pipeline": pipeline,
            "elements_per_command": elements,
            "ops_per_s": ops,
            "elements_per_s": ops * elements,
            "p50_latency_ms": float(fields[4]) if len(fields) > 4 else None,
            # LRANGE's window also holds redis-benchmark's LPUSH fill: no CPU figure for it.
            "redis_cpu_us_per_op": cpu * 1e6 / calls if calls and name != "LRANGE_100" else None,
            "command": " ".join(
                f'"{a}"' if " " in a else a
                for a in ["redis-benchmark", "-q", "-n", str(n), *rand, "-P", str(pipeline), *shown]
            ),
        }
        log(f"limit {key:<18}: {ops:>12,.0f} ops/s" + (f" = {ops * elements:,.0f} elements/s" if elements > 1 else ""))
        server.flush()
        server.client.script_load(LIMIT_SCRIPT)
    server.flush()
    return results
