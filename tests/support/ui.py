"""Helpers of the web view's tier: Debian's chromium driven by Playwright (never ``playwright
install``: the browser is the system's), the local stack or ``delayq ui`` in a process of their own,
and a page that records what a test must never see (a dialog: an injected ``alert``; a page error)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from delayq import Queue

from support.local import Stack, base_env, local_stack, running_process, start_module
from support.servers import free_port

TESTS = Path(__file__).resolve().parents[1]  # on the stack's PYTHONPATH: support.ui_targets
WAIT_MS = 30_000  # a condition a loaded machine may be slow to reach
expect.set_options(timeout=WAIT_MS)
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"]
TOPICS = {
    "*": {"target": "python:delayq.local:log_delivery"},
    "fails": {"target": "python:support.ui_targets:fail_with_markup", "retries": 0},
    "answers": {"target": "python:support.ui_targets:answer"},
}


def waits_for(attribute: str, routes: str) -> pytest.MarkDecorator:
    """A test of the contract's routes that another stream (see18) adds: until ``Queue`` has
    ``attribute`` it is not run and is reported as waiting (xfail) for ``routes``; from then on it runs
    like any other, with nothing to change here."""
    return pytest.mark.xfail(not hasattr(Queue, attribute), reason=f"waits for see18: {routes}", run=False, strict=True)


LISTING = waits_for("topics", "GET /topics, GET /topics/{topic}/jobs and /forecast, POST /topics/{topic}/pause")
BULK_CANCEL = waits_for("cancel_all", "DELETE /topics/{topic}/jobs?state=")


def chromium_path() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    assert os.access(path, os.X_OK), "these tests need Debian's chromium (tests/setup.sh installs it)"
    return path


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            yield browser
        finally:
            browser.close()


def launch(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, timeout=120_000)


@dataclass
class Watched:
    """A page, and what it did that a test checks never happens."""

    page: Page
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def watched(browser: Browser, **context: Any) -> Watched:
    """A page in a fresh context (its own storage and cookies); an ``alert`` is recorded and dismissed.
    The confirmations of the view are its own ``<dialog>`` elements, not browser dialogs."""
    page = browser.new_context(viewport={"width": 1280, "height": 900}, **context).new_page()
    page.set_default_timeout(WAIT_MS)
    seen = Watched(page)

    def dialog(d: Any) -> None:
        seen.dialogs.append(f"{d.type}: {d.message}")
        d.dismiss()

    page.on("dialog", dialog)
    page.on("pageerror", lambda error: seen.errors.append(str(error)))
    return seen


def stack_env(namespace: str, redis_url: str, **extra: str) -> dict[str, str]:
    """The local stack's environment for these tests: the tests' targets importable, their topics."""
    import json  # noqa: PLC0415

    env = base_env(namespace, redis_url, DELAYQ_TOPICS=json.dumps(TOPICS), **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return env


@contextmanager
def own_namespace(redis_url: str) -> Iterator[str]:
    """A namespace for a module's tests (a stack shared by them), its keys deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        with redis.Redis.from_url(redis_url) as client:
            keys = list(client.scan_iter(match=f"{name}:*", count=1000))
            if keys:
                client.delete(*keys)


@contextmanager
def shared_stack(redis_url: str, **extra: str) -> Iterator[Stack]:
    with own_namespace(redis_url) as namespace, local_stack(stack_env(namespace, redis_url, **extra)) as stack:
        yield stack


@contextmanager
def delayq_ui(env: dict[str, str]) -> Iterator[Stack]:
    """``python -m delayq ui --port <free>``, as a user starts it, until the block ends."""
    port = free_port()
    with running_process(start_module("delayq", env, "ui", "--port", str(port)), port, "delayq ui on") as ui:
        yield ui


def confirm(tab: Watched, verb: str) -> None:
    """Answers the view's confirmation (its own <dialog>) with ``verb``."""
    dialog = tab.page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name=verb).click()
    expect(dialog).to_be_hidden()


def create(stack: Stack, topic: str, job_id: str, *, delay: float = 3600, body: Any = None, **more: Any) -> None:
    answer = stack.request("POST", "/jobs", {"topic": topic, "id": job_id, "delay": delay, "body": body, **more})
    assert answer.status == 201, answer


def fresh_topic() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


__all__ = ["BULK_CANCEL", "LISTING", "WAIT_MS"]
