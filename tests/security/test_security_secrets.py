"""No secret in any log line, error or answer, whatever the shape of the URL or secret that holds it.

A table: every entry point (the API handler, the sweep and consume handlers, ``python -m delayq sweep``
and ``consume``, the ``Queue`` client, the local stack ``python -m delayq.local``) times every shape
of secret (a password in the URL's user part with ``/``, ``#``, ``?`` or ``@`` in it, raw or
percent-encoded, with and without a user name; ``?password=``; ``rediss://``; ``unix://?password=``;
a wrong password; a URL that cannot be read; the URL, JSON ``{"url"}`` or JSON ``{"username",
"password"}`` in Secrets Manager; the webhook signing key, plain or from Secrets Manager). Each runs
in a process of its own (``entry_point.py``), as it runs for real, against a private redis-server
whose users have those passwords; everything it prints, on stdout and stderr, and every answer is
searched for the secret and for each piece a URL parser could cut it into.

Each run must also have done what its shape allows (the API answered 201, or 503 for a refused
password, or a config error for a URL that cannot be read...): a run that did nothing would leak
nothing and prove nothing.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from support.security import make_pki
from support.servers import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).resolve().parent / "entry_point.py"
ENTRY_POINTS = ("api", "sweep", "consume", "cli-sweep", "cli-consume", "client", "local")
RUN_TIMEOUT_S = 60.0
PARALLEL_RUNS = 3


def _token() -> str:
    return secrets.token_hex(5)


# Distinctive secrets: every piece between URL delimiters is random, so a piece found is a leak.
PASSWORD = f"{_token()}/{_token()}#{_token()}?{_token()}"  # the default user's (the S3c/r#t?x)
USER_PASSWORD = f"{_token()}@{_token()}/{_token()}:{_token()}"  # the user delayq's
WRONG = f"{_token()}/{_token()}#{_token()}"
KEY = f"{_token()}{_token()}"  # the webhook signing key
USER = "delayq"


def pieces(secret: str) -> set[str]:
    """``secret`` and each piece a URL parser could cut it into (at / # ? @ : & = %)."""
    parts = {secret, quote(secret, safe="")}
    parts.update(piece for piece in re.split(r"[/#?@:&=%+]", secret) if len(piece) >= 4)
    return parts


@dataclass(frozen=True)
class Shape:
    """One way of handing delayq a secret: the environment (``{port}``, ``{socket}``, ``{hook}``
    filled in), the secrets in Secrets Manager, and what the entry points can do with it."""

    env: dict[str, str]
    secrets: tuple[str, ...]  # what must never show
    outcome: str  # "works", "refused" (Redis refuses it), "config" (delayq refuses it)
    managed: dict[str, str] = field(default_factory=dict)  # Secrets Manager: name -> value


def url(userinfo: str = "", query: str = "") -> str:
    return f"redis://{userinfo}127.0.0.1:{{port}}/0{query}"


SHAPES: dict[str, Shape] = {
    "userinfo-raw": Shape({"DELAYQ_REDIS_URL": url(f":{PASSWORD}@")}, (PASSWORD,), "works"),
    "user-and-password-raw": Shape({"DELAYQ_REDIS_URL": url(f"{USER}:{USER_PASSWORD}@")}, (USER_PASSWORD,), "works"),
    "user-and-password-encoded": Shape(
        {"DELAYQ_REDIS_URL": url(f"{USER}:{quote(USER_PASSWORD, safe='')}@")}, (USER_PASSWORD,), "works"
    ),
    "query-password": Shape(
        {"DELAYQ_REDIS_URL": url(query=f"?password={quote(PASSWORD, safe='')}")}, (PASSWORD,), "works"
    ),
    "unix-query-password": Shape(
        {"DELAYQ_REDIS_URL": f"unix://{{socket}}?password={quote(PASSWORD, safe='')}"}, (PASSWORD,), "works"
    ),
    "rediss": Shape(
        {"DELAYQ_REDIS_URL": f"rediss://{USER}:{USER_PASSWORD}@localhost:{{tls}}/0?ssl_ca_certs={{ca}}"},
        (USER_PASSWORD,),
        "works",
    ),
    "rediss-to-a-server-without-tls": Shape(  # an HTTP server: the TLS handshake fails at once
        {"DELAYQ_REDIS_URL": f"rediss://{USER}:{USER_PASSWORD}@127.0.0.1:{{hook}}/0"}, (USER_PASSWORD,), "refused"
    ),
    "wrong-password": Shape({"DELAYQ_REDIS_URL": url(f"{USER}:{WRONG}@")}, (WRONG,), "refused"),
    "unreadable-url": Shape({"DELAYQ_REDIS_URL": url(f":{PASSWORD}@", "?password=x@y")}, (PASSWORD,), "config"),
    "secret-url": Shape(
        {"DELAYQ_REDIS_SECRET": "delayq/url"},
        (USER_PASSWORD,),
        "works",
        {"delayq/url": url(f"{USER}:{USER_PASSWORD}@")},
    ),
    "secret-json-url": Shape(
        {"DELAYQ_REDIS_SECRET": "delayq/json"},
        (PASSWORD,),
        "works",
        {"delayq/json": json.dumps({"url": url(f":{PASSWORD}@")})},
    ),
    "secret-json-credentials": Shape(
        {"DELAYQ_REDIS_URL": url(), "DELAYQ_REDIS_SECRET": "delayq/user"},
        (USER_PASSWORD,),
        "works",
        {"delayq/user": json.dumps({"username": USER, "password": USER_PASSWORD})},
    ),
    "secret-unreadable-url": Shape(
        {"DELAYQ_REDIS_SECRET": "delayq/bad"},
        (PASSWORD,),
        "config",
        {"delayq/bad": url(f":{PASSWORD}@", "?password=x@y")},
    ),
    "webhook-key": Shape(
        {"DELAYQ_REDIS_URL": url(f":{PASSWORD}@"), "DELAYQ_WEBHOOK_SECRET": KEY}, (PASSWORD, KEY), "works"
    ),
    "webhook-key-secret": Shape(
        {"DELAYQ_REDIS_URL": url(f":{PASSWORD}@"), "DELAYQ_WEBHOOK_SECRET_ID": "delayq/webhook"},
        (PASSWORD, KEY),
        "works",
        {"delayq/webhook": KEY},
    ),
}


# ------------------------------------------------------------------------------------------ the world


class Hook(BaseHTTPRequestHandler):
    """A webhook receiver that fails every delivery, and counts them."""

    server: HookServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.deliveries += 1
        self.send_response(500)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"nope")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class HookServer(ThreadingHTTPServer):
    daemon_threads = True
    deliveries = 0


@dataclass
class World:
    redis: RedisServer
    tls_port: int
    socket: Path
    ca: Path
    hook: HookServer

    def fill(self, text: str) -> str:
        places = {
            "port": self.redis.port,
            "tls": self.tls_port,
            "socket": self.socket,
            "ca": self.ca,
            "hook": self.hook.server_address[1],
        }
        return re.sub(r"\{(\w+)\}", lambda m: str(places[m.group(1)]), text)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("secret-grep")
    socket, pki, tls_port = folder / "redis.sock", make_pki(folder, "grep"), free_port()
    server = RedisServer(
        "--requirepass", PASSWORD, "--unixsocket", str(socket), "--unixsocketperm", "700",
        "--tls-port", str(tls_port), "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
        "--tls-ca-cert-file", str(pki.ca), "--tls-auth-clients", "no",
    )  # fmt: skip
    hook = HookServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    try:
        server.start(ready=lambda: server.client(password=PASSWORD).ping())
        with server.client(password=PASSWORD) as admin:
            admin.acl_setuser(USER, enabled=True, passwords=[f"+{USER_PASSWORD}"], keys=["*"], commands=["+@all"])
        yield World(server, tls_port, socket, pki.ca, hook)
    finally:
        hook.shutdown()
        hook.server_close()
        server.close()


# ------------------------------------------------------------------------------------------ a run


@dataclass
class Run:
    entry: str
    shape: str
    code: int | None
    output: str  # stdout and stderr, every line
    answers: list[Any]
    stdout: str = ""

    @property
    def seen(self) -> str:
        return self.output + json.dumps(self.answers)


def environment(world: World, entry: str, shape: Shape, namespace: str) -> dict[str, str]:
    topics = {
        "orders": {"target": "python:delayq.local:log_delivery"},
        "hooks": {
            "target": f"http://127.0.0.1:{world.hook.server_address[1]}/hook",
            "allow_http": True,
            "allow_private": True,
            "retries": 0,
        },
    }
    env = {name: value for name, value in os.environ.items() if not name.startswith(("DELAYQ_", "AWS_", "POWERTOOLS_"))}
    env |= {
        "PYTHONPATH": str(ROOT / "functions"),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "POWERTOOLS_SERVICE_NAME": f"grep-{entry}",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "LOG_LEVEL": "DEBUG",
        "DELAYQ_NAMESPACE": namespace,
        "DELAYQ_TOPICS": json.dumps(topics),
        "DELAYQ_TICK": "0.1",
        "DELAYQ_LOOP_SECONDS": "0",
    }
    env |= {name: world.fill(value) for name, value in shape.env.items()}
    if shape.managed:
        env["DELAYQ_TEST_SECRETS"] = json.dumps({name: world.fill(value) for name, value in shape.managed.items()})
    return env


def stage_a_webhook_job(world: World, namespace: str) -> None:
    """A due job of the webhook topic, ready to take: consume then delivers it, signed."""
    from delayq import Queue, Settings, Topics  # noqa: PLC0415
    from delayq.core.loop import Budget  # noqa: PLC0415
    from delayq.loops.sweeper import Sweeper  # noqa: PLC0415

    topics = Topics.parse({"hooks": {"target": "http://127.0.0.1:9/x", "allow_http": True}})
    redis_url = f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{world.redis.port}/0"
    queue = Queue(Settings(redis_url=redis_url, namespace=namespace, topics=topics))
    try:
        queue.enqueue("hooks", {"n": 3}, id="hook-1")
        Sweeper(queue).run(Budget.of(0))
    finally:
        queue.close()


def run(world: World, entry: str, shape_name: str) -> Run:
    shape = SHAPES[shape_name]
    namespace = f"grep-{entry}-{shape_name}"
    env = environment(world, entry, shape, namespace)
    if entry in ("consume", "cli-consume") and shape_name.startswith("webhook"):
        stage_a_webhook_job(world, namespace)
    if entry == "local":
        return run_local(env, shape_name)
    argv = {"cli-sweep": ["cli", "sweep", "--seconds", "0"], "cli-consume": ["cli", "consume", "--seconds", "0"]}
    command = [sys.executable, str(RUNNER), *argv.get(entry, [entry])]
    done = subprocess.run(
        command, check=False, env=env, cwd=ROOT / "functions", capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    return Run(entry, shape_name, done.returncode, done.stdout + done.stderr, answers_in(done.stdout), done.stdout)


def answers_in(stdout: str) -> list[Any]:
    return [json.loads(line[len("ANSWER ") :]) for line in stdout.splitlines() if line.startswith("ANSWER ")]


def run_local(env: dict[str, str], shape_name: str) -> Run:
    """The local stack, briefly: until it serves (or exits), three requests, then SIGTERM."""
    port = free_port()
    command = [sys.executable, str(RUNNER), "local", "--port", str(port)]
    with subprocess.Popen(
        command, env=env, cwd=ROOT / "functions", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(process.stdout or []), daemon=True)
        reader.start()
        answers: list[Any] = []
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while process.poll() is None and not any("local stack on" in line for line in list(lines)):
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        if process.poll() is None:
            base = f"http://127.0.0.1:{port}"
            answers.append(request("GET", f"{base}/health"))
            answers.append(request("POST", f"{base}/jobs", {"topic": "orders", "id": "grep-3", "delay": 60}))
            answers.append(request("POST", f"{base}/jobs", {"topic": "hooks", "id": "hook-2"}))
            wait_for_a_failed_delivery(base)
            answers.append(request("GET", f"{base}/jobs/hooks/hook-2"))
            process.send_signal(signal.SIGTERM)
        code = process.wait(RUN_TIMEOUT_S)
        reader.join(5)
    return Run("local", shape_name, code, "".join(lines), answers)


def request(method: str, address: str, body: Any = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    ask = urllib.request.Request(address, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(ask, timeout=10) as response:
            return {"status": response.status, "body": response.read().decode()}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "body": exc.read().decode()}


def wait_for_a_failed_delivery(base: str) -> None:
    """Until the webhook job has a last error (delivered and failed), or 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        job = request("GET", f"{base}/jobs/hooks/hook-2")
        if job["status"] != 200 or json.loads(job["body"]).get("last_error"):
            return
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------ the table

_runs: dict[tuple[str, str], Run] = {}
_lock = threading.Lock()


@pytest.fixture(scope="module")
def runs(world: World) -> Iterator[Callable[[str, str], Run]]:
    """``runs(entry, shape)``: that run; the first call runs the entry point's whole row, a few at once."""

    def get(entry: str, shape: str) -> Run:
        with _lock:
            if (entry, shape) not in _runs:
                with ThreadPoolExecutor(PARALLEL_RUNS) as pool:
                    row = dict(zip(SHAPES, pool.map(lambda name: run(world, entry, name), SHAPES), strict=True))
                _runs.update({(entry, name): done for name, done in row.items()})
            return _runs[(entry, shape)]

    yield get
    _runs.clear()


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_no_secret_in_any_line_or_answer(runs: Callable[[str, str], Run], entry: str, shape: str) -> None:
    done = runs(entry, shape)
    leaks = sorted(piece for secret in SHAPES[shape].secrets for piece in pieces(secret) if piece in done.seen)
    assert leaks == [], f"{entry} x {shape} shows {leaks}:\n{done.output}\n{done.answers}"
    assert_it_ran(done, SHAPES[shape].outcome)


def statuses(done: Run) -> list[int]:
    return [int(answer.get("statusCode", answer.get("status", 0))) for answer in done.answers]


def body_of(answer: dict[str, Any]) -> Any:
    return json.loads(answer["body"]) if answer.get("body") else None


def assert_it_ran(done: Run, outcome: str) -> None:
    """What the entry point did with this shape of secret: the run did its work, or failed the way
    that shape makes it fail, and said why without the secret."""
    context = f"{done.entry} x {done.shape}:\n{done.output}\n{done.answers}"
    if done.entry == "api":
        expected = {"works": [200, 201, 200], "refused": [503, 503, 503], "config": [500, 500, 500]}[outcome]
        assert statuses(done) == expected, context
        if outcome == "config":
            assert all(body_of(a)["error"] == "config" for a in done.answers), context
    elif done.entry == "client":
        [first, *_] = done.answers
        raised = {"works": None, "refused": "RedisUnavailable", "config": "ConfigError"}[outcome]
        assert first.get("raised") == raised, context
        if outcome == "works":
            assert len(done.answers) == 3, context
    elif done.entry in ("sweep", "consume", "cli-sweep", "cli-consume"):
        if outcome == "config" and done.entry.startswith("cli-"):  # one line naming the setting, exit 2
            assert done.code == 2, context
            said = f"delayq {done.entry[4:]}: DELAYQ_REDIS_"  # _URL or _SECRET: the setting to mend
            assert any(line.startswith(said) for line in done.output.splitlines()), context
            assert "Traceback" not in done.output, context
        elif outcome == "config":
            assert done.code != 0, context
            assert "ConfigError" in done.output, context
        else:
            assert done.code == 0, context
            summary = done.answers[0] if done.answers else json.loads(done.stdout.strip().splitlines()[-1])
            assert isinstance(summary, dict), context
            if outcome == "refused":
                assert "Redis" in done.output, context  # the loop said why it did nothing
            if done.entry.endswith("consume") and done.shape.startswith("webhook"):
                assert summary.get("dead") == 1, context  # delivered, signed, failed (500)
    # The local stack: on the URL's Redis, or a private one when that one refuses.
    elif outcome == "config":
        assert done.code != 0, context
        assert "ConfigError" in done.output, context
    else:
        assert statuses(done)[:3] == [200, 201, 201], context
        assert body_of(done.answers[3])["last_error"], context
        assert ("private redis-server" in done.output) == (outcome == "refused"), context
