"""The local stack's example targets: a delivery's log line keeps a big body to its first characters;
they load without the ``local`` extra, and the stack, without it, says how to install it."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from delayq import Job
from delayq.local import LOCAL_EXTRA, fail_delivery, log_delivery
from delayq.surfaces.examples import LOGGED_BODY_CHARS


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


WITHOUT_THE_EXTRA = "import sys; sys.modules['waitress'] = None  # as if the local extra were not installed\n"


def test_the_example_targets_load_without_the_local_extra() -> None:
    code = WITHOUT_THE_EXTRA + "from delayq.local import log_delivery, fail_delivery; print('loaded')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "loaded\n"), done.stderr


def test_the_local_stack_without_the_extra_says_how_to_install_it() -> None:
    code = WITHOUT_THE_EXTRA + "from delayq.local import main; main([])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr == f"python -m delayq.local needs waitress: {LOCAL_EXTRA}\n"
