"""Limits on one flow key's jobs: how many may run at once, how fast they may start, whether they may
start at all. A topic's config gives every key's defaults (``key_concurrency``, ``key_rate``,
``key_burst``); a key's own settings, kept in Redis, win field by field (``lua/includes/flow.lua``).

Each partition enforces its share (a key's jobs spread over the partitions as every job does, by a
hash of its id): the rate split evenly as a topic's is, the concurrency rounded up, so that with one
partition, the default, both are exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .errors import InvalidField

MAX_KEY_CONCURRENCY = 100_000
MAX_RATE = 100_000  # starts per second of one topic or key: far beyond what one Redis partition takes
MIN_RATE = 0.0001  # one start every 10,000 s: a bucket's interval stays a whole number of µs
LIMIT_FIELDS = ("concurrency", "rate", "burst", "paused")


def rate_share(rate: float, burst: int | None, partitions: int) -> tuple[int, int]:
    """One partition's share of a rate limit, as the Lua buckets read it (µs): the interval between two
    starts (``partitions / rate`` s, rounded up) and the tolerance, the burst's share (``burst /
    partitions`` intervals, at least one; the burst defaults to the rate). Every partition gets an
    equal share, so the starts across all of them never exceed ``rate`` per second plus ``burst``."""
    interval = math.ceil(1_000_000 * partitions / rate)
    return interval, max(interval, math.floor((rate if burst is None else burst) * interval / partitions))


def concurrency_share(concurrency: int, partitions: int) -> int:
    """One partition's share of a concurrency limit: rounded up, so that no key is starved."""
    return -(-concurrency // partitions)


Shares = tuple[int | str, int | str, int | str]  # what one partition enforces of a key's limits (KeyLimits.shares)
UNLIMITED: Shares = ("", "", "")  # the shares of no limit at all


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A key's limits; None where unlimited (or, in a key's own settings, where the topic's apply)."""

    concurrency: int | None = None
    rate: float | None = None
    burst: int | None = None
    paused: bool = False

    @classmethod
    def parse(cls, body: Any, base: KeyLimits | None = None) -> KeyLimits:
        """The settings a ``PUT /topics/{topic}/keys/{key}`` body gives, over ``base`` (the key's own
        settings so far): each field it names replaces that one, null clears it. ``InvalidField``
        naming the first bad field."""
        if not isinstance(body, dict):
            raise InvalidField("body", "must be a JSON object")
        for name in body:
            if name not in LIMIT_FIELDS:
                raise InvalidField(name, f"is not a setting of a key; one of {', '.join(LIMIT_FIELDS)}")
        changes: dict[str, Any] = {name: _checked(name, value) for name, value in body.items()}
        return replace(base or cls(), **changes)

    def over(self, defaults: KeyLimits) -> KeyLimits:
        """These settings where set, else ``defaults``' (the topic's): what is in force for the key."""
        return KeyLimits(
            self.concurrency if self.concurrency is not None else defaults.concurrency,
            self.rate if self.rate is not None else defaults.rate,
            self.burst if self.burst is not None else defaults.burst if self.rate is None else None,
            self.paused or defaults.paused,
        )

    @property
    def empty(self) -> bool:
        return self == KeyLimits()

    def shares(self, partitions: int) -> Shares:
        """What one partition enforces, as flow.lua reads it: the concurrency share, the rate's interval
        and tolerance (µs); '' where unlimited."""
        concurrency: int | str = "" if self.concurrency is None else concurrency_share(self.concurrency, partitions)
        if self.rate is None:
            return concurrency, "", ""
        return concurrency, *rate_share(self.rate, self.burst, partitions)

    def encode(self, partitions: int) -> str:
        """As a key's own settings are kept (the ``flows`` hash): the four settings, '' where unset,
        then the partition's shares (``shares``)."""
        own = ["" if value is None else _number(value) for value in (self.concurrency, self.rate, self.burst)]
        return "|".join([*own, "1" if self.paused else "", *map(str, self.shares(partitions))])

    @classmethod
    def decode(cls, raw: str) -> KeyLimits:
        concurrency, rate, burst, paused = raw.split("|")[:4]
        return cls(
            int(concurrency) if concurrency else None,
            float(rate) if rate else None,
            int(burst) if burst else None,
            paused == "1",
        )

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "rate": self.rate, "burst": self.burst, "paused": self.paused}


def _checked(name: str, value: Any) -> Any:
    """A setting's value as given, checked: ``InvalidField`` naming it if it is not one."""
    if name == "paused":
        if not isinstance(value, bool):
            raise InvalidField(name, "must be true or false")
        return value
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidField(name, "must be a number, or null")
    if name == "rate":
        if not MIN_RATE <= value <= MAX_RATE:
            raise InvalidField(name, f"must be from {MIN_RATE} to {MAX_RATE}, or null")
        return float(value)
    most = MAX_KEY_CONCURRENCY if name == "concurrency" else MAX_RATE
    if not isinstance(value, int) or not 1 <= value <= most:
        raise InvalidField(name, f"must be an integer from 1 to {most}, or null")
    return value


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass(frozen=True, slots=True)
class KeyState:
    """One flow key of a topic: its jobs by state, the limits in force, and until when a receiver's
    Retry-After holds it."""

    key: str
    delayed: int
    ready: int
    reserved: int
    limits: KeyLimits
    held_until_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "delayed": self.delayed,
            "ready": self.ready,
            "reserved": self.reserved,
            **self.limits.to_dict(),
            "held_until_ms": self.held_until_ms,
        }


@dataclass(frozen=True, slots=True)
class KeyPage:
    """A page of a topic's keys by name; ``next`` is the cursor of the following page, None at the end."""

    keys: list[KeyState]
    next: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"keys": [key.to_dict() for key in self.keys], "next": self.next}
