"""The documentation's fenced examples, as ``tests/local/test_docs_examples.py`` runs them: every block
of ``README.md`` and ``docs/*.md``, split into the commands a reader types, and the two sessions a page
runs them in (one bash, one Python interpreter), like a second terminal next to ``make dev``.

The rule a block's info string (the word after the opening fence) follows, also in docs/contributing.md:

- ``sh``, ``bash``, ``shell``, ``console`` (shell) and ``python``: run, in page order;
- the same followed by ``skip-test`` and why (```` ```sh skip-test deploys to AWS ````): not run;
- ``text``, ``json``, ``yaml``: not a command (an output, a config, a file);
- anything else, or no language at all: refused, so a new example cannot slip past unrun.
"""

from __future__ import annotations

import ast
import json
import os
import re
import selectors
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.local import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = frozenset({"sh", "bash", "shell", "console"})
PYTHON = frozenset({"python"})
NOT_COMMANDS = frozenset({"text", "json", "yaml"})
SKIP = "skip-test"
DOC_ADDRESSES = ("127.0.0.1:8000", "localhost:8000")  # make dev's address, as the docs write it
DOC_REDIS_URL = "redis://127.0.0.1:6379/0"  # the default Redis, as the docs write it

_FENCE = re.compile(r"^(```+|~~~+)(.*)$")


@dataclass(frozen=True)
class Block:
    """A fenced block: its page (relative to the checkout), the line of its opening fence, its info
    string and its text."""

    page: str
    line: int
    info: str
    text: str

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def skipped(self) -> bool:
        return self.info.split()[1:2] == [SKIP]

    @property
    def runs(self) -> bool:
        return self.language in SHELL | PYTHON and not self.skipped

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ```{self.info}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in page order."""
    page = path.relative_to(ROOT).as_posix()
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index].strip())
        if opening is None:
            index += 1
            continue
        fence, info, start = opening[1], opening[2].strip(), index
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            index += 1
        found.append(Block(page, start + 1, info, "\n".join(lines[start + 1 : index]) + "\n"))
        index += 1
    return found


def broken_rule(block: Block) -> str | None:
    """Why ``block`` breaks the rule above, or None."""
    if block.language in SHELL | PYTHON:
        if block.skipped and len(block.info.split()) < 3:
            return f"{SKIP} needs a reason after it"
        if not block.skipped and len(block.info.split()) > 1:
            return f"an info string runs with its language alone, or says {SKIP} and why"
        return None
    if block.language in NOT_COMMANDS:
        return None
    if not block.language:
        return "no language: name one (text for an output)"
    return f"language {block.language!r} is neither run ({', '.join(sorted(SHELL | PYTHON))}) nor text, json, yaml"


# ------------------------------------------------------------------------------ commands of a block


@dataclass
class Command:
    """One command of a block as a reader types it (continuation lines joined, a trailing comment
    kept), with what the doc shows it answers: its comment and the comment lines after it (``sh``),
    or the lines after it up to the next prompt (``console``); for Python, one top-level statement.
    ``line``: its first line in the page."""

    block: Block
    line: int
    text: str
    shown: str = ""

    def __str__(self) -> str:
        return f"{self.block.page}:{self.line}: {self.text}"


def trailing_comment(line: str) -> str:
    """The comment at the end of a shell command line ('' if none): the first ``#`` outside quotes,
    after a blank."""
    quote: str | None = None
    for position, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or line[position - 1] in " \t"):
            return line[position + 1 :].strip()
    return ""


def shell_commands(block: Block) -> list[Command]:
    """The commands of a shell block: for ``console``, the lines after ``$ `` (the other lines are the
    output the doc shows); else every line that is not blank or a comment."""
    logical: list[tuple[int, str]] = []  # (line in the page, the line with its continuations)
    for number, line in enumerate(block.text.splitlines(), start=block.line + 1):
        if logical and logical[-1][1].endswith("\\"):
            logical[-1] = (logical[-1][0], logical[-1][1][:-1] + " " + line)
        else:
            logical.append((number, line))
    commands: list[Command] = []
    for number, line in logical:
        stripped = line.strip()
        if block.language == "console":
            if stripped.startswith("$ "):
                commands.append(Command(block, number, stripped[2:]))
            elif commands:
                commands[-1].shown += stripped + "\n"
            continue
        if not stripped:
            continue
        if stripped.startswith("#"):
            if commands:
                commands[-1].shown += stripped[1:].strip() + "\n"
            continue
        commands.append(Command(block, number, stripped, trailing_comment(stripped) + "\n"))
    return commands


def for_stack(text: str, port: int, redis_url: str) -> str:
    """``text`` with make dev's documented address and Redis turned into the test stack's."""
    for address in DOC_ADDRESSES:
        text = text.replace(address, f"{address.split(':')[0]}:{port}")
    return text.replace(DOC_REDIS_URL, redis_url)


# ------------------------------------------------------------------------------ a page's sessions


@dataclass
class Ran:
    """What a command or a statement did: its exit status (0, or 1 for a Python exception), its
    output, its error output; for a Python expression, the repr of its value."""

    status: int
    out: str
    err: str
    value: str | None = None


@dataclass
class Terminal:
    """A second terminal next to ``make dev``, for one page: a checkout-shaped working directory (the
    checkout's entries linked into a temporary directory, so ``.venv/bin/delayq`` works and what a
    command writes stays out of the checkout), the venv on PATH, one bash session and one Python
    interpreter that keep their state (variables, ``cd``, imports) from block to block."""

    env: dict[str, str]
    port: int
    directory: Path = field(init=False)
    _tmp: tempfile.TemporaryDirectory[str] = field(init=False)
    _bash: subprocess.Popen[str] | None = None
    _python: subprocess.Popen[str] | None = None

    def __post_init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="delayq-docs-")
        self.directory = Path(self._tmp.name)
        for entry in ROOT.iterdir():
            if entry.name not in {".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"}:
                (self.directory / entry.name).symlink_to(entry)
        venv = ROOT / ".venv"
        self.env = {
            **self.env,
            "PATH": f"{venv / 'bin'}{os.pathsep}{self.env.get('PATH', os.defpath)}",
            "VIRTUAL_ENV": str(venv),
            "PYTHONUNBUFFERED": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",  # api.md's pip install finds the package there: no network
        }

    def shell(self, command: str, merged: bool = False, timeout: float = 120) -> Ran:
        """``command`` in this page's bash, stdin empty (a command that asks, asks no one); with
        ``merged``, its error output in ``out`` too, in order, as a terminal shows them."""
        if self._bash is None:
            self._bash = subprocess.Popen(
                ["bash", "--noprofile", "--norc"],
                cwd=self.directory,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        assert self._bash.stdin is not None
        out, err = self.directory / ".out", self.directory / ".err"
        self._bash.stdin.write(
            f"{{ {for_stack(command, self.port, self.env['DELAYQ_REDIS_URL'])}\n}} </dev/null >{shlex.quote(str(out))} "
            f"2>{'&1' if merged else shlex.quote(str(err))}\n"
            'echo "done $?"\n'
        )
        self._bash.stdin.flush()
        reply = self._read_line(self._bash, timeout)
        assert reply.startswith("done "), f"bash ended or said {reply!r} after {command!r}"
        if merged:
            err.write_text("")
        return Ran(int(reply.split()[1]), out.read_text(errors="replace"), err.read_text(errors="replace"))

    def python(self, statement: str, timeout: float = 120) -> Ran:
        """``statement`` (one top-level statement) in this page's interpreter; an expression's value
        kept as the interpreter's prompt shows it."""
        if self._python is None:
            self._python = subprocess.Popen(
                [sys.executable, "-c", _PYTHON_SESSION],
                cwd=self.directory,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        assert self._python.stdin is not None
        self._python.stdin.write(json.dumps(for_stack(statement, self.port, self.env["DELAYQ_REDIS_URL"])) + "\n")
        self._python.stdin.flush()
        reply = self._read_line(self._python, timeout)
        assert reply, "the Python session ended"
        ran = json.loads(reply)
        return Ran(1 if ran["error"] else 0, ran["out"], ran["error"] or "", ran["value"])

    @staticmethod
    def _read_line(process: subprocess.Popen[str], timeout: float) -> str:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                raise AssertionError(f"no answer within {timeout} s")
        return process.stdout.readline()

    def close(self) -> None:
        for process in (self._bash, self._python):
            if process is None:
                continue
            assert process.stdin is not None
            assert process.stdout is not None
            process.stdin.close()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
            process.stdout.close()
        self._tmp.cleanup()

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The interpreter of a page: reads one statement (a JSON string) a line and runs it in one module
# namespace (sys.path[0] the working directory, as for ``python`` there); answers one JSON line. Its
# own stdout is the channel; what a statement prints is caught.
_PYTHON_SESSION = r"""
import ast, contextlib, io, json, sys, traceback
sys.path.insert(0, "")
channel = sys.stdout
scope = {"__name__": "__main__"}
for request in sys.stdin:
    out, err = io.StringIO(), io.StringIO()
    value = error = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            tree = ast.parse(json.loads(request))
            if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr):
                got = eval(compile(ast.Expression(tree.body[0].value), "<doc>", "eval"), scope)
                value = None if got is None else repr(got)
            else:
                exec(compile(tree, "<doc>", "exec"), scope)
    except BaseException:
        error = err.getvalue() + traceback.format_exc()
    channel.write(json.dumps({"out": out.getvalue(), "value": value, "error": error}) + "\n")
    channel.flush()
"""


def python_statements(block: Block) -> list[Command]:
    """The top-level statements of a Python block, each with its source lines (decorators and
    comments inside it included)."""
    lines = block.text.splitlines()
    statements: list[Command] = []
    for node in ast.parse(block.text).body:
        decorators = getattr(node, "decorator_list", [])
        first = min([node.lineno] + [decorator.lineno for decorator in decorators])
        source = "\n".join(lines[first - 1 : node.end_lineno])
        comment = trailing_comment(lines[(node.end_lineno or first) - 1])
        statements.append(Command(block, block.line + first, source, comment + "\n"))
    return statements


def json_answer(text: str) -> Any:
    """``text`` read as JSON, or None when it is not."""
    try:
        return json.loads(text)
    except ValueError:
        return None
