"""celery's adapter of the benchmark (``.bench/venvs/celery``), Redis as the broker, no result
backend; the protocol is in ``common.py``.

celery has no bulk send: ``enqueue`` calls ``apply_async(eta=due, task_id=id)`` once per job on one
producer connection. An ETA task is not delayed in Redis: it is in the queue's list at once, a worker
takes it straight away and holds it in its memory until its ETA (the Redis transport keeps a copy
in the ``unacked`` hash, redelivered after ``visibility_timeout``, one hour by default, if the worker
dies). ``worker`` is ``celery worker`` with its defaults: the prefork pool with as many children as
cores, the default prefetch multiplier (4; celery raises the prefetch limit for each ETA task it holds).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from celery import Celery, signals
from common import PAYLOAD, QUEUE_NAME, IdsWriter, Recorder, due_of, job_ids, now_ms, paced, parser, result, steady_plan
from common import touch as touch_file

RECORDER = Recorder(None)  # the task runs in a pool child: the path comes from BENCH_OUT
app = Celery("bench")
app.conf.update(
    task_default_queue=QUEUE_NAME,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.noop", bind=True)
def noop(self: Any, payload: str) -> None:
    RECORDER.record(self.request.id)


def when(due_ms: float) -> datetime:
    return datetime.fromtimestamp(due_ms / 1000, tz=UTC)


def enqueue(args: Any) -> None:
    ids = job_ids(args.prefix, args.jobs)
    due = due_of(args)
    eta = when(due)
    started = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for job_id in ids:
            noop.apply_async((PAYLOAD,), task_id=job_id, eta=eta, producer=producer)
    seconds = time.perf_counter() - started
    writer = IdsWriter(args.ids)
    for job_id in ids:
        writer.add(job_id, due)
    writer.close()
    result(jobs=args.jobs, seconds=seconds, chunk=1)


def produce_steady(args: Any) -> None:
    delays = steady_plan(args.rate, args.seconds, args.min_delay, args.max_delay, args.seed)
    writer = IdsWriter(args.ids)
    started = time.monotonic()
    behind = 0.0
    with app.producer_or_acquire() as producer:
        for i in paced(len(delays), args.rate):
            behind = max(behind, time.monotonic() - (started + i / args.rate))
            job_id = f"{args.prefix}{i}"
            due = round(now_ms() + delays[i])
            noop.apply_async((PAYLOAD,), task_id=job_id, eta=when(due), producer=producer)
            writer.add(job_id, due)
    writer.close()
    result(jobs=len(delays), seconds=time.monotonic() - started, max_behind_s=behind)


def worker(args: Any) -> None:
    os.environ["BENCH_OUT"] = args.out

    def ready(**_: Any) -> None:
        touch_file(args.ready)

    signals.worker_ready.connect(ready, weak=False)
    app.worker_main(
        ["worker", "--loglevel=WARNING", *(["--concurrency", str(args.concurrency)] * bool(args.concurrency))]
    )


def main() -> None:
    top, _, subs = parser(__doc__.split("\n\n")[0])
    subs["worker"].add_argument("--concurrency", type=int, help="pool children (celery's default: the cores)")
    args = top.parse_args()
    app.conf.broker_url = args.redis_url
    {"enqueue": enqueue, "produce-steady": produce_steady, "worker": worker}[args.command](args)


if __name__ == "__main__":
    main()
