"""The scale run's producers. ``run.py`` runs them with one side's delayq (its ``functions/``
first on PYTHONPATH) and its ``DELAYQ_*`` settings:

    load.py fill --jobs N --first K --topics T     jobs bK.. due in a day over T topics: a backlog
    load.py seed --topics T --ids FILE             one job due now in each of T topics
    load.py steady --rate R --seconds S --topics T --min-delay 1 --max-delay 3 --max-batch B --ids FILE

Job i goes to topic ``t{i % T}``, every topic under ``*``. ``--ids`` gets one ``{"id", "due_ms"}``
line per job (the due time Redis answered). Each command prints one JSON line: what it did.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

from delayq import Queue

BODY = "x" * 100  # a 100-character body, as in the rest of the benchmark
BACKLOG_DELAY_S = 86_400  # far beyond any run: a backlog job never falls due
FILL_CHUNK = 10_000  # jobs per enqueue_many call of the fill (it writes them 250 per Lua call)


def topic(i: int, topics: int) -> str:
    return f"t{i % topics}"


def check(answers: list[Any]) -> list[tuple[str, int]]:
    """(id, due ms) of each job written; exits on the first job refused. An answer is a dict (older
    checkouts) or an object with ``status``, ``id`` and ``run_at_ms`` (``delayq.Scheduled``)."""
    plain = [answer if isinstance(answer, dict) else vars_of(answer) for answer in answers]
    for answer in plain:
        if answer["status"] != 201:
            raise SystemExit(f"a job was refused: {answer}")
    return [(a["id"], a["run_at_ms"]) for a in plain]


def vars_of(answer: Any) -> dict[str, Any]:
    return {"status": answer.status, "id": getattr(answer, "id", None), "run_at_ms": getattr(answer, "run_at_ms", 0)}


def write_ids(path: str, written: list[tuple[str, int]]) -> None:
    with open(path, "w") as out:
        out.writelines(f'{{"id":"{job_id}","due_ms":{due_ms}}}\n' for job_id, due_ms in written)


def fill(queue: Queue, args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    for start in range(args.first, args.first + args.jobs, FILL_CHUNK):
        end = min(start + FILL_CHUNK, args.first + args.jobs)
        jobs = [{"topic": topic(i, args.topics), "id": f"b{i}", "body": BODY, "delay": BACKLOG_DELAY_S}
                for i in range(start, end)]  # fmt: skip
        check(queue.enqueue_many(jobs))
    return {"jobs": args.jobs, "seconds": time.perf_counter() - started}


def seed(queue: Queue, args: argparse.Namespace) -> dict[str, Any]:
    jobs = [{"topic": topic(i, args.topics), "id": f"seed{i}", "body": BODY} for i in range(args.topics)]
    write_ids(args.ids, check(queue.enqueue_many(jobs)))
    return {"jobs": len(jobs)}


def steady(queue: Queue, args: argparse.Namespace) -> dict[str, Any]:
    """Sends each job when its time comes (job i at ``i / rate`` s): one ``Queue.enqueue`` call per job
    with ``--max-batch 1``, else one ``enqueue_many`` call for the jobs whose time has come (at most
    ``--max-batch``): a producer that cannot keep up one job at a time sends them in small batches."""
    rng = random.Random(17)
    total = round(args.rate * args.seconds)
    written: list[tuple[str, int]] = []
    calls, sent, behind = 0, 0, 0.0
    started = time.monotonic()
    while sent < total:
        now = time.monotonic()
        owed = min(total, int((now - started) * args.rate) + 1)  # jobs whose time has come
        if owed <= sent:
            time.sleep(max(0.0, started + sent / args.rate - now))
            continue
        behind = max(behind, now - (started + sent / args.rate))
        jobs = [{"topic": topic(i, args.topics), "id": f"s{i}", "body": BODY,
                 "delay": round(rng.uniform(args.min_delay, args.max_delay), 3)}
                for i in range(sent, min(owed, sent + args.max_batch))]  # fmt: skip
        if args.max_batch == 1:
            job = jobs[0]
            scheduled = queue.enqueue(job["topic"], BODY, id=job["id"], delay=job["delay"])
            written.append((scheduled.id, scheduled.run_at_ms))
        else:
            written += check(queue.enqueue_many(jobs))
        calls, sent = calls + 1, sent + len(jobs)
    write_ids(args.ids, written)
    seconds = time.monotonic() - started
    return {"jobs": sent, "seconds": seconds, "calls": calls, "max_behind_s": behind}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("fill", "seed", "steady"):
        command = commands.add_parser(name)
        command.add_argument("--topics", type=int, required=True)
        if name != "fill":
            command.add_argument("--ids", required=True)
    commands.choices["fill"].add_argument("--jobs", type=int, required=True)
    commands.choices["fill"].add_argument("--first", type=int, default=0)
    for option, kind in (("--rate", float), ("--seconds", float), ("--min-delay", float), ("--max-delay", float)):
        commands.choices["steady"].add_argument(option, type=kind, required=True)
    commands.choices["steady"].add_argument("--max-batch", type=int, default=1)
    args = parser.parse_args(argv)
    queue = Queue.from_env()
    answer = {"fill": fill, "seed": seed, "steady": steady}[args.command](queue, args)
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
