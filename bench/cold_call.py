"""What one script call costs Redis when calls come back to back, and when they come a few ms apart as
they do at a steady 200 jobs/s: ``INFO commandstats``' µs per ``evalsha``, on a private redis-server.

    .venv/bin/python bench/cold_call.py                      # the default gaps: 0, 0.5, 2, 5 and 20 ms
    .venv/bin/python bench/cold_call.py --calls 200 --gaps 0,5

Three scripts: ``return 1`` (the call alone), three commands (``TIME``, ``ZADD``, ``HSET``), and delayq's
enqueue of one delayed job (``Queue.enqueue``). Between two calls the process sleeps the gap: on an
idle or shared machine Redis' CPU caches go cold meanwhile, and what a call costs then, not in a tight
loop, is what a job costs at a steady low rate. Prints one JSON object: µs per call, by script and gap.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from redis_server import PrivateRedis

from delayq import Queue, Settings, Topics

THREE_COMMANDS = (
    "redis.call('TIME'); redis.call('ZADD', KEYS[1], 1, ARGV[1]); redis.call('HSET', KEYS[2], ARGV[1], 'x')"
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per script and gap (400)")
    parser.add_argument("--gaps", default="0,0.5,2,5,20", help="ms between calls (0,0.5,2,5,20)")
    args = parser.parse_args(argv)
    gaps = [float(gap) / 1000 for gap in args.gaps.split(",")]
    server = PrivateRedis()
    client = server.client
    queue = Queue(Settings(redis_url=server.url, topics=Topics.parse({"t": {"target": "python:os:getcwd"}})))
    try:
        trivial, three = client.script_load("return 1"), client.script_load(THREE_COMMANDS)
        scripts: dict[str, Callable[[int], object]] = {
            "return 1": lambda i: client.evalsha(trivial, 1, "k"),
            "TIME, ZADD, HSET": lambda i: client.evalsha(three, 2, "z", "h", f"m{i}"),
            "delayq enqueue": lambda i: queue.enqueue("t", {"x": "y" * 100}, id=f"j{time.monotonic_ns()}", delay=60),
        }
        for call in scripts.values():
            call(0)  # each script cached, the connection open
        out = {
            name: {f"{gap * 1000:g} ms": round(per_call_us(server, call, args.calls, gap), 1) for gap in gaps}
            for name, call in scripts.items()
        }
    finally:
        queue.close()
        server.stop()
    print(json.dumps({"calls": args.calls, "us_per_call": out}, indent=1))


if __name__ == "__main__":
    main()
