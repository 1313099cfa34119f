"""Redis' clock as one process knows it: the time a reply gave, carried forward by this machine's
monotonic clock, never by its wall clock (which may be set wrong, or jump)."""

from __future__ import annotations

import time


class ServerClock:
    """Redis' time in ms, from the last reply that told it. Not locked: a reader on another thread sees
    the last reply's reading or the one before, both good estimates."""

    def __init__(self) -> None:
        self._seen: tuple[int, float] | None = None

    def saw(self, server_ms: int, at: float | None = None) -> None:
        """A reply said Redis' time was ``server_ms`` (read before the reply left Redis); it came at the
        monotonic time ``at`` (now, if not given)."""
        self._seen = (server_ms, time.monotonic() if at is None else at)

    @property
    def known(self) -> bool:
        """Whether a reply told the time yet."""
        return self._seen is not None

    def ms(self, at: float | None = None) -> float:
        """Redis' time at the monotonic time ``at`` (now, if not given): at least what it was then, since
        the reply's reading came before. Before any reply, this machine's wall clock."""
        if self._seen is None:
            return time.time() * 1000
        server_ms, seen_at = self._seen
        return server_ms + ((time.monotonic() if at is None else at) - seen_at) * 1000
