"""bullmq's (Python) adapter of the benchmark (``.bench/venvs/bullmq``); the protocol is in ``common.py``.

``enqueue`` is ``Queue.addBulk``, ``--chunk`` (1000) jobs per call, each with ``jobId``, ``delay`` and
``timestamp`` set so that timestamp + delay is the due time exactly (with ``--batches``, one call per
line of the file, the jobs of its JSON batch). ``worker`` is one ``Worker``
with ``--concurrency`` (100; bullmq's default is 1) and bullmq's other defaults.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

from bullmq import Queue, Worker
from common import (
    PAYLOAD,
    QUEUE_NAME,
    IdsWriter,
    Recorder,
    due_of,
    job_ids,
    now_ms,
    parser,
    read_batches,
    result,
    steady_plan,
)
from common import touch as touch_file

RECORDER = Recorder(None)
DEFAULT_CONCURRENCY = 100


def options(job_id: str, due_ms: int) -> dict[str, Any]:
    """timestamp + delay = due: bullmq delays a job from its timestamp."""
    timestamp = min(round(now_ms()), due_ms)
    return {"jobId": job_id, "timestamp": timestamp, "delay": due_ms - timestamp}


async def enqueue(args: Any) -> None:
    if args.batches:
        await enqueue_fed(args)
        return
    queue = Queue(QUEUE_NAME, {"connection": args.redis_url})
    ids = job_ids(args.prefix, args.jobs)
    due = due_of(args)
    chunk = args.chunk or 1000
    started = time.perf_counter()
    for start in range(0, len(ids), chunk):
        await queue.addBulk(
            [
                {"name": "noop", "data": {"body": PAYLOAD}, "opts": options(job_id, due)}
                for job_id in ids[start : start + chunk]
            ]
        )
    seconds = time.perf_counter() - started
    writer = IdsWriter(args.ids)
    for job_id in ids:
        writer.add(job_id, due)
    writer.close()
    await queue.close()
    result(jobs=args.jobs, seconds=seconds, chunk=chunk)


async def enqueue_fed(args: Any) -> None:
    """``enqueue --batches``: each line parsed and handed to one ``addBulk`` call."""
    queue = Queue(QUEUE_NAME, {"connection": args.redis_url})
    lines = read_batches(args.batches)
    jobs = 0
    started = time.perf_counter()
    for line in lines:
        batch = json.loads(line)["jobs"]
        await queue.addBulk(
            [
                {"name": "noop", "data": {"body": job["body"]}, "opts": options(job["id"], round(job["run_at"] * 1000))}
                for job in batch
            ]
        )
        jobs += len(batch)
    seconds = time.perf_counter() - started
    await queue.close()
    result(jobs=jobs, seconds=seconds, chunk=jobs // max(len(lines), 1))


async def produce_steady(args: Any) -> None:
    queue = Queue(QUEUE_NAME, {"connection": args.redis_url})
    delays = steady_plan(args.rate, args.seconds, args.min_delay, args.max_delay, args.seed)
    writer = IdsWriter(args.ids)
    started = time.monotonic()
    behind = 0.0
    for i in range(len(delays)):
        wait = started + i / args.rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        behind = max(behind, -wait)
        job_id = f"{args.prefix}{i}"
        due = round(now_ms() + delays[i])
        await queue.add("noop", {"body": PAYLOAD}, options(job_id, due))
        writer.add(job_id, due)
    writer.close()
    await queue.close()
    result(jobs=len(delays), seconds=time.monotonic() - started, max_behind_s=behind)


async def worker(args: Any) -> None:
    RECORDER.path = args.out

    async def process(job: Any, token: str) -> None:
        RECORDER.record(job.id)

    instance = Worker(QUEUE_NAME, process, {"connection": args.redis_url, "concurrency": args.concurrency})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    touch_file(args.ready)
    await stop.wait()
    await instance.close()


def main() -> None:
    top, _, subs = parser(__doc__.split("\n\n")[0])
    subs["worker"].add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    args = top.parse_args()
    asyncio.run({"enqueue": enqueue, "produce-steady": produce_steady, "worker": worker}[args.command](args))


if __name__ == "__main__":
    main()
