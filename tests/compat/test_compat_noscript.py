"""SCRIPT FLUSH while a Sweeper and a Consumer loop run and jobs flow (a restart, a failover or a
proxy's other backend look the same to delayq): every call answered NOSCRIPT is repeated as EVAL, so
work goes on, every job is delivered once, and neither loop counts an error."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from delayq import Queue
from delayq.core.loop import Budget
from delayq.loops.consumer import Consumer
from delayq.loops.sweeper import Sweeper

from support import recorder
from support.compat import TOPIC, check_deliveries, direct_client, error_stats, make_settings
from support.servers import RedisServer


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as redis_server:
        yield redis_server


class Loop:
    """A Sweeper or Consumer running in a thread until stopped; its summary, or what ended it."""

    def __init__(self, loop: Sweeper | Consumer) -> None:
        self.loop = loop
        self.summary: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.summary = self.loop.run(Budget.of(30))
        except BaseException as exc:  # the test reports it
            self.error = exc

    def stop(self) -> dict[str, Any]:
        self.loop.request_stop()
        self.thread.join(10)
        assert not self.thread.is_alive()
        assert self.error is None, repr(self.error)
        assert self.summary is not None
        return self.summary


def settled(queue: Queue) -> bool:
    stats = queue.stats(TOPIC)
    return (stats.delayed, stats.ready, stats.reserved, stats.dead) == (0, 0, 0, 0)


def test_script_flush_mid_run(server: RedisServer) -> None:
    settings = make_settings(server.url, partitions=2)
    producer, swept, consumed = Queue(settings), Queue(settings), Queue(settings)
    control = direct_client(server.port)
    ids: list[str] = []
    sweeper = Loop(Sweeper(swept))
    consumer = Loop(Consumer(consumed))
    try:
        for n in range(5):
            jobs = [{"topic": TOPIC, "id": f"r{n}-{i}", "delay": i % 4 * 0.1, "body": {"i": i}} for i in range(20)]
            jobs.append({"topic": TOPIC, "id": f"r{n}-retry", "body": {"fail_until": 1}})  # fails once, then not
            assert [r.status for r in producer.enqueue_many(jobs)] == [201] * len(jobs)
            assert producer.enqueue(TOPIC, {"n": n}, id=f"r{n}-one", delay=0.15).created
            ids += [job["id"] for job in jobs] + [f"r{n}-one"]
            time.sleep(0.2)
            before = error_stats(control).get("NOSCRIPT", 0)
            control.script_flush()
            deadline = time.monotonic() + 5
            while error_stats(control).get("NOSCRIPT", 0) == before:  # the loops did hit the flush
                assert time.monotonic() < deadline, "no NOSCRIPT after the flush"
                time.sleep(0.01)
        deadline = time.monotonic() + 15
        while {d.id for d in recorder.of(TOPIC) if d.ok} != set(ids) or not settled(producer):
            assert time.monotonic() < deadline, f"not delivered: {set(ids) - {d.id for d in recorder.of(TOPIC)}}"
            time.sleep(0.05)
    finally:
        swept_summary = sweeper.stop()
        consumed_summary = consumer.stop()
        for queue in (producer, swept, consumed):
            queue.close()
        control.close()
    check_deliveries(ids)
    assert consumed_summary["redis_errors"] == 0, consumed_summary
    assert swept_summary["redis_errors"] == 0, swept_summary
    assert (consumed_summary["acked"], consumed_summary["retried"], consumed_summary["dead"]) == (len(ids), 5, 0)
    assert swept_summary["passes"] > 5
