"""What a process counts before it sends it (``Tally``), and the Redis clock it files it by
(``ServerClock``): each event in its own minute by Redis' time, never this machine's wall clock."""

from __future__ import annotations

import threading
import time

from delayq.core.activity import Counts, Tally, minute_of
from delayq.core.clock import ServerClock
from delayq.core.lateness import bucket_of

MINUTE_MS = 60_000


def test_events_are_filed_in_the_minute_they_happened() -> None:
    """A start in its own time's minute; an end at the clock's time: a flush that comes after a minute
    turned still files the events of the minute before in it."""
    now = [10 * MINUTE_MS + 59_990.0]
    tally = Tally(lambda: now[0])
    tally.started("orders", 4, now[0] - 5)
    tally.ended("orders", done=1)
    now[0] += 20  # the next minute
    tally.started("orders", 7, now[0] - 30)  # started in the minute before, by its own time
    tally.ended("orders", done=2, failed=1, dead=1)
    tally.ended("payments", done=0)  # nothing: no entry
    assert tally.take() == {
        (10, "orders"): Counts({bucket_of(4): 1, bucket_of(7): 1}, done=1),
        (11, "orders"): Counts(done=2, failed=1, dead=1),
    }
    assert tally.take() == {}


def test_a_tally_counts_from_many_threads() -> None:
    tally = Tally(lambda: 5 * MINUTE_MS)

    def count() -> None:
        for _ in range(1000):
            tally.started("orders", 1, 5 * MINUTE_MS)
            tally.ended("orders", done=1)

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts = tally.take()[(5, "orders")]
    assert (counts.started, counts.done) == (4000, 4000)


def test_the_server_clock_runs_on_from_the_last_reply_not_the_wall_clock() -> None:
    clock = ServerClock()
    assert not clock.known
    assert abs(clock.ms() - time.time() * 1000) < 60_000  # before any reply: the machine's clock
    clock.saw(1_000_000, at=100.0)
    assert clock.known
    assert clock.ms(100.0) == 1_000_000
    assert clock.ms(102.5) == 1_002_500  # 2.5 s later by the monotonic clock
    assert minute_of(clock.ms(102.5)) == 16
    clock.saw(5_000, at=200.0)  # a later reply wins, even one that went back (a failover's new server)
    assert clock.ms(201.0) == 6_000
