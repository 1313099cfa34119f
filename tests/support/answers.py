"""What the client and the handlers answer, read and checked in one line: an answer of
``Queue.enqueue_many`` that must be a job written (``created``) or a refusal (``refusal``), and the JSON
body of a handler's response (``response_json``)."""

from __future__ import annotations

import json
from typing import Any

from delayq.core.job import EnqueueResult, Refused, Scheduled


def created(result: EnqueueResult) -> Scheduled:
    """An answer of ``Queue.enqueue_many`` that must be a job written."""
    assert isinstance(result, Scheduled), result
    return result


def refusal(result: EnqueueResult) -> tuple[int, str | None]:
    """``(status, field)`` of an answer of ``Queue.enqueue_many`` that must be a refusal."""
    assert isinstance(result, Refused), result
    return result.status, result.error.field


def response_json(response: dict[str, Any]) -> Any:
    """The JSON body of a Lambda handler's response, or None when it has none."""
    return json.loads(response["body"]) if response.get("body") else None
