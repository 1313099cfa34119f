"""The flow keys run's producers. ``run.py`` runs them with one side's delayq (its ``functions/`` first
on PYTHONPATH) and its ``DELAYQ_*`` settings:

    producers.py seed --topic T --ids FILE                     one job without a key, due now
    producers.py backlog --topic T --jobs N --key K --at MS --ids FILE
                                                               N jobs of key K, all due at epoch ms MS
    producers.py steady --topic T --rate R --seconds S --min-delay A --max-delay B [--keys N]
                        [--key-prefix P] [--start-at MS] --ids FILE
                                                               R jobs/s, each due A-B s after it is sent
    producers.py fill --topic T --jobs N --first F [--distinct-keys]
                                                               N jobs due in a day, each of a key of its own

``steady``'s job i has no key with ``--keys 0``, the key P with ``--keys 1``, else the key P{i % N}.
``--ids`` gets one ``{"id", "due_ms"}`` line per job (the due time Redis answered). Each command
prints one JSON line: what it did.
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
FAR_S = 86_400  # a filled job falls due in a day: never within a run
CHUNK = 10_000  # jobs per enqueue_many call (it writes them 250 per Lua call)


def written(answers: list[Any]) -> list[tuple[str, int]]:
    """(id, due ms) of each job written; exits on the first job refused."""
    for answer in answers:
        if answer.status != 201:
            raise SystemExit(f"a job was refused: {answer}")
    return [(answer.id, answer.run_at_ms) for answer in answers]


def write_ids(path: str, jobs: list[tuple[str, int]]) -> None:
    with open(path, "w") as out:
        out.writelines(f'{{"id":"{job_id}","due_ms":{due_ms}}}\n' for job_id, due_ms in jobs)


def key_of(i: int, keys: int, prefix: str) -> str | None:
    if keys == 0:
        return None
    return prefix if keys == 1 else f"{prefix}{i % keys}"


def seed(queue: Queue, args: argparse.Namespace) -> dict[str, Any]:
    write_ids(args.ids, written(queue.enqueue_many([{"topic": args.topic, "id": "seed", "body": BODY}])))
    return {"jobs": 1}


def backlog(queue: Queue, args: argparse.Namespace) -> dict[str, Any]:
    """``--jobs`` jobs of one key, all due at the same instant ``--at``, ``CHUNK`` a call."""
    started, jobs = time.perf_counter(), []
    for first in range(0, args.jobs, CHUNK):
        chunk = [{"topic": args.topic, "id": f"a{i}", "body": BODY, "run_at": args.at / 1000, "key": args.key}
                 for i in range(first, min(args.jobs, first + CHUNK))]  # fmt: skip
        jobs += written(queue.enqueue_many(chunk))
    write_ids(args.ids, jobs)
    return {"jobs": len(jobs), "seconds": time.perf_counter() - started, "ended_ms": time.time() * 1000}


def steady(queue: Queue, args: argparse.Namespace) -> dict[str, Any]:
    """Sends job i at ``--start-at`` + i / rate, one ``Queue.enqueue`` call each."""
    rng = random.Random(17)
    total = round(args.rate * args.seconds)
    if args.start_at:
        time.sleep(max(0.0, args.start_at / 1000 - time.time()))
    jobs: list[tuple[str, int]] = []
    behind = 0.0
    started = time.monotonic()
    for i in range(total):
        due = started + i / args.rate
        now = time.monotonic()
        if now < due:
            time.sleep(due - now)
        behind = max(behind, now - due)
        delay = round(rng.uniform(args.min_delay, args.max_delay), 3)
        key = key_of(i, args.keys, args.key_prefix)
        scheduled = queue.enqueue(args.topic, BODY, id=f"{args.id_prefix}{i}", delay=delay, key=key)
        jobs.append((scheduled.id, scheduled.run_at_ms))
    write_ids(args.ids, jobs)
    return {"jobs": total, "seconds": time.monotonic() - started, "max_behind_s": behind}


def fill(queue: Queue, args: argparse.Namespace) -> dict[str, Any]:
    """Jobs ``m{first}`` .. due in a day, each of the key ``m{i}`` with ``--distinct-keys``, else of none."""
    started = time.perf_counter()
    for first in range(args.first, args.first + args.jobs, CHUNK):
        chunk = [{"topic": args.topic, "id": f"m{i}", "body": BODY, "delay": FAR_S}
                 for i in range(first, min(args.first + args.jobs, first + CHUNK))]  # fmt: skip
        if args.distinct_keys:
            for job in chunk:
                job["key"] = job["id"]
        written(queue.enqueue_many(chunk))
    return {"jobs": args.jobs, "seconds": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("seed", "backlog", "steady", "fill"):
        command = commands.add_parser(name)
        command.add_argument("--topic", required=True)
        if name != "fill":
            command.add_argument("--ids", required=True)
    commands.choices["backlog"].add_argument("--jobs", type=int, required=True)
    commands.choices["backlog"].add_argument("--key", required=True)
    commands.choices["backlog"].add_argument("--at", type=float, required=True, help="epoch ms")
    run = commands.choices["steady"]
    for option in ("--rate", "--seconds", "--min-delay", "--max-delay"):
        run.add_argument(option, type=float, required=True)
    run.add_argument("--keys", type=int, default=0)
    run.add_argument("--key-prefix", default="k")
    run.add_argument("--id-prefix", default="s")
    run.add_argument("--start-at", type=float, default=0, help="epoch ms (0: now)")
    commands.choices["fill"].add_argument("--jobs", type=int, required=True)
    commands.choices["fill"].add_argument("--first", type=int, default=0)
    commands.choices["fill"].add_argument("--distinct-keys", action="store_true")
    args = parser.parse_args(argv)
    queue = Queue.from_env()
    answer = {"seed": seed, "backlog": backlog, "steady": steady, "fill": fill}[args.command](queue, args)
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
