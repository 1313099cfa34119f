"""The backoff rule, checked where it runs: ``backoff_ms`` of ``lua/includes/backoff.lua``, called on
the real Redis through a test-only script that includes it, the way fail.lua and sweep.lua do. (The
scripts' own tests check that a failed attempt waits the entry it picks.)"""

from __future__ import annotations

import pytest
import redis

from delayq.core.schedule import DEFAULT_BACKOFF_S, encode_backoff
from delayq.store.scripts import expand_includes

BACKOFF_MS = expand_includes("-- @include backoff\nreturn backoff_ms(ARGV[1], tonumber(ARGV[2]))")
TABLE = "1000,5000,30000"


def backoff_ms(client: redis.Redis, key: str, csv: str, failures: int) -> int:
    """The wait Lua picks after the ``failures``-th failure (one key: the data path's rule for EVAL)."""
    return int(client.eval(BACKOFF_MS, 1, key, csv, failures))


@pytest.mark.parametrize(
    ("csv", "failures", "expected"),
    [
        (TABLE, 1, 1000),
        (TABLE, 2, 5000),
        (TABLE, 3, 30000),
        (TABLE, 4, 30000),
        (TABLE, 100, 30000),
        (TABLE, 0, 1000),
        (TABLE, -1, 1000),
        (TABLE, -100, 1000),
        ("7", 1, 7),
        ("7", 9, 7),
        ("0,0,60000", 1, 0),
        ("0,0,60000", 3, 60000),
        ("", 1, 0),
        ("", 0, 0),
        ("", 5, 0),
    ],
)
def test_backoff_ms(redis_client: redis.Redis, namespace: str, csv: str, failures: int, expected: int) -> None:
    assert backoff_ms(redis_client, f"{namespace}:k", csv, failures) == expected


def test_backoff_ms_default_table(redis_client: redis.Redis, namespace: str) -> None:
    csv = encode_backoff(DEFAULT_BACKOFF_S)
    assert [backoff_ms(redis_client, f"{namespace}:k", csv, n) for n in range(1, 11)] == [
        15_000,
        180_000,
        600_000,
        1_800_000,
        3_600_000,
        7_200_000,
        21_600_000,
        54_000_000,
        54_000_000,
        54_000_000,
    ]
