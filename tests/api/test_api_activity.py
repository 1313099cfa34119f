"""``GET /topics/{topic}/history`` and ``GET /topics/{topic}/dead/errors``: their answers' shapes and
counts, their windows' limits, and a topic nobody knows."""

from __future__ import annotations

from itertools import pairwise

import pytest

from delayq.core.activity import KEEP_MINUTES, Counts
from delayq.core.lateness import bucket_of
from delayq.store.listing import ERROR_LINE_CHARS
from delayq.surfaces.api import DeadErrorsOut, HistoryOut

from support.api import Api, assert_model
from support.scripts import add_activity_now


def test_the_history_answers_every_minute_up_to_now(api: Api) -> None:
    counts = Counts({bucket_of(2): 9, bucket_of(40): 1}, done=8, failed=3, dead=1)
    add_activity_now(api.r, api.keys, "orders", counts)
    reply = api.get("/topics/orders/history", query={"minutes": "3"})
    assert reply.status == 200, reply
    assert_model(HistoryOut, reply.json)
    minutes = reply.json["minutes"]
    assert len(minutes) == 3
    assert [m["from_ms"] % 60_000 for m in minutes] == [0, 0, 0]
    assert [b["from_ms"] - a["from_ms"] for a, b in pairwise(minutes)] == [60_000, 60_000]
    assert minutes[-1]["from_ms"] <= api.server_ms() < minutes[-1]["from_ms"] + 60_000 + 5_000
    totals = {name: sum(m[name] for m in minutes) for name in ("started", "done", "failed", "dead")}
    assert totals == {"started": 10, "done": 8, "failed": 3, "dead": 1}
    busy = next(m for m in minutes if m["started"])
    assert busy["p50_ms"] < busy["p99_ms"]
    assert len(api.get("/topics/orders/history").json["minutes"]) == 60


@pytest.mark.parametrize("minutes", ["0", str(KEEP_MINUTES + 1), "1.5", "x"])
def test_a_history_window_out_of_bounds_is_refused_naming_minutes(seeded: Api, minutes: str) -> None:
    seeded.refused(422, "minutes", "GET", "/topics/orders/history", query={"minutes": minutes}, error="invalid")


def test_dead_letters_are_grouped_by_the_first_line_of_their_error(api: Api) -> None:
    for n in range(3):
        api.kill("orders", f"timeout-{n}", f"TimeoutError: upstream took too long\nattempt detail {n}")
    api.kill("orders", "refused-0", "HTTP 403 Forbidden: <b>no</b>")
    long = "ValueError: " + "x" * (ERROR_LINE_CHARS + 100)
    api.kill("orders", "long-0", long)
    reply = api.get("/topics/orders/dead/errors")
    assert reply.status == 200, reply
    assert_model(DeadErrorsOut, reply.json)
    groups = reply.json["errors"]
    assert [(g["error"], g["count"]) for g in groups[:1]] == [("TimeoutError: upstream took too long", 3)]
    assert groups[0]["example_id"] == "timeout-2"  # the most recent of them
    assert groups[0]["last_at_ms"] == api.job("orders", "timeout-2")["dead_at_ms"]
    assert {(g["error"], g["count"], g["example_id"]) for g in groups[1:]} == {
        ("HTTP 403 Forbidden: <b>no</b>", 1, "refused-0"),
        (long[:ERROR_LINE_CHARS], 1, "long-0"),
    }
    assert (reply.json["scanned"], reply.json["dead"]) == (5, 5)


def test_no_dead_letters_and_an_unknown_topic(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    reply = api.get("/topics/orders/dead/errors")
    assert (reply.status, reply.json) == (200, {"errors": [], "scanned": 0, "dead": 0})
    monkeypatch.setenv("DELAYQ_TOPICS", '{"orders": {"target": "python:support.recorder:deliver"}}')
    api = Api.start(api.r, api.namespace)
    api.create("orders", "seed", delay=600)
    for path in ("/topics/nosuch/dead/errors", "/topics/nosuch/history"):
        api.refused(404, "topic", "GET", path, error="not_found")
