"""The local stack as a user runs it (``python -m delayq.local``, what ``make dev`` starts): on the
Redis it is given, on a private redis-server when that Redis does not answer, and on the embedded
fakeredis when there is no redis-server either. Each time a job posted over HTTP is delivered."""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLOSED = "redis://127.0.0.1:1/0"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Stack:
    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.base = f"http://127.0.0.1:{port}"
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 15) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return line
        pytest.fail(f"{text!r} not in the local stack's output:\n{''.join(self.seen)}")

    def request(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


@contextmanager
def local_stack(env: dict[str, str]) -> Iterator[Stack]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "delayq.local", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    stack = Stack(process, port)
    try:
        stack.wait_for("delayq local stack on")
        yield stack
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        stack.reader.join(5)
        assert process.stdout is not None
        process.stdout.close()


def base_env(namespace: str, redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_")}
    env.update(DELAYQ_REDIS_URL=redis_url, DELAYQ_NAMESPACE=namespace, DELAYQ_TICK="0.2", PYTHONUNBUFFERED="1")
    return env


def post_and_see_delivery(stack: Stack) -> None:
    status, created = stack.request("POST", "/jobs", {"topic": "example", "delay": 1, "body": {"hello": "world"}})
    assert status == 201, created
    assert isinstance(created, dict)
    line = stack.wait_for(f"delivered example/{created['id']} attempt 1")
    assert '{"hello": "world"}' in line
    # The delivery is acknowledged: the topic ends empty.
    deadline = time.monotonic() + 5
    while True:
        status, stats = stack.request("GET", "/topics/example")
        assert status == 200
        assert isinstance(stats, dict)
        if stats["reserved"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert {k: stats[k] for k in ("delayed", "ready", "reserved", "dead")} == dict.fromkeys(
        ("delayed", "ready", "reserved", "dead"), 0
    )


def test_on_the_given_redis(redis_url: str, namespace: str) -> None:
    with local_stack(base_env(namespace, redis_url)) as stack:
        assert "on Redis at" in "".join(stack.seen)
        post_and_see_delivery(stack)
        status, body = stack.request("POST", "/jobs", {"topic": "example", "delay": -1})
        assert status == 422
        assert isinstance(body, dict)
        assert body["field"] == "delay"


def test_on_a_private_redis_server_when_the_url_does_not_answer(namespace: str) -> None:
    assert shutil.which("redis-server"), "this test needs redis-server on PATH"
    with local_stack(base_env(namespace, CLOSED)) as stack:
        assert "a private redis-server" in "".join(stack.seen)
        post_and_see_delivery(stack)


def test_on_the_embedded_redis_when_there_is_no_redis_server(namespace: str, tmp_path: Path) -> None:
    env = base_env(namespace, CLOSED)
    env["PATH"] = str(tmp_path)  # no redis-server to be found
    with local_stack(env) as stack:
        output = "".join(stack.seen)
        assert "embedded in-process Redis" in output
        post_and_see_delivery(stack)


def test_a_busy_port_is_a_one_line_error_at_once(namespace: str) -> None:
    """Nothing starts (no private redis-server, no loops) when the port is taken: one line naming
    it, exit status 1, within the timeout (the stack used to hang, its loops logging errors)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "delayq.local", "--port", str(port)],
            cwd=ROOT,
            env=base_env(namespace, CLOSED),  # no Redis there: it would have started a private one
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"delayq local: cannot listen on 127.0.0.1:{port}: ")
    assert "--port" in line
