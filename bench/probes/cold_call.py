"""What one call costs Redis when calls come back to back, and when they come a few ms apart as they
do at a steady 200 jobs/s, on a private redis-server; and the whole server's CPU per call at a steady
rate of calls: the floor under what a job costs at that rate when its producer makes one call.

    .venv/bin/python bench/probes/cold_call.py                      # the default gaps: 0, 0.5, 2, 5 and 20 ms
    .venv/bin/python bench/probes/cold_call.py --calls 200 --gaps 0,5 --rate 200

The calls: ``PING`` (no script; the steady rate only), ``return 1`` (a script call alone), the five commands a create
writes (``TIME``, ``HSETNX``, ``HSET``, ``ZADD``, ``ZADD LT``), and delayq's enqueue of one delayed job
(``Queue.enqueue``). Between two calls the process sleeps the gap: on an idle or shared machine Redis'
CPU caches go cold meanwhile, and what a call costs then, not in a tight loop, is what a job costs at a
steady low rate. Two measures: µs per call in ``INFO commandstats`` (the command's own time, scripts
only); and, at ``--rate`` calls a second for ``--seconds``, Redis' CPU (``INFO cpu``, user + sys: the
call, reading and answering it, and the server's own work meanwhile, as ``make bench-scale`` counts a
job) per call, with the server left idle as the first row. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.servers import PrivateRedis

from delayq import Queue, Settings, Topics

CREATE_WRITES = (
    "redis.call('TIME'); redis.call('HSETNX', KEYS[1], ARGV[1], 'q'); redis.call('HSET', KEYS[2], ARGV[1], 'x');"
    " redis.call('ZADD', KEYS[3], 1, ARGV[1]); redis.call('ZADD', KEYS[4], 'LT', 1, 't')"
)


def per_call_us(server: PrivateRedis, call: Callable[[int], object], calls: int, gap_s: float) -> float:
    """Redis' µs in ``evalsha`` per call of ``call``, ``gap_s`` apart."""

    def usec() -> tuple[int, int]:
        stat = server.client.info("commandstats")["cmdstat_evalsha"]
        return int(stat["usec"]), int(stat["calls"])

    before_us, before_calls = usec()
    for i in range(calls):
        call(i)
        if gap_s:
            time.sleep(gap_s)
    after_us, after_calls = usec()
    return (after_us - before_us) / (after_calls - before_calls)


def cpu_per_call_us(server: PrivateRedis, call: Callable[[int], object] | None, rate: float, seconds: float) -> float:
    """Redis' CPU (user + sys) per call of ``call`` at ``rate`` calls a second for ``seconds``; with no
    call, the idle server's CPU over as many slots."""

    def cpu_s() -> float:
        info = server.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    slots = int(rate * seconds)
    before, started = cpu_s(), time.monotonic()
    for i in range(slots):
        if call is not None:
            call(i)
        time.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
    return (cpu_s() - before) * 1e6 / slots


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per script and gap (400)")
    parser.add_argument("--gaps", default="0,0.5,2,5,20", help="ms between calls (0,0.5,2,5,20)")
    parser.add_argument("--rate", type=float, default=200, help="calls a second for Redis' CPU per call (200)")
    parser.add_argument("--seconds", type=float, default=5, help="how long each steady rate runs (5)")
    args = parser.parse_args(argv)
    gaps = [float(gap) / 1000 for gap in args.gaps.split(",")]
    server = PrivateRedis()
    client = server.client
    queue = Queue(Settings(redis_url=server.url, topics=Topics.parse({"t": {"target": "python:os:getcwd"}})))
    try:
        trivial, create = client.script_load("return 1"), client.script_load(CREATE_WRITES)
        scripts: dict[str, Callable[[int], object]] = {
            "return 1": lambda i: client.evalsha(trivial, 1, "k"),
            "a create's five writes": lambda i: client.evalsha(
                create, 4, "m", "b", "z", "i", f"j{time.monotonic_ns()}"
            ),
            "delayq enqueue": lambda i: queue.enqueue("t", {"x": "y" * 100}, id=f"j{time.monotonic_ns()}", delay=60),
        }
        for call in scripts.values():
            call(0)  # each script cached, the connection open
        in_script = {
            name: {f"{gap * 1000:g} ms": round(per_call_us(server, call, args.calls, gap), 1) for gap in gaps}
            for name, call in scripts.items()
        }
        steady: dict[str, Callable[[int], object] | None] = {"idle": None, "PING": lambda i: client.ping()}
        cpu = {
            name: round(cpu_per_call_us(server, call, args.rate, args.seconds), 1)
            for name, call in (steady | scripts).items()
        }
    finally:
        queue.close()
        server.stop()
    out = {"calls": args.calls, "us_per_call": in_script, "rate": args.rate, "redis_cpu_us_per_call": cpu}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
