"""The sweep's part for recurring schedules: in each partition, it makes the next occurrence of every
schedule whose pending one has fallen due, and carries out outboxes whose claim expired, by the steps
``store/schedules.py`` describes (claim, write, settle)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace
from typing import NamedTuple

from pydantic import ValidationError

from delayq.core.errors import RedisUnavailable
from delayq.store import calls
from delayq.store.calls import CLAIM, Move, Stored
from delayq.store.connection import redis_errors
from delayq.store.keys import Partition
from delayq.store.namespace import Namespace
from delayq.store.schedules import (
    CLAIM_MS,
    CREATE,
    Definition,
    Outbox,
    Progress,
    Schedules,
    Step,
    in_time,
    new_token,
    settling,
)

from .outages import Outages

log = logging.getLogger("delayq.schedules")

DUE_LIMIT = 100  # schedules handled per partition and call


class _Plan(NamedTuple):
    """What a sweep does with one due schedule: the move that claims it, and, when that leaves work,
    the outbox to carry out and the move that settles it."""

    claim: Move
    outbox: Outbox | None = None
    settle: Move | None = None


class Scheduler:
    """The sweep's part for schedules: in each partition, makes the next occurrence of every schedule
    whose pending one has fallen due, and carries out outboxes whose claim expired. ``pass_once`` is
    one read per partition when nothing is due, whatever the number of schedules."""

    def __init__(
        self,
        namespace: Namespace,
        *,
        counts: Counter[str] | None = None,
        claim_ms: int = CLAIM_MS,
        limit: int = DUE_LIMIT,
        outages: Outages | None = None,
    ) -> None:
        self.namespace = namespace
        self.outages = outages or Outages(namespace, tick=namespace.settings.tick, name="schedules")
        self.store = Schedules(namespace, claim_ms=claim_ms)
        if counts is not None:
            self.store.counts = counts
        self.claim_ms = claim_ms
        self.limit = limit

    @property
    def counts(self) -> Counter[str]:
        return self.store.counts

    def pass_once(self) -> int | None:
        """One pass over every partition; the ms until a schedule next falls due (0: more are due now;
        None: none). A partition whose Redis fails is logged, counted and tried again next pass."""
        next_in: list[int | None] = []
        for partition in self.namespace.keys.partitions:
            now = time.monotonic()
            if self.outages.resting(partition, now):
                continue
            try:
                with redis_errors():
                    next_in.append(self._advance(partition))
            except RedisUnavailable as exc:
                self.counts["redis_errors"] += 1
                self.namespace.telemetry.count("RedisErrors", None)
                if not self.outages.failed(partition, exc, now):  # refused by an ACL: not an outage
                    log.warning("schedules of partition %d: %s", partition.index, exc.message)
                continue
            self.outages.answered(partition)
        known = [ms for ms in next_in if ms is not None]
        return min(known) if known else None

    def _advance(self, partition: Partition) -> int | None:
        """Claims, carries out and settles the work of the partition's due schedules; the ms until the
        next one falls due."""
        redis = self.namespace.redis
        due = calls.schedules_due(partition, self.limit).run(redis)
        if not due.schedules:
            return due.next_in_ms
        token = new_token()
        plans = [plan for stored in due.schedules if (plan := self._plan(stored, due.now_ms, token)) is not None]
        claimed_at = time.monotonic()
        claimed = calls.schedules_cas(partition, [plan.claim for plan in plans], self.claim_ms).run(redis)
        won = [plan for plan, made in zip(plans, claimed.made, strict=True) if made and plan.outbox is not None]
        self.counts["schedule_races_lost"] += claimed.made.count(False)
        next_in = [due.next_in_ms]
        if won and in_time(claimed_at, self.claim_ms):
            done = self.store.carry_out([plan.outbox for plan in won if plan.outbox is not None])
            settles = [plan.settle for plan, ok in zip(won, done, strict=True) if ok and plan.settle is not None]
            if settles:
                settled = calls.schedules_cas(partition, settles, self.claim_ms).run(redis)
                next_in += [max(0, move.due - settled.now_ms) for move in settles if isinstance(move.due, int)]
        known = [ms for ms in next_in if ms is not None]
        return min(known) if known else None

    def _plan(self, stored: Stored, now_ms: int, token: str) -> _Plan | None:
        """What to do with a due schedule at ``now_ms``: carry out its outbox if a claim on it expired,
        else make the occurrence that follows its pending one (the catch-up rule's), or take it out of
        the due index once its calendar has ended. None for a definition that cannot be read."""
        key, raw = stored.name, stored.progress or ""
        if not raw:  # in the due index with no progress (never written so): out of it
            return _Plan(Move(key, "", "", None))
        progress = Progress.decode(raw)
        topic, name = key.split("/", 1)
        try:
            definition = Definition.decode(stored.definition) if stored.definition else None
        except (ValueError, KeyError, ValidationError) as exc:
            log.error("schedule %s cannot be read, left as it is: %s", key, exc)
            return None
        schedule = definition.schedule if definition else None
        if progress.claim:  # its claimant died, or was too slow: take its outbox over
            claimed = replace(progress, claim=token)
        else:
            following = None
            if definition is not None and progress.last_ms is not None:
                following = definition.calendar().next_to_create(progress.last_ms, now_ms)
            if following is None:  # the calendar has ended: nothing more to make
                return _Plan(Move(key, raw, raw, None))
            claimed = Progress(progress.generation, following, token, (Step(CREATE, following),))
        outbox = Outbox(topic, name, schedule, claimed.outbox)
        return _Plan(Move(key, raw, claimed.encode(), CLAIM), outbox, settling(key, claimed))
