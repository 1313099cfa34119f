"""Callbacks: when a job of a topic with ``on_done`` succeeds (with ``on_dead``, goes dead), a job is
created in that topic, due at once, that says what became of it. The Lua call that settles the job
leaves a record in its partition's outbox (``store/lua/includes/callbacks.lua``, where the record's
fields are listed); the sweeper makes the jobs (``loops/callbacks.py``). Why it is exactly once:
docs/how-it-works.md's "Callbacks"."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .job import decode_result

DONE, DEAD = "done", "dead"  # a record's outcome


@dataclass(frozen=True, slots=True)
class Record:
    """One outbox record: what became of job ``id`` of ``topic``, for the callback topic ``target``."""

    seq: int  # increasing within its partition
    target: str
    topic: str
    id: str
    key: str | None
    outcome: str  # DONE or DEAD
    attempts: int
    started_at_ms: int | None  # when its last attempt's handler started (None: not known)
    ended_at_ms: int
    body: str  # the job's body, its JSON as stored
    detail: str  # DONE: its result as stored (``encode_result``); DEAD: its last error

    @classmethod
    def decode(cls, raw: str) -> Record:
        seq, target, topic, job_id, key, outcome, attempts, started, ended, body, detail = json.loads(raw)
        return cls(
            int(seq), target, topic, job_id, key or None, outcome, int(attempts),
            int(started) if started else None, int(ended), body, detail,
        )  # fmt: skip

    def job_body(self) -> dict[str, Any]:
        """The callback job's body: the job's topic, id, key, outcome, attempts, body, result (and
        whether it was cut) or error, and its last attempt's start and end."""
        shown: dict[str, Any] = {
            "topic": self.topic,
            "id": self.id,
            "key": self.key,
            "outcome": self.outcome,
            "attempts": self.attempts,
            "body": json.loads(self.body),
        }
        if self.outcome == DONE:
            shown["result"], shown["result_truncated"] = decode_result(self.detail)
        else:
            shown["error"] = self.detail
        shown["started_at_ms"], shown["ended_at_ms"] = self.started_at_ms, self.ended_at_ms
        return shown
