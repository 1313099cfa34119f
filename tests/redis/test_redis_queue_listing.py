"""delayq.Queue's views and switches against the real Redis: topics, jobs by state with cursors,
forecast, pause and resume; and the paging property under concurrent change."""

from __future__ import annotations

import random
import secrets
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from delayq import InvalidField, Queue, TopicNotFound
from delayq.store import calls
from delayq.store.calls import Failure
from delayq.store.keys import Partition
from delayq.store.listing import MAX_BUCKETS, STATES, encode_cursor

from support.scripts import Rules, job_meta, leases, server_ms

T = "orders"
MakeQueue = Callable[..., Queue]
RULES = Rules(2, "60000")
KEEP = Rules(keep_done_ms=3_600_000)  # receipts kept an hour


def lease(queue: Queue, topic: str = T, *, timeout_ms: int = 30_000) -> list[str]:
    """Takes every ready job of ``topic`` in every partition; the ids leased."""
    ids: list[str] = []
    for p in queue.keys.partitions:
        ids += calls.take(p, topic, count=1000, timeout_ms=timeout_ms, grace_ms=0).run(queue.redis).ids
    return ids


def kill(queue: Queue, job_ids: list[str], topic: str = T) -> None:
    """Ready jobs of ``topic`` among ``job_ids``, leased and failed with no retry left: dead. The other
    ready jobs the takes lease go back where they were (untake)."""
    for p in queue.keys.partitions:
        take_id = "t" + secrets.token_hex(8)
        taken = calls.take(p, topic, count=1000, timeout_ms=30_000, grace_ms=0, take_id=take_id).run(queue.redis)
        failures = [Failure(job_id, take_id, "boom") for job_id in taken.ids if job_id in job_ids]
        calls.fail(p, topic, Rules(0, "1000"), failures).run(queue.redis)
        calls.untake(p, topic, [take_id]).run(queue.redis)


def finish(queue: Queue, job_ids: list[str], topic: str = T) -> None:
    """Ready jobs of ``topic`` among ``job_ids``, leased and acknowledged: done, kept as receipts. The
    other ready jobs the takes lease go back where they were (untake)."""
    for p in queue.keys.partitions:
        take_id = "t" + secrets.token_hex(8)
        taken = calls.take(p, topic, count=1000, timeout_ms=30_000, grace_ms=0, take_id=take_id).run(queue.redis)
        calls.ack(p, topic, KEEP, [(job_id, take_id, 0) for job_id in taken.ids if job_id in job_ids]).run(queue.redis)
        calls.untake(p, topic, [take_id]).run(queue.redis)


def walk(queue: Queue, state: str, limit: int, topic: str = T) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = queue.jobs(topic, state, limit=limit, cursor=cursor)
        seen += [job.id for job in page.jobs]
        if page.next is None:
            return seen
        assert len(page.jobs) == limit  # every page is full while more are left
        cursor = page.next


# ------------------------------------------------------------------------------------- jobs


@pytest.mark.parametrize("partitions", [1, 4])
def test_jobs_in_each_state_in_the_contracts_order(make_queue: MakeQueue, partitions: int) -> None:
    queue = make_queue(partitions=partitions)
    for i in range(12):
        queue.enqueue(T, {"i": i}, id=f"d{i:02d}", delay=600 - i * 10)  # the last created falls due first
    for i in range(6):
        queue.enqueue(T, {"i": i}, id=f"x{i}", delay=0, retries=0)
    kill(queue, [f"x{i}" for i in range(6)])
    for i in range(5):
        queue.enqueue(T, {"i": i}, id=f"l{i}", delay=0, timeout=100 - i)  # the last made is due back first
    lease(queue)
    for i in range(7):
        queue.enqueue(T, {"i": i}, id=f"r{i}", delay=0)

    assert walk(queue, "delayed", 5) == [f"d{i:02d}" for i in reversed(range(12))]
    assert walk(queue, "reserved", 2) == [f"l{i}" for i in reversed(range(5))]
    dead = walk(queue, "dead", 4)
    died = {job.id: job.died_at_ms for job in queue.dead(T)}
    assert dead == sorted(died, key=lambda job_id: (died[job_id], job_id), reverse=True)  # newest first
    ready = walk(queue, "ready", 3)
    assert sorted(ready) == [f"r{i}" for i in range(7)]
    if partitions == 1:
        assert ready == [f"r{i}" for i in range(7)]
    for state in STATES:
        for job in queue.jobs(T, state, limit=1000).jobs:
            assert job == queue.get(T, job.id)  # each job as GET /jobs/{topic}/{id} shows it
            assert job.state == state


def test_a_page_of_jobs_as_the_api_answers_it(queue: Queue) -> None:
    queue.enqueue(T, {"a": 1}, id="a", delay=60)
    queue.enqueue(T, {"b": 2}, id="b", delay=120)
    page = queue.jobs(T, "delayed", limit=1)
    data = page.to_dict()
    assert data["jobs"] == [queue.get(T, "a").to_dict()]
    assert data["next"] == page.next
    assert queue.jobs(T, "delayed", cursor=page.next).to_dict() == {"jobs": [queue.get(T, "b").to_dict()], "next": None}
    assert queue.jobs(T, "dead").to_dict() == {"jobs": [], "next": None}


def test_ready_pages_take_from_every_partition_soonest_first(make_queue: MakeQueue, redis_client: redis.Redis) -> None:
    queue = make_queue(partitions=3)
    for i in range(30):
        queue.enqueue(T, {}, id=f"r{i:02d}", delay=0)
    listed = queue.jobs(T, "ready", limit=1000).jobs
    assert sorted(job.id for job in listed) == [f"r{i:02d}" for i in range(30)]
    run_ats = [job.run_at_ms for job in listed]
    assert run_ats == sorted(run_ats)  # each partition's list is in run-at order here: the merge keeps it
    assert walk(queue, "ready", 4) == [job.id for job in listed]


def test_listing_refuses_what_it_cannot_read(make_queue: MakeQueue) -> None:
    queue = make_queue(partitions=2)
    queue.enqueue(T, {}, id="a", delay=60)
    queue.enqueue(T, {}, id="b", delay=60)
    delayed_cursor = queue.jobs(T, "delayed", limit=1).next
    queue.enqueue(T, {}, id="r", delay=0)
    queue.enqueue(T, {}, id="s", delay=0)
    ready_cursor = queue.jobs(T, "ready", limit=1).next
    assert delayed_cursor is not None
    assert ready_cursor is not None
    cases: list[tuple[dict[str, object], str]] = [
        ({"state": "waiting"}, "state"),
        ({"state": None}, "state"),
        ({"state": "delayed", "limit": 0}, "limit"),
        ({"state": "delayed", "limit": 1001}, "limit"),
        ({"state": "delayed", "limit": True}, "limit"),
        ({"state": "delayed", "limit": "5"}, "limit"),
        ({"state": "delayed", "cursor": "not a cursor!"}, "cursor"),
        ({"state": "delayed", "cursor": ""}, "cursor"),
        ({"state": "delayed", "cursor": "bm90IGpzb24"}, "cursor"),  # base64 of text that is not JSON
        ({"state": "dead", "cursor": delayed_cursor}, "cursor"),  # another state's
        ({"state": "delayed", "cursor": ready_cursor}, "cursor"),
        ({"state": "ready", "cursor": delayed_cursor}, "cursor"),
        ({"state": "ready", "cursor": encode_cursor("ready", {"2": 5})}, "cursor"),  # no partition 2 of 2
        ({"state": "ready", "cursor": encode_cursor("ready", {"0": "5"})}, "cursor"),
        ({"state": "delayed", "cursor": encode_cursor("delayed", 5, "bad id!")}, "cursor"),
        ({"state": "delayed", "cursor": encode_cursor("delayed", 5.5, "a")}, "cursor"),
        ({"state": "delayed", "cursor": "x" * 20_000}, "cursor"),
    ]
    for arguments, field in cases:
        with pytest.raises(InvalidField) as caught:
            queue.jobs(T, **arguments)  # type: ignore[arg-type]
        assert caught.value.field == field, arguments
    with pytest.raises(InvalidField) as caught:
        queue.jobs("-bad", "delayed")
    assert caught.value.field == "topic"


def test_jobs_of_a_topic_nobody_knows_is_not_found(make_queue: MakeQueue) -> None:
    queue = make_queue(topics={"orders": {"target": "python:support.recorder:deliver"}})
    with pytest.raises(TopicNotFound):
        queue.jobs("nobody", "delayed")
    with pytest.raises(TopicNotFound):
        queue.forecast("nobody")
    with pytest.raises(TopicNotFound):
        queue.pause("nobody")
    assert queue.jobs(T, "delayed").jobs == []  # configured: known, if empty


# ------------------------------------------------------------------------------------- topics


def test_topics_lists_configured_topics_and_topics_holding_jobs(make_queue: MakeQueue) -> None:
    queue = make_queue(partitions=3)  # configured: orders, reminders, payments, and "*"
    queue.enqueue("zeta", {}, id="z", delay=60)  # a "*" topic holding a job
    queue.enqueue("alpha", {}, id="a", delay=30)
    queue.enqueue("gone", {}, id="g", delay=60)
    queue.cancel("gone", "g")  # a "*" topic that held jobs once, and holds none now: not listed
    page = queue.topics()
    assert [stats.topic for stats in page.topics] == ["alpha", "orders", "payments", "reminders", "zeta"]
    assert page.next is None
    by_name = {stats.topic: stats for stats in page.topics}
    assert (by_name["zeta"].delayed, by_name["alpha"].delayed, by_name["orders"].delayed) == (1, 1, 0)
    assert by_name["alpha"] == queue.stats("alpha")
    assert page.to_dict()["topics"][0] == queue.stats("alpha").to_dict()


def test_topics_come_a_page_at_a_time(make_queue: MakeQueue) -> None:
    queue = make_queue(
        topics={"*": {"target": "python:support.recorder:deliver"}, "b-configured": {"target": "python:x:y"}}
    )
    names = sorted([f"t{i:02d}" for i in range(25)] + ["b-configured"])
    queue.enqueue_many([{"topic": name, "id": "j", "delay": 60} for name in names if name != "b-configured"])
    seen: list[str] = []
    cursor = None
    while True:
        page = queue.topics(limit=4, cursor=cursor)
        seen += [stats.topic for stats in page.topics]
        if page.next is None:
            break
        assert len(page.topics) == 4
        cursor = page.next
    assert seen == names
    with pytest.raises(InvalidField) as caught:
        queue.topics(cursor=encode_cursor("delayed", 1, "a"))
    assert caught.value.field == "cursor"
    with pytest.raises(InvalidField) as caught:
        queue.topics(limit=0)
    assert caught.value.field == "limit"


# ------------------------------------------------------------------------------------- forecast


def test_forecast_sums_the_partitions_and_lists_every_bucket(make_queue: MakeQueue, redis_client: redis.Redis) -> None:
    queue = make_queue(partitions=3)
    before = server_ms(redis_client)
    for i in range(9):
        queue.enqueue(T, {}, id=f"soon{i}", delay=30)  # the first minute
    for i in range(4):
        queue.enqueue(T, {}, id=f"later{i}", delay=150)  # the third
    queue.enqueue(T, {}, id="outside", delay=3_000)
    forecast = queue.forecast(T, minutes=5, bucket=60)
    assert [bucket.count for bucket in forecast.buckets] == [9, 0, 4, 0, 0]
    first = forecast.buckets[0]
    assert before <= first.from_ms < before + 10_000
    assert [b.from_ms - first.from_ms for b in forecast.buckets] == [0, 60_000, 120_000, 180_000, 240_000]
    assert forecast.buckets[-1].to_ms == first.from_ms + 300_000
    assert forecast.to_dict()["buckets"][2] == {"from_ms": first.from_ms + 120_000, "to_ms": first.from_ms + 180_000,
                                                "count": 4}  # fmt: skip
    assert len(queue.forecast(T).buckets) == 60  # an hour by minute, by default
    assert [b.count for b in queue.forecast(T, minutes=1, bucket=45).buckets] == [9, 0]  # cut at the minute


@pytest.mark.parametrize(
    ("minutes", "bucket", "field"),
    [(0, 60, "minutes"), (10_081, 60, "minutes"), (1.5, 60, "minutes"), (True, 60, "minutes"), (60, 0, "bucket"),
     (60, 86_401, "bucket"), (60, "60", "bucket"), (10_080, 60, "bucket"), (1441, 1, "bucket")],
)  # fmt: skip
def test_forecast_refuses_bad_windows(queue: Queue, minutes: object, bucket: object, field: str) -> None:
    with pytest.raises(InvalidField) as caught:
        queue.forecast(T, minutes=minutes, bucket=bucket)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_forecast_of_the_most_buckets(queue: Queue) -> None:
    assert len(queue.forecast(T, minutes=MAX_BUCKETS, bucket=60).buckets) == MAX_BUCKETS
    assert len(queue.forecast(T, minutes=10_080, bucket=86_400).buckets) == 7


# ------------------------------------------------------------------------------------- pause


def test_pause_and_resume_are_seen_in_the_stats_and_idempotent(make_queue: MakeQueue) -> None:
    queue = make_queue(partitions=3)
    assert not queue.stats(T).paused
    queue.pause(T)
    queue.pause(T)
    assert queue.stats(T).paused
    assert not queue.stats("reminders").paused
    for p in queue.keys.partitions:
        assert calls.take(p, T, count=1, timeout_ms=1000, grace_ms=0).run(queue.redis).paused
    queue.resume(T)
    queue.resume(T)
    assert not queue.stats(T).paused


def test_a_paused_topic_reports_how_long_its_oldest_due_job_waits(queue: Queue, redis_client: redis.Redis) -> None:
    queue.pause(T)
    queue.enqueue(T, {}, id="a", delay=0)
    assert 0 <= queue.stats(T).oldest_ready_ms < 5_000
    stats = queue.stats(T)
    assert (stats.ready, stats.paused) == (1, True)


# ------------------------------------------------------------------------------------- the paging property


class World:
    """One topic's jobs, changed between pages the way a queue in use changes: creates, cancels,
    reschedules, takes and takes undone, acks and failures, deaths and replays. Every job a change
    touches is in ``touched``: the property is about the others."""

    def __init__(self, queue: Queue, rng: random.Random, redis_client: redis.Redis) -> None:
        self.queue = queue
        self.rng = rng
        self.r = redis_client
        self.touched: set[str] = set()
        self.n = 0
        self.tie_at = server_ms(redis_client) + 600_000  # many jobs due at one instant: ties by id

    def new_ids(self, count: int) -> list[str]:
        self.n += count
        return [f"{self.rng.getrandbits(24):06x}-{self.n - i}" for i in range(count)]  # the seed's

    def ids_in(self, state: str) -> list[str]:
        return [job.id for job in self.queue.jobs(T, state, limit=1000).jobs] if state != "ready" else self._ready()

    def _ready(self) -> list[str]:
        return [
            job_id
            for p in self.queue.keys.partitions
            for job_id in self.r.lrange(p.topic_key(T, "ready"), 0, -1)
            if job_id
        ]

    def make(self, state: str, count: int) -> list[str]:
        ids = self.new_ids(count)
        if state == "delayed":
            for job_id in ids:
                run_at = self.tie_at if self.rng.random() < 0.5 else self.tie_at + self.rng.randint(-300_000, 300_000)
                self.queue.enqueue(T, {}, id=job_id, run_at=run_at / 1000)
        else:
            self.queue.enqueue_many([{"topic": T, "id": job_id, "delay": 0, "retries": 0} for job_id in ids])
            if state == "reserved":
                for p in self.queue.keys.partitions:
                    self._take(p, 1000, self.rng.choice([10_000, 20_000]))
            elif state == "dead":
                kill(self.queue, ids)
            elif state == "done":
                finish(self.queue, ids)
        return ids

    def _take(self, p: Partition, count: int, timeout_ms: int = 30_000, take_id: str | None = None) -> list[str]:
        call = calls.take(p, T, count=count, timeout_ms=timeout_ms, grace_ms=0, take_id=take_id)
        taken = call.run(self.queue.redis)
        self.touched.update(taken.ids)
        return taken.ids

    def change(self, state: str) -> None:
        """A few random changes to the topic."""
        for _ in range(self.rng.randint(1, 4)):
            getattr(self, f"_{self.rng.choice(CHANGES[state])}")(state)

    def _create(self, state: str) -> None:
        self.make(state, self.rng.randint(1, 5))

    def _cancel(self, state: str) -> None:
        ids = self.ids_in(state)
        for job_id in self.rng.sample(ids, min(len(ids), self.rng.randint(1, 3))):
            self.queue.cancel(T, job_id)
            self.touched.add(job_id)

    def _reschedule(self, state: str) -> None:
        ids = self.ids_in(state)
        for job_id in self.rng.sample(ids, min(len(ids), 2)):
            when = self.rng.choice([0, self.tie_at / 1000, self.tie_at / 1000 + self.rng.randint(-300, 300)])
            self.queue.reschedule(T, job_id, run_at=when)
            self.touched.add(job_id)

    def _take_some(self, state: str) -> None:
        p = self.rng.choice(self.queue.keys.partitions)
        self._take(p, self.rng.randint(1, 4))

    def _take_and_undo(self, state: str) -> None:
        p = self.rng.choice(self.queue.keys.partitions)
        take_id = f"t{self.rng.getrandbits(64):016x}"
        if self._take(p, self.rng.randint(1, 4), take_id=take_id):
            calls.untake(p, T, [take_id]).run(self.queue.redis)  # back at the head

    def _settle(self, state: str) -> None:
        p = self.rng.choice(self.queue.keys.partitions)
        leased = list(leases(self.r, p, T))
        for job_id in self.rng.sample(leased, min(len(leased), 2)):
            token = job_meta(self.r, p, T, job_id).split("|")[4]
            if self.rng.random() < 0.5:
                calls.ack(p, T, KEEP, [(job_id, token, 0)]).run(self.queue.redis)
            else:
                calls.fail(p, T, RULES, [Failure(job_id, token, "x")]).run(self.queue.redis)
            self.touched.add(job_id)

    def _replace(self, state: str) -> None:
        ids = self.ids_in(state)
        for job_id in self.rng.sample(ids, min(len(ids), 2)):
            self.queue.put(T, job_id, {}, delay=0)
            self.touched.add(job_id)

    def _replay(self, state: str) -> None:
        ids = self.ids_in("dead")
        chosen = self.rng.sample(ids, min(len(ids), 2))
        self.queue.replay(T, chosen)
        self.touched.update(chosen)


CHANGES = {
    "delayed": ["create", "cancel", "reschedule"],
    "ready": ["create", "cancel", "reschedule", "take_some", "take_and_undo"],
    "reserved": ["create", "cancel", "settle"],
    "dead": ["create", "cancel", "replay"],
    "done": ["create", "cancel", "replace"],
}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("state", STATES)
def test_walking_the_pages_lists_every_job_that_stays_exactly_once(
    make_queue: MakeQueue, redis_client: redis.Redis, state: str, partitions: int, seed: int
) -> None:
    rng = random.Random(f"{state}-{partitions}-{seed}")
    queue = make_queue(partitions=partitions)
    world = World(queue, rng, redis_client)
    # Jobs in other states around them, so that changes cross states (leased first: a take leases
    # every ready job of its partition).
    for other in ("reserved", "dead", "done", "delayed", "ready"):
        world.make(other, 60 if other == state else 5)
    before = set(world.ids_in(state))
    world.touched.clear()  # what set-up did is not a change
    seen: Counter[str] = Counter()
    cursor = None
    pages = 0
    while True:
        limit = rng.randint(1, 6)
        page = queue.jobs(T, state, limit=limit, cursor=cursor)
        pages += 1
        assert all(job.state == state for job in page.jobs)
        seen.update(job.id for job in page.jobs)
        if page.next is None:
            break
        assert len(page.jobs) == limit
        cursor = page.next
        world.change(state)
    stayed = before - world.touched
    assert pages > 5
    assert world.touched & before, "the changes touched none of the jobs listed: no test"
    assert {job_id: seen[job_id] for job_id in stayed if seen[job_id] != 1} == {}
    assert {job_id: n for job_id, n in seen.items() if n > 1 and job_id not in world.touched} == {}
