"""Helpers for the loop tests: run a Sweeper or a Consumer in a background thread, poll for a state."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from delayq import JobNotFound, Queue
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 5.0, interval: float = 0.01) -> T:
    """Polls ``predicate`` until it is truthy; returns its last value (falsy on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def state(queue: Queue, topic: str, job_id: str) -> str | None:
    """The job's state, or None when it is gone."""
    try:
        return queue.get(topic, job_id).state
    except JobNotFound:
        return None


class Running:
    """A Sweeper or Consumer looping in a daemon thread until ``stop()`` (or its budget runs out)."""

    def __init__(self, loop: Sweeper | Consumer, budget_s: float = 30.0) -> None:
        self.loop = loop
        self.budget = Budget.of(budget_s)
        self.summary: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"test-{type(loop).__name__}", daemon=True)

    def _run(self) -> None:
        try:
            self.summary = self.loop.run(self.budget)
        except BaseException as exc:
            self.error = exc

    def start(self) -> Running:
        self.thread.start()
        return self

    @property
    def counts(self) -> Any:
        return self.loop.counts

    def stop(self, timeout: float = 10.0) -> dict[str, Any]:
        self.loop.request_stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the {type(self.loop).__name__} did not stop within {timeout} s"
        if self.error is not None:
            raise self.error
        assert self.summary is not None
        return self.summary


@contextmanager
def running(loop: Sweeper | Consumer, budget_s: float = 30.0) -> Iterator[Running]:
    """Runs ``loop`` in the background for the ``with`` block; stopped (and checked) on the way out."""
    run = Running(loop, budget_s).start()
    try:
        yield run
    finally:
        run.stop()
