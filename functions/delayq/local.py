"""``python -m delayq.local``: the local stack (``delayq.surfaces.local``), where ``make dev``, the docs
and the example topics' targets (``python:delayq.local:log_delivery``) name it."""

from .surfaces.local import EXAMPLE_TOPICS, fail_delivery, log_delivery, main

__all__ = ["EXAMPLE_TOPICS", "fail_delivery", "log_delivery", "main"]

if __name__ == "__main__":
    main()
