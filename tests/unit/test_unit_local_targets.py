"""The local stack's example targets: a delivery's log line keeps a big body to its first characters."""

from __future__ import annotations

import logging

import pytest

from delayq import Job
from delayq.local import fail_delivery, log_delivery
from delayq.surfaces.local import LOGGED_BODY_CHARS


def test_a_delivery_line_cuts_a_big_body_and_says_how_big(caplog: pytest.LogCaptureFixture) -> None:
    body = {"blob": "x" * 256_000}
    with caplog.at_level(logging.INFO, logger="delayq.local"):
        log_delivery(Job("orders", "big", body, 1, 0, 0))
        log_delivery(Job("orders", "small", {"n": 1}, 1, 0, 0))
    big, small = (record.getMessage() for record in caplog.records)
    assert big.startswith("delivered orders/big attempt 1, ")
    assert big.endswith("… (256,012 characters)")
    assert len(big) < LOGGED_BODY_CHARS + 200
    assert small.endswith(': {"n": 1}')


def test_the_failing_example_names_its_own_topic() -> None:
    with pytest.raises(RuntimeError, match=r"^webhooks fails every delivery: see GET /topics/webhooks/dead"):
        fail_delivery(Job("webhooks", "w1", None, 1, 0, 0))
