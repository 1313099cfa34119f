"""Fixtures of the loops tier."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support import loop_targets


@pytest.fixture(autouse=True)
def _clean_targets() -> Iterator[None]:
    """``support.loop_targets`` forgets its calls and releases every blocked handler, before and after."""
    loop_targets.reset()
    yield
    loop_targets.reset()
