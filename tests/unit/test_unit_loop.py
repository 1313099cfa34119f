"""How long an invocation loops: ``delayq.core.loop``, with an explicit ``now`` (no clock)."""

from __future__ import annotations

import math
import time

import pytest

from delayq.core.errors import InvalidField
from delayq.core.loop import FINISH_BEFORE_DEADLINE_S, STOP_BEFORE_DEADLINE_S, Budget, requested_seconds


def test_deadline_margins():
    assert STOP_BEFORE_DEADLINE_S == 5.0
    assert FINISH_BEFORE_DEADLINE_S == 2.0


# ----------------------------------------------------------------------------- requested_seconds


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"seconds": 10}, 10.0),
        ({"seconds": 0}, 0.0),
        ({"seconds": 0.5}, 0.5),
        ({"seconds": 840}, 840.0),
        ({"detail": {"seconds": 30}}, 30.0),
        ({"detail": {"seconds": 0}}, 0.0),
        ({"seconds": None, "detail": {"seconds": 7}}, 7.0),
        ({"seconds": 3, "detail": {"seconds": 7}}, 3.0),  # top level wins
        ({"seconds": 0, "detail": {"seconds": 7}}, 0.0),  # 0 is a value, not "absent"
        ({}, None),
        ({"detail": {}}, None),
        ({"detail": None}, None),
        ({"detail": "seconds"}, None),
        ({"detail-type": "Scheduled Event", "source": "aws.scheduler", "detail": {}}, None),
        ({"seconds": None}, None),
        (None, None),
        ([], None),
        ("seconds", None),
        (42, None),
    ],
)
def test_requested_seconds(event, expected):
    got = requested_seconds(event)
    assert got == expected
    if expected is not None:
        assert type(got) is float


@pytest.mark.parametrize(
    "event",
    [
        {"seconds": -1},
        {"seconds": -0.001},
        {"seconds": "10"},
        {"seconds": ""},
        {"seconds": True},
        {"seconds": False},
        {"seconds": [10]},
        {"seconds": {"n": 10}},
        {"seconds": math.nan},
        {"seconds": math.inf},
        {"detail": {"seconds": -5}},
        {"detail": {"seconds": "5"}},
        {"detail": {"seconds": True}},
    ],
)
def test_requested_seconds_invalid(event):
    with pytest.raises(InvalidField) as info:
        requested_seconds(event)
    assert info.value.field == "seconds"
    assert info.value.status == 422
    assert ">= 0" in info.value.message


# ----------------------------------------------------------------------------- Budget.of


@pytest.mark.parametrize(
    ("seconds", "remaining_s", "stop_at", "finish_by"),
    [
        # no deadline: loop the seconds asked
        (60, None, 1060, None),
        (0.5, None, 1000.5, None),
        # the deadline is far: the seconds asked
        (60, 900, 1060, 1898),
        (10, 60, 1010, 1058),
        # the deadline is near: stop 5 s before it, finish 2 s before it
        (60, 60, 1055, 1058),
        (60, 30, 1025, 1028),
        (840, 900, 1840, 1898),
        (900, 900, 1895, 1898),
        (60, 5, 1000, 1003),
        (60, 3, 998, 1001),  # already past the point of taking work
    ],
)
def test_budget_of(seconds, remaining_s, stop_at, finish_by):
    budget = Budget.of(seconds, remaining_s=remaining_s, now=1000.0)
    assert budget.started == 1000.0
    assert budget.stop_at == pytest.approx(stop_at)
    if finish_by is None:
        assert budget.finish_by is None
    else:
        assert budget.finish_by == pytest.approx(finish_by)
    assert budget.one_pass is False


@pytest.mark.parametrize(("remaining_s", "stop_at"), [(None, 1000), (60, 1000), (3, 998)])
def test_budget_of_zero_is_one_pass(remaining_s, stop_at):
    budget = Budget.of(0, remaining_s=remaining_s, now=1000.0)
    assert budget.one_pass is True
    assert budget.stop_at == pytest.approx(stop_at)
    assert budget.taking(now=1000.0) is False


def test_budget_of_uses_the_monotonic_clock_without_now():
    before = time.monotonic()
    budget = Budget.of(10)
    left = budget.left()
    assert budget.taking()
    assert 10 - (time.monotonic() - before) <= left <= 10  # 10 s, less what passed since
    assert budget.fits(1000)


@pytest.mark.parametrize(
    ("seconds", "remaining_s", "now", "run_ms"),
    [
        (0, 60, 1000.0, 58_000),
        (0, 60, 1990.7, 58_000),  # (1990.7 + 60 - 2) - 1990.7 is 57.99999999999977 in floats
        (60, 900, 1990.7, 898_000),
        (0, 1.5, 1000.0, 0),  # less time left than the margin: nothing can run
        (60, None, 1000.0, -1),  # no deadline
    ],
)
def test_run_ms_is_the_longest_a_job_can_run(seconds, remaining_s, now, run_ms):
    assert Budget.of(seconds, remaining_s=remaining_s, now=now).run_ms == run_ms


# ----------------------------------------------------------------------------- taking / fits / left


@pytest.fixture
def budget() -> Budget:
    # started at 1000, 60 s asked, 30 s left before the Lambda deadline
    return Budget.of(60, remaining_s=30, now=1000.0)


@pytest.mark.parametrize(
    ("now", "expected"),
    [(1000.0, True), (1010.0, True), (1024.999, True), (1025.0, False), (1026.0, False), (1100.0, False)],
)
def test_taking(budget, now, expected):
    assert budget.taking(now=now) is expected


@pytest.mark.parametrize(
    ("seconds", "now", "expected"),
    [
        (0, 1000.0, True),
        (10, 1000.0, True),
        (28, 1000.0, True),  # exactly on finish_by
        (28.001, 1000.0, False),
        (30, 1000.0, False),
        (3, 1025.0, True),
        (3.5, 1025.0, False),
        (0, 1028.0, True),
        (0, 1028.5, False),
    ],
)
def test_fits(budget, seconds, now, expected):
    assert budget.fits(seconds, now=now) is expected


@pytest.mark.parametrize(("now", "expected"), [(1000.0, 25.0), (1020.0, 5.0), (1025.0, 0.0), (1030.0, -5.0)])
def test_left(budget, now, expected):
    assert budget.left(now=now) == pytest.approx(expected)


def test_fits_without_a_deadline_always():
    budget = Budget.of(60, now=0.0)
    assert budget.finish_by is None
    assert budget.fits(10**9, now=10**6)


# ----------------------------------------------------------------------------- from_event, forever


class Context:
    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@pytest.mark.parametrize(
    ("event", "remaining_ms", "loop_seconds", "left", "one_pass"),
    [
        ({}, None, 60, 60, False),
        ({"seconds": 10}, None, 60, 10, False),
        ({"detail": {"seconds": 20}}, None, 60, 20, False),
        ({}, 30_000, 60, 25, False),
        ({"seconds": 10}, 900_000, 60, 10, False),
        ({"seconds": 0}, 900_000, 60, 0, True),
        ({}, 900_000, 0, 0, True),
    ],
)
def test_from_event(event, remaining_ms, loop_seconds, left, one_pass):
    context = None if remaining_ms is None else Context(remaining_ms)
    budget = Budget.from_event(event, context, loop_seconds)
    assert budget.left(now=budget.started) == pytest.approx(left)
    assert budget.one_pass is one_pass
    if remaining_ms is None:
        assert budget.finish_by is None
    else:
        assert budget.finish_by == pytest.approx(budget.started + remaining_ms / 1000 - 2)


def test_from_event_refuses_bad_seconds():
    with pytest.raises(InvalidField):
        Budget.from_event({"seconds": "10"}, None, 60)


def test_forever():
    budget = Budget.forever()
    assert budget.stop_at == math.inf
    assert budget.finish_by is None
    assert budget.one_pass is False
    assert budget.taking()
    assert budget.fits(10**9)
