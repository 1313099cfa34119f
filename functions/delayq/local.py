"""The local stack: the HTTP API on http://127.0.0.1:8000, with the sweep and consume loops, in one
process. ``python -m delayq.local`` (``make dev``).

The API is the same resolver the Lambda runs, behind a real HTTP server that turns each request into
an API Gateway REST proxy event. Redis is, in this order: ``DELAYQ_REDIS_URL`` (or the default URL)
when it answers; a private ``redis-server`` on a free port when one is on PATH; an embedded
in-process Redis (fakeredis with Lua), with a warning. Without ``DELAYQ_TOPICS``, the topic
``example`` (and any other) is delivered to ``log_delivery``, which logs each job.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import redis

from .api import create_app
from .connection import RedisClient, client_options, connect, redact
from .consumer import Consumer
from .job import Job
from .loop import Budget
from .queue import Queue
from .settings import Settings, Topics
from .sweeper import Sweeper

log = logging.getLogger("delayq.local")

MAX_REQUEST_BYTES = 10 * 1024 * 1024  # API Gateway's limit
EXAMPLE_TOPICS = {
    "example": {"target": "python:delayq.local:log_delivery", "retries": 2, "backoff": [1, 5, 30]},
    "*": {"target": "python:delayq.local:log_delivery"},
}


def log_delivery(job: Job) -> None:
    """The example topic's target: logs each delivery, and how late it started."""
    late_ms = time.time() * 1000 - job.run_at_ms
    log.info(
        "delivered %s/%s attempt %d, %.0f ms after its run-at: %s",
        job.topic,
        job.id,
        job.attempt,
        late_ms,
        json.dumps(job.body),
    )


# ----------------------------------------------------------------------------------- Redis


def _answers(client: RedisClient) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis_server(stack: ExitStack) -> str:
    """A private redis-server on a free port, stopped when ``stack`` closes; its URL."""
    port = _free_port()
    workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="delayq-redis-"))
    server = subprocess.Popen(  # noqa: S603 - a fixed program and arguments
        [
            shutil.which("redis-server") or "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
    )

    def stop() -> None:
        server.terminate()
        server.wait(10)

    stack.callback(stop)
    url = f"redis://127.0.0.1:{port}/0"
    probe = redis.Redis.from_url(url, **client_options())
    for _ in range(100):
        if _answers(probe):
            return url
        time.sleep(0.05)
    raise RuntimeError(f"redis-server did not start on port {port}")


def embedded_redis() -> RedisClient:
    """An in-process Redis with Lua (fakeredis), for machines with no Redis at all."""
    import fakeredis  # noqa: PLC0415 - optional: only this fallback needs it

    return fakeredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)


def choose_redis(settings: Settings, stack: ExitStack) -> tuple[RedisClient, str]:
    """The Redis the local stack uses, and a line saying which."""
    client = connect(settings)
    if _answers(client):
        return client, f"Redis at {redact(settings.redis_url)}"
    if shutil.which("redis-server"):
        url = start_redis_server(stack)
        return connect(settings, url), f"a private redis-server at {url} (nothing at {redact(settings.redis_url)})"
    log.warning(
        "no Redis at %s and no redis-server on PATH: using an embedded in-process Redis (fakeredis). "
        "Jobs live only as long as this process; use a real Redis for anything else.",
        redact(settings.redis_url),
    )
    return embedded_redis(), "an embedded in-process Redis (fakeredis)"


# ----------------------------------------------------------------------------------- HTTP


def request_event(method: str, target: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """An HTTP request as the API Gateway REST proxy event the Lambda would receive."""
    url = urlsplit(target)
    pairs = parse_qsl(url.query, keep_blank_values=True)
    multi: dict[str, list[str]] = {}
    for name, value in pairs:
        multi.setdefault(name, []).append(value)
    try:
        text: str | None = body.decode("utf-8") if body else None
        encoded = False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    path = unquote(url.path) or "/"
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


def make_handler(resolve: Callable[[dict[str, Any], Any], dict[str, Any]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "delayq-local"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_REQUEST_BYTES:
                error = {"status": 413, "error": "too_large", "field": None, "message": "request over 10 MiB"}
                self._send(413, {"Content-Type": "application/json"}, json.dumps(error).encode())
                return
            body = self.rfile.read(length) if length else b""
            event = request_event(self.command, self.path, dict(self.headers.items()), body)
            response = resolve(event, None)
            payload = response.get("body") or ""
            raw = base64.b64decode(payload) if response.get("isBase64Encoded") else payload.encode()
            headers = dict(response.get("headers") or {})
            for name, values in (response.get("multiValueHeaders") or {}).items():
                headers[name] = ", ".join(values)
            self._send(int(response["statusCode"]), headers, raw)

        def _send(self, status: int, headers: dict[str, str], raw: bytes) -> None:
            self.send_response(status)
            for name, value in headers.items():
                if name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            log.debug("%s %s", self.address_string(), format % args)

    return Handler


# ----------------------------------------------------------------------------------- main


def listen(host: str, port: int) -> ThreadingHTTPServer:
    """The HTTP server, bound to ``host:port`` (requests are answered once a handler is set). Exits
    with one line naming the address when it is taken, before anything else has started."""
    try:
        server = ThreadingHTTPServer((host, port), BaseHTTPRequestHandler)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SystemExit(
            f"delayq local: cannot listen on {host}:{port}: {reason} (another `make dev`? pick one with --port)"
        ) from None
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m delayq.local", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s [%(threadName)s]: %(message)s")

    settings = Settings.from_env()
    if not settings.topics:
        settings = settings.with_(topics=Topics.parse(EXAMPLE_TOPICS))
    server = listen(args.host, args.port)  # first: a busy port stops here, with nothing to undo
    with ExitStack() as stack:
        stack.callback(server.server_close)
        client, where = choose_redis(settings, stack)
        queue = Queue(settings, redis=client)
        server.RequestHandlerClass = make_handler(create_app(queue).resolve)
        sweeper, consumer = Sweeper(queue), Consumer(queue)
        loops = [
            threading.Thread(target=sweeper.run, args=(Budget.forever(),), name="sweep", daemon=True),
            threading.Thread(target=consumer.run, args=(Budget.forever(),), name="consume", daemon=True),
        ]

        def stop_loops() -> None:  # before the private redis-server stops (callbacks run last in, first out)
            sweeper.request_stop()
            consumer.request_stop()
            for thread in loops:
                if thread.is_alive():
                    thread.join(10)

        stack.callback(stop_loops)
        for thread in loops:
            thread.start()

        def shutdown(signum: int, frame: Any) -> None:
            sweeper.request_stop()
            consumer.request_stop()
            threading.Thread(target=server.shutdown).start()

        signal.signal(signal.SIGINT, shutdown)
        signal.signal(signal.SIGTERM, shutdown)
        base = f"http://{args.host}:{args.port}"
        log.info("delayq local stack on %s, on %s; topics: %s", base, where, ", ".join(settings.topics))
        log.info(
            "try: curl -s -X POST %s/jobs -H 'content-type: application/json' "
            """-d '{"topic": "example", "delay": 3, "body": {"hello": "world"}}'""",
            base,
        )
        server.serve_forever()
    log.info("stopped")


if __name__ == "__main__":
    main()
