"""Callbacks in the scripts: the call that makes a job done or dead leaves one outbox record when its
topic has ``on_done`` or ``on_dead`` (and none when the settlement is refused, or retried);
callbacks.lua makes each record's job once however often it is sent; outbox_trim.lua drops by
number."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial

from delayq.core.callbacks import Record
from delayq.core.job import encode_result
from delayq.store import calls
from delayq.store.calls import Ack, CallbackJob

from support.scripts import Lua, Rules, server_ms

T = "orders"
HOUR_MS = 3_600_000
ON_DONE = Rules(keep_done_ms=HOUR_MS, on_done="audit")


def test_an_ack_leaves_a_record_of_the_job_done(lua: Lua) -> None:
    write = lua.write(T, "a", '{"n":1}', value=0)
    assert calls.enqueue(lua.p, [replace(write, key="acme")]).run(lua.r).codes == [1]
    (lease,) = lua.take(T, count=1).leases
    before = server_ms(lua.r)
    ack = Ack("a", lease.token, before - 3, encode_result({"ok": True}))
    assert calls.ack(lua.p, T, ON_DONE, [ack]).run(lua.r) == 1
    (record,) = lua.outbox()
    assert (record.target, record.topic, record.id, record.key, record.outcome) == ("audit", T, "a", "acme", "done")
    assert (record.attempts, record.started_at_ms, record.body) == (1, before - 3, '{"n":1}')
    assert before <= record.ended_at_ms <= server_ms(lua.r)
    assert record.job_body()["result"] == {"ok": True}
    found = lua.inspect(T, "a")
    assert found is not None
    assert record.ended_at_ms == found.meta.done_at_ms
    # The same ack again, or a late one: refused by the lease, no record.
    assert calls.ack(lua.p, T, ON_DONE, [ack]).run(lua.r) == 0
    assert len(lua.outbox()) == 1
    # A topic without on_done leaves none.
    other = lua.make_leased(T, "b")
    assert lua.ack(T, "b", other.token, keep_ms=HOUR_MS) == 1
    assert len(lua.outbox()) == 1


def test_acks_riding_a_take_leave_records_numbered_in_order(lua: Lua) -> None:
    leases = [lua.make_leased(T, job_id) for job_id in ("a", "b")]
    acks = [Ack(lease.job.id, lease.token, 5) for lease in leases]
    taken = lua.take(T, count=5, acks=acks, keeping=ON_DONE)
    assert taken.acked == 2
    records = lua.outbox()
    assert [r.id for r in records] == ["a", "b"]
    assert records[0].seq < records[1].seq


def test_a_fail_leaves_a_record_only_when_the_job_goes_dead(lua: Lua) -> None:
    lease = lua.make_leased(T, "a", body='{"n":2}')
    fail = partial(lua.fail, T, "a", retries=1, backoff="0", on_dead="alerts")
    assert fail(lease.token, "boom 1", started_at_ms=7) == (1, 0)
    assert lua.outbox() == []  # retried: no outcome yet
    taken = lua.take(T, count=1)
    assert fail(taken.tokens[0], "boom 2", started_at_ms=9) == (0, 1)
    (record,) = lua.outbox()
    assert (record.target, record.outcome, record.attempts, record.started_at_ms) == ("alerts", "dead", 2, 9)
    assert (record.body, record.detail) == ('{"n":2}', "boom 2")
    assert record.job_body()["error"] == "boom 2"
    assert fail(taken.tokens[0], "boom 3") == (0, 0)  # a late answer: nothing
    assert len(lua.outbox()) == 1


def test_an_expired_lease_with_no_retry_left_leaves_a_record(lua: Lua) -> None:
    lua.enqueue(T, "a", value=0)
    lua.take(T, count=1, timeout_ms=1, grace_ms=0)
    lua.r.set(lua.p.lock, "me", px=10_000)
    lua.set_lease(T, "a", 0)  # expired
    swept = lua.sweep([T], "me", retries=0, on_dead="alerts")
    assert swept.per_topic[0].dead == 1
    assert swept.outbox == 1
    assert swept.next_in_ms == 0  # the sweeper has records to make jobs of now
    (record,) = lua.outbox()
    assert (record.outcome, record.started_at_ms, record.attempts) == ("dead", None, 1)
    assert record.detail.startswith("lease expired")


def test_a_take_that_gives_up_on_a_job_leaves_a_record(lua: Lua) -> None:
    lua.enqueue(T, "a", value=0, timeout="600000")
    call = calls.take(lua.p, T, count=1, timeout_ms=30_000, grace_ms=0, run_ms=60_000, on_dead="alerts")
    taken = call.run(lua.r)
    assert taken.dead == ["a"]
    (record,) = lua.outbox()
    assert (record.outcome, record.target, record.attempts) == ("dead", "alerts", 0)
    assert "longer than a consume run can last" in record.detail


def test_callbacks_makes_each_record_once_however_often_it_is_sent(lua: Lua) -> None:
    source = lua.p  # one partition: the source is also where the jobs go
    jobs = [CallbackJob("audit", seq, f"done-p0-{seq}", "acme" if seq == 2 else None, '{"n":1}') for seq in (1, 2, 3)]
    assert calls.callbacks(lua.p, source, jobs[:2]).run(lua.r) == 2
    assert calls.callbacks(lua.p, source, jobs).run(lua.r) == 1  # 1 and 2 made before: skipped
    assert lua.r.hget(lua.p.inbox, source.tag) == "3"
    assert calls.callbacks(lua.p, source, jobs).run(lua.r) == 0
    assert lua.stats("audit").ready == 3
    assert lua.meta("audit", "done-p0-2").key == "acme"  # type: ignore[union-attr]
    # A record numbered below the last made, with an id never seen: still skipped (it was made, under
    # another id, before).
    late = CallbackJob("audit", 2, "other", None, "{}")
    assert calls.callbacks(lua.p, source, [late]).run(lua.r) == 0
    assert lua.meta("audit", "other") is None


def test_the_outbox_is_trimmed_by_number_not_by_count(lua: Lua) -> None:
    rows = [json.dumps([str(seq), "audit", T, f"j{seq}", "", "done", "1", "", "1", "{}", ""]) for seq in (4, 5, 9)]
    lua.r.rpush(lua.p.outbox, *rows)
    assert calls.outbox_trim(lua.p, 5).run(lua.r) == 2
    assert calls.outbox_trim(lua.p, 5).run(lua.r) == 0  # a second sweeper trimming the same: nothing more
    assert [r.seq for r in lua.outbox()] == [9]
    assert calls.outbox_trim(lua.p, 100).run(lua.r) == 1
    assert lua.r.exists(lua.p.outbox) == 0


def test_a_record_reads_back_as_the_contract_names_it() -> None:
    raw = json.dumps(["7", "alerts", T, "a", "", "dead", "3", "", "1795", '{"n":[1,2]}', "RuntimeError: x"])
    record = Record.decode(raw)
    assert record.job_body() == {
        "topic": T,
        "id": "a",
        "key": None,
        "outcome": "dead",
        "attempts": 3,
        "body": {"n": [1, 2]},
        "error": "RuntimeError: x",
        "started_at_ms": None,
        "ended_at_ms": 1795,
    }
