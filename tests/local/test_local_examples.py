"""``make dev PORT=... HOST=...`` and ``delayq --version``, as the documentation has them. The docs'
examples themselves (curl, the command line, the Python snippets) run in test_docs_examples.py."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from support.local import ROOT, Stack, base_env
from support.servers import free_port


@pytest.mark.timeout(180)
def test_make_dev_takes_the_port_and_host(redis_url: str, namespace: str) -> None:
    assert shutil.which("make"), "this test needs make"
    port = free_port()
    process = subprocess.Popen(
        ["make", "--no-print-directory", "dev", f"PORT={port}", "HOST=localhost"],
        cwd=ROOT,
        env=base_env(namespace, redis_url, HOST="0.0.0.0", PORT="1"),  # a shell's own: ignored
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # make and the stack it runs: one process group, stopped as one
    )
    stack = Stack(process, port)
    try:
        stack.wait_for(f"delayq local stack on http://localhost:{port}", timeout=150)
        answer = stack.request("POST", "/jobs", {"topic": "example", "delay": 0})
        assert answer.status == 201, answer
        stack.wait_for(f"delivered example/{answer.json['id']} attempt 1")
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # make passes it on too: the stack gets two, and must stop once
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        stack.reader.join(30)
        assert process.stdout is not None
        process.stdout.close()
    assert not stack.reader.is_alive(), "the stack outlived make: it still holds its output open"
    assert "stopped" in stack.output()


@pytest.mark.parametrize("command", [[sys.executable, "-m", "delayq"], [str(Path(sys.executable).parent / "delayq")]])
def test_version(command: list[str]) -> None:
    result = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout == f"delayq {version('delayq')}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", version("delayq"))
