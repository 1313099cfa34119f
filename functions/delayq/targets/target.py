"""What a target is: a callable ``(job, timeout_s) -> result``.

Returning is success, and what it returns is the job's result (``None``: none; kept with its receipt,
``core/job.py encode_result``); raising is a failed attempt (the exception's text becomes the job's
``last_error``), raising ``PermanentFailure`` sends the job dead at once. The consumer enforces the
timeout; targets that do I/O also pass it to their client so a stuck call ends by itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from delayq.core.job import Job

Target = Callable[[Job, float], Any]
