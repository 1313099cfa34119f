"""Recent lateness: how late the handlers of a topic's recent deliveries started (handler start minus
run-at, on Redis' clock), as p50 and p99 over the last ``WINDOW_MINUTES`` minutes, for every reader of
the queue: ``lateness`` in ``GET /topics`` and ``GET /topics/{topic}``, and the web view.

Each consumer (a Lambda, a process, the local stack) counts its deliveries into log-scale buckets in
memory, four a doubling (``bucket_of``: one bisection and a dict increment, under a lock, well under
a microsecond a delivery), and every ``activity.FLUSH_S`` adds its counts to the topics' activity in
Redis, each start in its minute by Redis' clock (``activity.py``: one call per partition for up to
``consumer.ACTIVITY_CHUNK`` topics' minutes, one such call joined to the round trip of each pass while
more wait). A reader sums the buckets of the window's minutes (``lateness_read.lua``) and reads the
percentiles off them: each is the geometric middle of its bucket, within 9% of the true value. A
minute holds at most ``MAX_BUCKET + 1`` buckets (usually a few dozen).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BUCKETS_PER_DOUBLING = 4  # bucket b >= 1 holds [2**((b-1)/4), 2**(b/4)) ms; bucket 0 holds under 1 ms
MAX_BUCKET = 160  # 2**40 ms, 35 years: later than any job can be (its delay is at most 366 days)
WINDOW_MINUTES = 5  # what "recent" means: the last five whole minutes and the current one
QUANTILES = (0.5, 0.99)


# The lower bound of each bucket from 1 on: bucket_of is one bisection (no logarithm on the hot path).
_BOUNDS = tuple(2 ** (bucket / BUCKETS_PER_DOUBLING) for bucket in range(MAX_BUCKET))


def bucket_of(ms: float) -> int:
    """The bucket of a lateness of ``ms`` milliseconds."""
    return bisect_right(_BOUNDS, ms)


def bucket_ms(bucket: int) -> float:
    """What a bucket stands for: the geometric middle of its bounds (0 for the first)."""
    return 0.0 if bucket <= 0 else 2 ** ((bucket - 0.5) / BUCKETS_PER_DOUBLING)


def quantile_ms(counts: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile of the deliveries counted in ``counts`` (bucket -> deliveries); None for none."""
    total = sum(counts.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))  # the rank-th smallest delivery, 1-based
    seen = 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= rank:
            return bucket_ms(bucket)
    raise AssertionError("unreachable: the ranks add up to the total")


@dataclass(frozen=True, slots=True)
class Lateness:
    """A topic's recent lateness: how many deliveries started in the window, and their p50 and p99."""

    deliveries: int
    p50_ms: float | None
    p99_ms: float | None
    window_s: int = WINDOW_MINUTES * 60

    @classmethod
    def of(cls, counts: Mapping[int, int]) -> Lateness:
        p50, p99 = (quantile_ms(counts, q) for q in QUANTILES)
        return cls(sum(counts.values()), p50, p99)

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "deliveries": self.deliveries,
            "p50_ms": shown_ms(self.p50_ms),
            "p99_ms": shown_ms(self.p99_ms),
        }


NONE = Lateness(0, None, None)


def shown_ms(ms: float | None) -> float | None:
    """Milliseconds as answered: three significant digits are all a bucket knows."""
    return None if ms is None else float(f"{ms:.3g}")
