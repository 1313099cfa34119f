"""What a job's history and result cost Redis memory: per dead job with 1 and with 10 failed attempts
kept, per receipt of a job that failed once before it succeeded, and per receipt with a result (a
small one, and a 10 MB answer, of which 64 KiB are kept), against a job that never failed and
answered nothing.

    .venv/bin/python bench/probes/kept_cost.py [--jobs 20000] [--error-chars 60] [--big-jobs 500]

On a private redis-server (``shared.servers``: nothing else runs on it, so its ``INFO`` is ours
alone). Each case creates ``--jobs`` jobs (ids generated, 24 characters; a body of about 100 bytes)
and settles their attempts through the product's scripts, as a consumer does (``calls.take``,
``calls.fail`` with when each attempt started, ``calls.ack``), each failure an error of
``--error-chars`` characters, each success's result encoded as the consumer does
(``encode_result``); ``used_memory`` before the jobs and after, per job. The difference between two
cases is what the history or the result costs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.servers import PrivateRedis

from delayq import Queue, Settings, Topics
from delayq.core.job import encode_result
from delayq.store import calls
from delayq.store.calls import Ack, Failure

CHUNK = 1000  # jobs per take
TOPICS = {"t": {"target": "-", "retries": 25, "backoff": [0], "keep_done_max": 10_000_000}}


SMALL_RESULT = {"charged": 1299, "currency": "EUR", "receipt": "r-0123456789abcdef"}  # 64 bytes of JSON
BIG_ANSWER = "x" * (10 << 20)  # 10 MB


def settled(
    server: PrivateRedis, jobs: int, failures: int, *, succeed: bool, error: str, result: object = None
) -> float:
    """Bytes per job once each failed ``failures`` times and then, if ``succeed``, succeeded with
    ``result``."""
    stored = encode_result(result)
    queue = Queue(Settings(redis_url=server.url, namespace="h", topics=Topics.parse(TOPICS)))
    partition = queue.keys.partitions[0]
    config = queue.topic_config("t")
    try:
        queue.stats("t")  # the namespace's layout recorded, the scripts cached
        before = int(server.client.info("memory")["used_memory"])
        queue.enqueue_many({"topic": "t", "body": {"pad": "x" * 90}, "delay": 0} for _ in range(jobs))
        for attempt in range(failures + int(succeed)):
            last = attempt == failures - 1 and not succeed  # its retries spent: dead
            done = 0  # each round takes every job once: a retry is due at once, after the round's others
            while done < jobs:
                count = min(CHUNK, jobs - done)
                taken = calls.take(partition, "t", count=count, timeout_ms=600_000, grace_ms=0).run(queue.redis)
                assert len(taken.jobs) == count, (attempt, done, len(taken.jobs))
                done += count
                if attempt < failures:
                    failed = [
                        Failure(job.id, token, error, permanent=last, started_at_ms=taken.now_ms)
                        for job, token, _ in taken.leases
                    ]
                    calls.fail(partition, "t", config, failed).run(queue.redis)
                else:
                    acks = [Ack(job.id, token, taken.now_ms, stored) for job, token, _ in taken.leases]
                    for start in range(0, len(acks), 50):  # as a consumer's, acks of at most a few MB a call
                        calls.ack(partition, "t", config, acks[start : start + 50]).run(queue.redis)
        after = int(server.client.info("memory")["used_memory"])
    finally:
        queue.close()
        server.flush()
    return (after - before) / jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per case (20000)")
    parser.add_argument("--error-chars", type=int, default=60, help="characters of each failure's error (60)")
    parser.add_argument("--big-jobs", type=int, default=500, help="jobs of the 10 MB answer's case (500)")
    args = parser.parse_args()
    error = "RuntimeError: " + "e" * max(0, args.error_chars - 14)
    server = PrivateRedis()
    try:
        cases = {
            "receipt, no failure": settled(server, args.jobs, 0, succeed=True, error=error),
            "receipt after 1 failure": settled(server, args.jobs, 1, succeed=True, error=error),
            "dead after 1 attempt": settled(server, args.jobs, 1, succeed=False, error=error),
            "dead after 10 attempts": settled(server, args.jobs, 10, succeed=False, error=error),
            "dead after 25 attempts (10 kept)": settled(server, args.jobs, 25, succeed=False, error=error),
            "receipt with a 64-byte result": settled(
                server, args.jobs, 0, succeed=True, error=error, result=SMALL_RESULT
            ),
            "receipt, a 10 MB answer (64 KiB kept)": settled(
                server, args.big_jobs, 0, succeed=True, error=error, result=BIG_ANSWER
            ),
        }
        print(f"Redis {server.version}, {args.jobs:,} jobs a case, errors of {len(error)} characters:")
        for name, per_job in cases.items():
            print(f"  {name:<38} {per_job:9,.0f} bytes a job")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
