"""Fixtures of the web view's tier: one headless chromium per module, a fresh tab per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from support.ui import Watched, chromium, watched


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def tab(browser: Browser) -> Iterator[Watched]:
    """A page in a context of its own; at the end, it opened no browser dialog and its script never failed."""
    seen = watched(browser)
    yield seen
    seen.page.context.close()
    assert seen.dialogs == [], "the page opened a browser dialog: an injected script ran"
    assert seen.errors == [], "the page's script failed"
