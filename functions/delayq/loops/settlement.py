"""Settlement: the consumer's verdicts on their way to Redis, and the undoing of takes whose reply was
lost.

Per lane (one topic in one partition), ``Pending`` gathers what finished since the last pass: the
acks of jobs whose handler succeeded, the failed attempts, and the ids of takes whose reply never
came. Each pass takes them off (``Settlement.calls``) and sends them with its takes, one Lua call
each (``calls.ack``, ``calls.fail``, ``calls.untake``), at most ``SETTLE_CHUNK`` jobs per call, and
acks while their results stay within ``SETTLE_BYTES`` (``AckRoom``; the first always goes). Acks may
ride with the lane's next take instead, in the same Lua call (``Settlement.ride``), or with a take of
another lane of the partition (``Settlement.ride_along``): while jobs keep falling due, a delivery
then costs one call, not two, however many topics they are spread over. The lanes whose acks ride in
one take call share its ``AckRoom``; acks that do not fit wait for the next call, in order. The loop
says which acks may wait for that (``hold``), never longer than ``ACK_RIDE_S``.

A call that fails keeps its items for the next pass, before what came since. Nothing is lost if Redis
stays away: a lease that is never settled expires and the sweeper retries its job; only the count of
take ids kept for undoing is bounded (``MAX_UNTAKES``), and a take that is not undone is the same
expired lease, its attempt counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from delayq.core.activity import Tally
from delayq.core.observability import Telemetry
from delayq.store import calls
from delayq.store.calls import Ack, Failure, Rules
from delayq.store.keys import Partition
from delayq.store.scripts import Call

log = logging.getLogger("delayq.consume")

SETTLE_CHUNK = 1000  # acks or failed attempts per Lua call: bounded work per call
SETTLE_BYTES = 1 << 20  # acks' results per Lua call (64 KiB each): Redis blocks while it reads and copies a call
ACK_RIDE_S = 0.06  # how long an ack may wait for a take of its partition (every TAKE_AHEAD_MS or so) to ride with
MAX_UNTAKES = 256  # per lane: take ids kept for undoing while Redis stays away (the oldest are dropped)

ACK, FAIL, UNTAKE = "ack", "fail", "untake"


def _result_bytes(ack: Ack) -> int:
    """The bytes of an ack's result as Redis gets it (UTF-8)."""
    return len(ack.result) if ack.result.isascii() else len(ack.result.encode())


class AckRoom:
    """What one Lua call can still carry of acks: ``SETTLE_CHUNK`` of them and ``SETTLE_BYTES`` of
    their results, shared by the lanes whose acks ride in the call. The first ack always fits, so that
    each call moves one on."""

    __slots__ = ("carried", "left")

    def __init__(self) -> None:
        self.left = SETTLE_BYTES
        self.carried = 0  # acks

    def fit(self, acks: Iterable[Ack]) -> int:
        """How many of ``acks``, the first in order, the call can still carry; counted as carried."""
        fitted = 0
        for ack in islice(acks, SETTLE_CHUNK - self.carried):
            size = _result_bytes(ack)
            if size > self.left and self.carried:
                break
            self.left -= size
            self.carried += 1
            fitted += 1
        return fitted


def _ack_calls(acks: list[Ack]) -> Iterator[list[Ack]]:
    """``acks`` in order, cut into the acks of one call each (an ``AckRoom`` each)."""
    start = 0
    while start < len(acks):
        end = start + AckRoom().fit(acks[start : start + SETTLE_CHUNK])
        yield acks[start:end]
        start = end


@dataclass(eq=False)
class Pending:
    """One lane's settlements waiting for the next pass; read and changed under the consumer's lock."""

    partition: Partition
    topic: str
    rules: Rules  # the topic's retries and backoff, for its failed attempts; its receipts, for its acks
    acks: list[Ack] = field(default_factory=list)  # of jobs whose handler succeeded
    acks_since: float = 0.0  # monotonic time the oldest of ``acks`` came
    fails: list[Failure] = field(default_factory=list)
    untakes: list[str] = field(default_factory=list)  # ids of takes whose reply never came, to undo

    def ack(self, ack: Ack) -> None:
        """A job whose handler succeeded."""
        if not self.acks:
            self.acks_since = time.monotonic()
        self.acks.append(ack)

    def take_acks(self, room: AckRoom) -> list[Ack]:
        """The first acks waiting that fit in ``room`` (at most ``SETTLE_CHUNK``), taken off to ride in
        a take call; the rest wait, in order."""
        fitted = room.fit(self.acks)
        acks, self.acks = self.acks[:fitted], self.acks[fitted:]
        return acks

    def fills_a_call(self) -> bool:
        """Whether the acks waiting fill a call of their own (``SETTLE_CHUNK`` of them, or
        ``SETTLE_BYTES`` of results, as an ``AckRoom`` counts them): those never wait for a take, that
        would carry only part."""
        room = AckRoom()
        fitted = room.fit(self.acks)
        return fitted == SETTLE_CHUNK or fitted < len(self.acks) or room.left <= 0

    def send_acks_by(self) -> float:
        """When the acks waiting must go, with a take or alone (inf: none waits)."""
        return self.acks_since + ACK_RIDE_S if self.acks else float("inf")

    def undo_later(self, take_ids: list[str]) -> None:
        """Takes to undo at the next passes, after those already waiting; the newest ``MAX_UNTAKES`` kept."""
        self.untakes = (self.untakes + take_ids)[-MAX_UNTAKES:]

    def __bool__(self) -> bool:
        return bool(self.acks or self.fails or self.untakes)


@dataclass(slots=True)
class Settle:
    """One settle call of a pass: its lane, its kind, and the items it carries (kept for the next
    pass if the call fails)."""

    pending: Pending
    kind: str  # ACK, FAIL or UNTAKE
    items: list[Any]
    call: Call[Any]


RedisErrorReport = Callable[[str, Partition, str, Exception], None]  # what, partition, topic, error


class Settlement:
    """The lanes' pending settlements, and what their calls' replies mean: counts, telemetry, and the
    items of a failed call put back."""

    def __init__(
        self,
        lock: threading.Lock,
        counts: Counter[str],
        telemetry: Telemetry,
        redis_error: RedisErrorReport,
        *,
        tally: Tally,
        resting: Callable[[Partition], float] = lambda partition: 0.0,
    ) -> None:
        self._lock = lock
        self._counts = counts
        self._telemetry = telemetry
        self._tally = tally  # the topics' activity: what Redis accepted
        self._redis_error = redis_error
        self._resting = resting  # when a partition's calls may go again (``Outages.until``)
        self._pending: dict[Pending, None] = {}  # every lane's, in the order the lanes came (a set, ordered)

    def lane(self, partition: Partition, topic: str, rules: Rules) -> Pending:
        """A new lane's pending settlements."""
        pending = Pending(partition, topic, rules)
        self._pending[pending] = None
        return pending

    def drop(self, pending: Pending) -> None:
        """Forgets a lane that has nothing left to settle (with the consumer's lock held)."""
        del self._pending[pending]

    def waiting(self) -> bool:
        """Whether anything waits to be sent."""
        with self._lock:
            return any(self._pending)

    def send_acks_by(self) -> float:
        """When the first acks waiting for a take must go (inf: none waits); a resting partition's, once
        its rest ends."""
        with self._lock:
            return min(
                (
                    max(pending.send_acks_by(), self._resting(pending.partition))
                    for pending in self._pending
                    if pending.acks
                ),
                default=float("inf"),
            )

    def ride(self, pending: Pending, room: AckRoom) -> list[Ack]:
        """The lane's acks that fit in ``room``, the room of its take's call, taken off to ride with
        its take (at most ``SETTLE_CHUNK``)."""
        with self._lock:
            return pending.take_acks(room)

    def ride_along(
        self, partition: Partition, taking: set[Pending], limit: int, room: AckRoom
    ) -> list[tuple[Pending, list[Ack]]]:
        """The acks of up to ``limit`` lanes of ``partition`` but those ``taking``, as many as fit in
        ``room`` (what the call's takes left), taken off to ride in a take call of the partition (at
        most ``SETTLE_CHUNK`` a lane)."""
        riders: list[tuple[Pending, list[Ack]]] = []
        if limit <= 0:
            return riders
        with self._lock:
            for pending in self._pending:
                if pending.acks and pending.partition == partition and pending not in taking:
                    acks = pending.take_acks(room)
                    if acks:
                        riders.append((pending, acks))
                        if len(riders) == limit:
                            break
        return riders

    def calls(self, now: float, hold: Callable[[Pending], bool] | None = None) -> list[Settle]:
        """The calls for everything pending, taken off the lanes: undo first, then acks, then fails;
        the acks of lanes that ``hold`` says may wait for a take stay (unless they fill a call), and so
        does everything of a partition that rests (``Outages``)."""
        settle: list[Settle] = []
        with self._lock:
            for pending in self._pending:
                if not pending or self._resting(pending.partition) > now:
                    continue
                partition, topic = pending.partition, pending.topic
                if pending.untakes:
                    untakes, pending.untakes = pending.untakes, []
                    settle.append(Settle(pending, UNTAKE, untakes, calls.untake(partition, topic, untakes)))
                acks: list[Ack] = []
                if pending.acks and not (hold and not pending.fills_a_call() and hold(pending)):
                    acks, pending.acks = pending.acks, []
                fails, pending.fails = pending.fails, []
                for done in _ack_calls(acks):
                    settle.append(Settle(pending, ACK, done, calls.ack(partition, topic, pending.rules, done)))
                for start in range(0, len(fails), SETTLE_CHUNK):
                    failed = fails[start : start + SETTLE_CHUNK]
                    settle.append(Settle(pending, FAIL, failed, calls.fail(partition, topic, pending.rules, failed)))
        return settle

    def rode(self, pending: Pending, acks: list[Ack], reply: int | Exception) -> None:
        """What became of acks that rode with a take: ``reply`` is how many were acknowledged, or the
        take's error (the take reports it; the acks go back for the next pass)."""
        if isinstance(reply, Exception):
            with self._lock:
                pending.acks = acks + pending.acks  # ``acks_since`` is theirs or older: due soon
        else:
            self._counts["acked"] += reply
            self._tally.ended(pending.topic, done=reply)

    def settled(self, settle: Settle, reply: Any) -> None:
        """What a settle call's reply (or error) means."""
        pending = settle.pending
        if isinstance(reply, Exception):
            self._redis_error(settle.kind, pending.partition, pending.topic, reply)
            self._put_back(settle)
        elif settle.kind == ACK:
            self._counts["acked"] += reply
            self._tally.ended(pending.topic, done=reply)
        elif settle.kind == UNTAKE:
            self._untaken(pending, reply)
        else:
            self._counts.update(retried=reply.retried, dead=reply.dead)
            self._telemetry.count("Retried", pending.topic, reply.retried)
            self._telemetry.count("Dead", pending.topic, reply.dead)
            self._tally.ended(pending.topic, failed=reply.retried + reply.dead, dead=reply.dead)
            failures = {failure.id: failure for failure in settle.items}
            for job_id in reply.dead_ids:
                error = failures[job_id].error
                context = {"topic": pending.topic, "id": job_id, "error": error}
                log.error("%s/%s is dead: %s", pending.topic, job_id, error, extra=context)

    def _put_back(self, settle: Settle) -> None:
        """A failed call's items, for the next pass (a lease that expires meanwhile is retried)."""
        pending = settle.pending
        with self._lock:
            if settle.kind == ACK:
                pending.acks = settle.items + pending.acks
            elif settle.kind == FAIL:
                pending.fails = settle.items + pending.fails
            else:
                pending.undo_later(settle.items)

    def _untaken(self, pending: Pending, jobs: int) -> None:
        self._counts["untaken"] += jobs
        if jobs:
            log.warning(
                "%s (partition %d): %d jobs of takes whose reply was lost are back in the ready list",
                pending.topic,
                pending.partition.index,
                jobs,
                extra={"topic": pending.topic, "untaken": jobs},
            )
