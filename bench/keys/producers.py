"""The flow keys run's producers. ``run.py`` runs them with one side's delayq (its ``functions/`` first
on PYTHONPATH) and its ``DELAYQ_*`` settings:

    producers.py seed --topic T --ids FILE                     one job without a key, due now
    producers.py backlog --topic T --jobs N --key K [--keys N] [--id-prefix P] --at MS --ids FILE
                                                               N jobs of key K (of N keys K{i % N}),
                                                               all due at epoch ms MS
    producers.py steady --topic T --rate R --seconds S --min-delay A --max-delay B [--keys N]
                        [--key-prefix P] [--start-at MS] --ids FILE
                                                               R jobs/s, each due A-B s after it is sent
    producers.py fill --topic T --jobs N --first F [--distinct-keys | --key K] [--delay S]
                                                               N jobs due in a day (or in S s), each of a
                                                               key of its own, or all of key K
    producers.py set-key --topic T --key K [--concurrency C] [--rate R] [--burst B]
                                                               Queue.set_key: K's own limits
    producers.py takes --topic T --count N                     takes N jobs at a time, each partition in
                                                               turn, until none is due; each take acks
                                                               the jobs of the one before it

``takes`` calls take.lua as the consume loop does (``store.calls.take``, the topic's config and key
limits, the acks riding), without the loop, its handler and its clock: what ``run.py`` measures of
Redis around it is the takes' own cost.

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
from itertools import cycle
from typing import Any

from delayq import Queue
from delayq.store import calls

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
        chunk = [{"topic": args.topic, "id": f"{args.id_prefix}{i}", "body": BODY, "run_at": args.at / 1000,
                  "key": key_of(i, args.keys, args.key)}
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
    """Jobs ``m{first}`` .. due in a day (``--delay``), each of the key ``m{i}`` with ``--distinct-keys``,
    else of ``--key``, else of none."""
    started = time.perf_counter()
    for first in range(args.first, args.first + args.jobs, CHUNK):
        chunk = [{"topic": args.topic, "id": f"m{i}", "body": BODY, "delay": args.delay}
                 for i in range(first, min(args.first + args.jobs, first + CHUNK))]  # fmt: skip
        if args.distinct_keys or args.key:
            for job in chunk:
                job["key"] = job["id"] if args.distinct_keys else args.key
        written(queue.enqueue_many(chunk))
    return {"jobs": args.jobs, "seconds": time.perf_counter() - started}


def set_key(queue: Queue, args: argparse.Namespace) -> dict[str, Any]:
    """``--key``'s own limits, those given (the others the topic's)."""
    given = {name: getattr(args, name) for name in ("concurrency", "rate", "burst")}
    state = queue.set_key(args.topic, args.key, **{name: value for name, value in given.items() if value is not None})
    return state.to_dict()


def takes(queue: Queue, args: argparse.Namespace) -> dict[str, Any]:
    """Takes of ``--count`` jobs, the partitions in turn, each with the acks of the jobs its partition's
    take before it leased (as if their handlers had succeeded at once), until a take of every partition
    finds none; then the last acks. The takes, the jobs, and the time."""
    config = queue.settings.topics.for_topic(args.topic)
    if config is None:
        raise SystemExit(f"no config for the topic {args.topic}")
    partitions = queue.keys.partitions
    pending: dict[int, list[tuple[str, str, int]]] = {partition.index: [] for partition in partitions}
    share, limits = config.rate_share(len(partitions)), config.key_limits.shares(len(partitions))
    made = jobs = empty = 0
    started = time.perf_counter()
    for partition in cycle(partitions):
        call = calls.take(partition, args.topic, count=args.count, timeout_ms=config.timeout_ms, grace_ms=0,
                          take_id=f"t{made}", rate=share, acks=pending[partition.index], keeping=config,
                          key_limits=limits)  # fmt: skip
        taken = call.run(queue.redis)
        made += 1
        jobs += len(taken.jobs)
        pending[partition.index] = [
            (job.id, token, taken.now_ms) for job, token in zip(taken.jobs, taken.tokens, strict=True)
        ]
        empty = 0 if taken.jobs else empty + 1
        if empty == len(partitions):
            break
    seconds = time.perf_counter() - started
    for partition in partitions:
        if pending[partition.index]:
            calls.ack(partition, args.topic, config, pending[partition.index]).run(queue.redis)
    return {"takes": made, "jobs": jobs, "seconds": seconds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("seed", "backlog", "steady", "fill", "set-key", "takes"):
        command = commands.add_parser(name)
        command.add_argument("--topic", required=True)
        if name in ("seed", "backlog", "steady"):
            command.add_argument("--ids", required=True)
    commands.choices["backlog"].add_argument("--jobs", type=int, required=True)
    commands.choices["backlog"].add_argument("--key", required=True)
    commands.choices["backlog"].add_argument("--keys", type=int, default=1)
    commands.choices["backlog"].add_argument("--id-prefix", default="a")
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
    commands.choices["fill"].add_argument("--key")
    commands.choices["fill"].add_argument("--delay", type=float, default=FAR_S)
    commands.choices["set-key"].add_argument("--key", required=True)
    commands.choices["set-key"].add_argument("--concurrency", type=int)
    commands.choices["set-key"].add_argument("--rate", type=float)
    commands.choices["set-key"].add_argument("--burst", type=int)
    commands.choices["takes"].add_argument("--count", type=int, default=100)
    args = parser.parse_args(argv)
    queue = Queue.from_env()
    run = {"seed": seed, "backlog": backlog, "steady": steady, "fill": fill, "set-key": set_key, "takes": takes}
    answer = run[args.command](queue, args)
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main()
