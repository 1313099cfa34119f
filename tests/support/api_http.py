"""HTTP in front of a Lambda handler, for the tests that speak HTTP: each request becomes the API
Gateway proxy event it would be (REST, payload 1.0, or HTTP API, payload 2.0), and the handler's answer
the response. As a WSGI application (``wsgi_app``) and as a real HTTP server on a free port of
127.0.0.1 (``serve``: a generated client calls it over the network).

A request is handed over as the local stack hands it (method, request target still percent-encoded,
headers, body bytes): the REST event is the local stack's own, ``delayq.surfaces.localhttp.request_event``;
the HTTP API event (``http_api_event``, which the local stack never makes) is built here the same way:
the path percent-decoded, as API Gateway passes it, a body that is not UTF-8 passed in base64, nothing
else done to the request.
"""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, quote, unquote
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from delayq.surfaces.localhttp import request_event

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]  # lambda_handler(event, context)
EventMaker = Callable[[str, str, dict[str, str], bytes], dict[str, Any]]  # (method, target, headers, body)


def _body(raw: bytes) -> tuple[str | None, bool]:
    """A request body as an event carries it: text, or base64 when it is not UTF-8."""
    if not raw:
        return None, False
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode(), True


def http_api_event(method: str, target: str, headers: dict[str, str], raw: bytes) -> dict[str, Any]:
    """The HTTP API (payload 2.0) event of a request, on the ``$default`` stage: lower-case header
    names, repeated query parameters joined by commas, cookies apart. ``target`` is the request target
    as sent (path and query, still percent-encoded), as ``request_event`` takes it."""
    raw_path, _, query = target.partition("?")
    path = unquote(raw_path) or "/"
    lower = {name.lower(): value for name, value in headers.items()}
    cookies = [part.strip() for part in lower.pop("cookie", "").split(";") if part.strip()]
    joined: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        joined[name] = f"{joined[name]},{value}" if name in joined else value
    body, encoded = _body(raw)
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        **({"cookies": cookies} if cookies else {}),
        "headers": lower,
        **({"queryStringParameters": joined} if joined else {}),
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "api",
            "domainName": "127.0.0.1",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"},
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
        },
        **({"body": body} if body is not None else {}),
        "isBase64Encoded": encoded,
    }


def response_parts(response: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
    """A handler's answer as HTTP: status, headers (``multiValueHeaders`` of 1.0, ``cookies`` of 2.0
    included), body bytes."""
    payload = response.get("body") or ""
    raw = base64.b64decode(payload) if response.get("isBase64Encoded") else payload.encode()
    headers = [(name, str(value)) for name, value in (response.get("headers") or {}).items()]
    for name, values in (response.get("multiValueHeaders") or {}).items():
        headers += [(name, str(value)) for value in values]
    headers += [("Set-Cookie", cookie) for cookie in response.get("cookies") or ()]
    headers = [(name, value) for name, value in headers if name.lower() != "content-length"]
    return int(response["statusCode"]), [*headers, ("Content-Length", str(len(raw)))], raw


def wsgi_app(
    handler: Handler, make_event: EventMaker = request_event, context: Any = None
) -> Callable[..., list[bytes]]:
    """``handler`` as a WSGI application, each request sent as the event ``make_event`` makes."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = _unwsgi(environ.get("PATH_INFO", "")) or "/"
        query = _unwsgi(environ.get("QUERY_STRING", ""))
        headers = {name[5:].replace("_", "-").title(): value for name, value in environ.items() if name[:5] == "HTTP_"}
        for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if environ.get(name):
                headers[name.replace("_", "-").title()] = environ[name]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        target = quote(path) + (f"?{query}" if query else "")  # as sent: wsgiref decoded the path
        event = make_event(environ["REQUEST_METHOD"], target, headers, raw)
        status, out, body = response_parts(handler(event, context))
        start_response(f"{status} {_reason(status)}", out)
        return [body] if environ["REQUEST_METHOD"] != "HEAD" else []

    return app


@contextmanager
def serve(handler: Handler, make_event: EventMaker = request_event, context: Any = None) -> Iterator[str]:
    """``handler`` behind a real HTTP server on a free port of 127.0.0.1, for the ``with`` block; its
    base URL. The server runs in a thread of its own and is shut down at the end."""
    server = make_server("127.0.0.1", 0, wsgi_app(handler, make_event, context), WSGIServer, _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="api-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def _unwsgi(text: str) -> str:
    """A WSGI environ string (bytes as latin-1, PEP 3333) as the UTF-8 text it carries."""
    return text.encode("latin-1").decode("utf-8", "replace")


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
