"""Scenario 3: Redis killed with SIGKILL right after acknowledging writes, and restarted.

With ``appendonly yes`` and ``appendfsync always`` Redis writes each command to its AOF and fsyncs
it before answering, and every delayq write is one Lua call (whole or absent). So a job whose create
was acknowledged (201) survives a crash of Redis; after the restart on the same port and directory
it is found in its state, counted in the stats and delivered. A concurrent writer is cut off
mid-stream by the kill: each of its acknowledged jobs survives too; the one in flight may or may not.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from delayq import DelayqError, JobNotFound

from support.faults import (
    Enqueued,
    Fleet,
    HandlerApi,
    check,
    loop_env,
    make_queue,
    read_records,
    topics_json,
    wait_until,
)
from support.servers import RedisServer

API_JOBS = 100
BATCH_JOBS = 400


@pytest.mark.fault
@pytest.mark.timeout(90)
def test_acknowledged_jobs_survive_a_redis_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deliveries = tmp_path / "deliveries.jsonl"
    with RedisServer("--appendonly", "yes", "--appendfsync", "always") as server:
        env = loop_env(server.url, "faults", topics_json(durable={"timeout": 5}, stream={"timeout": 5}), deliveries)
        api = HandlerApi(monkeypatch, env)
        queue = make_queue(env)
        began = time.monotonic()

        # A writer of its own, enqueueing one job at a time until Redis dies under it.
        streamed: list[Enqueued] = []
        cut_off: list[str] = []
        stop = threading.Event()

        def stream() -> None:
            writer = make_queue(env)
            i = 0
            while not stop.is_set():
                job_id = f"stream-{i:05d}"
                try:
                    scheduled = writer.enqueue("stream", {"i": i}, id=job_id, delay=1)
                except DelayqError:
                    cut_off.append(job_id)  # in flight when Redis died: written or not, nobody was told
                    return
                streamed.append(Enqueued("stream", job_id, scheduled.run_at_ms))
                i += 1

        writer = threading.Thread(target=stream, name="stream-writer", daemon=True)
        writer.start()

        acked: list[Enqueued] = []
        for i in range(API_JOBS):
            status, body, _ = api("POST", "/jobs", {"topic": "durable", "id": f"api-{i:03d}", "delay": i % 3})
            assert status == 201, body
            acked.append(Enqueued("durable", body["id"], body["run_at_ms"]))
        batch = [{"topic": "durable", "id": f"batch-{i:03d}", "delay": i % 4 / 2} for i in range(BATCH_JOBS)]
        status, body, _ = api("POST", "/jobs/batch", {"jobs": batch})
        assert status == 200, body
        acked += Enqueued.from_results(body["results"])
        server.kill()  # right after the last acknowledgement
        writer.join(10)
        assert not writer.is_alive()
        stop.set()
        assert cut_off, "the stream writer was not cut off by the kill"
        assert len(streamed) > 10, "the stream writer wrote too little to show anything"

        server.start()  # same port, same directory: Redis replays its AOF
        every = acked + streamed
        infos: dict[str, Any] = {}
        for job in every:
            info = queue.get(job.topic, job.id)
            assert info.state in ("delayed", "ready"), info
            assert info.run_at_ms == job.run_at_ms, (info, job)
            infos[job.id] = info
        stats = {topic: queue.stats(topic) for topic in ("durable", "stream")}
        assert stats["durable"].delayed + stats["durable"].ready == len(acked), stats
        in_flight_survived = False
        try:
            queue.get("stream", cut_off[0])
            in_flight_survived = True
        except JobNotFound:
            pass
        assert stats["stream"].delayed + stats["stream"].ready == len(streamed) + in_flight_survived, stats
        if in_flight_survived:  # written before the crash, its answer lost: it is a job like any other
            every.append(Enqueued("stream", cut_off[0], queue.get("stream", cut_off[0]).run_at_ms))

        fleet = Fleet(env, tmp_path)
        with fleet.running():
            fleet.sweeper()
            fleet.consumer()
            ended = lambda: len({(r["topic"], r["id"]) for r in read_records(deliveries) if r["ev"] == "end"})  # noqa: E731
            assert wait_until(lambda: ended() == len(every), 30), ended()
            summaries = fleet.stop_all()
        duration = time.monotonic() - began

        totals = check(
            "3 redis SIGKILL + AOF restart",
            every,
            read_records(deliveries),
            duration_s=duration,
            acked_api=len(acked),
            acked_stream=len(streamed),
            in_flight_at_kill_survived=in_flight_survived,
        )
        totals.assert_clean()
        assert all(summary["redis_errors"] == 0 for summary in summaries.values()), summaries
        queue.close()
