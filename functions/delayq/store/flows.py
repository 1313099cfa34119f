"""A topic's flow keys as an operator sees them: each key's jobs by state, the limits in force, its
hold; and its own settings, written to every partition (each enforces its share, ``core/flows.py``).

Nothing indexes a topic's jobs by key (a key costs nothing on the hot path), so counting them walks
the topic's jobs where they wait (its delayed set, ready list, fair and parked sets, its leases) and
reads their metas: ``keys_walk.lua``, about ``calls.KEYS_STEP`` jobs per call, every partition at once.
A page of keys costs a walk of the topic's jobs, however many other topics' jobs its partitions hold:
a few seconds per million jobs. Jobs that move while the walk goes on may be counted twice or not
at all: a busy topic's counts are close, not exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from delayq.core.flows import KeyLimits, KeyPage, KeyState
from delayq.core.models import check_key, check_topic

from . import calls
from .calls import KeysStep
from .connection import redis_errors
from .listing import DEFAULT_LIMIT, check_limit, encode_cursor, keys_cursor
from .scripts import run_many

if TYPE_CHECKING:
    from .queue import Queue


class Flows:
    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def get(self, topic: str, key: str) -> KeyState:
        """``key``'s jobs by state, its limits in force, its hold. ``TopicNotFound`` for an unknown topic."""
        check_topic(topic)
        check_key(key)
        self.queue.check_known(topic)
        counts, own = self._walk(topic, key)
        return self._state(topic, key, counts.get(key, (0, 0, 0)), own.get(key, ("", None)))

    def page(self, topic: str, limit: int = DEFAULT_LIMIT, cursor: str | None = None) -> KeyPage:
        """The keys of ``topic`` that hold jobs, settings or a hold, by name, a page at a time."""
        check_topic(topic)
        check_limit(limit)
        after = keys_cursor(cursor)
        self.queue.check_known(topic)
        counts, own = self._walk(topic)
        names = sorted(name for name in counts.keys() | own.keys() if after is None or name > after)
        page = [
            self._state(topic, name, counts.get(name, (0, 0, 0)), own.get(name, ("", None))) for name in names[:limit]
        ]
        return KeyPage(page, encode_cursor("keys", names[limit - 1]) if len(names) > limit else None)

    def put(self, topic: str, key: str, body: Mapping[str, Any]) -> KeyState:
        """Sets the fields of ``body`` (``KeyLimits.parse``) in ``key``'s own settings, the others kept;
        every consumer applies them from its next take."""
        check_topic(topic)
        check_key(key)
        self.queue.check_known(topic)
        _, own = self._walk_own(topic, key)
        limits = KeyLimits.parse(dict(body), KeyLimits.decode(own[0]) if own[0] else None)
        encoded = "" if limits.empty else limits.encode(len(self.queue.keys))
        self.queue.each_partition(calls.key_settings, topic, key, encoded)
        return self.get(topic, key)

    def reset(self, topic: str, key: str) -> None:
        """``key`` back to the topic's defaults: its own settings and its hold cleared."""
        check_topic(topic)
        check_key(key)
        self.queue.check_known(topic)
        self.queue.each_partition(calls.key_settings, topic, key, "")

    def _state(self, topic: str, key: str, counts: tuple[int, int, int], own: tuple[str, int | None]) -> KeyState:
        config = self.queue.settings.topics.for_topic(topic)
        defaults = config.key_limits if config is not None else KeyLimits()
        limits = (KeyLimits.decode(own[0]) if own[0] else KeyLimits()).over(defaults)
        return KeyState(key, *counts, limits, own[1])

    def _walk_own(self, topic: str, key: str) -> tuple[int, tuple[str, int | None]]:
        """``key``'s own settings and hold, from every partition, no job read."""
        reads = [calls.keys_walk(p, topic, "0", key, metas=0) for p in self.queue.keys.partitions]
        with redis_errors(self.queue.server):
            steps: list[KeysStep] = run_many(self.queue.redis, reads)
        return steps[0].now_ms, _own(steps).get(key, ("", None))

    def _walk(
        self, topic: str, key: str = ""
    ) -> tuple[dict[str, tuple[int, int, int]], dict[str, tuple[str, int | None]]]:
        """Every partition's walk over ``topic``'s jobs, side by side: the counts by key (only ``key``'s
        if given), and the keys' own settings and holds."""
        partitions = self.queue.keys.partitions
        counts: dict[str, tuple[int, int, int]] = {}
        firsts: list[KeysStep] = []
        cursors = {p.index: "0" for p in partitions}
        with redis_errors(self.queue.server):
            while cursors:
                walking = [p for p in partitions if p.index in cursors]
                steps = run_many(self.queue.redis, [calls.keys_walk(p, topic, cursors[p.index], key) for p in walking])
                for p, step in zip(walking, steps, strict=True):
                    if cursors[p.index] == "0":
                        firsts.append(step)
                    for name, (delayed, ready, reserved) in step.counts.items():
                        was = counts.get(name, (0, 0, 0))
                        counts[name] = (was[0] + delayed, was[1] + ready, was[2] + reserved)
                    if step.cursor == "0":
                        del cursors[p.index]
                    else:
                        cursors[p.index] = step.cursor
        return counts, _own(firsts)


def _own(steps: list[KeysStep]) -> dict[str, tuple[str, int | None]]:
    """The keys' own settings (as written to every partition alike) and their latest hold."""
    own: dict[str, tuple[str, int | None]] = {}
    for step in steps:
        for name, (settings, held) in step.own.items():
            was_settings, was_held = own.get(name, ("", None))
            holds = [at for at in (was_held, held) if at is not None]
            own[name] = (settings or was_settings, max(holds) if holds else None)
    return own
