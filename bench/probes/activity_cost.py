"""What a topic's history costs Redis: the memory of a day of minutes, per topic busy every minute,
and the commands of a flush, with one topic and with many sharing each minute's hash.

    .venv/bin/python bench/probes/activity_cost.py [--topics 1,100,10000] [--minutes 1440]

On a private redis-server (``shared.servers``: nothing else runs on it, so its ``INFO`` is ours
alone). Each case writes ``--minutes`` minutes of activity for ``--topics`` topics, each minute
holding what a busy topic's does (done, failed, and 4 or 12 lateness buckets), through the product's
own call (``calls.add_activity``, as a consumer's flush does, up to 50 topics' minutes a call); then
``used_memory`` before and after, per topic and minute, and the Redis commands a flush of the
topics' current minute costs (``INFO commandstats``, per topic).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for shared/
from shared.servers import PrivateRedis

from delayq.core.activity import Counts
from delayq.core.lateness import bucket_of
from delayq.loops.consumer import ACTIVITY_CHUNK
from delayq.store import calls
from delayq.store.keys import Keyspace
from delayq.store.scripts import run_many


def busy_minute(buckets: int) -> Counts:
    """A minute of a busy topic: 120 done, 2 failed, starts spread over ``buckets`` lateness buckets."""
    lateness = {bucket_of(0.6 * 1.19**b): 120 // buckets + 1 for b in range(buckets)}
    return Counts(lateness, done=120, failed=2)


def commands(server: PrivateRedis) -> int:
    return sum(
        int(stat["calls"]) for name, stat in server.client.info("commandstats").items() if name != "cmdstat_info"
    )


def case(server: PrivateRedis, topics: int, minutes: int, buckets: int) -> tuple[float, float]:
    """Bytes a topic and minute, and commands a topic of one flush."""
    server.client.flushall()
    partition = Keyspace("probe", 1).partitions[0]
    names = [f"topic-{n:05d}" for n in range(topics)]
    counts = busy_minute(buckets)
    now_minute = int(server.client.time()[0]) // 60
    before = int(server.client.info("memory")["used_memory"])
    for minute in range(now_minute - minutes + 1, now_minute + 1):
        for i in range(0, topics, ACTIVITY_CHUNK):
            counted = {(minute, name): counts for name in names[i : i + ACTIVITY_CHUNK]}
            run_many(server.client, [calls.add_activity(partition, counted)])
    after = int(server.client.info("memory")["used_memory"])
    start = commands(server)
    for i in range(0, topics, ACTIVITY_CHUNK):
        run_many(
            server.client,
            [calls.add_activity(partition, {(now_minute, n): counts for n in names[i : i + ACTIVITY_CHUNK]})],
        )
    return (after - before) / (topics * minutes), (commands(server) - start - 1) / topics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", default="1,100,10000", help="topic counts, comma separated (1,100,10000)")
    parser.add_argument("--minutes", type=int, default=1440, help="minutes of activity written (1440: a day)")
    args = parser.parse_args()
    server = PrivateRedis()
    try:
        print(f"Redis {server.version}, {args.minutes:,} minutes of a busy topic each:")
        for topics in (int(n) for n in args.topics.split(",")):
            for buckets in (4, 12):
                minutes = args.minutes if topics <= 100 else max(1, args.minutes // 24)
                per_minute, per_flush = case(server, topics, minutes, buckets)
                print(
                    f"  {topics:>6,} topics, {buckets:>2} buckets, {minutes:>5,} minutes: {per_minute:6.0f} bytes a"
                    f" topic's minute ({per_minute * 1440 / 1024:5.0f} KB a day), {per_flush:5.2f} commands a topic"
                    " a flush"
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
