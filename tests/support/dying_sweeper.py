"""``python -m support.dying_sweeper``: the sweep loop (``python -m delayq sweep``), which kills itself with
SIGKILL the first time it has claimed a schedule's next occurrence and is about to create it: a
sweeper that dies between the claim and the write, at the worst line, on purpose rather than by luck.

Before it dies it writes the claimed outboxes as JSON to the file named by ``DELAYQ_FAULT_CLAIMS``, so
that the scenario knows which occurrences were left claimed."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence

from delayq.__main__ import main
from delayq.store import schedules as scheduler

CLAIMS_ENV = "DELAYQ_FAULT_CLAIMS"


def die_before_the_writes(self: scheduler.Schedules, outboxes: Sequence[scheduler.Outbox]) -> list[bool]:
    claimed = [
        {"topic": box.topic, "name": box.name, "at_ms": step.at_ms}
        for box in outboxes
        for step in box.steps
        if step.kind == scheduler.CREATE
    ]
    with open(os.environ[CLAIMS_ENV], "w") as out:
        json.dump(claimed, out)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


if __name__ == "__main__":
    scheduler.Schedules.carry_out = die_before_the_writes  # type: ignore[method-assign]
    main(["sweep"])
