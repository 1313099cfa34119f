"""How long a scheduled invocation loops, on the monotonic clock.

The event may carry ``seconds`` (top level, or under ``detail`` as EventBridge puts it): loop that
long; ``0`` is exactly one pass. Without it: ``DELAYQ_LOOP_SECONDS``, or until 5 s before the Lambda
deadline, whichever comes first. Work that cannot finish before the deadline is not started.
"""

from __future__ import annotations

import gc
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import InvalidField

STOP_BEFORE_DEADLINE_S = 5.0  # stop taking work this long before the Lambda deadline
FINISH_BEFORE_DEADLINE_S = 2.0  # started work must be settled this long before it
_NEVER = threading.Event()  # never set: what pause() waits on


def freeze_start_up() -> None:
    """Takes what start-up made (modules, classes, settings: about 50,000 objects, kept for the
    process's life) out of the garbage collector's sight, so that a full collection looks only at what
    the loop makes. A full collection stops every thread: one of a consume process took 40 to 80 ms,
    every few seconds, with nothing to free, and every job due meanwhile was that late."""
    gc.freeze()


def pause(seconds: float) -> None:
    """Waits ``seconds`` on the monotonic clock. Not ``time.sleep``: it fails (EINVAL) under libfaketime
    with the monotonic clock left alone, as the fault tier runs the loops."""
    if seconds > 0:
        _NEVER.wait(seconds)


class LambdaContext(Protocol):
    def get_remaining_time_in_millis(self) -> int: ...


def requested_seconds(event: Any) -> float | None:
    """``seconds`` from the event, top level or under ``detail``; None when absent."""
    if not isinstance(event, Mapping):
        return None
    value = event.get("seconds")
    if value is None and isinstance(event.get("detail"), Mapping):
        value = event["detail"].get("seconds")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidField("seconds", "must be a number >= 0")
    return float(value)


@dataclass(frozen=True)
class Budget:
    """When to stop taking new work (``stop_at``) and when started work must be done (``finish_by``)."""

    started: float
    stop_at: float
    finish_by: float | None
    one_pass: bool = False

    @classmethod
    def of(cls, seconds: float, *, remaining_s: float | None = None, now: float | None = None) -> Budget:
        """Loop ``seconds`` (0: one pass), within ``remaining_s`` left before a hard deadline, if any."""
        start = time.monotonic() if now is None else now
        stop_at = start + seconds
        finish_by = None
        if remaining_s is not None:
            stop_at = min(stop_at, start + remaining_s - STOP_BEFORE_DEADLINE_S)
            finish_by = start + remaining_s - FINISH_BEFORE_DEADLINE_S
        return cls(started=start, stop_at=stop_at, finish_by=finish_by, one_pass=seconds == 0)

    @classmethod
    def from_event(cls, event: Any, context: LambdaContext | None, loop_seconds: float) -> Budget:
        seconds = requested_seconds(event)
        remaining = None
        if context is not None and hasattr(context, "get_remaining_time_in_millis"):
            remaining = context.get_remaining_time_in_millis() / 1000
        return cls.of(loop_seconds if seconds is None else seconds, remaining_s=remaining)

    @classmethod
    def forever(cls) -> Budget:
        """For a long-running process (the local stack): loop until stopped."""
        return cls(started=time.monotonic(), stop_at=math.inf, finish_by=None)

    def taking(self, now: float | None = None) -> bool:
        """Whether new work may still be started."""
        return (time.monotonic() if now is None else now) < self.stop_at

    def fits(self, seconds: float, now: float | None = None) -> bool:
        """Whether work that may take ``seconds`` can finish before the hard deadline."""
        if self.finish_by is None:
            return True
        return (time.monotonic() if now is None else now) + seconds <= self.finish_by

    @property
    def run_ms(self) -> int:
        """The longest a job can run in this budget (``finish_by`` minus the start), in ms; -1 without
        a deadline. Rounded: in floats 58 s can come out 57.99999... s, which must not read as 57."""
        return -1 if self.finish_by is None else max(0, round((self.finish_by - self.started) * 1000))

    def left(self, now: float | None = None) -> float:
        return self.stop_at - (time.monotonic() if now is None else now)
