"""What receipts cost Redis: CPU per job with receipts on (the default) against off (``keep_done: 0``),
and memory per receipt.

    .venv/bin/python bench/receipts_cost.py [--jobs 20000] [--rounds 3] [--receipts 100000]

On a private redis-server (``bench/redis_server.py``: nothing else runs on it, so its ``INFO`` is
ours alone):

- CPU: per round and mode, in a fresh namespace, one consume process (as ``python -m delayq
  consume`` runs it, no-op handler) first drains ``keep_done_max`` jobs unmeasured, so that receipts
  on are at their cap as in a steady state (every ack then also forgets as many as it adds), then the
  measured part: ``--jobs`` jobs enqueued due now (``enqueue_many``) and drained to the last ack.
  Redis CPU (``used_cpu_user + used_cpu_sys``) and the scripts' own time (``cmdstat_evalsha``) over
  the measured part, per job. The modes alternate, round after round; the median round of each is
  compared.
- Memory: ``--receipts`` jobs (ids generated, 24 characters) created, taken and acknowledged with
  receipts kept (``keep_done_max`` raised to hold them all), through the product's scripts;
  ``used_memory`` before the jobs and after the acks, per receipt.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from typing import Any

from redis_server import PrivateRedis

from delayq import Job, Queue, Settings, Topics, calls
from delayq.consumer import Consumer
from delayq.loop import Budget

KEEP_MAX = 10_000  # the default keep_done_max
STARTED = threading.Semaphore(0)


def record(job: Job) -> None:
    """The no-op handler."""
    STARTED.release()


def drain(queue: Queue, jobs: int, rate: float | None = None) -> None:
    """``jobs`` jobs enqueued due now (all at once, or ``rate`` a second in batches of ``BATCH``) and
    consumed by one consumer to the last ack."""
    if rate is None:
        results = queue.enqueue_many({"topic": "t", "body": {"pad": "x" * 90}, "delay": 0} for _ in range(jobs))
        assert all(r.status == 201 for r in results), results[:3]
    else:
        threading.Thread(target=produce, args=(queue, jobs, rate), daemon=True).start()
    worker = Consumer(queue)

    def stop_when_all_started() -> None:
        for _ in range(jobs):
            STARTED.acquire()
        worker.request_stop()

    threading.Thread(target=stop_when_all_started, daemon=True).start()
    worker.run(Budget.forever())
    assert worker.counts["acked"] == jobs, worker.summary()


BATCH = 50  # jobs per enqueue_many of the steady load


def produce(queue: Queue, jobs: int, rate: float) -> None:
    """``jobs`` jobs, ``rate`` a second, in batches of ``BATCH`` due now."""
    began = time.monotonic()
    for sent in range(0, jobs, BATCH):
        wait = began + sent / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        queue.enqueue_many(
            {"topic": "t", "body": {"pad": "x" * 90}, "delay": 0} for _ in range(min(BATCH, jobs - sent))
        )


def cpu_round(server: PrivateRedis, keep: bool, jobs: int, rate: float) -> dict[str, float]:
    topics = {"t": {"target": "python:__main__:record", "concurrency": 100, "batch": 500}}
    if not keep:
        topics["t"]["keep_done"] = 0
    namespace = f"receipts-{uuid.uuid4().hex[:8]}"
    queue = Queue(Settings(redis_url=server.url, namespace=namespace, topics=Topics.parse(topics)))
    try:
        drain(queue, KEEP_MAX)  # receipts at their cap: the steady state
        assert queue.stats("t").done == (KEEP_MAX if keep else 0)
        drain(queue, KEEP_MAX // 10)  # and cut back in chunks since
        before = server.client.info("everything")
        drain(queue, jobs, rate or None)
        after = server.client.info("everything")
        done = queue.stats("t").done
        assert KEEP_MAX - 64 <= done <= KEEP_MAX if keep else done == 0, done
    finally:
        queue.close()
        server.flush()

    def d(key: str) -> float:
        return float(after[key]) - float(before[key])

    scripts_us = after["cmdstat_evalsha"]["usec"] - before["cmdstat_evalsha"]["usec"]
    return {
        "cpu_us_per_job": (d("used_cpu_user") + d("used_cpu_sys")) * 1e6 / jobs,
        "sys_us_per_job": d("used_cpu_sys") * 1e6 / jobs,
        "scripts_us_per_job": scripts_us / jobs,
    }


def memory(server: PrivateRedis, receipts: int) -> dict[str, Any]:
    topics = {"t": {"target": "python:__main__:record", "keep_done_max": receipts}}
    namespace = "m"
    queue = Queue(Settings(redis_url=server.url, namespace=namespace, topics=Topics.parse(topics)))
    partition = queue.keys.partitions[0]
    config = queue.topic_config("t")
    try:
        queue.stats("t")  # the namespace's layout recorded, the scripts cached
        before = int(server.client.info("memory")["used_memory"])
        queue.enqueue_many({"topic": "t", "body": {"pad": "x" * 90}, "delay": 0} for _ in range(receipts))
        while True:
            taken = calls.take(partition, "t", count=1000, timeout_ms=600_000, grace_ms=0).run(queue.redis)
            if not taken.jobs:
                break
            leases = [(job.id, token, taken.now_ms) for job, token, _ in taken.leases]
            assert calls.ack(partition, "t", config, leases).run(queue.redis) == len(leases)
        assert queue.stats("t").done == receipts
        after = int(server.client.info("memory")["used_memory"])
        meta = queue.redis.hrandfield(partition.topic_keys("t")[4], 1, withvalues=True)
    finally:
        queue.close()
        server.flush()
    return {"bytes_per_receipt": (after - before) / receipts, "receipts": receipts, "example_meta": meta}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="measured jobs per round and mode")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--rate", type=float, default=4000, help="jobs enqueued a second, the steady load (0: all at once, a burst)"
    )
    parser.add_argument("--receipts", type=int, default=100_000, help="receipts for the memory figure (0: none)")
    args = parser.parse_args()
    server = PrivateRedis()
    try:
        runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for n in range(args.rounds):
            for keep in (False, True) if n % 2 == 0 else (True, False):
                runs[keep].append(cpu_round(server, keep, args.jobs, args.rate))
                print(f"round {n + 1}, receipts {'on ' if keep else 'off'}: {runs[keep][-1]}", flush=True)
        medians = {
            keep: {key: statistics.median(run[key] for run in found) for key in found[0]}
            for keep, found in runs.items()
            if found
        }
        for key in ("cpu_us_per_job", "sys_us_per_job", "scripts_us_per_job") if medians else ():
            paired = [on[key] - off[key] for on, off in zip(runs[True], runs[False], strict=True)]
            print(f"  {key}: on minus off, round by round: {', '.join(f'{d:+.2f}' for d in paired)}")
        print(f"Redis {server.version}, {args.jobs:,} jobs a round at {args.rate:g}/s, {args.rounds} rounds (medians):")
        for key in ("cpu_us_per_job", "sys_us_per_job", "scripts_us_per_job") if medians else ():
            off, on = medians[False][key], medians[True][key]
            print(f"  {key:20} receipts off {off:6.2f}  on {on:6.2f}  ({(on / off - 1) * 100:+.1f} %)")
        if args.receipts:
            found = memory(server, args.receipts)
            print(
                f"memory: {found['bytes_per_receipt']:.0f} bytes per receipt ({found['receipts']:,} receipts, "
                f"ids of 24 characters; a receipt's meta: {found['example_meta']})"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
