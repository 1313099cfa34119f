"""delayq.Queue against the real Redis: what a good call does."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
import redis

from delayq import JobNotFound, Queue, Scheduled
from delayq.core.job import Meta, Refused
from delayq.core.models import ID_PATTERN
from delayq.store import calls
from delayq.store.calls import Failure

from support.answers import created, refusal
from support.scripts import BACKOFF, Lua, Rules, dump, kill_job, lease_job, lua_for, server_ms, sleep_until_server_ms


def wait_until_due(seconds: float = 0.08) -> None:
    time.sleep(seconds)


# ------------------------------------------------------------------------------------- create


def test_enqueue_creates_a_delayed_job(queue: Queue, redis_client: redis.Redis) -> None:
    before = server_ms(redis_client)
    scheduled = queue.enqueue("orders", {"order": 1042}, id="close-1042", delay=60)
    after = server_ms(redis_client)
    assert isinstance(scheduled, Scheduled)
    assert (scheduled.topic, scheduled.id, scheduled.created, scheduled.status) == ("orders", "close-1042", True, 201)
    assert before + 60_000 <= scheduled.run_at_ms <= after + 60_000
    info = queue.get("orders", "close-1042")
    assert info.state == "delayed"
    assert info.body == {"order": 1042}
    assert info.run_at_ms == scheduled.run_at_ms
    assert before <= info.enqueued_at_ms <= after
    assert (info.attempts, info.retries, info.last_error) == (0, 2, None)
    assert info.to_dict()["run_at"].endswith("Z")


def test_enqueue_generates_an_id(queue: Queue) -> None:
    first = queue.enqueue("orders", "x")
    second = queue.enqueue("orders", "x")
    assert first.id != second.id
    assert re.match(ID_PATTERN, first.id)
    assert len(first.id) == 24
    assert queue.get("orders", first.id).body == "x"


@pytest.mark.parametrize("body", [None, 0, 1.5, "text", [1, "two", None], {"nested": {"a": [True, False]}}, "é✓"])
def test_any_json_body_round_trips(queue: Queue, body: object) -> None:
    job = queue.enqueue("orders", body)
    assert queue.get("orders", job.id).body == body


def test_enqueue_without_delay_is_ready_now(queue: Queue, redis_client: redis.Redis) -> None:
    before = server_ms(redis_client)
    job = queue.enqueue("orders", 1)
    after = server_ms(redis_client)
    assert before <= job.run_at_ms <= after
    assert queue.get("orders", job.id).state == "ready"


@pytest.mark.parametrize("run_at", [1_000_000, "2001-09-09T01:46:40Z", "2001-09-09T03:46:40+02:00"])
def test_enqueue_at_a_past_time_is_due_now(queue: Queue, redis_client: redis.Redis, run_at: object) -> None:
    before = server_ms(redis_client)
    job = queue.enqueue("orders", 1, run_at=run_at)
    after = server_ms(redis_client)
    assert before <= job.run_at_ms <= after
    assert queue.get("orders", job.id).state == "ready"


def test_enqueue_at_a_future_time(queue: Queue, redis_client: redis.Redis) -> None:
    now_s = server_ms(redis_client) // 1000
    assert queue.enqueue("orders", 1, id="epoch", run_at=now_s + 3600.25).run_at_ms == (now_s + 3600) * 1000 + 250
    when = datetime.fromtimestamp(now_s + 86_400 * 100, tz=timezone(timedelta(hours=1))).replace(microsecond=500_000)
    expected = (now_s + 86_400 * 100) * 1000 + 500
    assert queue.enqueue("orders", 1, id="iso", run_at=when.isoformat()).run_at_ms == expected
    assert queue.get("orders", "iso").state == "delayed"


def test_enqueue_keeps_per_job_overrides(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue("orders", 1, id="a", retries=5, timeout=3, backoff=[1, 2.5])
    lua = lua_for(redis_client, queue, "orders", "a")
    assert lua.meta("orders", "a") == Meta(
        "q", 0, queue.get("orders", "a").run_at_ms, queue.get("orders", "a").enqueued_at_ms, "", 5, 3000, (1000, 2500)
    )
    assert queue.get("orders", "a").retries == 5
    assert lua.take("orders").timeouts_ms == [3000]


def test_get_reports_the_topics_retries(queue: Queue) -> None:
    queue.enqueue("payments", 1, id="p")
    queue.enqueue("anything", 1, id="w")
    assert queue.get("payments", "p").retries == 8
    assert queue.get("anything", "w").retries == 2  # from "*"


def test_put_creates_then_replaces(queue: Queue, redis_client: redis.Redis) -> None:
    created = queue.put("orders", "a", {"v": 1}, delay=60)
    assert (created.created, created.status) == (True, 201)
    replaced = queue.put("orders", "a", {"v": 2}, delay=120, retries=7)
    assert (replaced.created, replaced.status) == (False, 200)
    assert replaced.run_at_ms >= created.run_at_ms + 59_000
    info = queue.get("orders", "a")
    assert (info.body, info.run_at_ms, info.retries, info.state) == ({"v": 2}, replaced.run_at_ms, 7, "delayed")
    lua = lua_for(redis_client, queue, "orders", "a")
    assert lua.r.zcard(lua.k("orders").delayed) == 1


def test_put_revives_a_dead_job_afresh(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue("orders", {"v": 1}, id="a")
    kill_job(redis_client, queue, "orders", "a", "it broke")
    assert queue.get("orders", "a").state == "dead"
    assert queue.put("orders", "a", {"v": 2}).status == 200
    info = queue.get("orders", "a")
    assert (info.state, info.attempts, info.last_error, info.body) == ("ready", 0, None, {"v": 2})
    assert queue.stats("orders").dead == 0


def test_put_replaces_a_ready_job(queue: Queue) -> None:
    queue.put("orders", "a", 1)
    assert queue.get("orders", "a").state == "ready"
    queue.put("orders", "a", 2, delay=30)
    assert queue.get("orders", "a").state == "delayed"
    assert queue.stats("orders").ready == 0


# ------------------------------------------------------------------------------------- enqueue_many


def test_enqueue_many_answers_in_order_and_writes_the_valid_ones(queue: Queue, namespace: str) -> None:
    queue.enqueue("orders", "original", id="exists")
    big = "x" * (256 * 1024)
    results = queue.enqueue_many(
        [
            {"topic": "orders", "id": "m1", "body": 1, "delay": 60},
            {"topic": "orders", "id": "exists", "body": "new"},
            {"topic": "orders", "id": "m2", "delay": -1},
            {"topic": "orders", "id": "m1", "body": 2},
            {"topic": "bad topic!", "id": "m3"},
            "not an object",
            {"topic": "orders", "id": "m4", "body": big},
            {"topic": "orders", "id": "m5", "delay_s": 5},
            {"topic": "reminders", "id": "m6", "run_at": "2020-01-01T00:00:00Z", "body": {"k": 6}},
            {"topic": "orders", "body": "generated"},
        ]
    )
    assert [r.status for r in results] == [201, 409, 422, 409, 422, 422, 422, 422, 201, 201]
    assert [r.id for r in results[:9]] == ["m1", "exists", "m2", "m1", "m3", None, "m4", "m5", "m6"]
    assert [refusal(r)[1] for r in results if r.status != 201] == [
        "id", "delay", "id", "topic", "job", "body", "delay_s",
    ]  # fmt: skip
    assert [type(r.error).__name__ for r in results if isinstance(r, Refused)] == [
        "JobExists",
        "InvalidField",
        "JobExists",
        "InvalidField",
        "InvalidField",
        "TooLarge",
        "InvalidField",
    ]  # fmt: skip: the errors ``enqueue`` raises; a body too large is a 422 item all the same
    for result in results:
        if result.status == 201:
            assert created(result).topic in ("orders", "reminders")
            assert isinstance(created(result).run_at_ms, int)
    assert queue.get("orders", "m1").body == 1
    assert queue.get("orders", "exists").body == "original"
    assert queue.get("reminders", "m6").state == "ready"
    assert queue.get("orders", results[9].id).body == "generated"
    for job_id in ("m2", "m4", "m5"):
        with pytest.raises(JobNotFound):
            queue.get("orders", job_id)
    assert queue.stats("orders").delayed + queue.stats("orders").ready == 3


def test_enqueue_many_keeps_bodies_and_ids_holding_the_scripts_separators(queue: Queue) -> None:
    """Each job goes to the script as one line, 'group|at|overrides|id|body': a body holding '|' or
    line breaks, an id with every punctuation an id may have, and overrides beside them, all intact."""
    bodies = ["a|b\nc|", {"k": "||", "|": ["\r\n", "|"]}, "|", ""]
    jobs = [{"topic": "orders", "id": f"A.b_c:d@e-{i}", "body": body, "delay": 60} for i, body in enumerate(bodies)]
    jobs[1] |= {"retries": 3, "timeout": 5, "backoff": [1, 2]}
    jobs.append({"topic": "reminders", "id": "z", "body": "|x|", "run_at": 1795372200})
    results = queue.enqueue_many(jobs)
    assert [r.status for r in results] == [201] * 5
    for i, body in enumerate(bodies):
        assert queue.get("orders", f"A.b_c:d@e-{i}").body == body
    assert queue.get("orders", "A.b_c:d@e-1").retries == 3
    assert queue.get("orders", "A.b_c:d@e-0").retries == 2  # the topic's
    assert queue.get("reminders", "z").body == "|x|"


def test_enqueue_many_of_nothing(queue: Queue, redis_client: redis.Redis, namespace: str) -> None:
    assert queue.enqueue_many([]) == []
    assert queue.enqueue_many(iter([])) == []
    assert dump(redis_client, namespace) == {}


def test_enqueue_many_of_2500_jobs_over_4_partitions(
    make_queue: Callable[..., Queue], redis_client: redis.Redis, namespace: str
) -> None:
    queue = make_queue(partitions=4)
    jobs = ({"topic": "bulk", "id": f"job-{i}", "body": {"i": i}, "delay": 60} for i in range(2500))
    results = queue.enqueue_many(jobs)
    assert len(results) == 2500
    assert all(r.status == 201 for r in results)
    assert [r.id for r in results] == [f"job-{i}" for i in range(2500)]
    assert queue.stats("bulk").delayed == 2500
    per_partition = [redis_client.zcard(p.topic_key("bulk", "delayed")) for p in queue.keys.partitions]
    assert sum(per_partition) == 2500
    assert all(count > 400 for count in per_partition)
    assert [redis_client.hlen(p.metas) for p in queue.keys.partitions] == per_partition
    assert queue.get("bulk", "job-1234").body == {"i": 1234}
    again = queue.enqueue_many([{"topic": "bulk", "id": f"job-{i}"} for i in range(0, 2500, 100)])
    assert {r.status for r in again} == {409}


def test_enqueue_many_over_several_chunks_answers_each_job_in_place(queue: Queue) -> None:
    """Each chunk of 250 is written while the next is validated: the answers stay in request order,
    with invalid jobs and duplicates (of a job in an earlier chunk) in place."""
    jobs: list[dict[str, object]] = [{"topic": "orders", "id": f"j{i}", "delay": 60} for i in range(3500)]
    jobs[1500] = {"topic": "orders", "id": "bad", "delay": -1}
    jobs[2999] = {"topic": "no spaces allowed", "id": "x"}
    jobs[3100] = {"topic": "orders", "id": "j7", "delay": 60}
    results = queue.enqueue_many(iter(jobs))
    assert len(results) == 3500
    assert refusal(results[1500]) == (422, "delay")
    assert refusal(results[2999]) == (422, "topic")
    assert (refusal(results[3100]), results[3100].id) == ((409, "id"), "j7")
    refused = {1500, 2999, 3100}
    assert [created(r).id for i, r in enumerate(results) if i not in refused] == [
        f"j{i}" for i in range(3500) if i not in refused
    ]
    assert queue.stats("orders").delayed == 3497


# ------------------------------------------------------------------------------------- one job


def test_get_names_each_state(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue("orders", 1, id="d", delay=60)
    queue.enqueue("reminders", 1, id="q")
    queue.enqueue("payments", 1, id="r")
    lease = lease_job(redis_client, queue, "payments", "r")
    queue.enqueue("orders", 1, id="x")
    kill_job(redis_client, queue, "orders", "x", "failed hard")
    assert queue.get("orders", "d").state == "delayed"
    assert queue.get("reminders", "q").state == "ready"
    reserved = queue.get("payments", "r")
    assert (reserved.state, reserved.attempts) == ("reserved", 1)
    dead = queue.get("orders", "x")
    assert (dead.state, dead.attempts, dead.last_error) == ("dead", 1, "failed hard")
    assert lease.token


def test_reschedule(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue("orders", 1, id="a", delay=60)
    before = server_ms(redis_client)
    later = queue.reschedule("orders", "a", delay=600)
    after = server_ms(redis_client)
    assert later.status == 200
    assert before + 600_000 <= later.run_at_ms <= after + 600_000
    assert queue.get("orders", "a").run_at_ms == later.run_at_ms
    now = queue.reschedule("orders", "a", run_at="2000-01-01T00:00:00+00:00")
    assert before <= now.run_at_ms <= server_ms(redis_client)
    assert queue.get("orders", "a").state == "ready"
    at = queue.reschedule("orders", "a", run_at=(server_ms(redis_client) // 1000) + 100)
    assert queue.get("orders", "a").state == "delayed"
    assert queue.stats("orders").next_run_at_ms == at.run_at_ms


def test_cancel(queue: Queue, redis_client: redis.Redis, namespace: str) -> None:
    queue.enqueue("orders", 1, id="a", delay=60)
    queue.enqueue("orders", 1, id="b")
    queue.cancel("orders", "a")
    with pytest.raises(JobNotFound):
        queue.get("orders", "a")
    lease_job(redis_client, queue, "orders", "b")
    queue.cancel("orders", "b")
    stats = queue.stats("orders")
    assert (stats.delayed, stats.ready, stats.reserved, stats.dead) == (0, 0, 0, 0)
    keys = dump(redis_client, namespace)
    assert not any(k.endswith((":meta", ":bodies", ":delayed", ":ready", ":leased", "_metas", "_bodies")) for k in keys)


def test_a_job_becomes_due_after_its_delay(queue: Queue, redis_client: redis.Redis) -> None:
    run_at_ms = queue.enqueue("orders", 1, id="a", delay=0.5).run_at_ms  # room for a slow machine's next call
    assert lua_for(redis_client, queue, "orders", "a").take("orders").ids == []
    sleep_until_server_ms(redis_client, run_at_ms)
    assert lua_for(redis_client, queue, "orders", "a").take("orders").ids == ["a"]


# ------------------------------------------------------------------------------------- topics


def test_stats(queue: Queue, redis_client: redis.Redis) -> None:
    empty = queue.stats("orders")
    assert (empty.delayed, empty.ready, empty.reserved, empty.dead, empty.next_run_at_ms) == (0, 0, 0, 0, None)
    queue.enqueue("orders", 1, id="r")
    lease_job(redis_client, queue, "orders", "r")
    queue.enqueue("orders", 1, id="x")
    kill_job(redis_client, queue, "orders", "x")
    first = queue.enqueue("orders", 1, id="d1", delay=60)
    queue.enqueue("orders", 1, id="d2", delay=90)
    queue.enqueue("orders", 1, id="q1")
    queue.enqueue("orders", 1, id="q2")
    stats = queue.stats("orders")
    assert (stats.delayed, stats.ready, stats.reserved, stats.dead) == (2, 2, 1, 1)
    assert stats.next_run_at_ms == first.run_at_ms
    assert stats.to_dict()["next_run_at"].endswith("Z")


def test_dead_replay_and_purge(queue: Queue, redis_client: redis.Redis) -> None:
    for job_id in ("a", "b", "c"):
        queue.enqueue("orders", {"id": job_id}, id=job_id)
        kill_job(redis_client, queue, "orders", job_id, f"error {job_id}")
        time.sleep(0.002)  # distinct deaths
    dead = queue.dead("orders")
    assert [job.id for job in dead] == ["c", "b", "a"]
    assert dead[0].last_error == "error c"
    assert dead[0].body == {"id": "c"}
    assert dead[0].attempts == 1
    assert dead[0].died_at_ms >= dead[1].died_at_ms >= dead[2].died_at_ms
    assert [job.id for job in queue.dead("orders", limit=2)] == ["c", "b"]

    assert queue.replay("orders", ["a", "missing", "a"]) == 1
    info = queue.get("orders", "a")
    assert (info.state, info.attempts, info.last_error) == ("ready", 0, "error a")
    assert queue.replay("orders", []) == 0
    assert queue.replay("orders") == 2
    assert queue.stats("orders").dead == 0
    assert queue.stats("orders").ready == 3

    for job_id in ("a", "b", "c"):
        lua = lua_for(redis_client, queue, "orders", job_id)
        job, token, _ = lua.take("orders", count=1).leases[0]
        lua.fail("orders", job.id, token, "again", retries=0)
    assert queue.purge("orders") == 3
    assert queue.purge("orders") == 0
    assert queue.dead("orders") == []
    for job_id in ("a", "b", "c"):
        with pytest.raises(JobNotFound):
            queue.get("orders", job_id)


def test_replay_and_purge_drain_more_than_one_chunk(queue: Queue, redis_client: redis.Redis) -> None:
    lua = Lua(redis_client, queue.settings.namespace)
    queue.enqueue_many({"topic": "orders", "id": f"j{i}"} for i in range(1500))
    taken = lua.take("orders", count=1500)
    failures = [Failure(job.id, token, "e") for job, token, _ in taken.leases]
    assert calls.fail(lua.p, "orders", Rules(0, BACKOFF), failures).run(lua.r)[:2] == (0, 1500)
    assert queue.replay("orders") == 1500
    taken = lua.take("orders", count=1500)
    failures = [Failure(job.id, token, "e") for job, token, _ in taken.leases]
    assert calls.fail(lua.p, "orders", Rules(0, BACKOFF), failures).run(lua.r)[:2] == (0, 1500)
    assert queue.purge("orders") == 1500
    assert queue.stats("orders").dead == 0


def test_known_topics_and_ping(queue: Queue) -> None:
    assert queue.known_topics() == set()
    queue.enqueue("orders", 1)
    queue.enqueue_many([{"topic": "reminders"}, {"topic": "made-up.topic"}])
    assert queue.known_topics() == {"orders", "reminders", "made-up.topic"}
    assert queue.ping() is True


# ------------------------------------------------------------------------------------- partitions


def test_partitions_spread_a_topic_and_every_read_sums_them(
    make_queue: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    queue = make_queue(partitions=4)
    ids = [f"job-{i}" for i in range(24)]
    for job_id in ids:
        queue.enqueue("orders", {"id": job_id}, id=job_id)
    holders = {queue.keys.for_job("orders", job_id).index for job_id in ids}
    assert len(holders) == 4
    for job_id in ids:
        partition = queue.keys.for_job("orders", job_id)
        assert redis_client.hexists(partition.metas, f"orders/{job_id}")
    assert queue.stats("orders").ready == 24

    for p in queue.keys.partitions:  # every job fails once, with no retries left
        lua = Lua(redis_client, queue.settings.namespace, 4, p.index)
        for job, token, _ in lua.take("orders", count=100).leases:
            lua.fail("orders", job.id, token, f"dead {job.id}", retries=0)
    stats = queue.stats("orders")
    assert (stats.ready, stats.dead) == (0, 24)
    dead = queue.dead("orders", limit=1000)
    assert sorted(job.id for job in dead) == sorted(ids)
    assert [job.died_at_ms for job in dead] == sorted((job.died_at_ms for job in dead), reverse=True)
    assert len(queue.dead("orders", limit=5)) == 5

    chosen = [job_id for job_id in ids if queue.keys.for_job("orders", job_id).index in (0, 3)][:6]
    assert queue.replay("orders", chosen) == len(chosen)
    assert queue.stats("orders").dead == 24 - len(chosen)
    assert queue.replay("orders") == 24 - len(chosen)
    assert queue.stats("orders").ready == 24

    for p in queue.keys.partitions:
        lua = Lua(redis_client, queue.settings.namespace, 4, p.index)
        for job, token, _ in lua.take("orders", count=100).leases:
            lua.fail("orders", job.id, token, "again", retries=0)
    assert queue.purge("orders") == 24
    assert queue.stats("orders").dead == 0
    assert queue.known_topics() == {"orders"}


def test_partitions_use_server_time_consistently(make_queue: Callable[..., Queue], redis_client: redis.Redis) -> None:
    queue = make_queue(partitions=3)
    results = queue.enqueue_many({"topic": "orders", "id": f"j{i}", "delay": 30} for i in range(30))
    run_ats = [created(r).run_at_ms for r in results]
    now = server_ms(redis_client)
    assert all(now + 29_000 <= at <= now + 30_000 for at in run_ats)
    assert queue.stats("orders").next_run_at_ms == min(run_ats)
