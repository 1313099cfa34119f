"""What the HTTP API answers, as JSON-ready dicts, for the answers that are not one object's
``to_dict``: the API sends these, and ``delayq <command> --json`` prints the very same."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from delayq.core.activity import Minute
from delayq.core.job import DeadJob
from delayq.core.recurring import ScheduleInfo


def dead_jobs(jobs: Sequence[DeadJob]) -> dict[str, Any]:
    """``GET /topics/{topic}/dead``."""
    return {"jobs": [job.to_dict() for job in jobs]}


def history(minutes: Sequence[Minute]) -> dict[str, Any]:
    """``GET /topics/{topic}/history``."""
    return {"minutes": [minute.to_dict() for minute in minutes]}


def replayed(count: int) -> dict[str, Any]:
    """``POST /topics/{topic}/dead/replay``."""
    return {"replayed": count}


def purged(count: int) -> dict[str, Any]:
    """``DELETE /topics/{topic}/dead``."""
    return {"purged": count}


def cancelled(count: int) -> dict[str, Any]:
    """``DELETE /topics/{topic}/jobs``."""
    return {"cancelled": count}


def paused(state: bool) -> dict[str, Any]:
    """``POST /topics/{topic}/pause`` and ``/resume``."""
    return {"paused": state}


def schedules(found: Sequence[ScheduleInfo]) -> dict[str, Any]:
    """``GET /schedules``."""
    return {"schedules": [info.to_dict() for info in found]}
