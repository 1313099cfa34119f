"""The local stack: the HTTP API on http://127.0.0.1:8000, with the sweep and consume loops, in one
process, and the web view at ``/ui/`` and Prometheus metrics at ``/metrics`` beside the API.
``python -m delayq.local`` (``make dev``).

The API is the same resolver the Lambda runs, behind a real HTTP server (``delayq.surfaces.localhttp``:
waitress, safe by default) that turns each request into an API Gateway REST proxy event. Redis is,
in this order: ``DELAYQ_REDIS_URL`` (or the default URL) when it answers; a private ``redis-server``
on a free port when one is on PATH; an embedded in-process Redis (fakeredis with Lua), with a
warning. Without ``DELAYQ_TOPICS``, the topics are ``EXAMPLE_TOPICS``: ``example`` (and any other
topic) logs each delivery, ``example-fails`` fails each one, so that dead letters can be seen, and
calls back into ``example-dead`` when one goes dead.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import ExitStack
from typing import Any

import redis

from delayq.core.loop import Budget
from delayq.core.observability import Telemetry
from delayq.core.settings import ENV, Settings, Topics
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper
from delayq.store.connection import RedisClient, client_options, connect, redact
from delayq.store.queue import Queue

from .api import create_app
from .examples import EXAMPLE_TOPICS
from .localhttp import lambda_app, listen
from .metrics import LoopMetrics, Metrics
from .webview import surface, ui_query

log = logging.getLogger("delayq.local")

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


# ----------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m delayq.local", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help=f"anything but loopback needs {ENV.UI_TOKEN}")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s [%(threadName)s]: %(message)s")

    settings = Settings.from_env()
    if not settings.topics:
        settings = settings.with_(topics=Topics.parse(EXAMPLE_TOPICS))
    # First: a busy port stops here, with nothing to undo.
    server = listen(args.host, args.port, settings.ui_token, program="delayq local")
    with ExitStack() as stack:
        stack.callback(server.close)
        client, where = choose_redis(settings, stack)
        counted = LoopMetrics(settings.metrics_topics)
        queue = Queue(settings, redis=client, telemetry=Telemetry.disabled(sink=counted))
        queue.publish_topics("the local stack")  # for the tools started beside it
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
            server.stop()  # nothing that takes a lock here: the loops are stopped once serve returns

        signal.signal(signal.SIGINT, shutdown)
        signal.signal(signal.SIGTERM, shutdown)
        base = server.binding.url
        log.info("delayq local stack on %s, on %s; topics: %s", base, where, ", ".join(settings.topics))
        auth = f' -H "authorization: Bearer ${ENV.UI_TOKEN}"' if settings.ui_token else ""
        log.info(
            "try: curl -s -X POST %s/jobs -H 'content-type: application/json'%s "
            """-d '{"topic": "example", "delay": 3, "body": {"hello": "world"}}'""",
            base,
            auth,
        )
        log.info("the web view: %s/ui/%s; Prometheus metrics: %s/metrics", base, ui_query(settings), base)
        api = lambda_app(create_app(queue).resolve)
        server.serve(surface(api, metrics=Metrics(queue, counted).app, token=settings.ui_token))
    log.info("stopped")


if __name__ == "__main__":
    main()
