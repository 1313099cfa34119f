"""arq's adapter of the benchmark (``.bench/venvs/arq``); the protocol is in ``common.py``.

arq has no bulk enqueue: ``enqueue`` runs ``enqueue_job(..., _job_id=id, _defer_until=due)``
concurrently, ``--chunk`` (1000) at a time on one pool, which is as close to a bulk call as arq gets.
``worker`` is arq's ``Worker`` with ``--max-jobs`` (100; arq's default is 10) and ``--poll-delay``
(arq's default, 0.5 s, unless given): arq polls the queue's sorted set for due jobs at that interval.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker, func
from common import PAYLOAD, QUEUE_NAME, IdsWriter, Recorder, due_of, job_ids, now_ms, parser, result, steady_plan
from common import touch as touch_file

RECORDER = Recorder(None)
DEFAULT_MAX_JOBS = 100


async def noop(ctx: dict[str, Any], payload: str) -> None:
    RECORDER.record(ctx["job_id"])


def when(due_ms: float) -> datetime:
    return datetime.fromtimestamp(due_ms / 1000, tz=UTC)


async def enqueue(args: Any) -> None:
    pool = await create_pool(RedisSettings.from_dsn(args.redis_url), default_queue_name=QUEUE_NAME)
    ids = job_ids(args.prefix, args.jobs)
    due = due_of(args)
    chunk = args.chunk or 1000
    started = time.perf_counter()
    for start in range(0, len(ids), chunk):
        jobs = await asyncio.gather(
            *(
                pool.enqueue_job("noop", PAYLOAD, _job_id=job_id, _defer_until=when(due))
                for job_id in ids[start : start + chunk]
            )
        )
        if not all(jobs):
            raise SystemExit("arq refused a job (an id that exists)")
    seconds = time.perf_counter() - started
    writer = IdsWriter(args.ids)
    for job_id in ids:
        writer.add(job_id, due)
    writer.close()
    await pool.aclose()
    result(jobs=args.jobs, seconds=seconds, chunk=chunk)


async def produce_steady(args: Any) -> None:
    pool = await create_pool(RedisSettings.from_dsn(args.redis_url), default_queue_name=QUEUE_NAME)
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
        await pool.enqueue_job("noop", PAYLOAD, _job_id=job_id, _defer_until=when(due))
        writer.add(job_id, due)
    writer.close()
    await pool.aclose()
    result(jobs=len(delays), seconds=time.monotonic() - started, max_behind_s=behind)


def worker(args: Any) -> None:
    RECORDER.path = args.out
    options: dict[str, Any] = {"max_jobs": args.max_jobs}
    if args.poll_delay is not None:
        options["poll_delay"] = args.poll_delay

    async def startup(ctx: dict[str, Any]) -> None:
        touch_file(args.ready)

    Worker(
        functions=[func(noop, name="noop")],
        queue_name=QUEUE_NAME,
        redis_settings=RedisSettings.from_dsn(args.redis_url),
        on_startup=startup,
        **options,
    ).run()  # arq handles SIGTERM and SIGINT: it stops taking jobs and lets the running ones finish


def main() -> None:
    top, _, subs = parser(__doc__.split("\n\n")[0])
    subs["worker"].add_argument("--max-jobs", type=int, default=DEFAULT_MAX_JOBS)
    subs["worker"].add_argument("--poll-delay", type=float, help="seconds (arq's default: 0.5)")
    args = top.parse_args()
    if args.command == "enqueue":
        asyncio.run(enqueue(args))
    elif args.command == "produce-steady":
        asyncio.run(produce_steady(args))
    else:
        worker(args)


if __name__ == "__main__":
    main()
