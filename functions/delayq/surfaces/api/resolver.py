"""The app: a ``DelayqResolver`` answers the routes (``routes.py``) for one queue, for API Gateway events
of either payload format (``delayq.surfaces.gateway``), and generates the OpenAPI document."""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Callable, Mapping
from functools import cached_property
from re import Pattern
from typing import Any, cast

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver, ResponseBuilder
from aws_lambda_powertools.event_handler.openapi.models import Server
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from delayq.core.errors import DelayqError
from delayq.store.queue import Queue
from delayq.surfaces.gateway import DelayqEvent, proxy_event
from delayq.version import VERSION

from .routes import APP, ONE_AT_A_TIME, delayq_error, error_answer, quoted, router

log = logging.getLogger("delayq.api")


class DelayqResolver(APIGatewayRestResolver):
    """The API of one queue, for events of either payload format (``delayq.surfaces.gateway``).

    Around Powertools' routing: an event that routing cannot read is a 400; a route matches a path to
    its very end; a path with routes but none for the method is a 405 (``OPTIONS``: 204), each with
    ``Allow``; ``HEAD`` is answered as ``GET``, without the body; anything unexpected is a JSON 500,
    logged, never a Lambda error."""

    def __init__(self, queue: Queue | Callable[[], Queue]) -> None:
        super().__init__(enable_validation=True)
        self._make_queue: Callable[[], Queue] = (lambda: queue) if isinstance(queue, Queue) else queue
        self._queue: Queue | None = None
        self._read: DelayqEvent | None = None  # the event being resolved, as ``_answer`` read it
        self.include_router(router)

    @property
    def queue(self) -> Queue:
        """The queue, made on the first request when the app was given a factory."""
        if self._queue is None:
            self._queue = self._make_queue()
        return self._queue

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        proxy = proxy_event(dict(event) if isinstance(event, Mapping) else {})
        with ONE_AT_A_TIME:
            try:
                response = self._answer(proxy, context)
            except Exception:  # routing or the answer failed (a route's errors are answered above)
                log.exception("unexpected error")
                response = self._built(proxy, error_answer(500, "internal", "internal error"))
        if proxy.is_head:  # a GET's answer without its body, but with its length (RFC 9110 9.3.2)
            body = response.get("body") or ""
            length = len(base64.b64decode(body)) if response.get("isBase64Encoded") else len(body.encode())
            response["headers"] = {**(response.get("headers") or {}), "Content-Length": str(length)}
            response["body"], response["isBase64Encoded"] = "", False
        return response

    def _answer(self, proxy: DelayqEvent, context: Any) -> dict[str, Any]:
        problem: DelayqError | None = proxy.problem()
        if problem is None:
            try:
                proxy.read_body()
                proxy.base_path = self.queue.settings.api_base_path  # a broken environment is answered too
            except DelayqError as exc:
                problem = exc
        if problem is not None:
            return self._built(proxy, delayq_error(problem))
        self.context[APP] = self
        self._read = proxy
        try:
            return super().resolve(proxy.raw_event, context)
        finally:
            self._read = None

    def _built(self, proxy: DelayqEvent, response: Response[Any]) -> dict[str, Any]:
        """``response`` as the Lambda returns it in ``proxy``'s payload format, outside routing."""
        return ResponseBuilder[DelayqEvent](response, serializer=self._serializer).build(proxy)

    def _to_proxy_event(self, event: dict[str, Any]) -> BaseProxyEvent:
        """The event as ``_answer`` read it (its body parsed once), for Powertools' routing."""
        if self._read is not None and self._read.raw_event is event:
            return self._read
        return proxy_event(event, self.queue.settings.api_base_path)

    @staticmethod
    def _compile_regex(rule: str, base_regex: str = "") -> Pattern[str]:
        """A route's pattern, anchored at the very end of the path (``\\Z``). Powertools ends it with
        ``$``, which also matches before a trailing newline: ``DELETE /topics/t/dead%0a`` purged. As in
        Powertools' REST resolver, trailing slashes are allowed."""
        return cast(Pattern[str], ApiGatewayResolver._compile_regex(rule, r"^{}/*\Z"))

    def _handle_not_found(self, method: str, path: str) -> ResponseBuilder[Any]:
        """No route for (method, path): 404, or for a path with routes, 405 (``OPTIONS``: 204) with ``Allow``."""
        allowed = self._allowed(path)
        if not allowed:
            response = error_answer(404, "not_found", f"no route for {quoted(path)}")
        elif method == "OPTIONS":
            response = Response(status_code=204, content_type=None, body=None, headers={"Allow": allowed})
        else:
            message = f"{quoted(method)} is not allowed on {quoted(path)}; it allows {allowed}"
            response = error_answer(405, "method_not_allowed", message, {"Allow": allowed})
        return ResponseBuilder(response, serializer=self._serializer)

    def _allowed(self, path: str) -> str:
        """The methods ``path`` answers, for ``Allow``: ``""`` when it has no route."""
        methods = {route.method for route in (*self._static_routes, *self._dynamic_routes) if route.rule.match(path)}
        if not methods:
            return ""
        return ", ".join(sorted(methods | {"OPTIONS"} | ({"HEAD"} if "GET" in methods else set())))

    @cached_property
    def openapi_document(self) -> str:
        """This API's OpenAPI document, generated from the routes and made exact: a 204 has no content,
        each operation is named after its route's function (a generated client's function names:
        ``create_job``, ``get_job`` ...), and the schemas listed are the ones the operations use."""
        base = self.queue.settings.api_base_path
        document = json.loads(
            self.get_openapi_json_schema(
                title="delayq",
                version=VERSION,
                description="A delay queue on Redis: jobs handed to their topic's target at their run-at.",
                servers=[Server(url=base or "/")],
            )
        )
        names = {
            (r.openapi_path, r.method.lower()): r.func.__name__ for r in (*self._static_routes, *self._dynamic_routes)
        }
        for path, item in document["paths"].items():
            for method, operation in item.items():
                operation["operationId"] = names[(path, method)]
                operation["responses"].get("204", {}).pop("content", None)
        document["components"]["schemas"] = _used_schemas(document)
        return json.dumps(document, separators=(",", ":"))


def _used_schemas(document: dict[str, Any]) -> dict[str, Any]:
    """The component schemas that the document's paths use, directly or through other schemas
    (Powertools also lists its own validation errors, which this API never answers)."""
    schemas = document["components"]["schemas"]
    used: set[str] = set()
    pending: list[Any] = [document["paths"]]
    while pending:
        for name in re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(pending.pop())):
            if name not in used:
                used.add(name)
                pending.append(schemas[name])
    return {name: schema for name, schema in schemas.items() if name in used}


def create_app(queue: Queue | Callable[[], Queue]) -> DelayqResolver:
    """The API of ``queue`` (or of the queue a factory makes on the first request)."""
    return DelayqResolver(queue)
