"""The recent-lateness math (delayq.core.lateness): buckets, quantiles read off them, the in-memory counts."""

from __future__ import annotations

import random

import pytest

from delayq.core.lateness import MAX_BUCKET, Lateness, bucket_ms, bucket_of, quantile_ms


@pytest.mark.parametrize(
    ("ms", "bucket"),
    [(-5, 0), (0, 0), (0.99, 0), (1, 1), (1.18, 1), (1.19, 2), (2, 5), (1000, 40), (60_000, 64), (1e15, MAX_BUCKET)],
)
def test_buckets_are_a_quarter_of_a_doubling_wide(ms: float, bucket: int) -> None:
    assert bucket_of(ms) == bucket


@pytest.mark.parametrize("ms", [1, 1.5, 7, 99.9, 250, 1234.5, 60_000, 3_600_000, 86_400_000])
def test_a_bucket_stands_for_its_values_within_nine_percent(ms: float) -> None:
    assert abs(bucket_ms(bucket_of(ms)) - ms) / ms < 0.091


def test_quantiles_of_known_samples() -> None:
    rng = random.Random(7)
    samples = [rng.uniform(5, 50) for _ in range(990)] + [rng.uniform(4000, 5000) for _ in range(10)]
    counts: dict[int, int] = {}
    for ms in samples:
        counts[bucket_of(ms)] = counts.get(bucket_of(ms), 0) + 1
    ordered = sorted(samples)
    p50, p99 = quantile_ms(counts, 0.5), quantile_ms(counts, 0.99)
    assert p50 is not None
    assert abs(p50 - ordered[499]) / ordered[499] < 0.1
    assert p99 is not None
    assert abs(p99 - ordered[989]) / ordered[989] < 0.1
    assert quantile_ms(counts, 1.0) == pytest.approx(bucket_ms(bucket_of(ordered[-1])))


def test_no_deliveries_is_no_figure() -> None:
    assert Lateness.of({}).to_dict() == {"window_s": 300, "deliveries": 0, "p50_ms": None, "p99_ms": None}
    one = Lateness.of({bucket_of(120): 1}).to_dict()
    assert one["deliveries"] == 1
    assert one["p50_ms"] == one["p99_ms"] == float(f"{bucket_ms(bucket_of(120)):.3g}")
