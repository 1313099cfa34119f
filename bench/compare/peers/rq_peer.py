"""rq's adapter of the benchmark (``.bench/venvs/rq``); the protocol is in ``common.py``.

rq's ``Queue.enqueue_many`` cannot schedule, so ``enqueue`` sends ``Queue.enqueue_at(due, ...)`` for
``--chunk`` (1000) jobs at a time through one pipeline (``pipeline=``, rq's own argument): one round
trip per chunk, the closest rq has to a bulk scheduled enqueue. rq keeps the scheduled time in whole
seconds (its scheduled registry's score), so it may start a job up to a second before it is due.

``worker`` is rq's default ``Worker`` (a fork per job) with its scheduler (``with_scheduler=True``,
which polls the scheduled registry every second); ``--worker-class simple`` runs ``SimpleWorker``
(no fork) instead.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from common import PAYLOAD, QUEUE_NAME, IdsWriter, Recorder, due_of, job_ids, now_ms, paced, parser, result, steady_plan
from common import touch as touch_file
from redis import Redis
from rq import Queue, SimpleWorker, Worker

RECORDER = Recorder(None)  # the job runs in the worker's fork: the path comes from BENCH_OUT
FUNC = "rq_peer.noop"


def noop(job_id: str, payload: str) -> None:
    RECORDER.record(job_id)


def when(due_ms: float) -> datetime:
    return datetime.fromtimestamp(due_ms / 1000, tz=UTC)


def enqueue(args: Any) -> None:
    redis = Redis.from_url(args.redis_url)
    queue = Queue(QUEUE_NAME, connection=redis)
    ids = job_ids(args.prefix, args.jobs)
    due = due_of(args)
    chunk = args.chunk or 1000
    started = time.perf_counter()
    for start in range(0, len(ids), chunk):
        with redis.pipeline() as pipe:
            for job_id in ids[start : start + chunk]:
                queue.enqueue_at(when(due), FUNC, job_id, PAYLOAD, job_id=job_id, pipeline=pipe)
            pipe.execute()
    seconds = time.perf_counter() - started
    writer = IdsWriter(args.ids)
    for job_id in ids:
        writer.add(job_id, due)
    writer.close()
    result(jobs=args.jobs, seconds=seconds, chunk=chunk)


def produce_steady(args: Any) -> None:
    redis = Redis.from_url(args.redis_url)
    queue = Queue(QUEUE_NAME, connection=redis)
    delays = steady_plan(args.rate, args.seconds, args.min_delay, args.max_delay, args.seed)
    writer = IdsWriter(args.ids)
    started = time.monotonic()
    behind = 0.0
    for i in paced(len(delays), args.rate):
        behind = max(behind, time.monotonic() - (started + i / args.rate))
        job_id = f"{args.prefix}{i}"
        due = round(now_ms() + delays[i])
        queue.enqueue_at(when(due), FUNC, job_id, PAYLOAD, job_id=job_id)
        writer.add(job_id, due)
    writer.close()
    result(jobs=len(delays), seconds=time.monotonic() - started, max_behind_s=behind)


def worker(args: Any) -> None:
    os.environ["BENCH_OUT"] = args.out
    redis = Redis.from_url(args.redis_url)
    cls = SimpleWorker if args.worker_class == "simple" else Worker
    instance = cls([Queue(QUEUE_NAME, connection=redis)], connection=redis)
    touch_file(args.ready)
    instance.work(with_scheduler=True, logging_level="WARNING")  # rq handles SIGTERM: a warm shutdown


def main() -> None:
    top, _, subs = parser(__doc__.split("\n\n")[0])
    subs["worker"].add_argument("--worker-class", choices=["default", "simple"], default="default")
    args = top.parse_args()
    {"enqueue": enqueue, "produce-steady": produce_steady, "worker": worker}[args.command](args)


if __name__ == "__main__":
    main()
