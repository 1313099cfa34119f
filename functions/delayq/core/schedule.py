"""Pure time math: run-at parsing, backoff lists, how long a loop may sleep.

Nothing here reads a clock. Due-ness is decided by Redis server time inside Lua; these functions
only turn user input into milliseconds and decide waits from durations Redis reported. Which
backoff entry a failed attempt waits is decided in Lua too (``lua/includes/backoff.lua``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache

DAY_MS = 86_400_000
MAX_DELAY_MS = 366 * DAY_MS
DEFAULT_BACKOFF_S: tuple[float, ...] = (15, 180, 600, 1800, 3600, 7200, 21600, 54000)


def seconds_to_ms(seconds: float) -> int:
    """Seconds (int or float) to whole milliseconds, rounding up so a job is never early.

    A product within floating-point noise of a whole number is that number: ``2.007 * 1000`` is
    ``2007.0000000000002``, and must not become 2008.
    """
    ms = seconds * 1000
    nearest = round(ms)
    if abs(ms - nearest) <= 4 * math.ulp(ms):
        return nearest
    return math.ceil(ms)


def parse_run_at(value: float | str) -> int:
    """``run_at`` as given on create (epoch seconds, or ISO-8601 with a zone) -> epoch milliseconds.

    Raises ValueError for a string that is not ISO-8601, or has no zone: a zoneless time means
    different instants on different machines, so it is refused rather than guessed.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(("z", "Z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError("must be epoch seconds or an ISO-8601 date-time with a zone") from None
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            raise ValueError("must carry a zone (for example 2026-01-31T09:00:00Z); zoneless times are refused")
        return math.ceil(parsed.timestamp() * 1000)
    if isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ValueError("must be epoch seconds >= 0")
    return seconds_to_ms(value)


def iso_utc(ms: int) -> str:
    """Epoch milliseconds -> ISO-8601 UTC with millisecond precision, e.g. ``2026-11-22T10:00:00.250Z``."""
    seconds, millis = divmod(ms, 1000)
    return f"{_iso_second(seconds)}.{millis:03d}Z"


@lru_cache(maxsize=4096)
def _iso_second(seconds: int) -> str:
    """The whole second, shared by the many jobs of a batch that fall due in it."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def encode_backoff(backoff_s: Sequence[float], *, floor_s: float = 0.0) -> str:
    """A backoff list in seconds -> the comma-separated milliseconds the Lua scripts read, each entry
    raised to ``floor_s`` at least."""
    return ",".join(str(seconds_to_ms(max(s, floor_s))) for s in backoff_s)


def sleep_for(tick: float, *next_in_ms: int | None) -> float:
    """Seconds to sleep before the next pass: until the soonest known event, at most one tick.

    ``next_in_ms`` are durations Redis reported (server time), ``None`` or negative for "nothing known".
    """
    known = [ms for ms in next_in_ms if ms is not None and ms >= 0]
    if not known:
        return tick
    return min(tick, min(known) / 1000)
