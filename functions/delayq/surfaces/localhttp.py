"""The HTTP layer of delayq's local surfaces (the local stack, the web view): a waitress server, the
guard that keeps them safe by default, and the adapter that turns a request into the API Gateway REST
proxy event the Lambda receives, so the local API is the deployed one, route for route.

Waitress frames the requests (Content-Length, chunked bodies, the 10 MiB cap) as a production server
does, and answers malformed framing with a 4xx of its own before any of delayq's code runs. The
guard, in front of every app the server runs, refuses:

- a Host that is not a name the server was bound to (403): a page served from a rebound DNS name
  cannot talk to it;
- without the token, when ``DELAYQ_UI_TOKEN`` is set (401): it is required to bind anything but
  loopback. A bearer credential on any request; on a GET or HEAD also ``?token=`` (the web view's
  first page load) or the web view's cookie, which that load sets (``ui_cookie``): the browser sends
  it with the page's own files and reloads, never with a request that changes anything. A browser
  opening the web view without it is answered a small page saying how to open it (``SIGN_IN_PAGE``),
  anything else the API's JSON error;
- a state-changing request (POST, PUT, PATCH, DELETE) from another origin (403, by ``Origin`` or
  ``Sec-Fetch-Site``), or whose body is not ``application/json`` (415): a cross-site form or
  ``text/plain`` fetch, which a browser sends without asking, cannot pass.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import ipaddress
import json
import logging
import socket
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, unquote
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from waitress import wasyncore
from waitress.server import BaseWSGIServer, MultiSocketServer, create_server

from delayq.core.errors import ConfigError, DelayqError, MalformedRequest
from delayq.core.settings import ENV

log = logging.getLogger("delayq.localhttp")

MAX_REQUEST_BYTES = 10 * 1024 * 1024  # API Gateway's limit
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARDS = ("0.0.0.0", "::", "")  # noqa: S104 - names of the wildcard address, not a binding
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON = "application/json"
SAME_ORIGIN_FETCHES = ("same-origin", "none")  # Sec-Fetch-Site: "none" is a user's own navigation
POLL_S = 0.2  # how often the serving loop looks whether it was told to stop
UI_COOKIE = "delayq_ui"  # the web view's credential for its own files (GET and HEAD only): see ui_cookie
# On every answer of a local surface: no type sniffing, no address of the page (which may hold the token)
# sent anywhere.
EVERY_ANSWER = (("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"))
# Headers the server sets itself: the hop-by-hop ones (WSGI forbids an application to set them), and
# the length, counted from the body actually sent.
SERVER_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers", "transfer-encoding"}
    | {"upgrade", "content-length"}
)

Resolve = Callable[[dict[str, Any], Any], dict[str, Any]]


class Forbidden(DelayqError):
    """A request from a name or an origin the server does not answer (403)."""

    status = 403
    error = "forbidden"


class Unauthorized(DelayqError):
    """A request without the token the server was started with (401)."""

    status = 401
    error = "unauthorized"


class UnsupportedMediaType(DelayqError):
    """A state-changing request whose body is not ``application/json`` (415)."""

    status = 415
    error = "unsupported_media_type"


class Internal(DelayqError):
    """An answer that could not be made (500); the details are in the server's log only."""

    status = 500
    error = "internal"


# ------------------------------------------------------------------------------ the event adapter


def request_event(method: str, target: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """An HTTP request as the API Gateway REST proxy event the Lambda would receive. ``target`` is the
    request target as sent (path and query, still percent-encoded); the event's path is decoded and
    kept whole, control characters included, for the router to refuse."""
    raw_path, _, query = target.partition("#")[0].partition("?")  # not urlsplit: "//x" is a path here
    multi: dict[str, list[str]] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        multi.setdefault(name, []).append(value)
    try:
        text: str | None = body.decode("utf-8") if body else None
        encoded = False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    path = unquote(raw_path) or "/"
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {name: [value] for name, value in headers.items()},
        "queryStringParameters": {name: values[-1] for name, values in multi.items()} or None,
        "multiValueQueryStringParameters": multi or None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "stage": "local",
            "path": path,
            "httpMethod": method,
            "resourcePath": "/{proxy+}",
            "identity": {"sourceIp": "127.0.0.1"},
        },
        "body": text,
        "isBase64Encoded": encoded,
    }


def lambda_app(resolve: Resolve) -> WSGIApplication:
    """A Lambda's HTTP handler (``resolve(event, context)``) as a WSGI application: each request becomes
    the event API Gateway would send, and the handler's answer the response. A handler that raises is
    a 500 in JSON; the traceback goes to the log, never to the caller."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        target = _request_target(environ)
        if not target.startswith("/"):
            problem = MalformedRequest("the request target must be a path, such as /jobs")
            return answer(start_response, problem, head=method == "HEAD")
        event = request_event(method, target, _headers(environ), _body(environ))
        try:
            response = resolve(event, None)
        except Exception:  # any failure is one JSON 500, whatever raised it
            log.exception("%s %.256r failed", method, event["path"])
            failed = Internal("the request could not be answered; see the server's log")
            return answer(start_response, failed, head=method == "HEAD")
        return _respond(start_response, response, head=method == "HEAD")

    return app


def answer(
    start_response: StartResponse, problem: DelayqError, *, head: bool = False, headers: Iterable[tuple[str, str]] = ()
) -> list[bytes]:
    """``problem`` as the API's JSON error document."""
    response = {
        "statusCode": problem.status,
        "headers": {"Content-Type": JSON, **dict(headers)},
        "body": _json_text(problem.to_dict()),
    }
    return _respond(start_response, response, head=head)


def _respond(start_response: StartResponse, response: dict[str, Any], *, head: bool) -> list[bytes]:
    payload = response.get("body") or ""
    raw = base64.b64decode(payload) if response.get("isBase64Encoded") else payload.encode()
    headers = {name.lower(): (name, [value]) for name, value in (response.get("headers") or {}).items()}
    for name, values in (response.get("multiValueHeaders") or {}).items():
        headers[name.lower()] = (name, list(values))
    out = [(name, str(v)) for key, (name, values) in headers.items() if key not in SERVER_HEADERS for v in values]
    length = str(len(raw))
    if head and "content-length" in headers:  # the length a GET's body would have (the resolver says)
        length = str(headers["content-length"][1][0])
    out.append(("Content-Length", length))
    status = int(response["statusCode"])
    start_response(f"{status} {_phrase(status)}", out)
    return [] if head else [raw]


def _request_target(environ: WSGIEnvironment) -> str:
    """The path as the client sent it, still percent-encoded, and the query. Waitress and werkzeug keep
    the raw path (``PATH_INFO`` is decoded, and has its leading slashes merged: not what was sent);
    only ``QUERY_STRING`` is sure to hold the query."""
    raw = environ.get("REQUEST_URI") or environ.get("RAW_URI")
    path = _unwsgi(raw).partition("?")[0] if raw else quote(_unwsgi(environ.get("PATH_INFO", "")))
    query = _unwsgi(environ.get("QUERY_STRING", ""))
    return path + (f"?{query}" if query else "")


def _headers(environ: WSGIEnvironment) -> dict[str, str]:
    headers = {
        name[5:].replace("_", "-").title(): _unwsgi(value)
        for name, value in environ.items()
        if name.startswith("HTTP_")
    }
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(name):
            headers[name.replace("_", "-").title()] = environ[name]
    return headers


def _body(environ: WSGIEnvironment) -> bytes:
    """The whole body: waitress has read it (de-chunked, within the cap) before the app is called."""
    length = environ.get("CONTENT_LENGTH")
    if length:
        return bytes(environ["wsgi.input"].read(int(length)))
    return bytes(environ["wsgi.input"].read()) if environ.get("wsgi.input_terminated") else b""


def _unwsgi(text: str) -> str:
    """A WSGI environ string (bytes as latin-1, PEP 3333) as the UTF-8 text it carries."""
    return text.encode("latin-1").decode("utf-8", "replace")


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _json_text(document: dict[str, object]) -> str:
    return json.dumps(document, separators=(",", ":"))


# ------------------------------------------------------------------------------ the guard


@dataclass(frozen=True)
class Binding:
    """Where a server listens, and so the names it answers to: the Host headers it accepts."""

    host: str
    port: int

    @cached_property
    def addresses(self) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
        """The addresses ``host`` stands for (none for a wildcard or a name that does not resolve)."""
        if self.host in WILDCARDS:
            return ()
        return _addresses(self.host)

    @property
    def wildcard(self) -> bool:
        return self.host in WILDCARDS

    @property
    def loopback(self) -> bool:
        """Reachable from this machine only."""
        return bool(self.addresses) and all(address.is_loopback for address in self.addresses)

    @cached_property
    def names(self) -> frozenset[str]:
        """Every accepted ``Host`` header, lower case: the loopback names when the server listens on
        loopback, the bound name and its addresses, and for a wildcard bind this machine's names and
        addresses. Each with the port, and also without it on port 80."""
        hosts = {_host_name(self.host)} if not self.wildcard else set()
        hosts.update(_host_name(str(address)) for address in self.addresses)
        if self.loopback or self.wildcard:
            hosts.update(LOOPBACK_NAMES)
        if self.wildcard:
            for name in {socket.gethostname(), socket.getfqdn()}:
                hosts.add(_host_name(name))
                hosts.update(_host_name(str(address)) for address in _addresses(name))
        names = {f"{host}:{self.port}".lower() for host in hosts}
        if self.port == 80:
            names.update(host.lower() for host in hosts)
        return frozenset(names)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.wildcard else _host_name(self.host)
        return f"http://{host}:{self.port}"


def _addresses(name: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return ()
    return tuple(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))


def _host_name(host: str) -> str:
    """``host`` as it appears in a Host header: IPv6 addresses in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class Guard:
    """The rules every local HTTP surface keeps, in front of its app (see the module's docstring).
    Each refusal is JSON, as the API's errors are, and logged with its reason."""

    def __init__(self, app: WSGIApplication, binding: Binding, token: str | None = None) -> None:
        self.app = app
        self.binding = binding
        self.token = token.encode() if token else None

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        problem = self.refusal(environ)
        if problem is None:
            return self.app(environ, start_response)
        method = environ["REQUEST_METHOD"]
        log.warning("refused %s %.256r: %s", method, _request_target(environ), problem.message)
        if isinstance(problem, Unauthorized) and _opens_the_page(environ):
            return _sign_in_page(start_response, head=method == "HEAD")
        challenge = [("WWW-Authenticate", "Bearer")] if isinstance(problem, Unauthorized) else []
        return answer(start_response, problem, head=method == "HEAD", headers=[*challenge, *EVERY_ANSWER])

    def refusal(self, environ: WSGIEnvironment) -> DelayqError | None:
        """Why this request is refused, or None. Host first: a stranger learns nothing else."""
        host = _unwsgi(environ.get("HTTP_HOST", "")).lower()
        if host not in self.binding.names:
            return Forbidden(f"this server answers to Host {', '.join(sorted(self.binding.names))} only", field="Host")
        if self.token is not None and not self._authorized(environ):
            return Unauthorized(
                f"this server needs its token ({ENV.UI_TOKEN}): send Authorization: Bearer <token>"
                " (the web view: open /ui/?token=<token>)",
                field="Authorization",
            )
        if environ["REQUEST_METHOD"] in STATE_CHANGING:
            return _cross_origin(environ, f"http://{host}") or _not_json(environ)
        return None

    def _authorized(self, environ: WSGIEnvironment) -> bool:
        """The token as a bearer credential; on a GET or HEAD, also as ``?token=`` (the web view's first
        page load) or the web view's cookie. Compared in constant time."""
        scheme, _, credential = _unwsgi(environ.get("HTTP_AUTHORIZATION", "")).strip().partition(" ")
        if scheme.lower() == "bearer" and self._is_token(credential.strip()):
            return True
        if environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
            return False
        given = query_token(environ)
        if given is not None and self._is_token(given):
            return True
        cookie = request_cookie(environ, UI_COOKIE)
        assert self.token is not None
        return cookie is not None and hmac.compare_digest(cookie, ui_cookie(self.token.decode()))

    def _is_token(self, candidate: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(candidate.encode(), self.token)


# ------------------------------------------------------------------------------ the page asking for the token

# What a browser opening the web view without the token is answered (401): what the server needs and
# how to open the page, as a page of its own. Fixed text: no script, nothing of the request echoed, never
# the token; its one style element is allowed by its hash, and its form (the token, sent as ?token= to
# /ui/, the documented first load) by form-action 'self'.
SIGN_IN_STYLE = (
    "body{font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,Arial,sans-serif;color:#1b1f24;"
    "max-width:42em;margin:48px auto;padding:0 24px}h1{font-size:20px}"
    "code{font:13px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f6f8fa;padding:1px 4px;"
    "border-radius:4px}form{display:flex;gap:8px;flex-wrap:wrap;margin:20px 0}"
    "input,button{font:inherit;padding:4px 10px;border:1px solid #d1d9e0;border-radius:6px}"
    "p.note{color:#59636e;font-size:13px}"
)
_VAR = html.escape(ENV.UI_TOKEN)
SIGN_IN_PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>delayq: this server needs its token</title>
<style>{SIGN_IN_STYLE}</style>
</head>
<body>
<h1>This delayq server needs its token</h1>
<p>It was started with <code>{_VAR}</code> set, and answers no request that does not carry that token.</p>
<p>Open the web view once per tab as <code>/ui/?token=&lt;{_VAR}&gt;</code>, with the token in place of
<code>&lt;{_VAR}&gt;</code>: the page keeps it for the tab, and takes it out of the address bar. Or give it here:</p>
<form method="get" action="/ui/">
<label>Token <input type="password" name="token" autocomplete="off" required></label>
<button type="submit">Open the web view</button>
</form>
<p class="note">Whoever started the server has the token: <code>delayq ui</code> and the local stack log the
address to open, with <code>${_VAR}</code> where the token goes. API clients send it as
<code>Authorization: Bearer &lt;token&gt;</code>.</p>
</body>
</html>
"""
SIGN_IN_HEADERS = (
    ("Content-Type", "text/html; charset=utf-8"),
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'sha256-"
        + base64.b64encode(hashlib.sha256(SIGN_IN_STYLE.encode()).digest()).decode()
        + "'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
    ("WWW-Authenticate", "Bearer"),
    *EVERY_ANSWER,
)
PAGE_PATHS = ("/", "/ui")  # the web view, and the root that leads to it; and anything under /ui/


def _opens_the_page(environ: WSGIEnvironment) -> bool:
    """A browser opening the web view (or the root, which leads to it): a GET or HEAD of a path under
    ``/ui`` whose ``Accept`` takes HTML. A script's fetch, curl and the page's own files ask otherwise."""
    path = environ.get("PATH_INFO", "")
    if environ["REQUEST_METHOD"] not in ("GET", "HEAD") or not (path in PAGE_PATHS or path.startswith("/ui/")):
        return False
    for item in _unwsgi(environ.get("HTTP_ACCEPT", "")).split(","):
        media, *params = (part.strip().lower() for part in item.split(";"))
        if media == "text/html" and not any(_refuses(param) for param in params):
            return True
    return False


def _refuses(param: str) -> bool:
    """A media range's ``q=0``: not acceptable."""
    name, _, value = param.partition("=")
    try:
        return name.strip() == "q" and float(value) == 0
    except ValueError:
        return False


def _sign_in_page(start_response: StartResponse, *, head: bool) -> list[bytes]:
    response = {"statusCode": 401, "headers": dict(SIGN_IN_HEADERS), "body": SIGN_IN_PAGE}
    return _respond(start_response, response, head=head)


def query_token(environ: WSGIEnvironment) -> str | None:
    """The ``?token=`` of a request, if it has one (the last, if several)."""
    query = parse_qsl(_unwsgi(environ.get("QUERY_STRING", "")), keep_blank_values=True)
    found = [value for name, value in query if name == "token"]
    return found[-1] if found else None


def request_cookie(environ: WSGIEnvironment, name: str) -> str | None:
    """The value of cookie ``name`` the request carries, if any (a malformed Cookie header has none)."""
    try:
        morsel = SimpleCookie(_unwsgi(environ.get("HTTP_COOKIE", ""))).get(name)
    except CookieError:
        return None
    return None if morsel is None else morsel.value


def ui_cookie(token: str) -> str:
    """The web view's cookie value: derived from the token (a MAC of a fixed label), so the cookie jar
    never holds the token itself, and the cookie, good for GET and HEAD only, cannot stand in for it."""
    return hmac.new(token.encode(), b"delayq web view files", hashlib.sha256).hexdigest()


def _cross_origin(environ: WSGIEnvironment, origin: str) -> DelayqError | None:
    """A browser names the page that made a request in ``Origin`` (and ``Sec-Fetch-Site``), on every
    POST, PUT, PATCH and DELETE; a page of this server's own origin is the only one allowed to."""
    site = environ.get("HTTP_SEC_FETCH_SITE")
    if site is not None and site.lower() not in SAME_ORIGIN_FETCHES:
        return Forbidden(f"a {site!r} request cannot change anything here", field="Sec-Fetch-Site")
    sent = environ.get("HTTP_ORIGIN")
    if sent is not None and _unwsgi(sent).lower() != origin:
        return Forbidden(f"only pages of {origin} can change anything here", field="Origin")
    return None


def _not_json(environ: WSGIEnvironment) -> DelayqError | None:
    """A body, or a Content-Type, other than JSON. A browser sends ``text/plain``, form encodings and
    untyped bodies cross-site without asking first; ``application/json`` only after asking (CORS),
    which this server never grants."""
    media_type = environ.get("CONTENT_TYPE", "").partition(";")[0].strip().lower()
    has_body = environ.get("CONTENT_LENGTH", "0") not in ("", "0")
    if media_type == JSON or not (media_type or has_body):
        return None
    return UnsupportedMediaType(
        f"request bodies are JSON, sent as Content-Type: {JSON} (curl: -H 'content-type: {JSON}')",
        field="Content-Type",
    )


# ------------------------------------------------------------------------------ the server


class Server:
    """A waitress server bound to ``host:port`` at once (so a busy port fails before anything else
    starts), serving an app behind the ``Guard`` from ``serve`` until ``stop``.

    Binding anything but loopback reaches beyond this machine: it is refused without a token, and
    warned about with one.
    """

    def __init__(self, host: str, port: int, *, token: str | None = None, threads: int = 8) -> None:
        if not Binding(host, port).loopback and not token:
            raise ConfigError(
                f"{host or '*'}:{port} is reachable from other machines: set {ENV.UI_TOKEN} to a secret "
                "that every request must carry, or bind 127.0.0.1"
            )
        self.token = token
        self._map: dict[int, Any] = {}
        self._app: WSGIApplication | None = None  # set by serve, before the first request is read
        self._stopping = False  # a plain flag, not an Event: see stop
        self._server = create_server(
            self._dispatch,
            map=self._map,
            host=host,
            port=port,
            threads=threads,
            ident="delayq",
            max_request_body_size=MAX_REQUEST_BYTES,
        )
        self.binding = Binding(host, _bound_port(self._server))  # the port given, or the one chosen for port 0
        if not self.binding.loopback:
            log.warning(
                "listening on %s:%d, reachable from other machines; every request needs %s; Host names: %s",
                host or "*",
                self.binding.port,
                ENV.UI_TOKEN,
                ", ".join(sorted(self.binding.names)),
            )

    def _dispatch(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        assert self._app is not None, "requests are read only while serve runs"
        return self._app(environ, start_response)

    def serve(self, app: WSGIApplication) -> None:
        """Answer requests with ``app``, behind the guard, until ``stop``; then close every socket."""
        self._app = Guard(app, self.binding, self.token)
        use_poll = self._server.adj.asyncore_use_poll
        try:
            while not self._stopping:
                wasyncore.loop(timeout=POLL_S, use_poll=use_poll, map=self._map, count=1)
        finally:
            self.close()

    def stop(self) -> None:
        """Ends ``serve`` within ``POLL_S``. Safe from any thread and from a signal handler, because it
        takes no lock: a handler that waits for a lock its own thread holds (an Event's, when a second
        signal lands inside the first one's ``set``) never returns."""
        self._stopping = True

    def close(self) -> None:
        """Stop the worker threads and close the listening socket and every connection."""
        self._server.task_dispatcher.shutdown(cancel_pending=True, timeout=5)
        wasyncore.close_all(self._map)


def listen(host: str, port: int, token: str | None, *, program: str) -> Server:
    """A ``Server`` bound to ``host:port`` (requests are answered once it serves). Exits with one line
    naming ``program`` when the address is taken, or reaches beyond this machine without a token,
    before anything else has started."""
    try:
        return Server(host, port, token=token)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SystemExit(
            f"{program}: cannot listen on {host}:{port}: {reason} (another one running? pick another port: "
            "--port, or make dev PORT=)"
        ) from None
    except ConfigError as exc:
        raise SystemExit(f"{program}: {exc}") from None


def _bound_port(server: BaseWSGIServer | MultiSocketServer) -> int:
    """The port a server listens on (the first, when a name stands for several addresses)."""
    if isinstance(server, BaseWSGIServer):
        return int(server.getsockname()[1])
    return int(server.effective_listen[0][1])
