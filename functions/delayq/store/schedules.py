"""Recurring schedules in Redis: their definitions, their progress, and the job writes of their
outboxes. A schedule lives in the partition of its ``topic/name``, in four keys (``keys.py``): its
definition (JSON, with when it was written, so every sweep builds the same ``every`` calendar), its
progress, one string ``generation|last|claim|outbox``, and its place in the partition's due index.
An occurrence lives in its own partition, so making one takes three calls: claim (a compare-and-set
of the progress, recording the outbox), write (create the job), settle (clear the outbox); a write of
the schedule itself takes the same steps. Why, and what races and deaths it survives:
docs/schedules.md's "How it works". The sweep's part is ``loops/occurrences.py``; the
calendar is ``core/calendar.py``, the definition ``core/recurring.py``.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from delayq.core.calendar import Calendar
from delayq.core.errors import Code, RedisUnavailable, ScheduleNotFound
from delayq.core.job import encode_overrides
from delayq.core.loop import pause
from delayq.core.models import body_json
from delayq.core.recurring import NEXT_RUNS, Schedule, ScheduleInfo, occurrence_id

from . import calls
from .calls import JobWrite, Move, Stored
from .connection import redis_errors, unavailable
from .keys import Partition
from .scripts import Call, run_many

if TYPE_CHECKING:
    from .namespace import Namespace

log = logging.getLogger("delayq.schedules")

CLAIM_MS = 5000  # how long an outbox stays its claimant's: a sweep takes it over after this
LIST_PAGE = 100  # schedules read per call when listing
WRITE_TRIES = 100  # reads and writes of one put or delete before it gives up (503): 10 s of waits at most
CREATE, REPLACE, CANCEL, FORGET = "c", "r", "x", "d"  # the kinds of outbox step


class Step(NamedTuple):
    """One job write of an outbox: create the occurrence at ``at_ms``, create or replace it, cancel it
    if it has not started; or forget the schedule's progress once the others are done."""

    kind: str
    at_ms: int = 0

    def encode(self) -> str:
        return self.kind if self.kind == FORGET else f"{self.kind}{self.at_ms}"

    @classmethod
    def decode(cls, text: str) -> Step:
        return cls(text[0], int(text[1:] or 0))


@dataclass(frozen=True, slots=True)
class Progress:
    """A schedule's progress (see the module's docstring)."""

    generation: int
    last_ms: int | None
    claim: str = ""
    outbox: tuple[Step, ...] = ()

    @classmethod
    def decode(cls, raw: str) -> Progress:
        generation, last, claim, outbox = raw.split("|")
        steps = tuple(Step.decode(step) for step in outbox.split(",") if step)
        return cls(int(generation), int(last) if last else None, claim, steps)

    def tail(self) -> str:
        """The progress without its generation, as ``schedule_write`` takes it."""
        last = "" if self.last_ms is None else str(self.last_ms)
        return f"{last}|{self.claim}|{','.join(step.encode() for step in self.outbox)}"

    def encode(self) -> str:
        return f"{self.generation}|{self.tail()}"


@dataclass(frozen=True, slots=True)
class Definition:
    """A schedule's definition as stored: as given, and when it was written (Redis' time)."""

    schedule: Schedule
    created_ms: int

    def encode(self) -> str:
        document = {"created_ms": self.created_ms, "schedule": self.schedule.model_dump(mode="json")}
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, raw: str) -> Definition:
        document = json.loads(raw)
        return cls(Schedule.model_validate(document["schedule"]), int(document["created_ms"]))

    def calendar(self) -> Calendar:
        return self.schedule.calendar(self.created_ms)


class Outbox(NamedTuple):
    """The job writes a change of schedule ``topic/name`` implies (``schedule``: what its occurrences
    are made of; None when it is being deleted)."""

    topic: str
    name: str
    schedule: Schedule | None
    steps: tuple[Step, ...]


class _Change(NamedTuple):
    """A write of a schedule, decided from what was read at ``read_ms`` (Redis' time): the definition to
    store ('' deletes it), the progress without its generation (None forgets it), when it is due."""

    definition: str
    progress: Progress | None
    due: int | None
    read_ms: int


def schedule_key(topic: str, name: str) -> str:
    """A schedule's name in its partition's keys: ``topic/name`` (neither holds a ``/``)."""
    return f"{topic}/{name}"


def upcoming(calendar: Calendar, last_ms: int | None, now_ms: int, count: int = NEXT_RUNS) -> tuple[int, ...]:
    """The next ``count`` runs of a schedule whose latest occurrence made is ``last_ms``, at ``now_ms``:
    that one while it is ahead, else the one the sweep makes next (by the catch-up rule), then those
    that follow it. None once the calendar has ended."""
    if last_ms is None:
        return ()
    first = last_ms if last_ms > now_ms else calendar.next_to_create(last_ms, now_ms)
    if first is None:
        return ()
    return (first, *calendar.next_runs(first, count - 1))


def new_token() -> str:
    return secrets.token_hex(8)


def in_time(claimed_at: float, claim_ms: int) -> bool:
    """Whether a claim sent at ``claimed_at`` (monotonic) leaves time to start its writes: within half
    the claim, so that they are done long before anyone else may take it over."""
    return (time.monotonic() - claimed_at) * 1000 < claim_ms / 2


def _replacing(name: str, old: Progress | None, now_ms: int, first_ms: int | None) -> tuple[Step, ...]:
    """The job writes of a schedule written at ``now_ms`` over ``old`` progress, its new calendar's
    first occurrence being ``first_ms`` (None: none, or a delete): cancel, if they have not started,
    the old calendar's pending occurrence and those an unfinished outbox was creating or cancelling;
    then create the first, or replace its job when it has the same id as one of those."""
    doomed: set[int] = set()
    if old is not None:
        doomed = {step.at_ms for step in old.outbox if step.kind != FORGET}
        if old.last_ms is not None and old.last_ms > now_ms:
            doomed.add(old.last_ms)
    if first_ms is None:
        return tuple(Step(CANCEL, at) for at in sorted(doomed))
    first_id = occurrence_id(name, first_ms)
    same = {at for at in doomed if occurrence_id(name, at) == first_id}
    cancels = tuple(Step(CANCEL, at) for at in sorted(doomed - same))
    return (*cancels, Step(REPLACE if same else CREATE, first_ms))


def _progress(stored: Stored) -> Progress | None:
    return Progress.decode(stored.progress) if stored.progress else None


def _token_for(steps: tuple[Step, ...]) -> str:
    """A claim token for an outbox with steps; none for an empty one."""
    return new_token() if steps else ""


def settling(key: str, claimed: Progress) -> Move:
    """The move that settles a claimed outbox once carried out: cleared, the schedule due at its
    latest occurrence; or gone, when the outbox was a delete's."""
    if any(step.kind == FORGET for step in claimed.outbox):
        return Move(key, claimed.encode(), "", None)
    return Move(key, claimed.encode(), replace(claimed, claim="", outbox=()).encode(), claimed.last_ms)


class Schedules:
    """The recurring schedules of a queue's namespace: written, read and listed (what ``Queue`` and
    the API call), and their outboxes carried out (theirs, and the sweep's through ``Scheduler``)."""

    def __init__(self, namespace: Namespace, *, claim_ms: int = CLAIM_MS) -> None:
        self.namespace = namespace
        self.claim_ms = claim_ms
        self.counts: Counter[str] = Counter()

    # ------------------------------------------------------------------------------- writes

    def put(self, topic: str, name: str, schedule: Schedule) -> ScheduleInfo:
        """Creates or replaces a validated schedule; its first occurrence exists when this returns."""
        self.namespace.topic_config(topic)  # UnknownTopic (422) for a topic nobody configured

        def replacing(found: Stored, now_ms: int) -> _Change:
            definition = Definition(schedule, now_ms)
            first = definition.calendar().next_after(now_ms - 1)
            steps = _replacing(name, _progress(found), now_ms, first)
            return _Change(definition.encode(), Progress(0, first, _token_for(steps), steps), first, now_ms)

        written, change = self._write(topic, name, schedule, replacing)
        calendar = Definition(schedule, change.read_ms).calendar()
        runs = upcoming(calendar, change.due, written.now_ms)
        return ScheduleInfo(topic, name, schedule, change.read_ms, runs, created=written.code == Code.CREATED)

    def delete(self, topic: str, name: str) -> None:
        """Deletes a schedule, and cancels its pending occurrence if it has not started."""

        def deleting(found: Stored, now_ms: int) -> _Change:
            if found.definition is None:
                raise ScheduleNotFound(topic, name)
            old = _progress(found)
            steps = _replacing(name, old, now_ms, None)
            if not steps:
                return _Change("", None, None, now_ms)  # nothing to cancel: gone in one call
            last_ms = old.last_ms if old else None
            return _Change("", Progress(0, last_ms, new_token(), (*steps, Step(FORGET))), None, now_ms)

        self._write(topic, name, None, deleting)

    def _write(
        self, topic: str, name: str, schedule: Schedule | None, decide: Callable[[Stored, int], _Change]
    ) -> tuple[calls.Written, _Change]:
        """Reads the schedule, ``decide``s its change and writes it if nothing changed meanwhile (else
        reads again), then carries out and settles the outbox it claimed."""
        partition, key = self.namespace.keys.for_schedule(topic, name), schedule_key(topic, name)
        with redis_errors(self.namespace.server):
            for _ in range(WRITE_TRIES):
                read = calls.schedule_read(partition, [key]).run(self.namespace.redis)
                found = read.schedules[0]
                change = decide(found, read.now_ms)
                claimed_at = time.monotonic()
                written = calls.schedule_write(
                    partition,
                    key,
                    expected=found.progress or "",
                    definition=change.definition,
                    progress=change.progress.tail() if change.progress else "",
                    claim_ms=self.claim_ms,
                    due=change.due,
                ).run(self.namespace.redis)
                if written.code == Code.NOT_FOUND:
                    raise ScheduleNotFound(topic, name)
                if self._written(written):
                    break
            else:
                raise RedisUnavailable(f"schedule {name!r} of topic {topic!r} kept changing: try again")
            if change.progress is not None and change.progress.outbox:
                claimed = replace(change.progress, generation=written.generation)
                self._finish(partition, Outbox(topic, name, schedule, claimed.outbox), key, claimed, claimed_at)
        return written, change

    def _written(self, written: calls.Written) -> bool:
        """Whether a schedule write went through; if not, waits a little when another caller's claim
        is in the way (its writes take milliseconds; its deadline, if that caller died)."""
        if written.code == Code.BUSY:
            pause(min(written.now_ms + 1, 100) / 1000)
        return written.code not in (Code.CHANGED, Code.BUSY)

    def _finish(self, partition: Partition, outbox: Outbox, key: str, claimed: Progress, claimed_at: float) -> None:
        """Carries out a write's claimed outbox and settles it; else leaves it to the sweep and says so
        (503: the definition is written, its job writes will be done within ``CLAIM_MS``)."""
        if not outbox.steps:
            return
        if not (in_time(claimed_at, self.claim_ms) and self.carry_out([outbox])[0]):
            raise RedisUnavailable(
                f"schedule {outbox.name!r} of topic {outbox.topic!r} is written, but its jobs are not yet: "
                "the sweep finishes them within seconds"
            )
        calls.schedules_cas(partition, [settling(key, claimed)], self.claim_ms).run(self.namespace.redis)

    # ------------------------------------------------------------------------------- reads

    def get(self, topic: str, name: str) -> ScheduleInfo:
        partition, key = self.namespace.keys.for_schedule(topic, name), schedule_key(topic, name)
        with redis_errors(self.namespace.server):
            stored = calls.schedule_read(partition, [key]).run(self.namespace.redis)
        info = self._info(stored.schedules[0], stored.now_ms)
        if info is None:
            raise ScheduleNotFound(topic, name)
        return info

    def find(self, topic: str | None = None) -> list[ScheduleInfo]:
        """Every schedule (of ``topic``), by topic and name."""
        # '0' follows '/': every topic/name of the topic sorts between '[topic/' and '(topic0'.
        first, last = ("-", "+") if topic is None else (f"[{topic}/", f"({topic}0")
        found: list[ScheduleInfo] = []
        with redis_errors(self.namespace.server):
            for partition in self.namespace.keys.partitions:
                found += self._list_partition(partition, first, last)
        found.sort(key=lambda info: (info.topic, info.name))
        return found

    def _list_partition(self, partition: Partition, first: str, last: str) -> Iterator[ScheduleInfo]:
        while True:
            page = calls.schedule_list(partition, first, last, LIST_PAGE).run(self.namespace.redis)
            for stored in page.schedules:
                info = self._info(stored, page.now_ms)
                if info is not None:
                    yield info
            if len(page.schedules) < LIST_PAGE:
                return
            first = f"({page.schedules[-1].name}"

    @staticmethod
    def _info(stored: Stored, now_ms: int) -> ScheduleInfo | None:
        """A stored schedule as callers see it; None when it does not exist (or is being deleted)."""
        if stored.definition is None:
            return None
        topic, name = stored.name.split("/", 1)
        definition = Definition.decode(stored.definition)
        last_ms = Progress.decode(stored.progress).last_ms if stored.progress else None
        runs = upcoming(definition.calendar(), last_ms, now_ms)
        return ScheduleInfo(topic, name, definition.schedule, definition.created_ms, runs)

    # ------------------------------------------------------------------------------- job writes

    def carry_out(self, outboxes: Sequence[Outbox]) -> list[bool]:
        """Does the job writes of each outbox, all in one round trip; whether each one's all went
        through (a create that finds its job made already, or a cancel its job started or gone, did)."""
        sends: list[tuple[int, Step, Call[Any]]] = []
        for i, outbox in enumerate(outboxes):
            for step in outbox.steps:
                call = self._job_write(outbox, step)
                if call is not None:
                    sends.append((i, step, call))
        done = [True] * len(outboxes)
        if not sends:
            return done
        writes = [call for _, _, call in sends]
        replies = run_many(self.namespace.redis, writes, return_exceptions=True, replicas=self.namespace.replicas)
        for (i, step, _), reply in zip(sends, replies, strict=True):
            outbox = outboxes[i]
            if isinstance(reply, Exception):
                done[i] = False
                # Redis down or failing over is logged once, by the sweep (outages.py): not once a write.
                level = logging.DEBUG if unavailable(reply) else logging.WARNING
                log.log(
                    level, "schedule %s/%s: a job write failed, retried later: %s", outbox.topic, outbox.name, reply
                )
            elif step.kind in (CREATE, REPLACE) and reply.codes[0] == Code.CREATED:
                self.counts["occurrences"] += 1
                self.namespace.telemetry.count("Enqueued", outbox.topic)
        return done

    def _job_write(self, outbox: Outbox, step: Step) -> Call[Any] | None:
        """The script call of one step (None: nothing to write)."""
        topic, job_id = outbox.topic, occurrence_id(outbox.name, step.at_ms)
        partition = self.namespace.keys.for_job(topic, job_id)
        if step.kind == CANCEL:
            return calls.cancel(partition, topic, job_id, only="pending")
        if step.kind == FORGET or outbox.schedule is None:
            return None
        config = self.namespace.settings.topics.for_topic(topic)
        if config is None:
            self.counts["skipped"] += 1
            log.warning(
                "schedule %s/%s: topic %r is no longer configured; %s not made", topic, outbox.name, topic, job_id
            )
            return None
        schedule = outbox.schedule
        write = JobWrite(
            topic,
            job_id,
            body_json(schedule.body),
            f"a{step.at_ms}",
            encode_overrides(schedule, floor_s=config.min_backoff_s),
            schedule.key or "",
        )
        return calls.enqueue(partition, [write], replace=step.kind == REPLACE)
