"""A webhook attempt's deadline: at it, one watchdog thread shuts the attempt's socket down, which ends
any read or write blocked on it, however slowly the server trickles bytes."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time


class Attempt:
    """One delivery's deadline. At the deadline the watchdog shuts its socket down, which ends any
    read or write blocked on it, however slowly the server trickles bytes."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = False
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._done = False

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.expired = True
            raise TimeoutError("deadline passed")
        return left

    def use(self, sock: socket.socket) -> None:
        """The socket to shut down at the deadline; its timeout becomes the time left."""
        with self._lock:
            if self.expired:
                raise TimeoutError("deadline passed")
            self._sock = sock
        sock.settimeout(self.remaining())

    def expire(self) -> None:
        """Called by the watchdog at the deadline."""
        with self._lock:
            if self._done:
                return
            self.expired = True
            if self._sock is not None:
                # The plain socket's shutdown, even on an SSLSocket: no TLS close_notify exchange.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def finish(self) -> None:
        """The delivery is over: the watchdog must no longer touch its socket (about to be closed)."""
        with self._lock:
            self._done = True
            self._sock = None


class _Watchdog:
    """One daemon thread for every delivery in the process: expires each at its deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Attempt]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def expire_at_deadline(self, attempt: Attempt) -> None:
        """Expires ``attempt`` at its deadline unless it is done by then."""
        with self._cond:
            heapq.heappush(self._heap, (attempt.deadline, next(self._seq), attempt))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="delayq-webhook-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        attempt = heapq.heappop(self._heap)[2]
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            attempt.expire()


WATCHDOG = _Watchdog()
