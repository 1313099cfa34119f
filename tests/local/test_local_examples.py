"""The newcomer's path: every example of the local stack's documentation, run as written (curl through
a shell, the Python snippet through the interpreter) against ``python -m delayq.local``, each answer
and the delivery log lines checked. The examples are read from the documentation itself, so the two
cannot drift apart: a command without a check here, or a check whose command is gone, fails.

Also ``make dev PORT=...`` and ``delayq --version``."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from support.local import ROOT, Stack, base_env, eventually, local_stack, send
from support.servers import free_port

EXAMPLES_DOC = ROOT / "docs" / "local.md"  # where the local stack's examples live
DOC_ADDRESS = "127.0.0.1:8000"
FENCED = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def shell_commands(doc: str) -> list[str]:
    """The commands of every ``sh`` block that runs curl against ``make dev`` at its default address,
    continuation lines joined, comments dropped."""
    commands: list[str] = []
    for language, block in FENCED.findall(doc):
        if language == "sh" and "curl " in block and DOC_ADDRESS in block:
            for line in block.replace("\\\n", " ").splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    commands.append(line.strip())
    return commands


def python_snippet(doc: str) -> str:
    [snippet] = [block for language, block in FENCED.findall(doc) if language == "python" and "Queue" in block]
    return snippet


# ------------------------------------------------------------------------------ running a command


def run(command: str, variables: dict[str, str], port: int) -> str:
    """``command`` as a user's shell runs it, with the variables set before it; its output."""
    command = command.replace(DOC_ADDRESS, f"127.0.0.1:{port}")
    if shutil.which("curl") and shutil.which("bash"):
        script = "".join(f"{name}={shlex.quote(value)}\n" for name, value in variables.items()) + command
        result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, (command, result.stderr)
        return result.stdout
    return emulate(command, variables, port)


def emulate(command: str, variables: dict[str, str], port: int) -> str:
    """The same command without curl: its arguments read as curl reads them, sent with http.client."""
    for name, value in variables.items():
        command = command.replace(f"${name}", value)
    words = shlex.split(command, comments=True)
    if words[0] == "sleep":
        time.sleep(float(words[1]))
        return ""
    assert words[0] == "curl", command
    method, headers, data, url = "GET", {}, None, ""
    args = iter(words[1:])
    for word in args:
        if word == "-X":
            method = next(args)
        elif word == "-H":
            name, _, value = next(args).partition(":")
            headers[name.strip().title()] = value.strip()
        elif word == "-d":
            data = next(args)
            method = "POST" if method == "GET" else method
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        elif not word.startswith("-"):
            url = word
    path = url.split(f"127.0.0.1:{port}", 1)[1]
    return send(port, method, path, data, headers).raw.decode()


# ------------------------------------------------------------------------------ what each example must do


@dataclass
class Example:
    """A documented command (found by ``pattern``), what to wait for before it, and its check."""

    pattern: str
    check: Callable[[Stack, str], None]
    before: Callable[[Stack], None] | None = None
    runs: int = 0


def now_ms() -> int:
    return int(time.time() * 1000)


def near(run_at_ms: int, delay_s: float, slack_s: float = 120) -> bool:
    """``run_at_ms`` is about now + ``delay_s`` (the machine's clock and Redis' are one here)."""
    return -slack_s * 1000 <= run_at_ms - (now_ms() + delay_s * 1000) <= 1000


def first_job(stack: Stack, out: str) -> None:
    created = json.loads(out)
    assert created["topic"] == "example"
    assert near(created["run_at_ms"], 3)
    line = stack.wait_for(f"delivered example/{created['id']} attempt 1", timeout=60)
    assert line.rstrip().endswith('after its run-at: {"hello": "world"}'), line


def created(topic: str, id_: str, delay_s: float) -> Callable[[Stack, str], None]:
    def check(stack: Stack, out: str) -> None:
        answer = json.loads(out)
        assert (answer["topic"], answer["id"]) == (topic, id_), answer
        assert near(answer["run_at_ms"], delay_s), answer

    return check


def got_order(stack: Stack, out: str) -> None:
    job = json.loads(out)
    assert (job["state"], job["body"], job["attempts"]) == ("delayed", {"order": 1042}, 0), job


def cancelled(stack: Stack, out: str) -> None:
    assert out == ""
    assert stack.request("GET", "/jobs/orders/close-1042").status == 404


def batch(ids: list[str]) -> Callable[[Stack, str], None]:
    def check(stack: Stack, out: str) -> None:
        results = json.loads(out)["results"]
        assert [result["status"] for result in results] == [201, 201], results
        ids[:] = [result["id"] for result in results]

    return check


def topic_counts(batch_ids: list[str]) -> Callable[[Stack, str], None]:
    def check(stack: Stack, out: str) -> None:
        counts = json.loads(out)
        assert counts["dead"] == 0
        assert counts["delayed"] + counts["ready"] + counts["reserved"] <= 2, counts  # the batch's, unless delivered
        for id_ in batch_ids:  # delayed 5 and 9 s: both delivered, and logged
            stack.wait_for(f"delivered orders/{id_} attempt 1", timeout=60)

    return check


def dead_by_now(stack: Stack) -> None:
    def settled() -> bool:
        counts = stack.get("/topics/example-fails")
        return counts["dead"] == 1 and counts["delayed"] + counts["ready"] + counts["reserved"] == 0

    eventually(settled, "doomed-1 dead after its two attempts", timeout=60)


def dead_list(stack: Stack, out: str) -> None:
    [job] = json.loads(out)["jobs"]
    assert (job["id"], job["attempts"], job["body"]) == ("doomed-1", 2, {"n": 1}), job
    assert job["last_error"].startswith("RuntimeError: example-fails fails every delivery"), job
    output = stack.output()
    for attempt in (1, 2):
        assert f"example-fails/doomed-1 attempt {attempt} failed: RuntimeError: example-fails fails" in output


def called_back_by_now(stack: Stack) -> None:
    eventually(lambda: stack.get("/topics/example-dead")["done"] == 1, "doomed-1's callback job done", timeout=60)


def callback_done(stack: Stack, out: str) -> None:
    """doomed-1's death made one job in example-dead (its on_dead), which ran; the stack logged its body."""
    [job] = json.loads(out)["jobs"]
    assert job["id"].startswith("dead-p0-"), job
    assert job["result"]["logged"] is True, job
    assert '"topic": "example-fails", "id": "doomed-1", "key": null, "outcome": "dead"' in stack.output()


def answered(document: dict[str, Any]) -> Callable[[Stack, str], None]:
    def check(stack: Stack, out: str) -> None:
        assert json.loads(out) == document

    return check


def no_check(stack: Stack, out: str) -> None:
    assert out == ""


def examples() -> list[Example]:
    batch_ids: list[str] = []
    return [
        Example(r'curl -s -X POST \S+/jobs .*"topic": "example", "delay": 3,', first_job),
        Example(r"-X POST \$API/jobs .*close-1042", created("orders", "close-1042", 600)),
        Example(r"-X PUT \$API/jobs/reminders/ride-77 ", created("reminders", "ride-77", 3600)),
        Example(r"^curl -s \$API/jobs/orders/close-1042 ", got_order),
        Example(r"-X PATCH \$API/jobs/orders/close-1042 ", created("orders", "close-1042", 1200)),
        Example(r"-X DELETE \$API/jobs/orders/close-1042 ", cancelled),
        Example(r"-X POST \$API/jobs/batch ", batch(batch_ids)),
        Example(r"^curl -s \$API/topics/orders ", topic_counts(batch_ids)),
        Example(r"-X POST \$API/jobs .*doomed-1", created("example-fails", "doomed-1", 0)),
        Example(r"^sleep ", no_check),
        Example(r'^curl -s "\$API/topics/example-fails/dead\?limit=20"', dead_list, before=dead_by_now),
        Example(r'^curl -s "\$API/topics/example-dead/jobs', callback_done, before=called_back_by_now),
        Example(r"-X POST \$API/topics/example-fails/dead/replay ", answered({"replayed": 1})),
        Example(r"-X DELETE \$API/topics/example-fails/dead ", answered({"purged": 1}), before=dead_by_now),
    ]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_documented_example_runs_as_written(redis_url: str, namespace: str) -> None:
    doc = EXAMPLES_DOC.read_text(encoding="utf-8")
    commands = shell_commands(doc)
    env = base_env(namespace, redis_url, DELAYQ_TICK="1")  # the default tick, as make dev runs
    expected = examples()
    with local_stack(env) as stack:
        variables: dict[str, str] = {}
        for command in commands:
            if assignment := re.fullmatch(r"(\w+)=(\S+)", command):
                variables[assignment[1]] = assignment[2].replace(DOC_ADDRESS, f"127.0.0.1:{stack.port}")
                continue
            [example] = [example for example in expected if re.search(example.pattern, command)] or [None]
            assert example is not None, f"no check for the documented command {command!r}"
            if example.before:
                example.before(stack)
            out = run(command, variables, stack.port)
            example.check(stack, out)
            example.runs += 1
        assert [example.pattern for example in expected if not example.runs] == [], "documented commands gone"

        snippet = python_snippet(doc)
        result = subprocess.run(
            [sys.executable, "-c", snippet], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, result.stderr
        assert "JobInfo(topic='orders', id='close-1042', state='delayed'" in result.stdout
        assert "TopicStats(" in result.stdout
        assert stack.request("GET", "/jobs/orders/close-1042").status == 404  # cancelled by the snippet
        ride = stack.get("/jobs/reminders/ride-77")
        assert near(ride["run_at_ms"], 3600)


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
