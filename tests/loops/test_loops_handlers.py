"""The sweep and consume Lambda handlers with the events/ samples, and loops whose Redis does not
answer: they count the errors and carry on until their budget is spent, never raise."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
import redis

from delayq import Queue
from delayq.core.loop import FINISH_BEFORE_DEADLINE_S, STOP_BEFORE_DEADLINE_S, Budget
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper

from support import loop_targets, recorder
from support.events import FakeContext, load_event
from support.loops import state, wait_until

MakeQueue = Callable[..., Queue]
DEAD_REDIS = loop_targets.DEAD_REDIS_URL


def _reload(name: str) -> Iterator[ModuleType]:
    module = importlib.import_module(name)
    module = importlib.reload(module)  # the handlers build their Queue at import, from the environment
    yield module
    if module.queue._redis is not None:
        module.queue.close()


@pytest.fixture
def sweep(handler_env: dict[str, str]) -> Iterator[ModuleType]:
    yield from _reload("sweep")


@pytest.fixture
def consume(handler_env: dict[str, str]) -> Iterator[ModuleType]:
    yield from _reload("consume")


def _event(name: str, seconds: float | None, where: str) -> dict[str, Any]:
    event = load_event(name)
    if seconds is not None:
        if where == "top":
            event["seconds"] = seconds
        else:
            event["detail"]["seconds"] = seconds
    return event


@pytest.mark.parametrize("where", ["top", "detail"])
def test_sweep_handler_seconds_zero_is_one_pass(sweep: ModuleType, handler_env: dict[str, str], where: str) -> None:
    queue: Queue = sweep.queue
    assert queue.settings.namespace == handler_env["DELAYQ_NAMESPACE"]
    queue.enqueue("orders", {}, id="o1", delay=0.05)
    assert wait_until(lambda: time.time() * 1000 >= queue.get("orders", "o1").run_at_ms + 5)

    summary = sweep.lambda_handler(_event("sweep", 0, where), FakeContext())
    assert summary["passes"] == 1
    assert summary["moved"] == 1
    assert summary["locks_taken"] == 1
    assert summary["redis_errors"] == 0
    assert state(queue, "orders", "o1") == "ready"
    assert queue.redis.get(queue.keys.partitions[0].lock) is None  # released on return


@pytest.mark.parametrize("where", ["top", "detail"])
def test_sweep_handler_loops_for_the_seconds_asked(sweep: ModuleType, where: str) -> None:
    queue: Queue = sweep.queue
    queue.enqueue("orders", {}, id="o2", delay=0.3)
    started = time.monotonic()
    summary = sweep.lambda_handler(_event("sweep", 0.6, where), FakeContext())
    elapsed = time.monotonic() - started
    assert elapsed >= 0.55
    assert summary["passes"] >= 2
    assert summary["moved"] == 1
    assert state(queue, "orders", "o2") == "ready"


class _SixSecondsLeft(FakeContext):
    """A Lambda context that always has 6 s left, however long the handler takes to ask."""

    def get_remaining_time_in_millis(self) -> int:
        return 6_000


def test_sweep_handler_stops_five_seconds_before_the_lambda_deadline(
    sweep: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DELAYQ_LOOP_SECONDS is 60 by default: the Lambda deadline (6 s away) minus 5 s comes first. The
    budget the handler gives the sweeper is read (not the run's length, which a loaded machine
    stretches), and the run lasts until its stop time."""
    budgets: list[Budget] = []
    run = Sweeper.run

    def recorded(sweeper: Sweeper, budget: Budget) -> dict[str, Any]:
        budgets.append(budget)
        return run(sweeper, budget)

    monkeypatch.setattr(Sweeper, "run", recorded)
    summary = sweep.lambda_handler(_event("sweep", None, "top"), _SixSecondsLeft())
    [budget] = budgets
    assert budget.stop_at - budget.started == pytest.approx(6 - STOP_BEFORE_DEADLINE_S) == 1
    assert budget.finish_by is not None
    assert budget.finish_by - budget.started == pytest.approx(6 - FINISH_BEFORE_DEADLINE_S)
    assert time.monotonic() >= budget.stop_at  # it swept until then
    assert summary["passes"] >= 2
    assert summary["redis_errors"] == 0


@pytest.mark.parametrize("where", ["top", "detail"])
def test_consume_handler_seconds_zero_takes_and_settles(consume: ModuleType, where: str) -> None:
    queue: Queue = consume.queue
    queue.enqueue("orders", {"n": 1}, id="c1", delay=0)
    queue.enqueue("payments", {"fail": True}, id="c2", delay=0)

    summary = consume.lambda_handler(_event("consume", 0, where), FakeContext())
    assert summary["taken"] == 2
    assert (summary["succeeded"], summary["acked"]) == (1, 1)
    assert (summary["failed"], summary["retried"], summary["dead"]) == (1, 1, 0)
    assert summary["redis_errors"] == 0
    assert [d.id for d in recorder.of("orders")] == ["c1"]
    assert state(queue, "orders", "c1") == "done"
    info = queue.get("payments", "c2")
    assert info.state == "delayed"  # payments: retries 8, first backoff 15 s
    assert info.last_error is not None
    assert "planned failure of attempt 1" in info.last_error


def test_consume_handler_takes_nothing_too_close_to_the_deadline(consume: ModuleType) -> None:
    queue: Queue = consume.queue
    queue.enqueue("orders", {}, id="c3", delay=0)
    # 20 s left: work must be settled 2 s before, so an orders job (timeout 30 s) cannot be started
    summary = consume.lambda_handler(_event("consume", 0, "detail"), FakeContext(remaining_ms=20_000))
    assert summary["taken"] == 0
    assert recorder.of("orders") == []
    assert state(queue, "orders", "c3") == "ready"


def test_consumer_with_redis_down_counts_errors_and_returns(make_queue: MakeQueue) -> None:
    queue = make_queue(redis_url=DEAD_REDIS, tick=0.1)
    started = time.monotonic()
    summary = Consumer(queue).run(Budget.of(1.0))
    assert time.monotonic() - started >= 0.9
    assert summary["redis_errors"] > 0
    assert summary["passes"] > 1
    assert summary["taken"] == 0


def test_sweeper_with_redis_down_counts_errors_and_returns(make_queue: MakeQueue) -> None:
    queue = make_queue(redis_url=DEAD_REDIS, tick=0.1)
    started = time.monotonic()
    summary = Sweeper(queue).run(Budget.of(1.0))
    assert time.monotonic() - started >= 0.9
    assert summary["redis_errors"] > 0
    assert summary["passes"] > 1
    assert summary["locks_taken"] == 0


def test_consumer_losing_redis_before_its_ack_still_ends(make_queue: MakeQueue) -> None:
    """Redis goes away after a handler succeeded: the ack cannot be sent. The loop keeps it for a later
    pass (the lease would expire and the job be retried, nothing is lost), but it must still end
    when its budget is spent rather than retry forever."""
    queue = make_queue(topics={"br": {"target": "python:support.loop_targets:break_redis"}}, tick=0.1)
    good = queue.redis
    loop_targets.queue = queue
    loop_targets.broken_client = redis.Redis.from_url(DEAD_REDIS, socket_connect_timeout=0.5)
    queue.enqueue("br", {}, id="b1", delay=0)

    consumer = Consumer(queue)
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(consumer.run(Budget.of(1.0))), daemon=True)
    thread.start()
    thread.join(3.0)
    ended = not thread.is_alive()
    queue._redis = good  # let it settle and end, whatever happened
    thread.join(5.0)
    loop_targets.broken_client.close()
    assert not thread.is_alive()
    assert consumer.counts["succeeded"] == 1
    assert consumer.counts["redis_errors"] > 0
    assert ended, "Consumer.run(Budget.of(1.0)) was still retrying its ack after 3 s"
