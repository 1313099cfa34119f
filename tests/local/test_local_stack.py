"""The local stack as a user runs it (``python -m delayq.local``, what ``make dev`` starts): on the
Redis it is given, on a private redis-server when that Redis does not answer, and on the embedded
fakeredis when there is no redis-server either. Each time a job posted over HTTP is delivered."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from support.local import CLOSED, ROOT, Stack, base_env, local_stack


def post_and_see_delivery(stack: Stack) -> None:
    answer = stack.request("POST", "/jobs", {"topic": "example", "delay": 1, "body": {"hello": "world"}})
    assert answer.status == 201, answer
    created = answer.json
    line = stack.wait_for(f"delivered example/{created['id']} attempt 1")
    assert '{"hello": "world"}' in line
    # The delivery is acknowledged: the topic ends empty.
    deadline = time.monotonic() + 5
    while True:
        stats = stack.get("/topics/example")
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
        answer = stack.request("POST", "/jobs", {"topic": "example", "delay": -1})
        assert answer.status == 422
        assert answer.json["field"] == "delay"


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
