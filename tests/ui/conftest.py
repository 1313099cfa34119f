"""Fixtures of the web view's tier: one headless chromium per module, a fresh tab per test, and a local
stack per module as a user runs it (a module that needs another defines its own ``stack``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from support.local import Stack
from support.ui import Watched, chromium, shared_stack, watched


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def stack(redis_url: str) -> Iterator[Stack]:
    with shared_stack(redis_url) as running:
        yield running


@pytest.fixture
def tab(browser: Browser) -> Iterator[Watched]:
    """A page in a context of its own; at the end, it opened no browser dialog and its script never failed."""
    seen = watched(browser)
    yield seen
    seen.page.context.close()
    assert seen.dialogs == [], "the page opened a browser dialog: an injected script ran"
    assert seen.errors == [], "the page's script failed"
