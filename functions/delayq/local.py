"""``python -m delayq.local``: the local stack (``delayq.surfaces.local``), where ``make dev``, the docs
and the example topics' targets (``python:delayq.local:log_delivery``) name it. The targets need
nothing beyond the package; the stack needs the ``local`` extra, and says how to install it when a
module of it is missing."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .surfaces.examples import EXAMPLE_TOPICS, fail_delivery, log_delivery

LOCAL_EXTRA = "from a checkout of delayq, pip install -e '.[local]' (make dev's .venv has it)"


def needs_local_extra(load: Callable[[], Any], command: str) -> Any:
    """``load()``, or an exit naming the module missing and how to install the extra that has it."""
    try:
        return load()
    except ModuleNotFoundError as exc:
        raise SystemExit(f"{command} needs {exc.name}: {LOCAL_EXTRA}") from None


def main(argv: list[str] | None = None) -> None:
    """The local stack (``delayq.surfaces.local.main``), once its modules are there."""
    run = needs_local_extra(lambda: importlib.import_module("delayq.surfaces.local").main, "python -m delayq.local")
    run(argv)


__all__ = ["EXAMPLE_TOPICS", "LOCAL_EXTRA", "fail_delivery", "log_delivery", "main", "needs_local_extra"]

if __name__ == "__main__":
    main()
