"""Pages: a topic's jobs by state, the topics by name, a topic's forecast, its dead letters grouped by
error; their cursors and checks.

Each partition keeps its own order (``jobs_scored.lua``, ``jobs_ready.lua``); a page merges them.
Jobs in a sorted set order by (score, id) in every partition alike, so one cursor, the (score, id) of
the last job listed, serves them all. The ready lists have no common order: a ready cursor holds one
position per partition read so far, and a page takes from the partitions' heads, soonest run-at first.
Either way each partition is walked in its own order from its own cursor, so a job that stays in its
state is listed exactly once.

A cursor is opaque to callers: base64url of a small JSON array that names its listing, so a cursor of
another listing (or state) is refused, 422 naming ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Literal, get_args

from delayq.core.errors import InvalidField
from delayq.core.job import STATES, JobInfo, TopicStats
from delayq.core.models import ID_RE, KEY_RE, TOPIC_RE

from .calls import Listed, Place, ReadyPage

# The sorted set that keeps each state's jobs (keys.py), and whether its pages go newest first.
SCORED: dict[str, tuple[str, bool]] = {
    "delayed": ("delayed", False),
    "reserved": ("leased", False),
    "dead": ("dead", True),
}
READY, DONE = "ready", "done"  # kept in lists: paged by position (jobs_ready.lua, jobs_done.lua)
CancellableState = Literal["delayed", "ready", "dead"]  # the states whose jobs can be cancelled all at once
CANCELLABLE: tuple[str, ...] = get_args(CancellableState)
TOPICS, KEYS = "topics", "keys"
# A parked job's member (lua/includes/flow.lua): key|run_at|id.
PARKED_RE = re.compile(rf"{KEY_RE.pattern[1:-1]}\|\d{{15}}\|{ID_RE.pattern[1:-1]}")
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_CURSOR_CHARS = 16_384  # a ready cursor grows with the partitions it has read: about 12 characters each
DEFAULT_MINUTES, MAX_MINUTES = 60, 10_080  # a forecast looks this far ahead (a week at most)
DEFAULT_BUCKET_S, MAX_BUCKET_S = 60, 86_400
MAX_BUCKETS = 1440  # a day of minutes: one ZCOUNT per bucket and partition, one row per bucket


# ------------------------------------------------------------------------------------ pages


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of a topic's jobs in one state; ``next`` is the cursor of the following page, None at the end."""

    jobs: list[JobInfo]
    next: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": [job.to_dict() for job in self.jobs], "next": self.next}


@dataclass(frozen=True, slots=True)
class TopicPage:
    """A page of topics by name, each with its stats; ``next`` as for ``JobPage``."""

    topics: list[TopicStats]
    next: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"topics": [topic.to_dict() for topic in self.topics], "next": self.next}


@dataclass(frozen=True, slots=True)
class Bucket:
    from_ms: int
    to_ms: int
    count: int  # delayed jobs falling due in [from_ms, to_ms)

    def to_dict(self) -> dict[str, Any]:
        return {"from_ms": self.from_ms, "to_ms": self.to_ms, "count": self.count}


@dataclass(frozen=True, slots=True)
class Forecast:
    """How many delayed jobs fall due in each bucket from Redis' now on; empty buckets too."""

    topic: str
    buckets: list[Bucket]

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "buckets": [bucket.to_dict() for bucket in self.buckets]}


@dataclass(frozen=True, slots=True)
class ErrorGroup:
    """The dead jobs whose last error starts with the same line: how many, the newest's id and death."""

    error: str
    count: int
    example_id: str
    last_at_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.error, "count": self.count, "example_id": self.example_id, "last_at_ms": self.last_at_ms}


@dataclass(frozen=True, slots=True)
class DeadErrors:
    """A topic's dead letters grouped by error, most frequent first, of the ``scanned`` newest of its
    ``dead`` dead jobs (``DEAD_ERRORS_SCAN`` at most)."""

    errors: list[ErrorGroup]
    scanned: int
    dead: int

    def to_dict(self) -> dict[str, Any]:
        return {"errors": [group.to_dict() for group in self.errors], "scanned": self.scanned, "dead": self.dead}


DEAD_ERRORS_SCAN = 10_000  # dead jobs that GET /topics/{topic}/dead/errors groups at most: the newest
DEAD_ERRORS_PAGE = 1000  # dead jobs read per call of dead_errors.lua (no bodies: a few hundred KB)
ERROR_LINE_CHARS = 500  # of an error's first line, what groups it


def group_errors(dead: Iterable[tuple[str, int, str]]) -> list[ErrorGroup]:
    """Dead jobs (id, died_at_ms, last error) grouped by the first line of their error, most frequent
    first (then the most recent)."""
    groups: dict[str, ErrorGroup] = {}
    for job_id, died_at_ms, error in dead:
        line = error.split("\n", 1)[0].strip()[:ERROR_LINE_CHARS]
        group = groups.get(line)
        if group is None:
            groups[line] = ErrorGroup(line, 1, job_id, died_at_ms)
        elif died_at_ms > group.last_at_ms:
            groups[line] = ErrorGroup(line, group.count + 1, job_id, died_at_ms)
        else:
            groups[line] = ErrorGroup(line, group.count + 1, group.example_id, group.last_at_ms)
    return sorted(groups.values(), key=lambda group: (-group.count, -group.last_at_ms))


# ------------------------------------------------------------------------------------ checks


def check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidField("limit", f"must be an integer from 1 to {MAX_LIMIT}")
    return limit


def check_state(state: Any) -> str:
    if state not in STATES:
        raise InvalidField("state", f"must be one of {', '.join(STATES)}")
    return str(state)


def check_cancellable(state: Any) -> str:
    if state not in CANCELLABLE:
        raise InvalidField("state", f"must be one of {', '.join(CANCELLABLE)}")
    return str(state)


def forecast_window(minutes: Any, bucket: Any) -> tuple[int, int]:
    """(bucket, window) in ms of a forecast of ``minutes`` in buckets of ``bucket`` seconds."""
    for name, value, most in (("minutes", minutes, MAX_MINUTES), ("bucket", bucket, MAX_BUCKET_S)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise InvalidField(name, f"must be an integer from 1 to {most}")
    if math.ceil(minutes * 60 / bucket) > MAX_BUCKETS:
        shortest = math.ceil(minutes * 60 / MAX_BUCKETS)
        raise InvalidField("bucket", f"at most {MAX_BUCKETS} buckets: for {minutes} minutes, at least {shortest} s")
    return bucket * 1000, minutes * 60_000


def buckets(now_ms: int, bucket_ms: int, window_ms: int, counts: Sequence[int]) -> list[Bucket]:
    end = now_ms + window_ms
    return [
        Bucket(now_ms + i * bucket_ms, min(now_ms + (i + 1) * bucket_ms, end), count) for i, count in enumerate(counts)
    ]


# ------------------------------------------------------------------------------------ cursors


def encode_cursor(kind: str, *parts: Any) -> str:
    raw = json.dumps([kind, *parts], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _decode(cursor: Any, kind: str) -> list[Any]:
    """The parts of ``cursor``, a cursor of the listing ``kind``; ``InvalidField`` naming ``cursor``."""
    if not isinstance(cursor, str) or not 0 < len(cursor) <= MAX_CURSOR_CHARS:
        raise InvalidField("cursor", "must be the 'next' of a previous page")
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError):
        raise InvalidField("cursor", "must be the 'next' of a previous page") from None
    if not isinstance(value, list) or not value or value[0] != kind:
        raise InvalidField("cursor", f"is not a cursor of this listing ({kind})")
    return value[1:]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def scored_cursor(cursor: str | None, state: str) -> tuple[int, str] | None:
    """The (score, id) a page of ``state`` starts after."""
    if cursor is None:
        return None
    parts = _decode(cursor, state)
    if len(parts) != 2 or not _is_int(parts[0]) or not isinstance(parts[1], str) or not ID_RE.fullmatch(parts[1]):
        raise InvalidField("cursor", f"is not a cursor of this listing ({state})")
    return parts[0], parts[1]


def ready_cursor(cursor: str | None, partitions: int, kind: str = READY) -> dict[int, Place]:
    """Partition index -> the place a page of a list (``kind``: ready jobs, or done ones) starts
    after there (absent: at the list's first): a position, or for ready jobs with flow keys a (turn, id)
    or a parked member."""
    if cursor is None:
        return {}
    parts = _decode(cursor, kind)
    positions = parts[0] if len(parts) == 1 else None
    if not isinstance(positions, dict):
        raise InvalidField("cursor", f"is not a cursor of this listing ({kind})")
    out: dict[int, Place] = {}
    for index, position in positions.items():
        fair = (
            kind == READY
            and isinstance(position, list)
            and len(position) == 2
            and _is_int(position[0])
            and isinstance(position[1], str)
            and ID_RE.fullmatch(position[1])
        )
        parked = kind == READY and isinstance(position, str) and PARKED_RE.fullmatch(position)
        if not index.isdigit() or not int(index) < partitions or not (_is_int(position) or fair or parked):
            raise InvalidField("cursor", f"is not a cursor of this namespace's {kind} lists")
        out[int(index)] = (position[0], position[1]) if fair else position
    return out


def topics_cursor(cursor: str | None) -> str | None:
    """The topic name a page of topics starts after."""
    return _name_cursor(cursor, TOPICS, TOPIC_RE)


def keys_cursor(cursor: str | None) -> str | None:
    """The flow key a page of a topic's keys starts after."""
    return _name_cursor(cursor, KEYS, KEY_RE)


def _name_cursor(cursor: str | None, kind: str, pattern: re.Pattern[str]) -> str | None:
    if cursor is None:
        return None
    parts = _decode(cursor, kind)
    if len(parts) != 1 or not isinstance(parts[0], str) or not pattern.fullmatch(parts[0]):
        raise InvalidField("cursor", f"is not a cursor of this listing ({kind})")
    return parts[0]


# ------------------------------------------------------------------------------------ merging


def merge_scored(parts: Iterable[list[Listed]], state: str, limit: int) -> tuple[list[Listed], str | None]:
    """The first ``limit`` jobs of the partitions' pages (each asked for ``limit + 1``) in the
    state's order, and the next cursor: more are left when the pages hold more than ``limit``."""
    descending = SCORED[state][1]
    merged = list(islice(heapq.merge(*parts, key=lambda job: (job.place, job.id), reverse=descending), limit + 1))
    if len(merged) <= limit:
        return merged, None
    return merged[:limit], scored_after(state, merged[limit - 1])


def scored_after(state: str, job: Listed) -> str:
    """The cursor of the page of ``state`` that starts after ``job``."""
    return encode_cursor(state, job.place, job.id)


def merge_ready(
    parts: Sequence[tuple[int, ReadyPage]],
    positions: dict[int, Place],
    limit: int,
    kind: str = READY,
    afters: list[str] | None = None,
) -> tuple[list[Listed], str | None]:
    """The first ``limit`` jobs taken from the heads of the partitions' pages of a list (partition
    index, page), each partition in its own order: ready jobs soonest run-at first, receipts (``kind``
    done) newest first; and the next cursor. ``afters`` gets the cursor after each job listed."""

    def order(job: Listed) -> int:
        return job.meta.run_at_ms if kind == READY else -(job.meta.done_at_ms or 0)

    streams = [[(order(job), index, n, job) for n, job in enumerate(page.jobs)] for index, page in parts]
    # heapq.merge takes the least head each time: each stream keeps its own order, sorted or not.
    page = [entry for entry in islice(heapq.merge(*streams), limit)]
    used = dict.fromkeys((index for _, index, _, _ in page), 0)
    for _, index, _, job in page:
        positions[index] = job.place
        used[index] += 1
        if afters is not None:
            afters.append(_list_cursor(kind, positions))
    more = any(p.more or used.get(index, 0) < len(p.jobs) for index, p in parts)
    return [job for _, _, _, job in page], _list_cursor(kind, positions) if more else None


def _list_cursor(kind: str, positions: dict[int, Place]) -> str:
    return encode_cursor(kind, {str(index): position for index, position in sorted(positions.items())})
