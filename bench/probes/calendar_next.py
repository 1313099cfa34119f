"""What computing a schedule's next occurrence costs: microseconds per ``next_after`` call.

    .venv/bin/python bench/probes/calendar_next.py [--calls 20000] [--repeat 5]

For each expression and zone, ``next_after`` is called on ``--calls`` instants from 2026-01-01 on, one
every ~53 minutes (20,000 of them cover two years, at every minute of the hour, DST changes
included); the best of ``--repeat`` rounds is printed, in microseconds per call. Also timed: an
``every`` calendar, the catch-up after a day without sweeps, and parsing an expression (which a
process does once per expression: parse_cron is cached). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import timeit
from datetime import UTC, datetime

from delayq.core.calendar import CronCalendar, EveryCalendar, parse_cron

CASES = [
    ("0 8 * * 1-5", "Europe/Paris"),
    ("*/15 * * * *", "Europe/Paris"),
    ("30 2 * * *", "America/New_York"),
    ("0 0 29 2 *", "UTC"),
    ("0 0 31 * *", "UTC"),
    ("0 0 31 * *", "Australia/Lord_Howe"),
    ("0 0 1 * MON", "America/Santiago"),
    ("@hourly", "Asia/Kolkata"),
    ("* * * * *", "UTC"),
]
START_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
DAY_MS = 86_400_000
PARSED = "0,30 8-18/2 1-15 JAN-JUN MON-FRI"
SPREAD_MS = 3_191_000  # about 53 minutes: over 2026-2028 the instants take every minute of the hour


def per_call_us(function: object, calls: int, repeat: int) -> float:
    timer = timeit.Timer("for t in instants: f(t)", globals={"f": function, "instants": instants(calls)})
    return min(timer.repeat(repeat=repeat, number=1)) / calls * 1e6


def instants(calls: int) -> list[int]:
    return [START_MS + i * SPREAD_MS for i in range(calls)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    print(f"{'expression':<16} {'zone':<22} {'next_after us':>13}")
    for expression, zone in CASES:
        calendar = CronCalendar.of(expression, zone)
        print(f"{expression:<16} {zone:<22} {per_call_us(calendar.next_after, args.calls, args.repeat):>13.1f}")
    every = EveryCalendar(every_ms=300_000, anchor_ms=START_MS)
    print(f"{'every 300 s':<16} {'-':<22} {per_call_us(every.next_after, args.calls, args.repeat):>13.2f}")

    quarters = CronCalendar.of("*/15 * * * *", "Europe/Paris")
    catch_up_us = per_call_us(lambda t: quarters.next_to_create(t, t + DAY_MS), args.calls, args.repeat)
    print(f"catch-up after a day without sweeps (*/15 * * * *, Europe/Paris): {catch_up_us:.1f} us")

    uncached = parse_cron.__wrapped__
    parse_s = min(timeit.repeat(lambda: uncached(PARSED), number=1000, repeat=args.repeat)) / 1000
    print(f"parsing {PARSED!r} (uncached): {parse_s * 1e6:.1f} us")


if __name__ == "__main__":
    main()
