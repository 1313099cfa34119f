"""``python:package.module:function``: the function is called with the ``delayq.Job``; what it returns
is the job's result."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

from delayq.core.errors import ConfigError
from delayq.core.job import Job

from .target import Target

SPEC = re.compile(r"^python:(?P<module>[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_][\w.]*)$")


def load(spec: str) -> Callable[[Job], Any]:
    match = SPEC.fullmatch(spec)
    if not match:
        raise ConfigError(f"target {spec!r}: expected python:package.module:function")
    try:
        obj: Any = importlib.import_module(match["module"])
    except ImportError as exc:
        raise ConfigError(f"target {spec!r}: cannot import {match['module']!r}: {exc}") from None
    for name in match["attr"].split("."):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            raise ConfigError(f"target {spec!r}: {match['module']!r} has no {match['attr']!r}") from None
    if not callable(obj):
        raise ConfigError(f"target {spec!r}: {match['attr']!r} is not callable")
    return obj  # type: ignore[no-any-return]


def python_target(spec: str) -> Target:
    function = load(spec)

    def deliver(job: Job, timeout: float) -> Any:
        return function(job)

    return deliver
