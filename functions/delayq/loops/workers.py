"""A pool of worker threads that runs one callable over the items it is handed, up to a size.

The consumer keeps one for its process, sized by its topics' concurrency, and hands it deliveries;
the pool knows nothing of jobs. Threads are started as they are needed, never more than ``size``.

A thread that finishes an item takes the next one waiting itself, and a batch wakes one thread
(or one for each item its owner knows will hold its thread waiting: a job taken ahead, a webhook):
quick items are run one after another by the thread already awake, with no context switch and
hand-over of the GIL per item (those cost more than a quick handler, and every blocking call a
handler makes, even a write to a file, would hand the GIL to another thread that wants it). The
owner calls ``spread`` every ``SPREAD_S`` while items wait: if none was taken up since, each still
waiting gets a thread, so items that wait (I/O, sleep) run together, the later ones about
``SPREAD_S`` late.

Daemon threads: an item that hangs does not hold the process at exit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger("delayq.workers")

SPREAD_S = 0.002  # items left waiting this long while the threads awake are all busy get threads of their own

T = TypeVar("T")


class Workers(Generic[T]):
    """Threads named ``name_0``, ``name_1`` ... running ``run(item)`` for each item submitted, at most
    ``size`` at once. ``run`` should not raise: what it raises is logged, and the thread goes on."""

    def __init__(self, name: str, size: int, run: Callable[[T], None]) -> None:
        self._name = name
        self._size = size
        self._run = run
        self._queued: deque[T] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for work
        self._woken = 0  # threads woken or started that have not looked at the queue yet
        self._moved = 0.0  # when the head of the queue last changed: an item taken up, or queued first
        self._closed = False

    @property
    def waiting(self) -> bool:
        """Whether items wait for a thread (read without the lock: a hint for the owner's sleep)."""
        return bool(self._queued)

    def submit(self, items: list[T], *, threads: int = 1) -> None:
        """Queues ``items`` and wakes ``threads`` threads for them (items that will wait, a thread each:
        the thread that takes one is held by it)."""
        with self._ready:
            if not self._queued:
                self._moved = time.monotonic()
            self._queued.extend(items)
            self._wake(threads)

    def spread(self, now: float) -> None:
        """If items have waited ``SPREAD_S`` with none taken up (the threads awake are all busy with
        items that take their time), wakes or starts a thread for each, up to the size."""
        with self._ready:
            if self._queued and now - self._moved >= SPREAD_S:
                self._wake(len(self._queued))

    def shutdown(self) -> None:
        """Each thread ends when it is done with what it runs (a hung item's thread, never)."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def _wake(self, wanted: int) -> None:
        """With the lock held: threads on their way for ``wanted`` items, woken or started."""
        wanted -= self._woken
        while wanted > 0 and self._idle > self._woken:
            self._ready.notify()
            self._woken += 1
            wanted -= 1
        while wanted > 0 and len(self._threads) < self._size:
            thread = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            self._woken += 1
            wanted -= 1
            thread.start()

    def _work(self) -> None:
        with self._ready:
            self._woken -= 1  # started: looks at the queue now
        while True:
            with self._ready:
                while not self._queued:
                    if self._closed:
                        return
                    self._idle += 1
                    self._ready.wait()
                    self._idle -= 1
                    self._woken = max(0, self._woken - 1)
                item = self._queued.popleft()
                self._moved = time.monotonic()
            try:
                self._run(item)
            except Exception:  # a bug in run: logged, and the thread goes on with the next item
                log.exception("%s: running %s failed", threading.current_thread().name, item)
