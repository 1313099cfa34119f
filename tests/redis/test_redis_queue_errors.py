"""delayq.Queue against the real Redis: every refused call raises the right error, naming the field, and
leaves the namespace exactly as it was."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from delayq import (
    ConfigError,
    DelayqError,
    InvalidField,
    JobDead,
    JobExists,
    JobNotFound,
    JobReserved,
    Queue,
    RedisUnavailable,
    TooLarge,
    UnknownTopic,
)
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper
from delayq.store.queue import STREAM_CHUNK
from delayq.store.scripts import Scripts

from support.answers import refusal
from support.recorder import RECORDER
from support.scripts import dump, kill_job, lease_job

MAX_BODY = 256 * 1024
DAY = 86_400


@pytest.fixture
def populated(queue: Queue, redis_client: redis.Redis) -> Queue:
    """orders: r reserved, x dead, q ready, d delayed; reminders: one delayed job."""
    queue.enqueue("orders", {"job": "r"}, id="r")
    lease_job(redis_client, queue, "orders", "r")
    queue.enqueue("orders", {"job": "x"}, id="x")
    kill_job(redis_client, queue, "orders", "x")
    queue.enqueue("orders", {"job": "q"}, id="q")
    queue.enqueue("orders", {"job": "d"}, id="d", delay=60)
    queue.enqueue("reminders", {"job": "m"}, id="m", delay=60)
    return queue


@pytest.fixture
def refused(redis_client: redis.Redis, namespace: str) -> Callable[..., DelayqError]:
    """``refused(call, ErrorClass, field=..., status=...)``: raises exactly that, and nothing changed."""

    def check(call: Callable[[], Any], kind: type[DelayqError], *, field: str | None, status: int) -> DelayqError:
        before = dump(redis_client, namespace)
        with pytest.raises(kind) as info:
            call()
        error = info.value
        assert type(error) is kind
        assert (error.field, error.status) == (field, status)
        assert error.to_dict()["field"] == field
        assert dump(redis_client, namespace) == before
        return error

    return check


# ------------------------------------------------------------------------------------- invalid fields

BAD_JOBS: list[tuple[dict[str, Any], str]] = [
    ({"topic": "bad topic"}, "topic"),
    ({"topic": ""}, "topic"),
    ({"topic": "_topics"}, "topic"),
    ({"topic": "t" * 65}, "topic"),
    ({"topic": 5}, "topic"),
    ({"id": "bad id"}, "id"),
    ({"id": "-leading"}, "id"),
    ({"id": "i" * 129}, "id"),
    ({"id": ""}, "id"),
    ({"id": 7}, "id"),
    ({"delay": -1}, "delay"),
    ({"delay": 366 * DAY + 1}, "delay"),
    ({"delay": "5"}, "delay"),
    ({"delay": True}, "delay"),
    ({"delay": math.nan}, "delay"),
    ({"delay": math.inf}, "delay"),
    ({"run_at": "2026-01-31T09:00:00"}, "run_at"),
    ({"run_at": "tomorrow"}, "run_at"),
    ({"run_at": -5}, "run_at"),
    ({"run_at": time.time() + 367 * DAY}, "run_at"),
    ({"run_at": math.nan}, "run_at"),
    ({"delay": 1, "run_at": 1_000}, "run_at"),
    ({"retries": -1}, "retries"),
    ({"retries": 26}, "retries"),
    ({"retries": 1.5}, "retries"),
    ({"retries": "3"}, "retries"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": 0.5}, "timeout"),
    ({"timeout": 901}, "timeout"),
    ({"backoff": []}, "backoff"),
    ({"backoff": [-1]}, "backoff[0]"),
    ({"backoff": [1, "x"]}, "backoff[1]"),
    ({"backoff": [1] * 65}, "backoff"),
]


@pytest.mark.parametrize(("change", "field"), BAD_JOBS, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD_JOBS)])
def test_enqueue_refuses_an_invalid_field(
    populated: Queue, refused: Callable[..., DelayqError], change: dict[str, Any], field: str
) -> None:
    job = {"topic": "orders", "id": "new", "body": 1, **change}
    topic = job.pop("topic")
    body = job.pop("body")
    error = refused(lambda: populated.enqueue(topic, body, **job), InvalidField, field=field, status=422)
    assert error.message
    assert refusal(populated.enqueue_many([{"topic": topic, "body": body, **job}])[0])[1] == field


@pytest.mark.parametrize(
    ("change", "field"), [c for c in BAD_JOBS if c[1] not in ("topic", "id")], ids=lambda v: str(v)[:30]
)
def test_put_refuses_an_invalid_field(
    populated: Queue, refused: Callable[..., DelayqError], change: dict[str, Any], field: str
) -> None:
    refused(lambda: populated.put("orders", "q", 1, **change), InvalidField, field=field, status=422)


@pytest.mark.parametrize(("topic", "job_id", "field"), [("bad topic", "q", "topic"), ("orders", "bad id", "id")])
def test_every_method_checks_topic_and_id(
    populated: Queue, refused: Callable[..., DelayqError], topic: str, job_id: str, field: str
) -> None:
    calls = [
        lambda: populated.put(topic, job_id, 1),
        lambda: populated.get(topic, job_id),
        lambda: populated.reschedule(topic, job_id, delay=1),
        lambda: populated.cancel(topic, job_id),
        lambda: populated.replay(topic, [job_id]),
    ]
    if field == "topic":
        calls += [
            lambda: populated.stats(topic),
            lambda: populated.dead(topic),
            lambda: populated.replay(topic),
            lambda: populated.purge(topic),
        ]
    for call in calls:
        refused(call, InvalidField, field=field, status=422)


def test_boundaries_are_accepted(populated: Queue) -> None:
    assert populated.enqueue("t" * 64, 1, id="i" * 128, delay=366 * DAY, retries=25, timeout=900).created
    assert populated.enqueue("orders", 1, retries=0, timeout=1, backoff=[0] * 64, delay=0).created
    assert populated.enqueue("orders", "b" * (MAX_BODY - 2)).created  # exactly 256 KiB as JSON


def test_a_body_over_256_kib_is_too_large(populated: Queue, refused: Callable[..., DelayqError]) -> None:
    big = "b" * (MAX_BODY - 1)  # 256 KiB + 1 byte as JSON, with its quotes
    refused(lambda: populated.enqueue("orders", big), TooLarge, field="body", status=413)
    refused(lambda: populated.put("orders", "q", big), TooLarge, field="body", status=413)
    wide = {"k": "é" * (MAX_BODY // 2)}  # counted in bytes of UTF-8, not characters
    refused(lambda: populated.enqueue("orders", wide), TooLarge, field="body", status=413)


@pytest.mark.parametrize(
    "body", [{1, 2}, object(), b"bytes", math.nan, {"n": math.inf}], ids=["set", "object", "bytes", "nan", "inf"]
)
def test_a_body_that_is_not_json_is_an_invalid_field(
    populated: Queue, refused: Callable[..., DelayqError], body: Any
) -> None:
    """The contract's body is any JSON: a set, bytes or NaN is not, and must be refused as a field error
    (not a TypeError, and not stored as the non-JSON ``NaN`` a webhook receiver cannot parse)."""
    refused(lambda: populated.enqueue("orders", body), InvalidField, field="body", status=422)


def test_enqueue_many_answers_a_non_json_body_in_place(populated: Queue) -> None:
    results = populated.enqueue_many([{"topic": "orders", "id": "bad", "body": {1}}, {"topic": "orders", "id": "ok"}])
    assert [r.status for r in results] == [422, 201]
    assert refusal(results[0]) == (422, "body")


# ------------------------------------------------------------------------------------- unknown topics


def test_a_topic_without_config_and_without_a_wildcard_is_refused(
    make_queue: Callable[..., Queue], refused: Callable[..., DelayqError]
) -> None:
    queue = make_queue(topics={"orders": {"target": RECORDER}})
    queue.enqueue("orders", 1, id="known")
    refused(lambda: queue.enqueue("other", 1), UnknownTopic, field="topic", status=422)
    refused(lambda: queue.put("other", "a", 1), UnknownTopic, field="topic", status=422)
    results = queue.enqueue_many([{"topic": "other", "id": "a"}, {"topic": "orders", "id": "b"}])
    assert [r.status for r in results] == [422, 201]
    assert refusal(results[0]) == (422, "topic")
    assert queue.known_topics() == {"orders"}


# ------------------------------------------------------------------------------------- conflicts


@pytest.mark.parametrize("job_id", ["d", "q", "r", "x"])
def test_enqueue_of_an_existing_job_is_a_conflict(
    populated: Queue, refused: Callable[..., DelayqError], job_id: str
) -> None:
    refused(lambda: populated.enqueue("orders", "again", id=job_id), JobExists, field="id", status=409)


def test_put_of_a_reserved_job_is_a_conflict(populated: Queue, refused: Callable[..., DelayqError]) -> None:
    refused(lambda: populated.put("orders", "r", "new"), JobReserved, field="id", status=409)
    assert populated.get("orders", "r").body == {"job": "r"}


def test_reschedule_is_refused(populated: Queue, refused: Callable[..., DelayqError]) -> None:
    refused(lambda: populated.reschedule("orders", "r", delay=5), JobReserved, field="id", status=409)
    refused(lambda: populated.reschedule("orders", "x", delay=5), JobDead, field="id", status=409)
    refused(lambda: populated.reschedule("orders", "nope", delay=5), JobNotFound, field="id", status=404)
    refused(lambda: populated.reschedule("reminders", "d", delay=5), JobNotFound, field="id", status=404)
    refused(lambda: populated.reschedule("orders", "d"), InvalidField, field="delay", status=422)
    refused(lambda: populated.reschedule("orders", "d", delay=1, run_at=5), InvalidField, field="run_at", status=422)
    refused(lambda: populated.reschedule("orders", "d", delay=-1), InvalidField, field="delay", status=422)
    refused(
        lambda: populated.reschedule("orders", "d", run_at="2026-01-01T00:00:00"),
        InvalidField,
        field="run_at",
        status=422,
    )


def test_missing_jobs_are_not_found(populated: Queue, refused: Callable[..., DelayqError]) -> None:
    refused(lambda: populated.get("orders", "nope"), JobNotFound, field="id", status=404)
    refused(lambda: populated.cancel("orders", "nope"), JobNotFound, field="id", status=404)
    refused(lambda: populated.cancel("reminders", "q"), JobNotFound, field="id", status=404)


@pytest.mark.parametrize("limit", [0, 1001, -1, True, "5", 2.0])
def test_dead_refuses_a_bad_limit(populated: Queue, refused: Callable[..., DelayqError], limit: Any) -> None:
    refused(lambda: populated.dead("orders", limit=limit), InvalidField, field="limit", status=422)


def test_replay_with_one_bad_id_replays_nothing(populated: Queue, refused: Callable[..., DelayqError]) -> None:
    refused(lambda: populated.replay("orders", ["x", "bad id"]), InvalidField, field="id", status=422)
    assert populated.get("orders", "x").state == "dead"


# ------------------------------------------------------------------------------------- Redis down


def _calls(queue: Queue) -> dict[str, Callable[[], Any]]:
    return {
        "enqueue": lambda: queue.enqueue("orders", 1, id="a"),
        "put": lambda: queue.put("orders", "a", 1),
        "enqueue_many": lambda: queue.enqueue_many([{"topic": "orders", "id": "a"}]),
        "get": lambda: queue.get("orders", "a"),
        "reschedule": lambda: queue.reschedule("orders", "a", delay=1),
        "cancel": lambda: queue.cancel("orders", "a"),
        "stats": lambda: queue.stats("orders"),
        "dead": lambda: queue.dead("orders"),
        "replay ids": lambda: queue.replay("orders", ["a"]),
        "replay all": lambda: queue.replay("orders"),
        "purge": lambda: queue.purge("orders"),
        "known_topics": queue.known_topics,
        "ping": queue.ping,
        "schedule": lambda: queue.schedule("orders", "s", every=60),
        "get_schedule": lambda: queue.get_schedule("orders", "s"),
        "unschedule": lambda: queue.unschedule("orders", "s"),
        "schedules": queue.schedules,
    }


@pytest.mark.parametrize("partitions", [1, 3])
def test_every_method_raises_redis_unavailable_quickly(
    make_queue: Callable[..., Queue], partitions: int, connection_attempts: list[tuple[str, int]]
) -> None:
    """Quickly: at the first refused connection, with no retry (and so no backoff): counted, not timed."""
    queue = make_queue(redis_url="redis://127.0.0.1:1/0", partitions=partitions)
    for name, call in _calls(queue).items():
        connection_attempts.clear()
        with pytest.raises(RedisUnavailable) as info:
            call()
        assert info.value.status == 503, name
        assert info.value.to_dict()["error"] == "unavailable"
        assert connection_attempts == [("127.0.0.1", 1)], name


def test_a_closed_port_writes_nothing_anywhere(
    make_queue: Callable[..., Queue], redis_client: redis.Redis, namespace: str
) -> None:
    queue = make_queue(redis_url="redis://127.0.0.1:1/0")
    for call in _calls(queue).values():
        with pytest.raises(RedisUnavailable):
            call()
    assert dump(redis_client, namespace) == {}


class _LosesRedisOnce(redis.Connection):
    """A connection cut as it sends the ``lost``-th enqueue call (counted over every connection of the
    class): Redis lost for a moment in the middle of a bulk enqueue."""

    lost = 0
    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        parts = command if isinstance(command, list) else [command]
        if any(Scripts.enqueue.sha.encode() in bytes(part) for part in parts):
            type(self).sent += 1
            if type(self).sent == self.lost:
                self.disconnect()
                raise redis.ConnectionError("Connection reset by peer")
        super().send_packed_command(command, check_health)


def test_enqueue_many_that_loses_redis_writes_the_chunks_before_and_none_after(
    queue: Queue, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of 250 (``STREAM_CHUNK``) go one after the other on one connection: the 5th is lost as it
    is sent, so the first 4 are written (the 4th's answer was never read), and nothing after."""
    monkeypatch.setattr(_LosesRedisOnce, "lost", 5)
    monkeypatch.setattr(_LosesRedisOnce, "sent", 0)
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=_LosesRedisOnce, decode_responses=True)
    flaky = Queue(queue.settings, redis=redis.Redis(connection_pool=pool))
    with pytest.raises(RedisUnavailable):
        flaky.enqueue_many({"topic": "orders", "id": f"j{i}", "delay": 60} for i in range(6000))
    assert queue.stats("orders").delayed == 4 * STREAM_CHUNK
    assert queue.get("orders", f"j{4 * STREAM_CHUNK - 1}").state == "delayed"
    with pytest.raises(JobNotFound):
        queue.get("orders", f"j{4 * STREAM_CHUNK}")
    assert _LosesRedisOnce.sent == 5  # the chunks after the lost one were never sent
    results = flaky.enqueue_many({"topic": "orders", "id": f"j{i}", "delay": 60} for i in range(6000))
    assert [r.status for r in results] == [409] * 4 * STREAM_CHUNK + [201] * (6000 - 4 * STREAM_CHUNK)
    pool.disconnect()


def test_a_batch_of_one_chunk_is_one_call_whole_or_nothing(
    queue: Queue, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /jobs/batch`` (``enqueue_many(jobs, chunk=1000)``, at most 1,000 jobs) is one enqueue call per
    partition, not chunks: a Redis lost as it is sent leaves nothing written."""
    monkeypatch.setattr(_LosesRedisOnce, "lost", 1)
    monkeypatch.setattr(_LosesRedisOnce, "sent", 0)
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=_LosesRedisOnce, decode_responses=True)
    flaky = Queue(queue.settings, redis=redis.Redis(connection_pool=pool))
    jobs = [{"topic": "orders", "id": f"j{i}", "delay": 60} for i in range(1000)]
    with pytest.raises(RedisUnavailable):
        flaky.enqueue_many(jobs, chunk=1000)
    assert queue.stats("orders").delayed == 0
    assert {r.status for r in flaky.enqueue_many(jobs, chunk=1000)} == {201}
    assert _LosesRedisOnce.sent == 2  # the lost call, then all 1,000 in one
    assert queue.stats("orders").delayed == 1000
    pool.disconnect()


def test_a_client_with_another_partition_count_is_refused(
    make_queue: Callable[..., Queue], redis_client: redis.Redis, namespace: str
) -> None:
    """A namespace's partition count is recorded at its first use. A client configured with another
    would write jobs to, and sweep and consume, partitions nobody else uses: it is refused, and writes
    nothing, rather than strand jobs."""
    first = make_queue(partitions=2)
    first.enqueue("orders", {"n": 1}, id="a", delay=60)
    assert redis_client.get(f"{namespace}:_layout") == "2"
    before = dump(redis_client, namespace)

    other = make_queue(partitions=3)
    for call in (
        lambda: other.enqueue("orders", {"n": 2}, id="b"),
        lambda: other.get("orders", "a"),
        other.ping,
    ):
        with pytest.raises(ConfigError, match=r"DELAYQ_PARTITIONS is 3, but namespace .* has 2 partitions"):
            call()
    # The loops end their run with the error (a failed invocation, which the errors alarm sees) rather
    # than sweep and consume partitions nobody writes to.
    for loop in (Sweeper(other), Consumer(other)):
        with pytest.raises(ConfigError, match="DELAYQ_PARTITIONS is 3"):
            loop.run(Budget.of(0))
    assert dump(redis_client, namespace) == before
    assert make_queue(partitions=2).get("orders", "a").state == "delayed"  # the same count is welcome
