"""A topic's jobs a page at a time, read from every partition and merged (``listing.py`` keeps the
cursors and the merges), or only one flow key's; and a bulk cancel of one key's jobs. Nothing
indexes jobs by key (a key costs nothing on the hot path), so one key's pages walk the state's
listing, ``MAX_LIMIT`` jobs per partition and call, until they are full."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from delayq.core.errors import Code

from . import calls
from .calls import Listed
from .connection import redis_errors
from .listing import (
    DONE,
    MAX_LIMIT,
    READY,
    SCORED,
    merge_ready,
    merge_scored,
    ready_cursor,
    scored_after,
    scored_cursor,
)
from .scripts import run_many

if TYPE_CHECKING:
    from .queue import Queue


class Pages:
    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def listed(
        self, topic: str, state: str, limit: int, cursor: str | None, afters: list[str] | None = None
    ) -> tuple[list[Listed], str | None]:
        """A page of ``topic``'s jobs in ``state`` as the partitions list them, and the next cursor;
        ``afters`` gets the cursor after each job."""
        if state in (READY, DONE):
            positions = ready_cursor(cursor, len(self.queue.keys), state)
            partitions = self.queue.keys.partitions
            if state == READY:
                reads = [calls.jobs_ready(p, topic, limit=limit, after=positions.get(p.index)) for p in partitions]
            else:
                # A done cursor holds list positions only (ready_cursor refuses a (turn, id) there).
                reads = [
                    calls.jobs_done(p, topic, limit=limit, before=cast(int | None, positions.get(p.index)))
                    for p in partitions
                ]
            with redis_errors(self.queue.server):
                pages = run_many(self.queue.redis, reads)
            return merge_ready(list(enumerate(pages)), positions, limit, state, afters)
        kind, descending = SCORED[state]
        after = scored_cursor(cursor, state)
        scored = [
            calls.jobs_scored(p, topic, kind, descending=descending, limit=limit + 1, after=after)
            for p in self.queue.keys.partitions
        ]
        with redis_errors(self.queue.server):
            listed, following = merge_scored(run_many(self.queue.redis, scored), state, limit)
        if afters is not None:
            afters += [scored_after(state, job) for job in listed]
        return listed, following

    def listed_of_key(
        self, topic: str, state: str, limit: int, cursor: str | None, key: str
    ) -> tuple[list[Listed], str | None]:
        """The first ``limit`` jobs of ``key`` from ``cursor`` on, and the cursor after the last of them
        if more of the key's are left: the listing walked ``MAX_LIMIT`` at a time until one more is found."""
        found: list[tuple[Listed, str]] = []
        following: str | None = cursor
        while len(found) <= limit:
            afters: list[str] = []
            listed, following = self.listed(topic, state, MAX_LIMIT, following, afters)
            found += [(job, after) for job, after in zip(listed, afters, strict=True) if job.meta.key == key]
            if following is None:
                break
        page = [job for job, _ in found[:limit]]
        return page, found[limit - 1][1] if len(found) > limit else None

    def cancel_of_key(self, topic: str, state: str, key: str) -> int:
        """Cancels the jobs of ``key`` in ``state``: the state's listing walked once, ``MAX_LIMIT`` at a
        time, each job of the key found cancelled if it is still in that state. How many were."""
        total = 0
        cursor: str | None = None
        while True:
            listed, cursor = self.listed(topic, state, MAX_LIMIT, cursor)
            cancels = [
                calls.cancel(self.queue.keys.for_job(topic, job.id), topic, job.id, only=state)
                for job in listed
                if job.meta.key == key
            ]
            if cancels:
                with redis_errors(self.queue.server):
                    total += sum(code == Code.OK for code in run_many(self.queue.redis, cancels))
            if cursor is None:
                return total
