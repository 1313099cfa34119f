"""Which partitions a loop cannot reach now, and when to try each again.

A loop's calls go per partition, and a partition's go to the server that holds it: the one server, or
on a cluster the master of its slot. When a call fails because Redis cannot answer now (refused, cut,
timed out, ``CLUSTERDOWN``, ``LOADING``...: ``connection.unavailable``), its partition rests: the loop
sends it nothing until the rest ends, then tries again. Each failed try doubles the rest, from
``tick / 20`` up to ``tick / 4``: a refused connection or a "not now" reply costs a try next to
nothing, and a server that comes back (a replica promoted, a name moved) is found within a quarter
of a tick. A call that timed out rests a whole tick at once: trying a server that hangs cost the loop
a wait already. The first call that answers ends the rest. So a dead master costs its partitions a
few calls a tick, not a spin, and the other partitions nothing.

One line is logged when a server stops answering (its partitions, the error) and one when they answer
again (after how long, and how many calls failed meanwhile), not a line per failed call.

On a cluster, while a partition rests, the slot table is read again every ``SLOTS_REFRESH_S`` at most
(``follow_moves``): a partition whose slot moved to another node (its replica was promoted) is tried at once.

Used from one loop's thread only.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import TimeoutError as RedisTimeoutError

from delayq.core.errors import RedisUnavailable
from delayq.store.connection import REFUSED, unavailable
from delayq.store.keys import Partition
from delayq.store.namespace import Namespace
from delayq.store.scripts import SLOTS_REFRESH_S, refresh_slots

log = logging.getLogger("delayq.outages")

FIRST_OF_TICK = 1 / 20  # the first rest, in ticks: 50 ms at the default tick
LONGEST_OF_TICK = 1 / 4  # the longest rest, in ticks, but after a timeout (a whole tick)


@dataclass(slots=True)
class _Rest:
    since: float  # monotonic time of its first failed call
    until: float  # no call before this
    wait: float  # the rest after the next failed try
    failed: int  # calls failed since
    server: str  # where its calls went when it went down
    node: str | None  # on a cluster, that node (host:port)
    reason: str  # the first error's code or class
    reported: bool = False  # its "down" line was logged


class Outages:
    """The partitions of ``namespace`` whose server does not answer now, for one loop (``name`` in logs)."""

    def __init__(self, namespace: Namespace, *, tick: float, name: str) -> None:
        self.namespace = namespace
        self.name = name
        self.first_s = tick * FIRST_OF_TICK
        self.longest_s = tick * LONGEST_OF_TICK
        self.tick = tick
        self._rests: dict[int, _Rest] = {}  # by partition index
        self._back: list[tuple[Partition, _Rest, str]] = []  # answered again since the last report
        self._followed_at = -math.inf

    def __bool__(self) -> bool:
        """Whether any partition rests."""
        return bool(self._rests)

    def until(self, partition: Partition) -> float:
        """When the partition may be sent calls again (monotonic time; 0.0: it answers)."""
        rest = self._rests.get(partition.index)
        return rest.until if rest is not None else 0.0

    def resting(self, partition: Partition, now: float) -> bool:
        return self.until(partition) > now

    def next_at(self, now: float) -> float:
        """When the first rest still to come ends, or the next read of the slot table is due while
        partitions rest (inf: none)."""
        ends = [rest.until for rest in self._rests.values() if rest.until > now]
        if self._rests and self.namespace.settings.redis_mode == "cluster":
            ends.append(max(now, self._followed_at + SLOTS_REFRESH_S))
        return min(ends, default=math.inf)

    def saw(self, partitions: list[Partition], replies: list[Any], now: float) -> None:
        """The replies of a round trip, each of a call to the partition in the same place: a partition
        with a reply that says Redis cannot answer rests; one whose calls were all answered is up."""
        failed: dict[int, tuple[Partition, BaseException, int]] = {}
        answered: dict[int, Partition] = {}
        for partition, reply in zip(partitions, replies, strict=True):
            if isinstance(reply, BaseException) and _reason(reply) is not None:
                _, first, calls = failed.get(partition.index, (partition, reply, 0))
                failed[partition.index] = (partition, first, calls + 1)
            else:
                answered[partition.index] = partition
        for partition, error, calls in failed.values():
            self.failed(partition, error, now, calls=calls)
        for index, partition in answered.items():
            if index not in failed:
                self.answered(partition)

    def failed(self, partition: Partition, error: BaseException, now: float, *, calls: int = 1) -> bool:
        """``calls`` calls to ``partition`` failed, the first with ``error``: whether that means Redis
        cannot answer now (the partition rests, longer at each try), rather than an error of a call."""
        reason = _reason(error)
        if reason is None:
            return False
        rest = self._rests.get(partition.index)
        if rest is None:
            rest = _Rest(
                now, now, self.first_s, 0, self.namespace.server(partition), self.namespace.node(partition), reason
            )
            self._rests[partition.index] = rest
        rest.failed += calls
        if rest.until <= now:  # a try, not more calls of the same round trip
            cause = error.__cause__ if isinstance(error, RedisUnavailable) and error.__cause__ else error
            wait = self.tick if isinstance(cause, RedisTimeoutError) else rest.wait
            rest.until = now + wait
            rest.wait = min(2 * rest.wait, self.longest_s)
        return True

    def answered(self, partition: Partition) -> None:
        """A call to ``partition`` was answered: its rest, if any, is over."""
        rest = self._rests.pop(partition.index, None)
        if rest is not None:
            self._back.append((partition, rest, self.namespace.server(partition)))

    def follow_moves(self, now: float) -> None:
        """On a cluster, while partitions rest: the slot table read again (at most every
        ``SLOTS_REFRESH_S``), and the rest of each partition whose slot moved to another node ended."""
        if not self._rests or now - self._followed_at < SLOTS_REFRESH_S:
            return
        self._followed_at = now
        try:
            client = self.namespace.redis
        except RedisUnavailable:
            return
        if not isinstance(client, RedisCluster):
            return
        # Unless a failed call just did; a node that failed is asked last (it may hang).
        failed = next((rest.node for rest in self._rests.values() if rest.node), None)
        refresh_slots(client, every_s=SLOTS_REFRESH_S, failed_node=failed)
        for index, rest in self._rests.items():
            if self.namespace.server(self.namespace.keys.partitions[index]) != rest.server:
                rest.until = now
                rest.wait = self.first_s

    def report(self, now: float) -> None:
        """Logs the servers that stopped answering and the partitions that answer again since the last
        report: a line per server and change."""
        down: dict[tuple[str, str], list[int]] = defaultdict(list)
        for index, rest in sorted(self._rests.items()):
            if not rest.reported:
                rest.reported = True
                down[(rest.server, rest.reason)].append(index)
        for (server, reason), indexes in down.items():
            log.warning(
                "%s: %s does not answer (%s): %s, tried again at most a tick apart",
                self.name,
                server,
                reason,
                _listed(indexes, "waits", "wait"),
                extra={"server": server, "reason": reason, "partitions": indexes},
            )
        back: dict[str, list[tuple[int, _Rest]]] = defaultdict(list)
        for partition, rest, server in self._back:
            if rest.reported:  # a rest too short to be reported is not reported over either
                back[server].append((partition.index, rest))
        self._back = []
        for server, rests in back.items():
            indexes = [index for index, _ in rests]
            seconds = max(now - rest.since for _, rest in rests)
            failed = sum(rest.failed for _, rest in rests)
            log.warning(
                "%s: %s again (%s), after %.1f s; %d calls failed meanwhile",
                self.name,
                _listed(indexes, "answers", "answer"),
                server,
                seconds,
                failed,
                extra={"server": server, "partitions": indexes, "down_s": round(seconds, 3), "failed": failed},
            )


def _reason(error: BaseException) -> str | None:
    """Why ``error`` means Redis cannot answer now, or None (``connection.unavailable``): not for a
    command the ACL refuses, which waiting does not mend."""
    if isinstance(error, RedisUnavailable):
        return None if error.reason == REFUSED else error.reason or "unavailable"
    return unavailable(error)


def _listed(indexes: list[int], one: str, more: str) -> str:
    """``partition 0 waits``, ``partitions 0, 2 wait``."""
    if len(indexes) == 1:
        return f"partition {indexes[0]} {one}"
    return f"partitions {', '.join(str(index) for index in indexes)} {more}"
