"""The web view, and the app every local HTTP surface serves: ``delayq ui`` (http://127.0.0.1:8001)
and the local stack (``/ui`` of http://127.0.0.1:8000).

The view is a static page (``ui/``: HTML, one ES module, one stylesheet, shipped in the package, no
build step) that reads and steers the queue through the JSON API only, same origin: the surface that
serves the page serves the API beside it, through the same resolver as the Lambda. Every value the
API answers is put in the page as text, never as markup; the page's Content-Security-Policy allows no
script but its own file, and no framing.

``surface`` routes a request: ``/ui/...`` to the page's files, ``/metrics`` to Prometheus (when the
process serves it), ``/`` to the page, anything else to the API. The guard (``delayq.surfaces.localhttp``) is in
front of all of it. With ``DELAYQ_UI_TOKEN``, the page is opened once as ``/ui/?token=...``: that load
sets a cookie the browser sends with the page's files and reloads (``localhttp.ui_cookie``), and the
page keeps the token for its API calls (sessionStorage, sent as a bearer credential) and takes it out
of the address bar.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import logging
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from delayq.core.errors import DelayqError
from delayq.core.settings import ENV, Settings
from delayq.store.connection import redact
from delayq.store.queue import Queue

from .api import create_app
from .localhttp import EVERY_ANSWER, UI_COOKIE, answer, lambda_app, listen, query_token, ui_cookie
from .metrics import Metrics

log = logging.getLogger("delayq.webview")

UI = "/ui/"
TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}
FILES = ("index.html", "app.js", "app.css", "icon.svg")
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = (
    ("Content-Security-Policy", CSP),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    # The files are small: the browser asks each time whether they changed (a 304 when not), so an
    # upgrade of delayq shows at the next load, never a mix of old and new files.
    ("Cache-Control", "private, no-cache"),
)


class NotFound(DelayqError):
    status = 404
    error = "not_found"


class MethodNotAllowed(DelayqError):
    status = 405
    error = "method_not_allowed"


@dataclass(frozen=True)
class File:
    """One of the page's files, as served."""

    body: bytes
    content_type: str
    etag: str


@cache
def files() -> dict[str, File]:
    """The page's files, read once from the package."""
    found = {}
    for name in FILES:
        body = resources.files(__package__).joinpath(f"ui/{name}").read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        found[name] = File(body, TYPES[name.rpartition(".")[2]], etag)
    return found


def surface(
    api: WSGIApplication, *, metrics: WSGIApplication | None = None, token: str | None = None
) -> WSGIApplication:
    """The app of a local HTTP surface: the web view's page, ``/metrics`` when given, the API."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        def respond(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, *EVERY_ANSWER], exc_info)

        path = environ.get("PATH_INFO", "")
        method = environ["REQUEST_METHOD"]
        if path == "/" and method in ("GET", "HEAD"):
            return _redirect(respond, environ, UI)
        if path == UI.rstrip("/"):
            return _redirect(respond, environ, UI)
        if path.startswith(UI):
            return _page_file(respond, environ, path[len(UI) :] or "index.html", token)
        if path == "/metrics" and metrics is not None:
            if method not in ("GET", "HEAD"):
                return _not_allowed(respond, method, path)
            return metrics(environ, respond)
        return api(environ, respond)

    return app


def _page_file(respond: StartResponse, environ: WSGIEnvironment, name: str, token: str | None) -> Iterable[bytes]:
    method = environ["REQUEST_METHOD"]
    found = files().get(name)
    if found is None:
        return answer(respond, NotFound(f"no file {UI}{name[:64]!r} in the web view"), head=method == "HEAD")
    if method not in ("GET", "HEAD"):
        return _not_allowed(respond, method, UI + name)
    headers = [*PAGE_HEADERS, ("ETag", found.etag)]
    given = query_token(environ)
    if name == "index.html" and token and given is not None and hmac.compare_digest(given, token):
        cookie = f"{UI_COOKIE}={ui_cookie(token)}; Path={UI}; HttpOnly; SameSite=Strict"
        headers.append(("Set-Cookie", cookie))
    if environ.get("HTTP_IF_NONE_MATCH") == found.etag:
        respond("304 Not Modified", headers)
        return []
    respond("200 OK", [*headers, ("Content-Type", found.content_type), ("Content-Length", str(len(found.body)))])
    return [] if method == "HEAD" else [found.body]


def _redirect(respond: StartResponse, environ: WSGIEnvironment, to: str) -> Iterable[bytes]:
    """To the page, keeping the query (a first load's ``?token=``)."""
    query = environ.get("QUERY_STRING", "")
    respond("308 Permanent Redirect", [("Location", to + (f"?{query}" if query else "")), ("Content-Length", "0")])
    return []


def _not_allowed(respond: StartResponse, method: str, path: str) -> Iterable[bytes]:
    problem = MethodNotAllowed(f"{method[:16]} is not allowed on {path[:64]}; it allows GET, HEAD")
    return answer(respond, problem, headers=[("Allow", "GET, HEAD")])


def metrics_surface(metrics: WSGIApplication) -> WSGIApplication:
    """The app of a loop's ``--metrics-port``: ``/metrics``, and nothing else."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        def respond(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, *EVERY_ANSWER], exc_info)

        path, method = environ.get("PATH_INFO", ""), environ["REQUEST_METHOD"]
        if path != "/metrics":
            return answer(respond, NotFound("this port serves /metrics only"), head=method == "HEAD")
        if method not in ("GET", "HEAD"):
            return _not_allowed(respond, method, path)
        return metrics(environ, respond)

    return app


def ui_query(settings: Settings) -> str:
    """How to open the page, for a log line: with the token's variable (never its value) when one is needed."""
    return f"?token=${ENV.UI_TOKEN}" if settings.ui_token else ""


# ------------------------------------------------------------------------------------ delayq ui


def main(argv: list[str] | None = None) -> None:
    """``delayq ui``: the web view and the jobs gauge of the queue the ``DELAYQ_*`` settings name; no loop."""
    parser = argparse.ArgumentParser(prog="delayq ui", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1", help=f"anything but loopback needs {ENV.UI_TOKEN}")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    settings = Settings.from_env()
    server = listen(args.host, args.port, settings.ui_token, program="delayq ui")
    queue = Queue(settings)
    queue.adopt_published_topics()  # without DELAYQ_TOPICS, the loops' topics

    def shutdown(signum: int, frame: Any) -> None:
        server.stop()

    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGTERM, shutdown)
    base = server.binding.url
    where = f"{redact(settings.redis_url)}, namespace {settings.namespace}"
    log.info("delayq ui on %s/ui/%s, for the queue at %s", base, ui_query(settings), where)
    log.info(
        "%s/metrics serves delayq_jobs, read from Redis; this process runs no loop: the loops' counters and "
        "lateness histogram are served by each loop's own --metrics-port",
        base,
    )
    try:
        queue.ping()
    except DelayqError as exc:
        log.warning("%s; the page shows it until Redis answers", exc.message)
    api = lambda_app(create_app(queue).resolve)
    server.serve(surface(api, metrics=Metrics(queue).app, token=settings.ui_token))
    log.info("stopped")


if __name__ == "__main__":
    main()
