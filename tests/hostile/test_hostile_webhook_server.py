"""A webhook receiver run by someone hostile, and a caller who sets ``retries: 25`` with ``backoff:
[0]``: through the real API handler and the consumer, what the receiver sends back never reaches the
job's ``last_error`` (every API caller can read it) beyond the status and its reason phrase, and the
attempts come at least ``WEBHOOK_MIN_BACKOFF_S`` apart, however the job asked.

Issue 15: ``last_error`` showed the URL path and 200 characters of the answer to every API caller; 26
POSTs per job came at once.
"""

from __future__ import annotations

import importlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import enqueue
from delayq import Queue
from delayq.core.settings import WEBHOOK_MIN_BACKOFF_S
from delayq.loops.consumer import Consumer

from support.answers import response_json
from support.events import FakeContext, api_event
from support.loops import running, wait_until

PATH_TOKEN = "xoxb-path-T0KEN-4f1d"  # a webhook URL's path is often its only secret (Slack's are)
BODY_TOKEN = "leaked-session-9c2e"
LOCATION_TOKEN = "redirect-token-77ab"


class Hostile(BaseHTTPRequestHandler):
    """Answers every POST with ``self.server.answer``: a status, headers and a body of its choice."""

    server: HostileServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.times.append(time.monotonic())
        status, reason, headers, body = self.server.answer
        self.send_response(status, reason)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class HostileServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Hostile)
        self.times: list[float] = []
        self.answer: tuple[int, str, dict[str, str], bytes] = (500, "Internal Server Error", {}, b"")
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/services/{PATH_TOKEN}"


@pytest.fixture
def receiver() -> Iterator[HostileServer]:
    server = HostileServer()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def hooks(
    receiver: HostileServer,
    handler_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    make_queue: Callable[..., Queue],
) -> tuple[Any, Queue]:
    """The API handler and a queue on this test's namespace, with the topic ``hooks`` on ``receiver``."""
    topics = {"hooks": {"target": receiver.url(), "allow_http": True, "allow_private": True, "timeout": 2}}
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps(topics))
    return importlib.reload(enqueue), make_queue(topics=topics, tick=0.05)


def call(handler: Any, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    response = handler.lambda_handler(api_event(method, path, body), FakeContext())
    return int(response["statusCode"]), response_json(response)


ANSWERS = {
    "a body with a token": (503, "Service Unavailable", {}, f"<html>session={BODY_TOKEN}</html>".encode()),
    "a redirect to a token": (
        302,
        "Found",
        {"Location": f"https://evil.example/p/{LOCATION_TOKEN}?t={LOCATION_TOKEN}"},
        b"",
    ),
    "a reason phrase too long": (500, "Oops " + "x" * 500, {}, BODY_TOKEN.encode()),
    "a 404 that echoes": (404, "Not Found", {}, f"no route /services/{PATH_TOKEN}".encode()),
}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_last_error_shows_the_status_and_reason_but_nothing_the_receiver_could_smuggle(
    hooks: tuple[Any, Queue], receiver: HostileServer, answer: str
) -> None:
    handler, queue = hooks
    receiver.answer = ANSWERS[answer]
    status, _ = call(handler, "POST", "/jobs", {"topic": "hooks", "id": "h-1", "retries": 0})
    assert status == 201
    with running(Consumer(queue)):
        assert wait_until(lambda: call(handler, "GET", "/jobs/hooks/h-1")[1]["state"] == "dead", timeout=10)
    _, job = call(handler, "GET", "/jobs/hooks/h-1")
    _, dead = call(handler, "GET", "/topics/hooks/dead")
    for seen in (job["last_error"], dead["jobs"][0]["last_error"]):
        assert seen.startswith(
            f"WebhookRefused: http://127.0.0.1:{receiver.server_address[1]}: HTTP "
        ) or seen.startswith(f"WebhookError: http://127.0.0.1:{receiver.server_address[1]}: HTTP ")
        for token in (PATH_TOKEN, BODY_TOKEN, LOCATION_TOKEN, "/services"):
            assert token not in seen
        assert len(seen) < 200
    assert f"HTTP {ANSWERS[answer][0]}" in job["last_error"]


def test_retries_25_with_backoff_0_through_the_api_are_spaced(
    hooks: tuple[Any, Queue], receiver: HostileServer
) -> None:
    """The caller's ``backoff: [0]`` is accepted (201) and raised to the floor when it is written:
    each attempt waits at least ``WEBHOOK_MIN_BACKOFF_S`` after the one before (three attempts seen,
    then the job is cancelled)."""
    handler, queue = hooks
    status, _ = call(handler, "POST", "/jobs", {"topic": "hooks", "id": "h-25", "retries": 25, "backoff": [0]})
    assert status == 201
    with running(Consumer(queue)):
        assert wait_until(lambda: len(receiver.times) >= 3, timeout=15)
        assert call(handler, "DELETE", "/jobs/hooks/h-25")[0] == 204
    gaps = [later - earlier for earlier, later in itertools.pairwise(receiver.times)]
    assert all(gap >= WEBHOOK_MIN_BACKOFF_S for gap in gaps), gaps
    _, job = call(handler, "GET", "/jobs/hooks/h-25")
    assert job["error"] == "not_found"
