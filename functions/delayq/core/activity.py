"""A topic's activity: for each minute of the last day, by Redis' clock, how many attempts started,
succeeded and failed, how many jobs went dead, and how late the starts were (``GET
/topics/{topic}/history``, the web view's chart, and the recent lateness of ``lateness.py``).

Each consumer and sweeper counts what it sees in a ``Tally``, in memory (a dict update a job), in the
minute it happened by Redis' clock (a start's own time; for the rest, Redis' time as the process's
last reply gave it plus what passed since), and every ``FLUSH_S`` adds its counts to Redis
(``activity_add.lua``). So an event is filed in its own minute, and what a process had counted when
it was killed is lost: its activity is for watching, the receipts and dead letters are what is kept.
Who counts what:

- started, with its lateness: the consumer, when a handler starts;
- done: the consumer, for each ack Redis accepted (an ack refused because the lease was lost is not);
- failed: the consumer for each failed attempt Redis accepted (an error, a timeout), the sweeper for
  each expired lease it took back; the attempt that made a job dead is one too;
- dead: each job that went dead, by either (and by a take that finds a job no run could finish).

A minute is one hash per partition (``Partition.activity``), a field per topic that did something in
it: ``"<topic>" -> "d=3,f=1,x=1,12=40,13=2"``: done, failed, dead, then lateness bucket = starts
(``lateness.bucket_of``); started is the sum of the buckets. So a flush of any number of topics costs
three commands per minute and partition, not three per topic, and a minute's hash expires whole
``KEEP_MINUTES`` after it ends: nothing to forget field by field, nothing left by a topic gone quiet.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidField
from .lateness import bucket_of, quantile_ms, shown_ms

KEEP_MINUTES = 1440  # a day: what GET /topics/{topic}/history can show
FLUSH_S = 5.0  # how often a consumer or sweeper adds its counts to Redis: minutes need no fresher figures
DEFAULT_MINUTES = 60
DONE, FAILED, DEAD = "d", "f", "x"  # a minute's counts, beside its lateness buckets (digits)

Counted = tuple[int, str]  # what counts are of: (minute since the epoch, topic)


@dataclass(slots=True)
class Counts:
    """What happened to a topic's jobs in some stretch of time (in a tally, or a minute in Redis)."""

    lateness: dict[int, int] = field(default_factory=dict)  # bucket -> handler starts
    done: int = 0
    failed: int = 0
    dead: int = 0

    @property
    def started(self) -> int:
        return sum(self.lateness.values())

    def __bool__(self) -> bool:
        return bool(self.lateness or self.done or self.failed or self.dead)

    def add(self, other: Counts) -> None:
        for bucket, n in other.lateness.items():
            self.lateness[bucket] = self.lateness.get(bucket, 0) + n
        self.done += other.done
        self.failed += other.failed
        self.dead += other.dead

    def encode(self) -> str:
        """As ``activity_add.lua`` adds it to a minute: ``name=count`` pairs, zeros left out."""
        named = ((DONE, self.done), (FAILED, self.failed), (DEAD, self.dead))
        parts = [f"{name}={n}" for name, n in named if n]
        parts += [f"{bucket}={n}" for bucket, n in self.lateness.items()]
        return ",".join(parts)

    @classmethod
    def decode(cls, text: str | None) -> Counts:
        counts = cls()
        for part in (text or "").split(","):
            name, _, n = part.partition("=")
            if name == DONE:
                counts.done += int(n)
            elif name == FAILED:
                counts.failed += int(n)
            elif name == DEAD:
                counts.dead += int(n)
            elif name.isdigit():
                counts.lateness[int(name)] = counts.lateness.get(int(name), 0) + int(n)
        return counts


class Tally:
    """What one process counted since it last sent its counts to Redis: (minute, topic) -> ``Counts``,
    each event in the minute it happened by Redis' clock: a start at its own time, the rest at
    ``clock()`` (Redis' time in ms as the process knows it, ``ServerClock.ms``). Safe to count into from
    any thread."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: dict[Counted, Counts] = {}

    def started(self, topic: str, lateness_ms: float, at_ms: float) -> None:
        bucket = bucket_of(lateness_ms)
        with self._lock:
            lateness = self._of(topic, at_ms).lateness
            lateness[bucket] = lateness.get(bucket, 0) + 1

    def ended(self, topic: str, *, done: int = 0, failed: int = 0, dead: int = 0) -> None:
        if done or failed or dead:
            at_ms = self._clock()
            with self._lock:
                counts = self._of(topic, at_ms)
                counts.done += done
                counts.failed += failed
                counts.dead += dead

    def take(self) -> dict[Counted, Counts]:
        """Everything counted so far, which the tally forgets."""
        with self._lock:
            taken, self._counts = self._counts, {}
        return taken

    def _of(self, topic: str, at_ms: float) -> Counts:
        counted = (minute_of(at_ms), topic)
        counts = self._counts.get(counted)
        if counts is None:
            counts = self._counts[counted] = Counts()
        return counts


def minute_of(at_ms: float) -> int:
    """The minute (since the epoch) that the time ``at_ms`` falls in."""
    return int(at_ms // 60_000)


@dataclass(frozen=True, slots=True)
class Minute:
    """One minute of a topic's activity, from ``from_ms`` (a whole minute, Redis time)."""

    from_ms: int
    counts: Counts

    def to_dict(self) -> dict[str, Any]:
        counts = self.counts
        return {
            "from_ms": self.from_ms,
            "started": counts.started,
            "done": counts.done,
            "failed": counts.failed,
            "dead": counts.dead,
            "p50_ms": shown_ms(quantile_ms(counts.lateness, 0.5)),
            "p99_ms": shown_ms(quantile_ms(counts.lateness, 0.99)),
        }


def check_minutes(minutes: Any) -> int:
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= KEEP_MINUTES:
        raise InvalidField("minutes", f"must be an integer from 1 to {KEEP_MINUTES}")
    return minutes


def minutes_of(now_ms: int, fields: list[str | None]) -> list[Minute]:
    """The minutes ``activity_read.lua`` answered (its last one the current minute), oldest first."""
    first = minute_of(now_ms) - len(fields) + 1
    return [Minute((first + i) * 60_000, Counts.decode(text)) for i, text in enumerate(fields)]
