"""Pure time math of ``delayq.core.schedule``: no Redis, no clock."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from delayq.core.schedule import (
    DAY_MS,
    DEFAULT_BACKOFF_S,
    MAX_DELAY_MS,
    encode_backoff,
    iso_utc,
    parse_run_at,
    seconds_to_ms,
    sleep_for,
)

# 2026-11-22T18:30:00Z
T0_S = 1795372200
T0_MS = T0_S * 1000


def test_constants():
    assert DAY_MS == 86_400_000
    assert MAX_DELAY_MS == 366 * 86_400_000
    assert DEFAULT_BACKOFF_S == (15, 180, 600, 1800, 3600, 7200, 21600, 54000)


# ----------------------------------------------------------------------------- parse_run_at


@pytest.mark.parametrize(
    ("value", "expected_ms"),
    [
        (0, 0),
        (1, 1000),
        (T0_S, T0_MS),
        (float(T0_S), T0_MS),
        (T0_S + 0.5, T0_MS + 500),
        (T0_S + 0.123, T0_MS + 123),
        (T0_S + 0.999, T0_MS + 999),
        # below one millisecond: rounded up, never early
        (T0_S + 0.0001, T0_MS + 1),
        (T0_S + 0.0006, T0_MS + 1),
        (0.0001, 1),
        (1e-9, 1),
        ("2026-11-22T18:30:00Z", T0_MS),
        ("2026-11-22T18:30:00z", T0_MS),
        ("2026-11-22T18:30:00+00:00", T0_MS),
        ("2026-11-22T20:30:00+02:00", T0_MS),
        ("2026-11-22T13:30:00-05:00", T0_MS),
        ("2026-11-22T18:30:00.250Z", T0_MS + 250),
        ("2026-11-22T18:30:00.007+00:00", T0_MS + 7),
        ("2026-11-22T20:30:00.999+02:00", T0_MS + 999),
        # sub-millisecond ISO: rounded up
        ("2026-11-22T18:30:00.000001Z", T0_MS + 1),
        ("2026-11-22T18:30:00.123400Z", T0_MS + 124),
        ("  2026-11-22T18:30:00Z  ", T0_MS),
        ("2026-11-22 18:30:00Z", T0_MS),
        ("1970-01-01T00:00:00Z", 0),
    ],
)
def test_parse_run_at_good(value, expected_ms):
    assert parse_run_at(value) == expected_ms


@pytest.mark.parametrize(
    "value",
    [
        "2026-11-22T18:30:00",
        "2026-11-22T18:30:00.250",
        "2026-11-22 18:30",
        "2026-11-22",
    ],
)
def test_parse_run_at_refuses_zoneless(value):
    with pytest.raises(ValueError, match="zone"):
        parse_run_at(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "now",
        "tomorrow",
        "Z",
        "1795372200",
        "1795372200Z",
        "2026-13-01T00:00:00Z",
        "2026-11-31T00:00:00Z",
        "2026-11-22T25:00:00Z",
        "2026-11-22T18:30:00+25:00",
        "22/11/2026 18:30 UTC",
    ],
)
def test_parse_run_at_refuses_garbage(value):
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_run_at(value)


@pytest.mark.parametrize("value", [-1, -0.001, -1e-9, math.nan, math.inf, -math.inf, True, False])
def test_parse_run_at_refuses_bad_numbers(value):
    with pytest.raises(ValueError, match="epoch seconds >= 0"):
        parse_run_at(value)


@pytest.mark.parametrize("value", [T0_S + 0.0001, T0_S + 0.1234, "2026-11-22T18:30:00.000500Z"])
def test_parse_run_at_never_early(value):
    exact_ms = (
        datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000
        if isinstance(value, str)
        else value * 1000
    )
    ms = parse_run_at(value)
    assert isinstance(ms, int)
    assert ms >= exact_ms
    assert ms - exact_ms < 1


def test_parse_run_at_returns_int():
    assert type(parse_run_at(T0_S + 0.5)) is int
    assert type(parse_run_at("2026-11-22T18:30:00Z")) is int


# ----------------------------------------------------------------------------- iso_utc


@pytest.mark.parametrize(
    ("ms", "expected"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1, "1970-01-01T00:00:00.001Z"),
        (T0_MS, "2026-11-22T18:30:00.000Z"),
        (T0_MS + 250, "2026-11-22T18:30:00.250Z"),
        (T0_MS + 999, "2026-11-22T18:30:00.999Z"),
        (T0_MS + 1000, "2026-11-22T18:30:01.000Z"),
    ],
)
def test_iso_utc(ms, expected):
    assert iso_utc(ms) == expected


def test_iso_utc_round_trips_every_millisecond():
    for ms in range(T0_MS, T0_MS + 3000):
        text = iso_utc(ms)
        assert text.endswith("Z")
        assert parse_run_at(text) == ms


def test_iso_utc_is_utc():
    parsed = datetime.fromisoformat(iso_utc(T0_MS).replace("Z", "+00:00"))
    assert parsed == datetime(2026, 11, 22, 18, 30, tzinfo=UTC)


# ----------------------------------------------------------------------------- encode_backoff


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        ([15], "15000"),
        ((15, 180, 600), "15000,180000,600000"),
        ([0, 0.5, 1.25], "0,500,1250"),
        ([0.0001], "1"),
        ([0.0015], "2"),
        ([], ""),
        (DEFAULT_BACKOFF_S, "15000,180000,600000,1800000,3600000,7200000,21600000,54000000"),
    ],
)
def test_encode_backoff(seconds, expected):
    assert encode_backoff(seconds) == expected


# ----------------------------------------------------------------------------- seconds_to_ms


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, 0),
        (0.0, 0),
        (1, 1000),
        (0.001, 1),
        (0.1, 100),
        (0.25, 250),
        (1.5, 1500),
        (1.1, 1100),
        (30, 30000),
        (900, 900_000),
        (366 * 86400, MAX_DELAY_MS),
        # below one millisecond: rounded up
        (0.0001, 1),
        (0.0009, 1),
        (0.0011, 2),
        (1.0000001, 1001),
        (1e-12, 1),
    ],
)
def test_seconds_to_ms(seconds, expected):
    ms = seconds_to_ms(seconds)
    assert type(ms) is int
    assert ms == expected


@pytest.mark.parametrize("seconds", [2.007, 2.011, 4.015, 8.123, 1000.003])
def test_seconds_to_ms_exact_milliseconds_are_not_rounded_up(seconds):
    """A whole number of milliseconds written in seconds must not gain one.

    ``2.007 * 1000`` is ``2007.0000000000002`` in binary floating point, and ``math.ceil`` turns
    that float noise into a whole extra millisecond.
    """
    assert seconds_to_ms(seconds) == round(seconds * 1000)


def test_seconds_to_ms_never_early():
    for ms in range(0, 5000):
        assert seconds_to_ms((ms + 0.5) / 1000) == ms + 1


# ----------------------------------------------------------------------------- sleep_for


@pytest.mark.parametrize(
    ("tick", "next_in_ms", "expected"),
    [
        (1.0, (), 1.0),
        (1.0, (None,), 1.0),
        (1.0, (None, None), 1.0),
        (1.0, (-1,), 1.0),
        (1.0, (-1, None, -500), 1.0),
        (1.0, (250,), 0.25),
        (1.0, (250, 100), 0.1),
        (1.0, (None, 400, -1), 0.4),
        (1.0, (0,), 0.0),
        (1.0, (0, 500), 0.0),
        (1.0, (1000,), 1.0),
        (1.0, (5000,), 1.0),
        (1.0, (5000, None), 1.0),
        (0.2, (100,), 0.1),
        (0.2, (300,), 0.2),
        (60, (30_000, 45_000), 30.0),
    ],
)
def test_sleep_for(tick, next_in_ms, expected):
    assert sleep_for(tick, *next_in_ms) == pytest.approx(expected)
