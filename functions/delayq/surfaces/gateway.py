"""API Gateway proxy events as the HTTP API reads them, in either payload format, told apart per event:

- **1.0**, REST APIs (and HTTP APIs set to 1.0): ``httpMethod``, ``path``, ``headers`` and
  ``multiValueHeaders``, ``queryStringParameters`` and ``multiValueQueryStringParameters``;
- **2.0**, HTTP APIs (``"version": "2.0"``): ``requestContext.http.method``, ``rawPath`` (with the
  stage in front unless it is ``$default``), ``rawQueryString``, lower-case ``headers`` (repeated ones
  joined by commas), ``cookies``; no multi-value fields.

``proxy_event`` wraps an event in the Powertools event class of its format, with what delayq changes:

- ``path`` is the path routes match: without the stage (2.0) and without the API's base path (a
  custom domain's mapping, ``DELAYQ_API_BASE_PATH``), when the path starts with them;
- ``http_method`` is the method routes match: ``HEAD`` is answered as ``GET`` (the resolver drops
  the body of the answer);
- the body is JSON whatever the Content-Type says, read once (``json_body``) by ``read_json``, which
  refuses what cannot be read safely;
- ``problem`` says what routing needs and the event lacks: synthetic events (a test's, a direct
  invoke's) may carry ``None`` for a method or a dict for a body, and they get a 400, never a crash.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from functools import cached_property
from itertools import chain
from typing import Any, ClassVar, cast

from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent, APIGatewayProxyEventV2
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent, CaseInsensitiveDict

from delayq.core.errors import InvalidField, MalformedRequest, NotAnObject
from delayq.core.models import LONE_SURROGATE, MAX_BODY_DEPTH, json_problem, lone_surrogate_at, too_deep

MAX_REQUEST_DEPTH = 2 * MAX_BODY_DEPTH  # deeper than any valid request: its parse (twice) and echo are safe
MAX_FIELD_ECHO = 256  # characters of a field's name quoted back in an error


# What an event must hold for routing to read it: field -> a check of its value, and the check in words.
# The checks run on every request: they let C loops look at the values (``set(map(type, ...))``).
Check = Callable[[Any], bool]
Shape = dict[str, tuple[Check, str]]
_STR, _LIST = {str}, {list}


def _string(value: Any) -> bool:
    return isinstance(value, str)


def _text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _strings(value: Any) -> bool:
    return value is None or (isinstance(value, list) and set(map(type, value)) <= _STR)


def _object_of_strings(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and set(map(type, value.values())) <= _STR)


def _object_of_lists(value: Any) -> bool:
    if value is None:
        return True
    return (
        isinstance(value, dict)
        and set(map(type, value.values())) <= _LIST
        and set(map(type, chain.from_iterable(value.values()))) <= _STR
    )


_TEXT = (_text, "a string or null")
_HEADERS = (_object_of_strings, "an object of strings, or null")
_MULTI_VALUES = (_object_of_lists, "an object of lists of strings, or null")


class DelayqEvent(BaseProxyEvent):
    """What both payload formats share. ``base_path`` is stripped from the path (``""``: nothing)."""

    base_path = ""
    method_field = ""  # where the event gives the method, for its problem
    shape: ClassVar[Shape] = {}

    @property
    def sent_method(self) -> Any:
        """The method as the event gives it (any JSON value, in a synthetic event)."""
        raise NotImplementedError

    @property
    def sent_path(self) -> str:
        """The path as the event gives it (a string, once ``problem`` said None)."""
        raise NotImplementedError

    @property
    def http_method(self) -> str:
        method = str(self.sent_method).upper()
        return "GET" if method == "HEAD" else method

    @property
    def is_head(self) -> bool:
        return str(self.sent_method).upper() == "HEAD"

    @property
    def path(self) -> str:
        path, base = self.sent_path, self.base_path
        if base and (path == base or path.startswith(f"{base}/")):
            return path[len(base) :] or "/"
        return path

    @cached_property
    def headers(self) -> dict[str, str]:
        """The request's headers, but Content-Type: request bodies are JSON whatever it says (a missing
        header and curl's default ``application/x-www-form-urlencoded`` mean JSON here)."""
        headers: dict[str, str] = CaseInsensitiveDict(self.get("headers") or {})  # type: ignore[no-untyped-call]
        headers["content-type"] = content_types.APPLICATION_JSON
        return headers

    @cached_property
    def json_body(self) -> Any:
        return read_json(self.get("body"), bool(self.get("isBase64Encoded")))

    def read_body(self) -> None:
        """Reads the body now, whatever the route: one that cannot be read is a 400 on every route, not
        only on those that read a body (a request that arrived garbled is not acted on)."""
        self.json_body  # noqa: B018 - a cached property: read once, here, and kept for the route

    def problem(self) -> MalformedRequest | None:
        """Why routing cannot read this event, or None."""
        if not isinstance(self.sent_method, str):
            return _malformed(self.method_field, "a string")
        for name, (check, words) in self.shape.items():
            if not check(self.raw_event.get(name)):
                return _malformed(name, words)
        return None


class RestEvent(DelayqEvent, APIGatewayProxyEvent):
    """Payload 1.0."""

    method_field = "httpMethod"
    shape: ClassVar[Shape] = {
        "path": (_string, "a string"),
        "body": _TEXT,
        "headers": _HEADERS,
        "multiValueHeaders": _MULTI_VALUES,
        "queryStringParameters": _HEADERS,
        "multiValueQueryStringParameters": _MULTI_VALUES,
    }

    @property
    def sent_method(self) -> Any:
        return self.get("httpMethod")

    @cached_property
    def multi_value_headers(self) -> dict[str, list[str]]:
        """Read once (Powertools reads them three times a request)."""
        return cast(dict[str, list[str]], CaseInsensitiveDict(self.get("multiValueHeaders")))  # type: ignore[no-untyped-call]

    @property
    def sent_path(self) -> str:
        return str(self["path"])


class HttpApiEvent(DelayqEvent, APIGatewayProxyEventV2):
    """Payload 2.0. The raw path holds a named stage when the request came to the API's own endpoint
    (``{api}.execute-api...``), not through a custom domain: it is dropped only then (Powertools' own
    event drops the stage's length from any path)."""

    method_field = "requestContext.http.method"
    shape: ClassVar[Shape] = {
        "rawPath": (_string, "a string"),
        "body": _TEXT,
        "headers": _HEADERS,
        "queryStringParameters": _HEADERS,
        "cookies": (_strings, "a list of strings, or null"),
        "requestContext": (lambda value: isinstance(value, dict), "an object"),
    }

    @property
    def context(self) -> dict[str, Any]:
        """``requestContext``, or nothing when the event lacks it (``problem`` says so)."""
        context = self.get("requestContext")
        return context if isinstance(context, dict) else {}

    @property
    def sent_method(self) -> Any:
        http = self.context.get("http")
        return http.get("method") if isinstance(http, dict) else None

    @property
    def sent_path(self) -> str:
        path, stage = str(self["rawPath"]), self.context.get("stage")
        if not isinstance(stage, str) or stage == "$default" or not _own_endpoint(self.context):
            return path
        if path == f"/{stage}" or path.startswith(f"/{stage}/"):
            return path[len(stage) + 1 :] or "/"
        return path


def _own_endpoint(context: dict[str, Any]) -> bool:
    """Whether the request came to the API's own endpoint rather than a custom domain: its domain
    starts with the API's id (a synthetic event without them is taken at its word)."""
    domain, api = context.get("domainName"), context.get("apiId")
    return not isinstance(domain, str) or not isinstance(api, str) or domain.startswith(f"{api}.execute-api.")


def proxy_event(event: dict[str, Any], base_path: str = "") -> DelayqEvent:
    """``event`` in the class of its payload format: 2.0 when it says so, else 1.0."""
    proxy: DelayqEvent = HttpApiEvent(event) if event.get("version") == "2.0" else RestEvent(event)
    proxy.base_path = base_path
    return proxy


def _malformed(field: str, expected: str) -> MalformedRequest:
    return MalformedRequest(f"not an API Gateway proxy event: {field} must be {expected}", field=field)


def read_json(body: str | None, is_base64: bool) -> Any:
    """A request body as the JSON object it holds (None when there is no body). ``MalformedRequest``
    (400) when it cannot be read: bad base64, not UTF-8, not JSON, nested deeper than
    ``MAX_REQUEST_DEPTH``, a number too long to read. ``InvalidField`` (422) naming the field for JSON
    that is no Unicode text (a lone surrogate); ``NotAnObject`` (422) for JSON that is not an object
    (left alone, Powertools would take the first element of an array for the object)."""
    if not body:
        return None
    if is_base64:
        try:
            raw = base64.b64decode(body, validate=True)
        except binascii.Error:
            raise MalformedRequest("request body is not valid base64") from None
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:  # raw bytes, which the local stack (and API Gateway) send as base64
            raise MalformedRequest("request body is not valid UTF-8") from None
    try:
        document = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MalformedRequest(f"request body is not valid JSON: {exc.msg} at character {exc.pos}") from None
    except ValueError:  # an integer of more than 4300 digits
        raise MalformedRequest("request body holds a number too long to read") from None
    except RecursionError:
        raise MalformedRequest(f"request body {too_deep(MAX_REQUEST_DEPTH)}") from None
    problem = json_problem(document, MAX_REQUEST_DEPTH)
    if problem and problem != LONE_SURROGATE:  # deeper than any field may be: the request is at fault
        raise MalformedRequest(f"request body {problem}")
    if not isinstance(document, dict):
        raise NotAnObject("request body must be a JSON object")
    if problem:
        field = lone_surrogate_at(document) or "body"
        raise InvalidField(field if len(field) <= MAX_FIELD_ECHO else field[:MAX_FIELD_ECHO] + "...", problem)
    return document
