"""Helpers of the local tier: the local stack started as a user starts it (``python -m delayq.local``
in a process of its own, on a free port), its output watched line by line, and plain HTTP requests
to it that can send any header, Host included."""

from __future__ import annotations

import http.client
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
CLOSED = "redis://127.0.0.1:1/0"
JSON = {"Content-Type": "application/json"}


class Answer:
    """A response: status, headers (lower-case names) and body, parsed when it is JSON."""

    def __init__(self, status: int, headers: dict[str, str], raw: bytes) -> None:
        self.status = status
        self.headers = headers
        self.raw = raw
        self.json: Any = json.loads(raw) if raw and headers.get("content-type") == "application/json" else None

    def __repr__(self) -> str:
        return f"Answer({self.status}, {self.headers}, {self.raw[:300]!r})"


def send(
    port: int, method: str, path: str, body: bytes | str | None = None, headers: dict[str, str] | None = None
) -> Answer:
    """One request to 127.0.0.1:``port``, headers exactly as given (a ``Host`` header replaces the
    default one). ``path`` is sent as is, percent-encoding and all."""
    headers = dict(headers or {})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        if "Host" not in headers:
            connection.putheader("Host", f"127.0.0.1:{port}")
        data = body.encode() if isinstance(body, str) else body
        if data is not None and "Transfer-Encoding" not in headers and "Content-Length" not in headers:
            headers["Content-Length"] = str(len(data))
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders(data)
        response = connection.getresponse()
        raw = response.read()
        names = {name.lower() for name in response.headers}
        headers = {name: ", ".join(response.headers.get_all(name) or []) for name in names}
        return Answer(response.status, headers, raw)
    finally:
        connection.close()


def eventually(predicate: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    """``predicate()``'s first true value, polled until ``timeout`` (generous: a loaded machine is slow)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s (last: {value!r})")
        time.sleep(0.1)


class Stack:
    """A running local stack: its port, its output so far, requests to it."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def output(self) -> str:
        """Everything the stack printed so far (``wait_for`` looks only at what comes after)."""
        while not self.lines.empty():
            self.seen.append(self.lines.get_nowait())
        return "".join(self.seen)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        """The first line from now on holding ``text``."""
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

    def request(self, method: str, path: str, body: object = None, headers: dict[str, str] | None = None) -> Answer:
        """A JSON request, as a well-behaved client sends it."""
        data = None if body is None else json.dumps(body)
        return send(self.port, method, path, data, {**JSON, **(headers or {})} if data is not None else headers)

    def get(self, path: str) -> Any:
        answer = self.request("GET", path)
        assert answer.status == 200, answer
        return answer.json


def base_env(namespace: str, redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: no DELAYQ_* but those given, this test's namespace, a fast tick."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_")}
    env.update(DELAYQ_REDIS_URL=redis_url, DELAYQ_NAMESPACE=namespace, DELAYQ_TICK="0.2", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def start_stack(env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    return start_module("delayq.local", env, "--port", str(port), *args), port


def start_module(module: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``python -m <module> *args`` from the checkout, its output (both streams) read as text."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@contextmanager
def running_process(process: subprocess.Popen[str], port: int, ready: str) -> Iterator[Stack]:
    """``process`` watched as a ``Stack`` once it printed ``ready``, until the block ends (then SIGTERM,
    as Ctrl-C; killed if it does not end within 15 s)."""
    stack = Stack(process, port)
    try:
        stack.wait_for(ready, timeout=60)
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


@contextmanager
def local_stack(env: dict[str, str], *args: str) -> Iterator[Stack]:
    """``python -m delayq.local --port <free> *args``, until the block ends (then SIGTERM, as Ctrl-C)."""
    process, port = start_stack(env, *args)
    with running_process(process, port, "delayq local stack on") as stack:
        yield stack
