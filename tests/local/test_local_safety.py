"""The reproductions of issue 15 against the local stack as users run it (``python -m delayq.local``,
the real API on the real Redis): what a hostile page, a hostile client or a careless operator tried,
and that it now changes nothing."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from support.local import CLOSED, JSON, ROOT, base_env, eventually, local_stack, send
from support.servers import free_port

TOKEN = "a-token-for-the-test"


def test_a_cross_site_simple_post_creates_nothing(redis_url: str, namespace: str) -> None:
    """Issue 15: ``curl -X POST /jobs -H 'Host: attacker.example' -H 'Origin: http://attacker.example'
    -H 'Content-Type: text/plain' -d '{...}'`` answered 201."""
    body = '{"topic":"example","id":"csrf-1","delay":3600}'
    with local_stack(base_env(namespace, redis_url)) as stack:
        attacks = {
            "Host": {"Host": "attacker.example", "Origin": "http://attacker.example", "Content-Type": "text/plain"},
            "Origin": {"Origin": "http://attacker.example", "Content-Type": "text/plain"},
            "Sec-Fetch-Site": {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
            "Content-Type": {"Content-Type": "text/plain"},
        }
        for field, headers in attacks.items():
            answer = send(stack.port, "POST", "/jobs", body, headers)
            assert (answer.status, answer.json["field"]) == (403 if field != "Content-Type" else 415, field), answer
        assert stack.request("GET", "/jobs/example/csrf-1").status == 404
        counts = stack.get("/topics/example")
        assert [counts[state] for state in ("delayed", "ready", "reserved", "dead")] == [0, 0, 0, 0]
        assert stack.request("POST", "/jobs", {"topic": "example", "id": "csrf-1", "delay": 3600}).status == 201
        assert "refused POST '/jobs': this server answers to Host" in stack.output()


def test_a_chunked_replay_of_one_id_replays_that_one(redis_url: str, namespace: str) -> None:
    """Issue 15: the body of a chunked request was dropped, and a replay without a body replays all."""
    with local_stack(base_env(namespace, redis_url)) as stack:
        for id_ in ("a", "b"):
            assert stack.request("POST", "/jobs", {"topic": "example-fails", "id": id_}).status == 201
        eventually(lambda: stack.get("/topics/example-fails")["dead"] == 2, "a and b dead", timeout=60)
        chunked = '4\r\n{"id\r\na\r\ns": ["a"]}\r\n0\r\n\r\n'
        headers = {**JSON, "Transfer-Encoding": "chunked"}
        answer = send(stack.port, "POST", "/topics/example-fails/dead/replay", chunked, headers)
        assert (answer.status, answer.json) == (200, {"replayed": 1}), answer
        assert stack.get("/jobs/example-fails/b")["state"] == "dead"
        assert stack.get("/jobs/example-fails/a")["state"] != "dead"


@pytest.mark.parametrize("length", ["-1", "abc"])
def test_a_malformed_content_length_is_a_400_and_the_stack_goes_on(redis_url: str, namespace: str, length: str) -> None:
    """Issue 15: ``-1`` read past the 10 MiB cap; ``abc`` printed a traceback and dropped the connection."""
    with local_stack(base_env(namespace, redis_url)) as stack:
        with socket.create_connection(("127.0.0.1", stack.port), timeout=30) as sock:
            head = f"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1:{stack.port}\r\nContent-Type: application/json\r\n"
            sock.sendall(f"{head}Content-Length: {length}\r\n\r\n{{}}".encode())
            reply = sock.makefile("rb").read()
        assert reply.startswith(b"HTTP/1.1 400 Bad Request\r\n"), reply
        assert b"Content-Length is invalid" in reply
        assert stack.get("/health") == {"status": "ok"}
        assert "Traceback" not in stack.output()


@pytest.mark.parametrize(
    ("method", "status", "content_type"),
    [("HEAD", 200, "application/json"), ("OPTIONS", 204, None), ("PROPFIND", 405, "application/json")],
)
def test_other_methods_are_answered_by_the_api(
    redis_url: str, namespace: str, method: str, status: int, content_type: str | None
) -> None:
    """Issue 14: HEAD and OPTIONS got an HTML 501 from the old server. The API decides what they get,
    as in Lambda: HEAD is GET without the body, OPTIONS a 204 naming the methods, any other a JSON 405."""
    with local_stack(base_env(namespace, redis_url)) as stack:
        answer = send(stack.port, method, "/health")
    assert answer.status == status, answer
    assert answer.headers.get("content-type") == content_type, answer.headers
    assert b"<html" not in answer.raw.lower()
    if method != "HEAD":  # (a HEAD's Allow would be that of a GET: none)
        assert answer.headers["allow"] == "GET, HEAD, OPTIONS", answer.headers
    assert (answer.raw == b"") == (method != "PROPFIND"), answer.raw
    if method == "HEAD":  # the length of what a GET answers: {"status":"ok"}
        assert answer.headers["content-length"] == "15", answer.headers


def test_binding_beyond_loopback_needs_a_token(namespace: str) -> None:
    """Issue 15: ``--host 0.0.0.0`` was taken silently. Now: one line, exit 1, nothing started."""
    result = subprocess.run(
        [sys.executable, "-m", "delayq.local", "--host", "0.0.0.0", "--port", str(free_port())],
        cwd=ROOT,
        env=base_env(namespace, CLOSED),  # no Redis there: it would have started a private one
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("delayq local: 0.0.0.0:")
    assert "reachable from other machines: set DELAYQ_UI_TOKEN" in line


def test_with_a_token_beyond_loopback_every_request_needs_it(redis_url: str, namespace: str) -> None:
    env = base_env(namespace, redis_url, DELAYQ_UI_TOKEN=TOKEN)
    with local_stack(env, "--host", "0.0.0.0") as stack:
        assert 'authorization: Bearer $DELAYQ_UI_TOKEN"' in stack.wait_for("try: curl")  # the hint says so
        assert "reachable from other machines; every request needs DELAYQ_UI_TOKEN" in stack.output()
        assert send(stack.port, "GET", "/health").status == 401
        assert stack.request("POST", "/jobs", {"topic": "example"}).status == 401
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        host = {"Host": f"{socket.gethostname()}:{stack.port}"}
        assert send(stack.port, "GET", "/health", headers={**bearer, **host}).status == 200
        answer = stack.request("POST", "/jobs", {"topic": "example", "delay": 0}, headers=bearer)
        assert answer.status == 201, answer
        stack.wait_for(f"delivered example/{answer.json['id']} attempt 1")
    assert TOKEN not in "".join(stack.seen)


def test_a_burst_of_signals_stops_the_stack_all_the_same(redis_url: str, namespace: str) -> None:
    """Ctrl-C pressed again and again, or SIGTERM from a supervisor and SIGINT from a terminal: the stack
    stops once, cleanly. (Its handler used to take a lock, an Event's, and a second signal landing
    inside the first one's ``set`` hung the stack for ever; that window is too narrow to hit on
    purpose, so this test guards the outcome, and ``Server.stop`` takes no lock.)"""
    with local_stack(base_env(namespace, redis_url)) as stack:
        for i in range(200):
            stack.process.send_signal(signal.SIGINT if i % 2 else signal.SIGTERM)
        assert stack.process.wait(60) == 0
        assert "stopped" in stack.wait_for("stopped")


def test_a_stack_stopped_by_sigterm_says_so(redis_url: str, namespace: str) -> None:
    with local_stack(base_env(namespace, redis_url)) as stack:
        port = stack.port
    assert stack.process.returncode == 0
    assert "stopped" in stack.output()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # the port is free again
