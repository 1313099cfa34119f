"""What every harness of the bench uses: where things are (``paths``), the private Redis (``servers``),
a checkout whose delayq is measured (``checkout``), the machine (``machine``), lateness from handler
starts (``records``) and the plot's environment (``venvs``).

A harness puts ``bench/`` on ``sys.path`` and imports ``shared.<module>``; nothing here imports delayq,
so a probe can measure another checkout's engine in its own process.
"""

from __future__ import annotations

import sys
import time


def log(message: str) -> None:
    """A line of the run's progress, on stderr: what a harness prints on stdout is its result."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
