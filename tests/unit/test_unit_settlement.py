"""Settlement (delayq.loops.settlement): which verdicts a pass sends, and the acks that ride with a take."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from delayq.core.activity import Tally
from delayq.core.job import RESULT_MAX_BYTES, encode_result
from delayq.core.observability import Telemetry
from delayq.core.settings import TopicConfig
from delayq.loops import settlement as settlement_module
from delayq.loops.settlement import (
    ACK,
    ACK_RIDE_S,
    FAIL,
    SETTLE_BYTES,
    SETTLE_CHUNK,
    AckRoom,
    Pending,
    Settlement,
)
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
    assert made.ride(pending, AckRoom()) == [Ack("a", "t1", 5), Ack("b", "t1", 5)]
    assert made.send_acks_by() == float("inf")


def test_acks_of_a_take_that_failed_go_back_first_and_an_answer_counts_them() -> None:
    made, pending, counts = settlement()
    pending.ack(Ack("a", "t1", 5))
    rode = made.ride(pending, AckRoom())
    pending.ack(Ack("b", "t2", 6))
    made.rode(pending, rode, ConnectionError("gone"))
    assert [a[0] for a in pending.acks] == ["a", "b"]
    made.rode(pending, made.ride(pending, AckRoom()), 2)
    assert counts["acked"] == 2
    assert pending.acks == []


def test_a_ride_carries_at_most_a_chunk() -> None:
    made, pending, _ = settlement()
    for i in range(SETTLE_CHUNK + 3):
        pending.ack(Ack(f"j{i}", "t1", 5))
    assert len(made.ride(pending, AckRoom())) == SETTLE_CHUNK
    assert len(pending.acks) == 3


BIG = encode_result("r" * RESULT_MAX_BYTES)  # the largest result a receipt keeps: 64 KiB and its mark


def big_acks(prefix: str, n: int, result: str = BIG) -> list[Ack]:
    return [Ack(f"{prefix}{i}", "t1", 5, result) for i in range(n)]


def result_bytes(acks: list[Ack]) -> int:
    return sum(len(ack.result.encode()) for ack in acks)


def test_an_ack_call_carries_results_up_to_settle_bytes_in_order_and_loses_none() -> None:
    made, pending, _ = settlement()
    acks = big_acks("b", 40) + [Ack(f"s{i}", "t1", 5, "=1") for i in range(5)] + big_acks("c", 20)
    for ack in acks:
        pending.ack(ack)
    sent = made.calls(0.0)
    assert {s.kind for s in sent} == {ACK}
    assert [ack for s in sent for ack in s.items] == acks  # each once, in order
    assert all(result_bytes(s.items) <= SETTLE_BYTES for s in sent)
    # Full calls: each but the last stopped at the first ack that did not fit.
    taken = 0
    for s in sent[:-1]:
        taken += len(s.items)
        assert result_bytes(s.items) + result_bytes(acks[taken : taken + 1]) > SETTLE_BYTES
    assert [len(s.items) for s in sent] == [15, 15, 10 + 5 + 5, 15]  # 15 of 64 KiB fit in 1 MiB, not 16
    assert pending.acks == []


def test_results_count_in_utf8_bytes() -> None:
    made, pending, _ = settlement()
    acks = big_acks("u", 20, encode_result("é" * (RESULT_MAX_BYTES // 2)))  # 64 KiB, 32 Ki characters
    for ack in acks:
        pending.ack(ack)
    sent = made.calls(0.0)
    assert [ack for s in sent for ack in s.items] == acks
    assert len(sent) == 2
    assert all(result_bytes(s.items) <= SETTLE_BYTES for s in sent)


def test_a_call_carries_at_least_one_ack_however_large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settlement_module, "SETTLE_BYTES", 1000)  # smaller than any one result here
    made, pending, _ = settlement()
    acks = big_acks("b", 3)
    for ack in acks:
        pending.ack(ack)
    assert made.ride(pending, AckRoom()) == acks[:1]
    assert [s.items for s in made.calls(0.0)] == [acks[1:2], acks[2:3]]


def test_acks_without_results_are_bounded_by_the_count_alone() -> None:
    made, pending, _ = settlement()
    for i in range(2 * SETTLE_CHUNK + 1):
        pending.ack(Ack(f"j{i}", "t1", 5))
    assert [len(s.items) for s in made.calls(0.0)] == [SETTLE_CHUNK, SETTLE_CHUNK, 1]


def test_the_riders_of_a_take_call_share_one_room_and_the_rest_wait_in_order() -> None:
    made, taking, counts = settlement()
    partition = taking.partition
    other = made.lane(partition, "other", CONFIG)
    third = made.lane(partition, "third", CONFIG)
    mine, theirs, last = big_acks("m", 10), big_acks("o", 10), big_acks("l", 10)
    for lane, acks in ((taking, mine), (other, theirs), (third, last)):
        for ack in acks:
            lane.ack(ack)
    room = AckRoom()
    rode = made.ride(taking, room)
    along = made.ride_along(partition, {taking}, 63, room)
    assert rode == mine  # 640 KiB: the take's own acks first
    assert [lane for lane, _ in along] == [other]  # the room is full before the third: no lane rides empty
    riding = along[0][1]
    assert riding == theirs[: len(riding)]
    assert result_bytes(rode + riding) <= SETTLE_BYTES
    assert result_bytes(rode + theirs[: len(riding) + 1]) > SETTLE_BYTES  # the next did not fit
    assert taking.acks == []
    assert other.acks == theirs[len(riding) :]
    assert third.acks == last
    # The take call failed: what rode goes back before what waited, and a later call takes it all.
    made.rode(other, riding, ConnectionError("gone"))
    made.rode(taking, rode, 10)
    assert other.acks == theirs
    assert [ack for s in made.calls(0.0) for ack in s.items] == theirs + last
    assert counts["acked"] == 10


def test_the_riders_of_a_take_call_carry_a_chunk_of_acks_in_all() -> None:
    """Acks without results are bounded by their count across the lanes of a call, not per lane:
    64 lanes of 1,000 acks each would make a call of several MB."""
    made, taking, _ = settlement()
    partition = taking.partition
    others = [made.lane(partition, f"other{n}", CONFIG) for n in range(3)]
    for lane in (taking, *others):
        for i in range(SETTLE_CHUNK // 2 + 1):
            lane.ack(Ack(f"{lane.topic}-{i}", "t1", 5))
    room = AckRoom()
    rode = made.ride(taking, room)
    along = made.ride_along(partition, {taking}, 63, room)
    assert len(rode) == SETTLE_CHUNK // 2 + 1
    assert [lane for lane, _ in along] == others[:1]  # the chunk is full: the others wait, none rides empty
    assert len(rode) + len(along[0][1]) == SETTLE_CHUNK
    assert [len(lane.acks) for lane in others] == [2, SETTLE_CHUNK // 2 + 1, SETTLE_CHUNK // 2 + 1]


def test_acks_that_fill_a_call_by_their_results_never_wait() -> None:
    made, pending, _ = settlement()
    few = big_acks("f", 15)  # 15 x (64 KiB + 1): under SETTLE_BYTES
    for ack in few:
        pending.ack(ack)
    assert made.calls(0.0, hold=lambda lane: True) == []
    pending.ack(Ack("g", "t1", 5, BIG))
    sent = made.calls(0.0, hold=lambda lane: True)
    assert [ack for s in sent for ack in s.items] == [*few, Ack("g", "t1", 5, BIG)]
