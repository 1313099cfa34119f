"""A topic's activity: for each minute of the last day, by Redis' clock, how many attempts started,
succeeded and failed, how many jobs went dead, and how late the starts were (``GET
/topics/{topic}/history``, the web view's chart, and the recent lateness of ``lateness.py``).

Each consumer and sweeper counts what it sees in a ``Tally``, in memory (a dict update a job), and
every ``FLUSH_S`` adds its counts to the topic's activity hash, in the minute that is current
by Redis' clock when they arrive (``activity_add.lua``). So an event is filed at most that late, and
what a process had counted when it was killed is lost: its activity is for watching, the receipts and
dead letters are what is kept. Who counts what:

- started, with its lateness: the consumer, when a handler starts;
- done: the consumer, for each ack Redis accepted (an ack refused because the lease was lost is not);
- failed: the consumer for each failed attempt Redis accepted (an error, a timeout), the sweeper for
  each expired lease it took back; the attempt that made a job dead is one too;
- dead: each job that went dead, by either (and by a take that finds a job no run could finish).

A minute is one field of its hash, ``"<minute>" -> "d=3,f=1,x=1,12=40,13=2"``: done, failed, dead,
then lateness bucket = starts (``lateness.bucket_of``); started is the sum of the buckets. A hash
holds at most ``KEEP_MINUTES + 1`` minutes, and goes once its topic has been quiet for that long.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidField
from .lateness import bucket_of, quantile_ms, shown_ms

KEEP_MINUTES = 1440  # a day: what GET /topics/{topic}/history can show
FLUSH_S = 5.0  # how often a consumer or sweeper adds its counts to Redis: minutes need no fresher figures
DEFAULT_MINUTES = 60
DONE, FAILED, DEAD = "d", "f", "x"  # a minute's counts, beside its lateness buckets (digits)


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
    """What one process counted since it last sent its counts to Redis: topic -> ``Counts``. Safe to
    count into from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counts] = {}

    def started(self, topic: str, lateness_ms: float) -> None:
        bucket = bucket_of(lateness_ms)
        with self._lock:
            lateness = self._of(topic).lateness
            lateness[bucket] = lateness.get(bucket, 0) + 1

    def ended(self, topic: str, *, done: int = 0, failed: int = 0, dead: int = 0) -> None:
        if done or failed or dead:
            with self._lock:
                counts = self._of(topic)
                counts.done += done
                counts.failed += failed
                counts.dead += dead

    def take(self) -> dict[str, Counts]:
        """Everything counted so far, which the tally forgets."""
        with self._lock:
            taken, self._counts = self._counts, {}
        return taken

    def _of(self, topic: str) -> Counts:
        counts = self._counts.get(topic)
        if counts is None:
            counts = self._counts[topic] = Counts()
        return counts


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
    current = now_ms // 60_000
    first = current - len(fields) + 1
    return [Minute((first + i) * 60_000, Counts.decode(text)) for i, text in enumerate(fields)]
