"""The Lambda side of the tests: the ``events/`` samples, API Gateway events built on them (payload
1.0 and 2.0), and the part of a Lambda context the handlers read."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

EVENTS = Path(__file__).resolve().parents[2] / "events"


class FakeContext:
    """The part of a Lambda context the handlers read."""

    function_name = "delayq-test"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:delayq-test"
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    def __init__(self, remaining_ms: int = 60_000) -> None:
        self._deadline_ms = remaining_ms + _now_ms()

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int(self._deadline_ms - _now_ms()))


def _now_ms() -> float:
    return time.monotonic() * 1000


def load_event(name: str) -> dict[str, Any]:
    """A sample event from ``events/`` (``"api/post_jobs"``, ``"sweep"``), as a fresh copy."""
    return copy.deepcopy(json.loads((EVENTS / f"{name}.json").read_text()))


def api_event(
    method: str,
    path: str,
    body: Any = None,
    *,
    query: dict[str, str] | None = None,
    raw_body: str | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An API Gateway REST proxy event built on the ``events/api/post_jobs.json`` sample."""
    event = load_event("api/post_jobs")
    event["httpMethod"] = method
    event["path"] = path
    event["resource"] = "/{proxy+}"
    event["pathParameters"] = {"proxy": path.lstrip("/")}
    event["requestContext"]["httpMethod"] = method
    event["requestContext"]["path"] = "/prod" + path
    event["queryStringParameters"] = query
    event["multiValueQueryStringParameters"] = None if query is None else {k: [v] for k, v in query.items()}
    event["body"] = raw_body if raw_body is not None else (None if body is None else json.dumps(body))
    if headers:
        event["headers"].update(headers)
        event["multiValueHeaders"].update({k: [v] for k, v in headers.items()})
    return event


def http_api_event(
    method: str,
    path: str,
    body: Any = None,
    *,
    query: dict[str, str] | None = None,
    raw_body: str | None = None,
    headers: dict[str, str] | None = None,
    stage: str = "$default",
) -> dict[str, Any]:
    """An API Gateway HTTP API event (payload 2.0) built on ``events/api/v2/post_jobs.json``: the
    stage in front of the raw path unless it is ``$default``, header names in lower case."""
    event = load_event("api/v2/post_jobs")
    raw_path = path if stage == "$default" else f"/{stage}{path}"
    event["rawPath"] = raw_path
    event["pathParameters"] = {"proxy": path.lstrip("/")}
    event["requestContext"]["http"]["method"] = method
    event["requestContext"]["http"]["path"] = raw_path
    event["requestContext"]["stage"] = stage
    event["rawQueryString"] = "&".join(f"{name}={value}" for name, value in (query or {}).items())
    event.pop("queryStringParameters", None)
    if query:
        event["queryStringParameters"] = query
    text = raw_body if raw_body is not None else (None if body is None else json.dumps(body))
    event.pop("body", None)
    if text is not None:
        event["body"] = text
    event["headers"].update({name.lower(): value for name, value in (headers or {}).items()})
    return event
