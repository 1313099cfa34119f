"""delayq's adapter of the benchmark (the project's own .venv). The protocol is in ``common.py``;
delayq adds:

    enqueue-api --jobs N --due-ms T   the same bulk enqueue through the API handler, in process:
                                      ``functions/enqueue.py``'s ``lambda_handler`` with API Gateway
                                      POST /jobs/batch events of 1000 jobs
    sweep-rate --jobs N               N jobs fall due, then one sweep pass (one sweeper, as
                                      ``python -m delayq sweep`` runs it) moves them: jobs moved per s
    sweeper                           the sweep loop alone (``worker`` starts it as a child process)

``worker`` is one consume process (a ``Consumer`` with a no-op ``python:`` target, run as
``python -m delayq consume`` runs it) plus one sweep process: the sweeper is part of the system.
``--concurrency`` and ``--batch`` set the topic's knobs (defaults: delayq's, 8 and 100).

Round trips to Redis are counted at the client: every request, or pipeline, that redis-py sends on a
connection (``send_packed_command``) is one. Each process reports its count (``--stats FILE``).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis.connection
from common import (
    PAYLOAD,
    QUEUE_NAME,
    IdsWriter,
    Recorder,
    due_of,
    job_ids,
    now_ms,
    paced,
    parser,
    read_batches,
    result,
    steady_plan,
    stop_on_sigterm,
    touch,
)

import delayq
from delayq import EnqueueResult, Job, Queue, Scheduled, Settings, Topics

try:  # the layered package; a checkout from before it (``--compare``) has its modules at the top
    from delayq.core.loop import Budget
    from delayq.loops.consumer import Consumer
    from delayq.loops.sweeper import Sweeper
except ImportError:
    from delayq.consumer import Consumer  # type: ignore[import-not-found, no-redef]
    from delayq.loop import Budget  # type: ignore[import-not-found, no-redef]
    from delayq.sweeper import Sweeper  # type: ignore[import-not-found, no-redef]

REPO = Path(__file__).resolve().parents[3]
# The sweeper leaves a job just due to the consumers this long (older engines: not at all).
SWEEP_LAG_S = getattr(sys.modules[Sweeper.__module__], "SWEEP_LAG_MS", 0) / 1000
FUNCTIONS = Path(delayq.__file__).resolve().parents[1]  # the checkout measured (PYTHONPATH), maybe not REPO's
API_BATCH = 1000  # jobs per POST /jobs/batch: the API's limit

# ------------------------------------------------------------------------------ round-trip counter

ROUND_TRIPS = [0]
_send_packed = redis.connection.AbstractConnection.send_packed_command


def _counting_send_packed(self: Any, command: Any, check_health: bool = True) -> None:
    ROUND_TRIPS[0] += 1
    _send_packed(self, command, check_health)


redis.connection.AbstractConnection.send_packed_command = _counting_send_packed  # type: ignore[method-assign]


def write_stats(path: str | None, **extra: Any) -> None:
    if path:
        Path(path).write_text(json.dumps({"round_trips": ROUND_TRIPS[0], **extra}))


# ------------------------------------------------------------------------------ the system

RECORDER = Recorder(None)


def record(job: Job) -> None:
    """The benchmark's handler: notes that it started, nothing else."""
    RECORDER.record(job.id)


def topics_config(concurrency: int | None = None, batch: int | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"target": "python:__main__:record"}
    if concurrency is not None:
        config["concurrency"] = concurrency
    if batch is not None:
        config["batch"] = batch
    return {QUEUE_NAME: config}


def make_queue(url: str, concurrency: int | None = None, batch: int | None = None) -> Queue:
    settings = Settings.from_env(redis_url=url, topics=Topics.parse(topics_config(concurrency, batch)))
    return Queue(settings)


def job_dicts(ids: list[str], due_ms: float) -> list[dict[str, Any]]:
    return [{"topic": QUEUE_NAME, "id": job_id, "body": PAYLOAD, "run_at": due_ms / 1000} for job_id in ids]


def check(answers: list[tuple[int, Any]], ids: list[str], writer: IdsWriter) -> None:
    """Each job's answer as (status, run-at ms when created, else the answer): every one a 201."""
    refused = [answer for status, answer in answers if status != 201]
    if refused:
        raise SystemExit(f"{len(refused)} jobs refused, the first: {refused[0]}")
    for job_id, (_, run_at_ms) in zip(ids, answers, strict=True):
        writer.add(job_id, run_at_ms)


def cmd_enqueue(args: Any) -> None:
    if args.batches:
        enqueue_fed(args)
        return
    queue = make_queue(args.redis_url)
    ids = job_ids(args.prefix, args.jobs)
    jobs = job_dicts(ids, due_of(args))
    queue.ping()
    before = ROUND_TRIPS[0]
    started = time.perf_counter()
    chunk = args.chunk or len(jobs)  # default: one call, which writes 1000 jobs per Lua call, 16 per round trip
    results: list[EnqueueResult] = []
    for start in range(0, len(jobs), chunk):
        results += queue.enqueue_many(jobs[start : start + chunk])
    seconds = time.perf_counter() - started
    writer = IdsWriter(args.ids)
    check([(r.status, r.run_at_ms if isinstance(r, Scheduled) else r) for r in results], ids, writer)
    writer.close()
    result(jobs=args.jobs, seconds=seconds, round_trips=ROUND_TRIPS[0] - before, chunk=chunk)


def enqueue_fed(args: Any) -> None:
    """``enqueue --batches``: each line parsed and handed to one ``Queue.enqueue_many`` call (one Lua call)."""
    queue = make_queue(args.redis_url)
    lines = read_batches(args.batches)
    queue.ping()
    before = ROUND_TRIPS[0]
    jobs = refused = 0
    started = time.perf_counter()
    for line in lines:
        results = queue.enqueue_many(json.loads(line)["jobs"])
        jobs += len(results)
        refused += sum(1 for r in results if r.status != 201)
    seconds = time.perf_counter() - started
    if refused:
        raise SystemExit(f"{refused} jobs refused")
    result(jobs=jobs, seconds=seconds, round_trips=ROUND_TRIPS[0] - before, chunk=jobs // max(len(lines), 1))


class _Context:
    """The part of a Lambda context the handler reads."""

    function_name = "delayq-bench-enqueue"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:delayq-bench-enqueue"
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def api_event(path: str, body: Any) -> dict[str, Any]:
    """An API Gateway REST proxy event built on ``events/api/post_jobs.json`` (as tests/conftest.py does)."""
    event: dict[str, Any] = copy.deepcopy(json.loads((REPO / "events/api/post_jobs.json").read_text()))
    event["path"] = path
    event["resource"] = "/{proxy+}"
    event["pathParameters"] = {"proxy": path.lstrip("/")}
    event["requestContext"]["path"] = "/prod" + path
    event["body"] = json.dumps(body)
    return event


def cmd_enqueue_api(args: Any) -> None:
    os.environ["DELAYQ_REDIS_URL"] = args.redis_url
    os.environ["DELAYQ_TOPICS"] = json.dumps(topics_config())
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "1")
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "delayq-bench")
    sys.path.insert(0, str(FUNCTIONS))
    import enqueue  # noqa: PLC0415 - reads the environment set above

    ids = job_ids(args.prefix, args.jobs)
    jobs = job_dicts(ids, due_of(args))
    events = [api_event("/jobs/batch", {"jobs": jobs[i : i + API_BATCH]}) for i in range(0, len(jobs), API_BATCH)]
    context = _Context()
    health = enqueue.lambda_handler(api_event("/health", None) | {"httpMethod": "GET", "body": None}, context)
    if health["statusCode"] != 200:
        raise SystemExit(f"GET /health answered {health}")
    before = ROUND_TRIPS[0]
    started = time.perf_counter()
    answers = [enqueue.lambda_handler(event, context) for event in events]
    seconds = time.perf_counter() - started
    results: list[dict[str, Any]] = []
    for answer in answers:
        if answer["statusCode"] != 200:
            raise SystemExit(f"POST /jobs/batch answered {answer['statusCode']}: {answer.get('body', '')[:500]}")
        results += json.loads(answer["body"])["results"]
    writer = IdsWriter(args.ids)
    check([(r["status"], r.get("run_at_ms", r)) for r in results], ids, writer)
    writer.close()
    result(jobs=args.jobs, seconds=seconds, round_trips=ROUND_TRIPS[0] - before, requests=len(events))


def cmd_worker(args: Any) -> None:
    """One sweep process and ``--consumers`` consume processes (this one and the others it starts),
    as ``python -m delayq sweep`` and ``python -m delayq consume`` would run them side by side."""
    RECORDER.path = args.out
    queue = make_queue(args.redis_url, args.concurrency, args.batch)
    queue.ping()

    def child(name: str, *command: str) -> subprocess.Popen[bytes]:
        stats = ["--stats", f"{args.stats}.{name}"] if args.stats else []
        return subprocess.Popen([sys.executable, __file__, "--redis-url", args.redis_url, *stats, *command])

    knobs = [f"--{knob}={value}" for knob, value in (("concurrency", args.concurrency), ("batch", args.batch)) if value]
    readies = [f"{args.ready or args.out}.consumer{k}" for k in range(1, args.consumers)]
    children = [] if args.consume_only else [child("sweeper", "sweeper")]
    children += [
        child(f"consumer{k}", "worker", "--consume-only", "--out", args.out, "--ready", ready, *knobs)
        for k, ready in enumerate(readies, start=1)
    ]
    consumer = Consumer(queue)
    stop_on_sigterm(consumer.stop.set)
    while not all(Path(ready).exists() for ready in readies):
        time.sleep(0.01)
    touch(args.ready)
    try:
        summary = consumer.run(Budget.forever())
    finally:
        for process in children:
            process.terminate()
        for process in children:
            process.wait(30)
    write_stats(args.stats, consumer=summary)


def cmd_sweeper(args: Any) -> None:
    sweeper = Sweeper(make_queue(args.redis_url))
    stop_on_sigterm(sweeper.stop.set)
    summary = sweeper.run(Budget.forever())
    write_stats(args.stats, sweeper=summary)


def cmd_sweep_rate(args: Any) -> None:
    queue = make_queue(args.redis_url)
    ids = job_ids(args.prefix, args.jobs)
    due = now_ms() + args.lead_s * 1000
    results = queue.enqueue_many(job_dicts(ids, due))
    assert all(r.status == 201 for r in results), results[:3]
    if now_ms() > due:
        raise SystemExit("the jobs fell due before they were all enqueued: raise --lead-s")
    time.sleep((due - now_ms()) / 1000 + SWEEP_LAG_S + 0.05)  # due, and the sweeper's to move
    before = ROUND_TRIPS[0]
    started = time.perf_counter()
    summary = Sweeper(queue).run(Budget.of(0))
    seconds = time.perf_counter() - started
    stats = queue.stats(QUEUE_NAME)
    result(
        jobs=args.jobs,
        moved=summary["moved"],
        seconds=seconds,
        round_trips=ROUND_TRIPS[0] - before,
        ready_after=stats.ready,
        delayed_after=stats.delayed,
    )


def cmd_produce_steady(args: Any) -> None:
    queue = make_queue(args.redis_url)
    queue.ping()
    delays = steady_plan(args.rate, args.seconds, args.min_delay, args.max_delay, args.seed)
    writer = IdsWriter(args.ids)
    behind = 0.0
    started = time.monotonic()
    for i in paced(len(delays), args.rate):
        behind = max(behind, time.monotonic() - (started + i / args.rate))
        job_id = f"{args.prefix}{i}"
        scheduled = queue.enqueue(QUEUE_NAME, PAYLOAD, id=job_id, run_at=round(now_ms() + delays[i]) / 1000)
        writer.add(job_id, scheduled.run_at_ms)
    writer.close()
    result(jobs=len(delays), seconds=time.monotonic() - started, max_behind_s=behind, round_trips=ROUND_TRIPS[0])


def main() -> None:
    top, commands, subs = parser(__doc__.split("\n\n")[0])
    top.add_argument("--stats", help="write this process's round-trip count here at exit")
    subs["worker"].add_argument("--concurrency", type=int, help="the topic's concurrency (delayq's default: 8)")
    subs["worker"].add_argument("--batch", type=int, help="the topic's batch (delayq's default: 100)")
    subs["worker"].add_argument("--consumers", type=int, default=1, help="consume processes (1)")
    subs["worker"].add_argument("--consume-only", action="store_true", help="no sweep process (another runs it)")
    api = commands.add_parser("enqueue-api", help="bulk enqueue through the API handler (POST /jobs/batch)")
    api.add_argument("--jobs", type=int, required=True)
    api.add_argument("--due-ms", type=float)
    api.add_argument("--delay-s", type=float, default=3600)
    api.add_argument("--prefix", default="a")
    api.add_argument("--ids")
    rate = commands.add_parser("sweep-rate", help="N jobs fall due; one sweep pass moves them")
    rate.add_argument("--jobs", type=int, required=True)
    rate.add_argument("--lead-s", type=float, default=5)
    rate.add_argument("--prefix", default="w")
    commands.add_parser("sweeper", help="the sweep loop alone")
    args = top.parse_args()
    {
        "enqueue": cmd_enqueue,
        "enqueue-api": cmd_enqueue_api,
        "worker": cmd_worker,
        "sweeper": cmd_sweeper,
        "sweep-rate": cmd_sweep_rate,
        "produce-steady": cmd_produce_steady,
    }[args.command](args)


if __name__ == "__main__":
    main()
