"""A real browser (Debian's ``chromium``, headless) on a page of another origin tries to drive the local
stack, the way any site a developer visits could: a ``fetch`` POST as ``text/plain``, as an untyped
blob and without a body (simple requests, sent without asking), one as ``application/json`` (which
needs a CORS preflight), and a ``text/plain`` form POST shaped to read as JSON (``{..., "body": "="}``).
None of them may create, replay or change anything; the stack's log shows each refused; a
same-origin JSON request from a client is accepted. (With the guard switched off, the same page
creates three jobs.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from support.local import Stack, base_env, eventually, local_stack

ATTACK_IDS = ("csrf-text", "csrf-json", "csrf-blob", "csrf-form")

PAGE = """<!doctype html>
<title>a page of another site</title>
<iframe name="sink"></iframe>
<form id="form" method="POST" enctype="text/plain" action="STACK/jobs" target="sink">
  <input name='{"topic": "example", "id": "csrf-form", "delay": 3600, "body": "' value='"}'>
</form>
<script type="module">
const stack = "STACK";
const job = (id) => JSON.stringify({topic: "example", id, delay: 3600});
const results = {};
async function attempt(name, request) {
  try {
    const response = await request();
    results[name] = `sent (${response.type} ${response.status})`;
  } catch (error) {
    results[name] = `failed: ${error}`;
  }
}
await attempt("text", () => fetch(`${stack}/jobs`,
  {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: job("csrf-text")}));
await attempt("json", () => fetch(`${stack}/jobs`,
  {method: "POST", headers: {"Content-Type": "application/json"}, body: job("csrf-json")}));
await attempt("blob", () => fetch(`${stack}/jobs`,
  {method: "POST", mode: "no-cors", body: new Blob([job("csrf-blob")])}));
await attempt("replay", () => fetch(`${stack}/topics/example-fails/dead/replay`, {method: "POST", mode: "no-cors"}));
const sink = document.querySelector("iframe");
await new Promise((done) => {
  sink.addEventListener("load", done, {once: true});
  setTimeout(done, 20000);
  document.getElementById("form").submit();
});
results.form = "submitted";
await fetch("/report", {method: "POST", body: JSON.stringify(results)});
</script>
"""


class Attacker:
    """The other origin: serves the attack page, and takes the page's report of what it tried."""

    def __init__(self, stack_base: str) -> None:
        self.page = PAGE.replace("STACK", stack_base).encode()
        self.report: dict[str, Any] = {}
        self.reported = threading.Event()
        attacker = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(attacker.page)))
                self.end_headers()
                self.wfile.write(attacker.page)

            def do_POST(self) -> None:
                attacker.report = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                attacker.reported.set()
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Attacker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@contextmanager
def chromium(url: str, profile: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Headless chromium showing ``url`` (``attacker.example`` resolves to 127.0.0.1), until the block ends."""
    binary = shutil.which("chromium")
    assert binary, "this test needs Debian's chromium (apt-get install chromium)"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP attacker.example 127.0.0.1",
    ]
    browser = subprocess.Popen(
        [binary, *flags, url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the browser and its helper processes: one group, stopped as one
    )
    try:
        yield browser
    finally:
        os.killpg(browser.pid, signal.SIGTERM)
        try:
            browser.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(browser.pid, signal.SIGKILL)
            browser.wait(10)


def dead_letter(stack: Stack) -> dict[str, Any]:
    """A job of ``example-fails`` that is dead: what a cross-site replay would bring back."""
    assert stack.request("POST", "/jobs", {"topic": "example-fails", "id": "doomed"}).status == 201
    eventually(lambda: stack.get("/jobs/example-fails/doomed")["state"] == "dead", "doomed dead", timeout=60)
    return stack.get("/jobs/example-fails/doomed")


def refusals(stack: Stack) -> list[str]:
    return [line for line in stack.output().splitlines() if "refused POST" in line]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("attacker_host", ["127.0.0.1", "attacker.example"])
def test_a_page_of_another_origin_cannot_drive_the_local_stack(
    redis_url: str, namespace: str, tmp_path: Path, attacker_host: str
) -> None:
    with local_stack(base_env(namespace, redis_url)) as stack:
        doomed = dead_letter(stack)
        with Attacker(stack.base) as attacker, chromium(f"http://{attacker_host}:{attacker.port}/", tmp_path):
            assert attacker.reported.wait(180), "the attack page never reported"
        report = attacker.report

        # The browser sent the simple requests (opaque answers), and refused the preflighted one itself.
        assert report["text"].startswith("sent (opaque"), report
        assert report["blob"].startswith("sent (opaque"), report
        assert report["replay"].startswith("sent (opaque"), report
        assert report["json"].startswith("failed: TypeError"), report
        assert report["form"] == "submitted", report
        # Nothing was created, replayed or changed.
        created = [id_ for id_ in ATTACK_IDS if stack.request("GET", f"/jobs/example/{id_}").status != 404]
        assert created == []
        counts = stack.get("/topics/example")
        assert [counts[state] for state in ("delayed", "ready", "reserved", "dead")] == [0, 0, 0, 0], counts
        assert stack.get("/jobs/example-fails/doomed") == doomed

        # They reached the stack, which refused each of them.
        refused = eventually(lambda: len(refusals(stack)) >= 4 and refusals(stack), "the four refusals logged")
        assert len(refused) == 4, refused
        assert sum("refused POST '/jobs'" in line for line in refused) == 3, refused
        assert sum("refused POST '/topics/example-fails/dead/replay'" in line for line in refused) == 1, refused
        assert all("request cannot change anything here" in line for line in refused), refused  # Sec-Fetch-Site

        # The same JSON request from the stack's own origin is accepted.
        own = {"Origin": stack.base, "Sec-Fetch-Site": "same-origin"}
        answer = stack.request("POST", "/jobs", {"topic": "example", "id": "csrf-json", "delay": 3600}, headers=own)
        assert answer.status == 201, answer
