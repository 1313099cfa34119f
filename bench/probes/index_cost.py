"""What the topic index adds to the hot path: Redis commands and script time per enqueue,
per take and per ack, on a private redis-server, for the delayq of a checkout.

    .venv/bin/python bench/probes/index_cost.py                          # this checkout's functions/
    .venv/bin/python bench/probes/index_cost.py --functions ../main/functions

One topic: ``--calls`` enqueues of one delayed job each; then as many jobs made ready, taken one per
take, then acknowledged one per ack (receipts kept, as by default). Commands are those Redis counts
(inside Lua scripts too); script time is ``evalsha``'s in ``INFO commandstats``. Each case runs
``--rounds`` times on a flushed server and the medians are printed as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--functions", type=Path, default=BENCH.parent / "functions", help="whose delayq")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(BENCH))  # for shared/
    sys.path.insert(0, str(args.functions.resolve()))
    from shared.servers import PrivateRedis  # noqa: PLC0415

    import delayq  # noqa: PLC0415
    import delayq.store.calls  # noqa: PLC0415

    server = PrivateRedis()
    try:
        rounds = [one_round(server, delayq, args.calls) for _ in range(args.rounds)]
    finally:
        server.stop()
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(json.dumps({"functions": str(args.functions), "calls": args.calls, **medians}, indent=1))


def counters(server: Any) -> tuple[int, float]:
    info = server.client.info("everything")
    return int(info["total_commands_processed"]), float(info.get("cmdstat_evalsha", {}).get("usec", 0))


def one_round(server: Any, delayq: Any, n: int) -> dict[str, float]:
    """One round on a flushed server: the cost per call of each step, by ``delayq`` (the module)."""
    server.flush()
    calls = delayq.store.calls
    topics = delayq.Topics.parse({"t": {"target": "python:os:getcwd"}})
    settings = delayq.Settings(redis_url=server.url, topics=topics)
    queue = delayq.Queue(settings=settings)
    partition = queue.keys.partitions[0]
    queue.enqueue("t", {}, id="warm", delay=60)  # scripts cached, connection open
    out: dict[str, float] = {}

    def measure(name: str, step: Any) -> Any:
        commands, usec = counters(server)
        results = [step(i) for i in range(n)]
        after_commands, after_usec = counters(server)
        out[f"{name}_commands"] = (after_commands - commands - 1) / n  # less the INFO
        out[f"{name}_script_us"] = (after_usec - usec) / n
        return results

    measure("enqueue", lambda i: queue.enqueue("t", {}, id=f"d{i}", delay=60))
    queue.enqueue_many([{"topic": "t", "id": f"r{i}", "delay": 0} for i in range(n)])
    config = settings.topics["t"]
    taken = measure(
        "take",
        lambda i: calls.take(partition, "t", count=1, timeout_ms=30_000, grace_ms=2000, longest_ms=-1, run_ms=-1).run(
            queue.redis
        ),
    )
    leases = [(lease.job.id, lease.token) for reply in taken for lease in reply.leases]
    measure("ack", lambda i: calls.ack(partition, "t", config, [(*leases[i], 0)]).run(queue.redis))
    queue.close()
    return out


if __name__ == "__main__":
    main()
