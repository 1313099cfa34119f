"""Every example of the documentation runs as written next to ``make dev``.

Which blocks: every fenced block of ``README.md`` and ``docs/*.md`` whose language is ``sh``, ``bash``,
``shell``, ``console`` or ``python`` runs, unless its info string says ``skip-test`` and why (deploying
with sam, ``make test``, benchmarks, a bare machine, AWS credentials, a server that runs until Ctrl-C).
Outputs, configs and files are ``text``, ``json`` or ``yaml``. A block with no language or another one
fails ``test_every_block_is_run_or_excluded``: nothing goes unrun unseen (docs/contributing.md).

How a page runs (``test_page_examples``, one test per page with a block to run): a local stack as
``make dev`` starts it (``python -m delayq.local``, its default tick, no ``DELAYQ_TOPICS``, so it runs
and publishes its example topics) on a free port, in a namespace of the page's own; and a second
terminal as a reader opens it in the checkout: the venv activated (``delayq`` and ``python`` on PATH),
``DELAYQ_REDIS_URL`` and ``DELAYQ_NAMESPACE`` those of the stack (the defaults both share on a
reader's machine) and no other ``DELAYQ_*``, so tools adopt the stack's published topics. The page's
blocks run in page order in that terminal: shell commands one by one in one bash session (variables
such as ``API=`` carry over), Python blocks statement by statement in one interpreter (``queue``
carries over). ``127.0.0.1:8000`` and ``localhost:8000`` are rewritten to the stack's port. The
working directory links the checkout's entries, so ``.venv/bin/delayq`` works and what a command
writes stays out of the checkout.

What is checked, for every shell command: exit status 0 and no traceback; an answer that is an API
error (``"status": 4xx/5xx``) only where the doc shows that status; where the doc shows an answer (a
JSON comment after the command, the lines after a ``console`` prompt), the keys it shows, and for a
console output that is not JSON its first line, numbers, times and ids set aside. For every Python
statement: it raises nothing; where its comment shows an object (``JobInfo(state='delayed', ...)``),
its value (or what it printed) is one, with the fields shown as literals. At the end of a page, no
traceback in the stack's log either.

``checks()`` adds, per page, what a doc's answer means where the page sets that state up (ids,
counts, the deliveries the stack logs), and what to wait for before a command (``before``): where the
doc sleeps, the test waits for what the sleep stands for (a job done, dead), never for a time. The one
page whose answers show a queue it does not build, operate.md, gets it from ``queue_as_operate_shows``
before its first block and before its transcript. Each check must find its command, so a check cannot
outlive its example.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest.mock import ANY

import pytest

from support.docs import (
    PAGES,
    PYTHON,
    Block,
    Command,
    Ran,
    Terminal,
    blocks,
    broken_rule,
    json_answer,
    python_statements,
    shell_commands,
)
from support.local import ROOT, Stack, base_env, eventually, local_stack

# ------------------------------------------------------------------------------ the rule


def every_block() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def test_every_block_is_run_or_excluded() -> None:
    broken = [f"{block}: {why}" for block in every_block() if (why := broken_rule(block))]
    assert broken == [], "\n".join(broken)


@pytest.mark.parametrize(
    ("info", "why"),
    [
        ("sh", None),
        ("python", None),
        ("console", None),
        ("sh skip-test deploys to AWS", None),
        ("text", None),
        ("json", None),
        ("", "no language: name one (text for an output)"),
        ("sh skip-test", "skip-test needs a reason after it"),
        ("sh title=x", "an info string runs with its language alone, or says skip-test and why"),
        ("ruby", "language 'ruby' is neither run (bash, console, python, sh, shell) nor text, json, yaml"),
    ],
)
def test_the_rule(info: str, why: str | None) -> None:
    assert broken_rule(Block("docs/x.md", 1, info, "")) == why


def test_commands_are_read_as_a_reader_types_them() -> None:
    sh = Block("x", 1, "sh", 'API=x\n# a comment\ncurl -s $API/a \\\n  -d \'{"a": 1}\'   # {"a": 1}\n# {"b": 2}\n')
    assert [(c.text, c.shown) for c in shell_commands(sh)] == [
        ("API=x", "\na comment\n"),
        ('curl -s $API/a    -d \'{"a": 1}\'   # {"a": 1}', '{"a": 1}\n{"b": 2}\n'),
    ]
    console = Block("x", 1, "console", "$ delayq pause a\na paused\n$ echo '#' # no\n")
    assert [(c.text, c.shown) for c in shell_commands(console)] == [
        ("delayq pause a", "a paused\n"),
        ("echo '#' # no", ""),
    ]


# ------------------------------------------------------------------------------ generic checks

_SHOWN_KEY = re.compile(r'"([A-Za-z_]\w*)"\s*:')
_SHOWN_STATUS = re.compile(r'"status"\s*:\s*(\d{3})')
_SAMPLE = re.compile(
    r"\d{4}-\d\d-\d\dT[\d:.]+Z|\b\d{4}-\d\d-\d\d [\d:,]+|[A-Za-z0-9_-]{24,}|\b[0-9a-f]{12,}\b|\d+(\.\d+)?(ms|s)?\b"
)


def keys_of(document: Any) -> set[str]:
    if isinstance(document, dict):
        return set(document) | {key for value in document.values() for key in keys_of(value)}
    if isinstance(document, list):
        return {key for value in document for key in keys_of(value)}
    return set()


def as_seen(line: str) -> str:
    """A line of output with what changes from run to run (numbers, times, ids) set aside."""
    return " ".join(_SAMPLE.sub("~", line).split())


def check_shell(command: Command, ran: Ran) -> None:
    where = f"{command}\nstatus {ran.status}\nstdout: {ran.out[:2000]}\nstderr: {ran.err[:2000]}"
    assert ran.status == 0, where
    assert "Traceback" not in ran.out + ran.err, where
    answer = json_answer(ran.out)
    if isinstance(answer, dict) and isinstance(answer.get("status"), int) and "error" in answer:
        assert str(answer["status"]) in _SHOWN_STATUS.findall(command.shown), f"an error the doc does not show: {where}"
    shown = command.shown.strip()
    if not shown:
        return
    if command.block.language == "console":  # the lines after the prompt: JSON when they start as JSON
        document = shown if shown.startswith(("{", "[")) else ""
    else:  # a comment: prose, perhaps with the JSON answer in it
        document = shown[shown.index("{") :] if re.search(r"\{(\"|\.\.\.)", shown) else ""
    if document:  # the doc shows a JSON answer
        assert answer is not None, f"the doc shows JSON: {where}"
        missing = set(_SHOWN_KEY.findall(document)) - keys_of(answer)
        assert not missing, f"keys the doc shows are missing: {missing}: {where}"
        if "..." not in document and "…" not in document:  # shown whole: no key left out either
            unshown = keys_of(answer) - set(_SHOWN_KEY.findall(document))
            assert not unshown, f"keys the answer has and the doc does not show: {unshown}: {where}"
    elif command.block.language == "console":
        first = ran.out.splitlines()[0] if ran.out.strip() else ""
        assert as_seen(first) == as_seen(shown.splitlines()[0]), f"not the doc's first line: {where}"


_SHOWN_OBJECT = re.compile(r"([A-Z]\w*)\(")
_SHOWN_FIELD = re.compile(r"(\w+)=('[^']*'|-?\d+|\(\)|True|False|None)(?=[,)])")


def check_python(command: Command, ran: Ran) -> None:
    """Raises nothing; where the comment after a statement shows an object (``JobInfo(state='delayed',
    attempts=0, ...)``), its value (or what it printed) is one, with the fields shown as literals; a
    ``print`` whose comment is one word printed that word."""
    where = f"{command}\nvalue: {ran.value}\nprinted: {ran.out[:2000]}\n{ran.err}"
    assert ran.status == 0, where
    shown = command.shown.strip()
    got = ran.value if ran.value is not None else ran.out.strip()
    if shown_object := _SHOWN_OBJECT.match(shown):
        assert got.startswith(shown_object[0]), where
        for name, literal in _SHOWN_FIELD.findall(shown):
            assert f"{name}={literal}" in got, f"not {name}={literal}: {where}"
    elif re.fullmatch(r"\w+", shown) and command.text.startswith("print("):
        assert ran.out == f"{shown}\n", where


# ------------------------------------------------------------------------------ what some answers mean


@dataclass
class Check:
    """A command of ``page`` (found by ``pattern``), what to wait for before it, and what its answer
    must be beyond the generic checks."""

    page: str
    pattern: str
    check: Callable[[Stack, Ran], None] | None = None
    before: Callable[[Stack], None] | None = None
    runs: int = 0


def now_ms() -> int:
    return int(time.time() * 1000)


def near(run_at_ms: int, delay_s: float, slack_s: float = 120) -> bool:
    """``run_at_ms`` is about now + ``delay_s`` (the machine's clock and Redis' are one here)."""
    return -slack_s * 1000 <= run_at_ms - (now_ms() + delay_s * 1000) <= 1000


def first_job(stack: Stack, ran: Ran) -> None:
    created = json.loads(ran.out)
    assert created["topic"] == "example"
    assert near(created["run_at_ms"], 3)
    line = stack.wait_for(f"delivered example/{created['id']} attempt 1", timeout=60)
    assert line.rstrip().endswith('after its run-at: {"hello": "world"}'), line


def created(topic: str, id_: str, delay_s: float) -> Callable[[Stack, Ran], None]:
    def check(stack: Stack, ran: Ran) -> None:
        answer = json.loads(ran.out)
        assert (answer["topic"], answer["id"]) == (topic, id_), answer
        assert near(answer["run_at_ms"], delay_s), answer

    return check


def job_is(**fields: Any) -> Callable[[Stack, Ran], None]:
    def check(stack: Stack, ran: Ran) -> None:
        job = json.loads(ran.out)
        assert {name: job[name] for name in fields} == fields, job

    return check


def answered(document: Any) -> Callable[[Stack, Ran], None]:
    def check(stack: Stack, ran: Ran) -> None:
        assert json.loads(ran.out) == document, ran

    return check


def nothing(stack: Stack, ran: Ran) -> None:
    assert ran.out == "", ran


def cancelled(topic: str, id_: str) -> Callable[[Stack, Ran], None]:
    def check(stack: Stack, ran: Ran) -> None:
        assert ran.out == "", ran
        assert stack.request("GET", f"/jobs/{topic}/{id_}").status == 404

    return check


def due_in(topic: str, id_: str, delay_s: float) -> Callable[[Stack, Ran], None]:
    def check(stack: Stack, ran: Ran) -> None:
        job = stack.get(f"/jobs/{topic}/{id_}")
        assert near(job["run_at_ms"], delay_s), job

    return check


def exists(topic: str, id_: str) -> Callable[[Stack, Ran], None]:
    def check(stack: Stack, ran: Ran) -> None:
        assert stack.request("GET", f"/jobs/{topic}/{id_}").status == 200, ran

    return check


def cancelled_by_client(topic: str, id_: str) -> Callable[[Stack, Ran], None]:
    def check(stack: Stack, ran: Ran) -> None:
        assert "status_code=<HTTPStatus.NO_CONTENT: 204>" in (ran.value or ""), ran
        assert stack.request("GET", f"/jobs/{topic}/{id_}").status == 404

    return check


def batch(ids: list[str]) -> Callable[[Stack, Ran], None]:
    def check(stack: Stack, ran: Ran) -> None:
        results = json.loads(ran.out)["results"]
        assert [result["status"] for result in results] == [201, 201], results
        ids[:] = [result["id"] for result in results]

    return check


def topic_counts(batch_ids: list[str]) -> Callable[[Stack, Ran], None]:
    def check(stack: Stack, ran: Ran) -> None:
        counts = json.loads(ran.out)
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


def dead_list(stack: Stack, ran: Ran) -> None:
    [job] = json.loads(ran.out)["jobs"]
    assert (job["id"], job["attempts"], job["body"]) == ("doomed-1", 2, {"n": 1}), job
    assert job["last_error"].startswith("RuntimeError: example-fails fails every delivery"), job
    output = stack.output()
    for attempt in (1, 2):
        assert f"example-fails/doomed-1 attempt {attempt} failed: RuntimeError: example-fails fails" in output


def called_back_by_now(stack: Stack) -> None:
    eventually(lambda: stack.get("/topics/example-dead")["done"] == 1, "doomed-1's callback job done", timeout=60)


def callback_done(stack: Stack, ran: Ran) -> None:
    """doomed-1's death made one job in example-dead (its on_dead), which ran; the stack logged its body."""
    [job] = json.loads(ran.out)["jobs"]
    assert job["id"].startswith("dead-p0-"), job
    assert job["result"]["logged"] is True, job
    assert '"topic": "example-fails", "id": "doomed-1", "key": null, "outcome": "dead"' in stack.output()


def printed(*texts: str) -> Callable[[Stack, Ran], None]:
    def check(stack: Stack, ran: Ran) -> None:
        for text in texts:
            assert text in ran.out, ran

    return check


def queue_as_operate_shows(stack: Stack) -> None:
    """The queue docs/operate.md's answers show: orders with 5 delayed jobs (close-1041..1045, 5 min
    apart) and 3 ready ones, paused; 2 delayed reminders; example-fails' bad-1 dead; webhooks jobs
    of 5 flow keys, globex paused and initech limited. Built through the API, as a reader's own jobs."""

    def put(path: str, body: object, status: tuple[int, ...] = (200, 201)) -> None:
        answer = stack.request("PUT", path, body)
        assert answer.status in status, answer

    for n in range(1041, 1046):
        put(f"/jobs/orders/close-{n}", {"delay": 300 * (n - 1040), "body": {"order": n}})
    assert stack.request("POST", "/topics/orders/pause").status == 200
    for n in range(1, 4):
        put(f"/jobs/orders/pay-{n}", {"delay": 0})
    for n in range(1, 3):
        put(f"/jobs/reminders/ride-{n}", {"delay": 60 * n})
    put("/jobs/example-fails/bad-1", {"delay": 0, "body": {"n": 1}})
    for n, key in enumerate(["acme-corp", "globex", "initech", "stark-industries", "tenant-00042"]):
        put(f"/jobs/webhooks/{key}-1", {"delay": 600 + n, "key": key})
    put("/topics/webhooks/keys/globex", {"paused": True})
    put("/topics/webhooks/keys/initech", {"concurrency": 1, "rate": 0.5})
    eventually(lambda: stack.get("/topics/orders")["ready"] == 3, "orders' 3 jobs due while paused, ready", timeout=60)
    eventually(lambda: stack.get("/jobs/example-fails/bad-1")["state"] == "dead", "bad-1 dead", timeout=60)


def state_by_now(topic: str, id_: str, state: str) -> Callable[[Stack], None]:
    """Waits for what the doc's ``sleep`` stands for: the job in ``state``."""

    def wait(stack: Stack) -> None:
        eventually(lambda: stack.get(f"/jobs/{topic}/{id_}")["state"] == state, f"{topic}/{id_} {state}", timeout=60)

    return wait


def died_twice(stack: Stack, ran: Ran) -> None:
    job = json.loads(ran.out)
    assert job["state"] == "dead", job
    assert job["dead_at_ms"] > 0, job
    assert [(h["attempt"], h["outcome"]) for h in job["history"]] == [(1, "error"), (2, "error")], job
    assert job["history"][0]["error"].startswith("RuntimeError: "), job


def checks() -> list[Check]:
    batch_ids: list[str] = []
    local = "docs/local.md"
    return [
        Check("README.md", r'curl -s -X POST \S+/jobs .*"topic": "example", "delay": 3,', first_job),
        Check("README.md", r"print\(queue.get\(\"example\", job.id\).state\)", printed("delayed\n")),
        Check(local, r'curl -s -X POST \S+/jobs .*"topic": "example", "delay": 3,', first_job),
        Check(local, r"-X POST \$API/jobs .*close-1042", created("orders", "close-1042", 600)),
        Check(local, r"-X PUT \$API/jobs/reminders/ride-77 ", created("reminders", "ride-77", 3600)),
        Check(
            local, r"^curl -s \$API/jobs/orders/close-1042 ", job_is(state="delayed", body={"order": 1042}, attempts=0)
        ),
        Check(local, r"-X PATCH \$API/jobs/orders/close-1042 ", created("orders", "close-1042", 1200)),
        Check(local, r"-X DELETE \$API/jobs/orders/close-1042 ", cancelled("orders", "close-1042")),
        Check(local, r"-X POST \$API/jobs/batch ", batch(batch_ids)),
        Check(local, r"^curl -s \$API/topics/orders ", topic_counts(batch_ids)),
        Check(local, r"-X POST \$API/jobs .*doomed-1", created("example-fails", "doomed-1", 0)),
        Check(local, r'^curl -s "\$API/topics/example-fails/dead\?limit=20"', dead_list, before=dead_by_now),
        Check(local, r'^curl -s "\$API/topics/example-dead/jobs', callback_done, before=called_back_by_now),
        Check(local, r"-X POST \$API/topics/example-fails/dead/replay ", answered({"replayed": 1})),
        Check(local, r"-X DELETE \$API/topics/example-fails/dead ", answered({"purged": 1}), before=dead_by_now),
        Check(
            local,
            r"print\(queue.get\(\"orders\", \"close-1042\"\)\)",
            printed("JobInfo(topic='orders', id='close-1042', state='delayed'"),
        ),
        Check(local, r'^queue.put\("reminders", "ride-77"', due_in("reminders", "ride-77", 3600)),
        Check(local, r'^queue.cancel\("orders", "close-1042"\)', cancelled("orders", "close-1042")),
        Check(local, r"print\(queue.stats\(\"orders\"\)\)", printed("TopicStats(")),
        Check(
            "docs/api.md",
            r"^curl -s \$API/jobs/orders/close-1041$",
            job_is(state="done", attempts=1),
            before=state_by_now("orders", "close-1041", "done"),
        ),
        Check(
            "docs/api.md",
            r"^curl -s \$API/jobs/example/pay-42 ",
            answered({"state": "done", "result": {"logged": True, "late_ms": ANY}, "result_truncated": False}),
            before=state_by_now("example", "pay-42", "done"),
        ),
        Check(
            "docs/api.md",
            r"^curl -s \$API/jobs/example-fails/doomed-1 ",
            died_twice,
            before=state_by_now("example-fails", "doomed-1", "dead"),
        ),
        Check("docs/api.md", r"-X POST \$API/topics/orders/jobs ", created("orders", "close-1043", 600)),
        Check("docs/api.md", r"^created = create_job.sync\(", exists("orders", "close-1042")),
        Check("docs/api.md", r"^cancel_job.sync_detailed\(", cancelled_by_client("orders", "close-1042")),
        Check("docs/operate.md", r"^curl -s \$API/topics$", before=queue_as_operate_shows),
        Check("docs/operate.md", r"^delayq topics$", before=queue_as_operate_shows),
        Check("docs/operate.md", r"-X DELETE \"\$API/topics/orders/jobs\?state=delayed\"", answered({"cancelled": 5})),
        Check("docs/operate.md", r"^delayq job example-fails doomed-2 ", printed("attempts     0 (retries: 1)")),
    ]


# ------------------------------------------------------------------------------ running a page


def runnable_pages() -> list[str]:
    return sorted({block.page for block in every_block() if block.runs}, key=lambda page: (page != "README.md", page))


@pytest.fixture(scope="module")
def tools() -> None:
    missing = [tool for tool in ("bash", "curl", "jq") if shutil.which(tool) is None]
    assert not missing, f"the docs' examples need {', '.join(missing)} on PATH"


def run_block(block: Block, terminal: Terminal, stack: Stack, mine: list[Check]) -> None:
    python = block.language in PYTHON
    for command in python_statements(block) if python else shell_commands(block):
        matched = [check for check in mine if re.search(check.pattern, command.text, re.MULTILINE)]
        for check in matched:
            if check.before:
                check.before(stack)
        if python:
            ran = terminal.python(command.text)
            check_python(command, ran)
        else:
            ran = terminal.shell(command.text, merged=block.language == "console")
            check_shell(command, ran)
        for check in matched:
            if check.check:
                check.check(stack, ran)
            check.runs += 1


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("tools")
@pytest.mark.parametrize("page", runnable_pages())
def test_page_examples(page: str, redis_url: str, namespace: str) -> None:
    mine = [check for check in checks() if check.page == page]
    stack_env = base_env(namespace, redis_url, DELAYQ_TICK="1")  # make dev's own tick
    second_terminal = {k: v for k, v in stack_env.items() if k not in {"DELAYQ_TICK", "PYTHONUNBUFFERED"}}
    with local_stack(stack_env) as stack, Terminal(second_terminal, stack.port) as terminal:
        for block in blocks(ROOT / page):
            if block.runs:
                run_block(block, terminal, stack, mine)
        assert "Traceback" not in stack.output(), stack.output()
    assert [check.pattern for check in mine if not check.runs] == [], "checks whose command is gone from the page"


def test_every_check_names_a_page_that_runs() -> None:
    pages = set(runnable_pages())
    assert [check.page for check in checks() if check.page not in pages] == []
