"""``delayq.loops.outages``: how long a partition rests after its calls fail, and what is logged (no server:
the rests are decided on the errors and the loop's clock given to them)."""

from __future__ import annotations

import logging
import math

import pytest
from redis.exceptions import ClusterDownError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from delayq import Settings, Topics
from delayq.core.errors import RedisUnavailable
from delayq.loops.outages import Outages
from delayq.store.connection import redis_errors
from delayq.store.namespace import Namespace

TICK = 1.0
REFUSED = RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")


@pytest.fixture
def outages() -> Outages:
    settings = Settings(redis_url="redis://127.0.0.1:1/0", partitions=3, topics=Topics.parse({}), tick=TICK)
    return Outages(Namespace(settings), tick=TICK, name="consume")


def translated(exc: Exception) -> RedisUnavailable:
    """``exc`` as the loops see it: through ``redis_errors``."""
    with pytest.raises(RedisUnavailable) as caught, redis_errors():
        raise exc
    return caught.value


def test_a_server_that_does_not_answer_is_tried_again_later_each_time_up_to_a_quarter_tick(outages: Outages) -> None:
    p0 = outages.namespace.keys.partitions[0]
    now = 100.0
    waits = []
    for _ in range(8):
        assert outages.failed(p0, REFUSED, now)
        waits.append(round(outages.until(p0) - now, 3))
        now = outages.until(p0)  # the next try, when the rest ends
    assert waits == [0.05, 0.1, 0.2, 0.25, 0.25, 0.25, 0.25, 0.25]
    assert not outages.resting(outages.namespace.keys.partitions[1], now)  # the others are not held up


def test_a_server_that_answers_not_now_is_tried_again_alike(outages: Outages) -> None:
    p0 = outages.namespace.keys.partitions[0]
    now = 100.0
    waits = []
    for error in [ClusterDownError("The cluster is down", status_code="CLUSTERDOWN")] * 4:
        assert outages.failed(p0, translated(error), now)
        waits.append(round(outages.until(p0) - now, 3))
        now = outages.until(p0)
    assert waits == [0.05, 0.1, 0.2, 0.25]


def test_a_call_that_timed_out_rests_a_whole_tick_at_once(outages: Outages) -> None:
    """Trying a server that hangs costs the loop a wait: not every 50 ms."""
    p1 = outages.namespace.keys.partitions[1]
    assert outages.failed(p1, RedisTimeoutError("Timeout reading from 127.0.0.1:7001"), 100.0)
    assert outages.until(p1) == pytest.approx(100.0 + TICK)


@pytest.mark.parametrize(
    "error",
    [
        ResponseError("user_script:1: Script attempted to access nonexistent global variable 'x'"),
        translated(ResponseError("NOPERM this user has no permissions to run the 'evalsha' command")),
    ],
    ids=["a script's error", "an ACL's refusal"],
)
def test_errors_that_waiting_does_not_mend_do_not_rest(outages: Outages, error: Exception) -> None:
    p0 = outages.namespace.keys.partitions[0]
    assert not outages.failed(p0, error, 100.0)
    assert not outages
    assert outages.next_at(100.0) == math.inf


def test_the_calls_of_one_round_trip_are_one_try(outages: Outages) -> None:
    """Ten calls of partition 0 failed in one round trip: one rest of 50 ms, ten calls counted; partition
    1's calls were answered in the same round trip and it does not rest."""
    p0, p1, _ = outages.namespace.keys.partitions
    outages.saw([p0] * 10 + [p1], [REFUSED] * 10 + [[]], 100.0)
    assert outages.until(p0) == pytest.approx(100.05)
    assert not outages.resting(p1, 100.0)
    assert outages.next_at(100.0) == pytest.approx(100.05)


def test_one_line_when_a_server_stops_answering_and_one_when_it_answers(
    outages: Outages, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="delayq.outages")
    partitions = outages.namespace.keys.partitions
    now = 100.0
    for _ in range(20):  # 20 passes of failed calls, 3 partitions on one server
        outages.saw(list(partitions) * 2, [REFUSED] * 6, now)
        outages.report(now)
        now += 0.5
    assert len(caplog.records) == 1
    down = caplog.records[0].getMessage()
    assert down == (
        "consume: Redis at redis://127.0.0.1:1/0 does not answer (ConnectionError): partitions 0, 1, 2 wait, "
        "tried again at most a tick apart"
    )
    caplog.clear()
    outages.saw(list(partitions), [[], [], []], now)
    outages.report(now)
    assert [record.getMessage() for record in caplog.records] == [
        "consume: partitions 0, 1, 2 answer again (Redis at redis://127.0.0.1:1/0), after 10.0 s; "
        "120 calls failed meanwhile"
    ]
    assert not outages
