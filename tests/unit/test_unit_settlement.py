"""Settlement (delayq.loops.settlement): which verdicts a pass sends, and the acks that ride with a take."""

from __future__ import annotations

import threading
import time
from collections import Counter

from delayq.core.activity import Tally
from delayq.core.observability import Telemetry
from delayq.core.settings import TopicConfig
from delayq.loops.settlement import ACK, ACK_RIDE_S, FAIL, SETTLE_CHUNK, Pending, Settlement
from delayq.store.calls import Ack, Failure
from delayq.store.keys import Keyspace

CONFIG = TopicConfig(target="python:os:getcwd")


def settlement() -> tuple[Settlement, Pending, Counter[str]]:
    counts: Counter[str] = Counter()
    errors: list[str] = []
    made = Settlement(
        threading.Lock(), counts, Telemetry.disabled(), lambda what, *_: errors.append(what), tally=Tally(lambda: 0.0)
    )
    return made, made.lane(Keyspace("ns", 1).partitions[0], "orders", CONFIG), counts


def test_acks_that_may_wait_stay_for_a_take_and_failures_go_at_once() -> None:
    made, pending, _ = settlement()
    pending.ack(Ack("a", "t1", 5))
    pending.fails.append(Failure("b", "t1", "boom"))
    sent = made.calls(0.0, hold=lambda lane: True)
    assert [s.kind for s in sent] == [FAIL]
    assert [a[0] for a in pending.acks] == ["a"]
    assert [s.kind for s in made.calls(0.0, hold=lambda lane: False)] == [ACK]
    assert pending.acks == []


def test_without_a_hold_every_ack_goes() -> None:
    made, pending, _ = settlement()
    pending.ack(Ack("a", "t1", 5))
    assert [(s.kind, s.items) for s in made.calls(0.0)] == [(ACK, [Ack("a", "t1", 5)])]


def test_a_full_chunk_of_acks_never_waits() -> None:
    made, pending, _ = settlement()
    for i in range(SETTLE_CHUNK):
        pending.ack(Ack(f"j{i}", "t1", 5))
    assert [s.kind for s in made.calls(0.0, hold=lambda lane: True)] == [ACK]


def test_acks_must_go_within_the_ride_window_of_the_first() -> None:
    made, pending, _ = settlement()
    assert made.send_acks_by() == float("inf")
    before = time.monotonic()
    pending.ack(Ack("a", "t1", 5))
    pending.ack(Ack("b", "t1", 5))
    by = made.send_acks_by()
    assert before + ACK_RIDE_S <= by <= time.monotonic() + ACK_RIDE_S
    assert made.ride(pending) == [Ack("a", "t1", 5), Ack("b", "t1", 5)]
    assert made.send_acks_by() == float("inf")


def test_acks_of_a_take_that_failed_go_back_first_and_an_answer_counts_them() -> None:
    made, pending, counts = settlement()
    pending.ack(Ack("a", "t1", 5))
    rode = made.ride(pending)
    pending.ack(Ack("b", "t2", 6))
    made.rode(pending, rode, ConnectionError("gone"))
    assert [a[0] for a in pending.acks] == ["a", "b"]
    made.rode(pending, made.ride(pending), 2)
    assert counts["acked"] == 2
    assert pending.acks == []


def test_a_ride_carries_at_most_a_chunk() -> None:
    made, pending, _ = settlement()
    for i in range(SETTLE_CHUNK + 3):
        pending.ack(Ack(f"j{i}", "t1", 5))
    assert len(made.ride(pending)) == SETTLE_CHUNK
    assert len(pending.acks) == 3
