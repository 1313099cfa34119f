"""The physical limit of the bench's Redis for the primitives a delay queue uses: ``redis-benchmark``
on the same private server the systems then run on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared import log
from shared.servers import PrivateRedis

LIMIT_SCRIPT = "return redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])"
BATCH_ELEMENTS = 100


def physical_limits(server: PrivateRedis, requests: int) -> dict[str, Any]:
    """redis-benchmark on the bench's Redis: each primitive unpipelined (-P 1) and with 16 commands per
    pipeline (-P 16); and ZADD, HSET, RPUSH with 100 elements per command (-P 1), the ceiling of a
    queue that batches its writes, as element/s. Redis' CPU per command is read around each test."""
    if not shutil.which("redis-benchmark"):
        raise SystemExit("the physical limit needs redis-benchmark on PATH (Debian: apt-get install redis-server)")
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
