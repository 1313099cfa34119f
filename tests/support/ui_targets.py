"""Targets the web view's tests deliver to, from the local stack's process
(``python:support.ui_targets:NAME``: ``tests/`` is on its ``PYTHONPATH``)."""

from __future__ import annotations

from typing import Any

from delayq import Job

MARKUP_ERROR = "<img src=x onerror=alert(2)> could not be handled"


def fail_with_markup(job: Job) -> None:
    """Fails every delivery with an error that would be markup if a page parsed it."""
    raise RuntimeError(MARKUP_ERROR)


def answer(job: Job) -> Any:
    """Succeeds, answering what its body's ``answer`` holds, ``repeat`` times over when it says so."""
    return job.body["answer"] * job.body.get("repeat", 1)
