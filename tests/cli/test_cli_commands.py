"""The operator's commands, ``delayq topics|jobs|job|dead|replay|purge|pause|resume|forecast``, against
the real Redis: what people see, what ``--json`` prints (what the HTTP route answers), exit codes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from delayq import Queue
from delayq.__main__ import main
from delayq.core.activity import Counts
from delayq.core.job import RESULT_MAX_BYTES, encode_result
from delayq.core.lateness import bucket_of
from delayq.core.schedule import iso_utc
from delayq.store import calls
from delayq.store.calls import Ack, Failure
from delayq.surfaces import answers

from support.recorder import DEFAULT_TOPICS
from support.scripts import add_activity_now

Run = Callable[..., tuple[int, str, str]]
ENTRY_POINTS = [[sys.executable, "-m", "delayq"], [str(Path(sys.executable).parent / "delayq")]]


@pytest.fixture
def cli(handler_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> Run:
    """``cli("jobs", "orders", "--state", "ready")``: exit code, stdout, stderr of one command, in this
    process, on this test's namespace."""

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def queue(handler_env: dict[str, str]) -> Iterator[Queue]:
    queue = Queue.from_env()
    yield queue
    queue.redis.close()


def finish(queue: Queue, topic: str, job_id: str, result: object = None) -> int:
    """``job_id`` delivered and acknowledged as the consumer does, its handler having answered
    ``result``: a done job. When it started."""
    queue.enqueue(topic, {"n": job_id}, id=job_id, delay=0)
    partition = queue.keys.for_job(topic, job_id)
    taken = calls.take(partition, topic, count=10, timeout_ms=30_000, grace_ms=0).run(queue.redis)
    leases = [Ack(job.id, token, taken.now_ms + 1, encode_result(result)) for job, token, _ in taken.leases]
    calls.ack(partition, topic, queue.settings.topics.retrying(topic), leases).run(queue.redis)
    return taken.now_ms + 1


def kill(queue: Queue, topic: str, job_id: str, error: str = "boom") -> None:
    queue.enqueue(topic, {"n": job_id}, id=job_id, delay=0, retries=0)
    partition = queue.keys.for_job(topic, job_id)
    taken = calls.take(partition, topic, count=10, timeout_ms=30_000, grace_ms=0).run(queue.redis)
    failures = [Failure(job.id, token, error) for job, token, _ in taken.leases]
    calls.fail(partition, topic, queue.settings.topics.retrying(topic), failures).run(queue.redis)


def answers_of(found: Any) -> Any:
    return json.loads(json.dumps(found.to_dict()))


def table(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


# ------------------------------------------------------------------------------------- topics, jobs, job


def test_topics_as_a_table_and_as_json(cli: Run, queue: Queue) -> None:
    queue.enqueue("orders", {}, id="a", delay=60)
    queue.enqueue("extra", {}, id="b", delay=0)
    queue.pause("extra")
    code, out, _ = cli("topics")
    assert code == 0
    rows = table(out)
    header = ["TOPIC", "DELAYED", "READY", "RESERVED", "DEAD", "DONE", "NEXT", "RUN", "AT", "OLDEST", "READY", "STATE"]
    assert rows[0] == header
    assert [row[0] for row in rows[1:]] == ["extra", "orders", "payments", "reminders"]
    assert rows[1][1:6] == ["0", "1", "0", "0", "0"]
    assert rows[1][-1] == "paused"
    assert rows[2][1:7] == ["1", "0", "0", "0", "0", queue.stats("orders").to_dict()["next_run_at"]]
    code, out, _ = cli("topics", "--json", "--limit", "2")
    page = json.loads(out)
    expected = [queue.stats(name).to_dict() for name in ("extra", "orders")]
    for topic in (*page["topics"], *expected):
        assert topic.pop("oldest_ready_ms") >= 0  # how long "extra"'s ready job has waited: it grows
    assert page == {"topics": expected, "next": page["next"]}
    assert page["topics"][0]["paused"] is True
    code, out, _ = cli("topics", "--json", "--limit", "2", "--cursor", page["next"])
    assert [topic["topic"] for topic in json.loads(out)["topics"]] == ["payments", "reminders"]


def test_jobs_by_state_a_page_or_all(cli: Run, queue: Queue) -> None:
    for i in range(5):
        queue.enqueue("orders", {"i": i, "text": "x" * 100}, id=f"j{i}", delay=60 + i)
    code, out, _ = cli("jobs", "orders", "--state", "delayed", "--limit", "2")
    rows = table(out)
    assert code == 0
    assert rows[0] == ["ID", "RUN", "AT", "ATTEMPTS", "RETRIES", "BODY", "LAST", "ERROR"]
    assert [row[0] for row in rows[1:3]] == ["j0", "j1"]
    assert rows[1][1] == queue.get("orders", "j0").to_dict()["run_at"]
    assert rows[1][4].endswith("…")  # a long body, cut short
    cursor = queue.jobs("orders", "delayed", limit=2).next
    assert rows[3] == ["(more:", "--cursor", f"{cursor},", "or", "--all)"]
    code, out, _ = cli("jobs", "orders", "--state", "delayed", "--limit", "2", "--cursor", str(cursor))
    assert [row[0] for row in table(out)[1:3]] == ["j2", "j3"]
    code, out, _ = cli("jobs", "orders", "--state", "delayed", "--limit", "2", "--all")
    assert [row[0] for row in table(out)[1:]] == ["j0", "j1", "j2", "j3", "j4"]
    code, out, _ = cli("jobs", "orders", "--state", "delayed", "--limit", "2", "--all", "--json")
    pages = [json.loads(line) for line in out.splitlines()]
    assert [len(page["jobs"]) for page in pages] == [2, 2, 1]
    assert pages[0] == queue.jobs("orders", "delayed", limit=2).to_dict()
    assert pages[-1]["next"] is None
    code, out, _ = cli("jobs", "orders", "--state", "dead")
    assert (code, out) == (1, "no dead jobs in orders\n")


def test_job_whole_and_its_error_made_safe_for_a_terminal(cli: Run, queue: Queue) -> None:
    kill(queue, "orders", "x1", error="\x1b[31mred\x1b[0m\nsecond line\u202e")
    code, out, _ = cli("job", "orders", "x1")
    assert code == 0
    assert "\x1b" not in out
    assert "\u202e" not in out
    assert "last error   \\x1b[31mred\\x1b[0m\\nsecond line\\u202e" in out
    assert '    "n": "x1"' in out
    assert "key          -" in out.splitlines()
    code, out, _ = cli("job", "orders", "x1", "--json")
    assert json.loads(out) == queue.get("orders", "x1").to_dict()


def test_job_shows_when_it_died_and_its_attempts(cli: Run, queue: Queue) -> None:
    kill(queue, "orders", "h1", error="ValueError: no such order\nsecond line")
    info = queue.get("orders", "h1")
    assert info.dead_at_ms is not None
    code, out, _ = cli("job", "orders", "h1")
    lines = out.splitlines()
    assert code == 0
    assert f"dead at      {iso_utc(info.dead_at_ms)}" in lines
    at = lines.index("history")
    assert table(lines[at + 1]) == [["ATTEMPT", "STARTED", "AT", "ENDED", "AT", "TOOK", "OUTCOME", "ERROR"]]
    row = table(lines[at + 2])[0]
    assert row[:2] == ["1", "-"]  # the attempt; its start not told by this consumer
    assert row[2] == iso_utc(info.history[0].ended_at_ms or 0)
    assert row[3:6] == ["-", "error", "ValueError:"]
    assert "no such order\\nsecond line" in lines[at + 2]  # one line, made safe for a terminal


def test_job_shows_its_key(cli: Run, queue: Queue) -> None:
    queue.enqueue("orders", {}, id="k1", key="tenant-7", delay=60)
    code, out, _ = cli("job", "orders", "k1")
    assert code == 0
    assert "key          tenant-7" in out.splitlines()
    assert "state        delayed" in out.splitlines()


def test_a_done_job_and_the_done_jobs(cli: Run, queue: Queue) -> None:
    started = finish(queue, "orders", "ok1")
    finish(queue, "orders", "ok2")
    info = queue.get("orders", "ok1")
    assert info.done_at_ms is not None
    code, out, _ = cli("job", "orders", "ok1")
    assert code == 0
    lines = out.splitlines()
    assert "state        done" in lines
    assert f"started at   {iso_utc(started)}" in lines
    assert f"done at      {iso_utc(info.done_at_ms)}" in lines
    assert "body         - (a done job's receipt keeps no body)" in lines
    assert lines[-2:] == ["result", "  -"]
    code, out, _ = cli("job", "orders", "ok1", "--json")
    assert json.loads(out) == info.to_dict()

    code, out, _ = cli("jobs", "orders", "--state", "done")
    rows = table(out)
    assert code == 0
    assert rows[0] == ["ID", "RUN", "AT", "STARTED", "AT", "DONE", "AT", "ATTEMPTS"]
    assert sorted(row[0] for row in rows[1:]) == ["ok1", "ok2"]
    assert [row[1:] for row in rows[1:] if row[0] == "ok1"] == [
        [iso_utc(info.run_at_ms), iso_utc(started), iso_utc(info.done_at_ms), "1"]
    ]
    code, out, _ = cli("jobs", "orders", "--state", "done", "--json")
    assert json.loads(out) == queue.jobs("orders", "done").to_dict()
    code, out, _ = cli("topics")
    assert [row[5] for row in table(out)[1:] if row[0] == "orders"] == ["2"]


def test_a_done_job_shows_its_result_and_whether_it_was_cut(cli: Run, queue: Queue) -> None:
    finish(queue, "orders", "r1", result={"charged": 12})
    code, out, _ = cli("job", "orders", "r1")
    assert code == 0
    assert out.splitlines()[-4:] == ["result", "  {", '    "charged": 12', "  }"]
    finish(queue, "orders", "r2", result="é" * RESULT_MAX_BYTES)
    code, out, _ = cli("job", "orders", "r2")
    lines = out.splitlines()
    assert lines[-2:] == [
        "result (cut to its first 64 KiB)",
        "  " + json.dumps("é" * (RESULT_MAX_BYTES // 2), ensure_ascii=False),
    ]
    code, out, _ = cli("job", "orders", "r2", "--json")
    assert (json.loads(out)["result"], json.loads(out)["result_truncated"]) == ("é" * (RESULT_MAX_BYTES // 2), True)


# ------------------------------------------------------------------------------------- dead letters


def test_dead_replay_purge(cli: Run, queue: Queue) -> None:
    for job_id in ("d1", "d2", "d3"):
        kill(queue, "orders", job_id)
    code, out, _ = cli("dead", "orders")
    assert code == 0
    assert sorted(row[0] for row in table(out)[1:]) == ["d1", "d2", "d3"]
    code, out, _ = cli("dead", "orders", "--json", "--limit", "2")
    assert json.loads(out) == answers.dead_jobs(queue.dead("orders", 2))
    code, out, _ = cli("replay", "orders", "d1", "--json")
    assert (code, json.loads(out)) == (0, {"replayed": 1})
    code, out, err = cli("replay", "orders", "d1")
    assert (code, out) == (1, "0 dead jobs of orders replayed: due now\n")  # nothing: d1 is not dead now
    assert err == "delayq replay: d1 not replayed: ready\n"
    code, out, err = cli("replay", "orders", "d2", "nope")
    assert (code, out) == (0, "1 dead job of orders replayed: due now\n")
    assert err == "delayq replay: nope not replayed: no such job\n"
    code, out, _ = cli("purge", "orders", "--yes")
    assert (code, out) == (0, "1 dead job of orders deleted\n")
    code, out, _ = cli("purge", "orders", "--yes", "--json")
    assert (code, json.loads(out)) == (1, {"purged": 0})
    assert queue.get("orders", "d1").state == "ready"


# ------------------------------------------------------------------------------------- cancel


class Terminal(io.StringIO):
    """A standard input that is a terminal, holding what a person types."""

    def isatty(self) -> bool:
        return True


def test_cancel_with_yes_as_text_and_json(cli: Run, queue: Queue) -> None:
    for n in range(3):
        queue.enqueue("orders", {}, id=f"d{n}", delay=600)
    queue.enqueue("orders", {}, id="r", delay=0)
    code, out, _ = cli("cancel", "orders", "--state", "delayed", "--yes")
    assert (code, out) == (0, "3 delayed jobs of orders cancelled\n")
    code, out, _ = cli("cancel", "orders", "--state", "delayed", "--yes", "--json")
    assert (code, json.loads(out)) == (1, {"cancelled": 0})
    assert queue.stats("orders").ready == 1
    code, out, _ = cli("cancel", "orders", "--state", "ready", "--yes", "--json")
    assert (code, json.loads(out)) == (0, {"cancelled": 1})


def test_cancel_without_yes_asks_a_terminal_and_refuses_elsewhere(
    cli: Run, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.enqueue("orders", {}, id="d", delay=600)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # no terminal: nobody to ask
    code, out, err = cli("cancel", "orders", "--state", "delayed")
    assert (code, out) == (2, "")
    assert "--yes" in err
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    code, out, err = cli("cancel", "orders", "--state", "delayed")
    assert (code, out) == (2, "")
    assert "cancel 1 delayed job of orders? [y/N]" in err
    assert queue.stats("orders").delayed == 1
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    code, out, _ = cli("cancel", "orders", "--state", "delayed")
    assert (code, out) == (0, "1 delayed job of orders cancelled\n")


def test_purge_without_yes_asks_a_terminal_and_refuses_elsewhere(
    cli: Run, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    kill(queue, "orders", "d1")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # no terminal: nobody to ask
    code, out, err = cli("purge", "orders")
    assert (code, out, err) == (2, "", "delayq purge: nothing deleted (--yes deletes without asking)\n")
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    code, out, err = cli("purge", "orders")
    assert (code, out) == (2, "")
    assert "delete 1 dead job of orders for good? [y/N]" in err
    assert queue.stats("orders").dead == 1
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    code, out, _ = cli("purge", "orders")
    assert (code, out) == (0, "1 dead job of orders deleted\n")


def test_replay_without_a_topic_names_only_the_topic_as_missing(cli: Run, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli("replay")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith("error: the following arguments are required: TOPIC\n")  # ID is optional


@pytest.mark.parametrize("state", ["reserved", "all"])
def test_cancel_refuses_a_state_it_cannot_cancel(cli: Run, queue: Queue, state: str) -> None:
    queue.enqueue("orders", {}, id="d", delay=600)
    with pytest.raises(SystemExit) as exit_:
        cli("cancel", "orders", "--state", state, "--yes")
    assert exit_.value.code == 2
    assert queue.stats("orders").delayed == 1


def test_cancel_of_an_empty_topic_is_nothing(cli: Run) -> None:
    code, out, _ = cli("cancel", "no-such-topic", "--state", "dead", "--yes")  # covered by "*", empty
    assert (code, out) == (1, "0 dead jobs of no-such-topic cancelled\n")


# ------------------------------------------------------------------------------------- pause, forecast


def test_pause_and_resume(cli: Run, queue: Queue) -> None:
    code, out, _ = cli("pause", "orders")
    assert (code, out) == (0, "orders paused: no consumer starts its jobs until 'delayq resume orders'\n")
    assert queue.stats("orders").paused
    code, out, _ = cli("pause", "orders", "--json")
    assert (code, json.loads(out)) == (0, {"paused": True})
    code, out, _ = cli("resume", "orders", "--json")
    assert (code, json.loads(out)) == (0, {"paused": False})
    assert not queue.stats("orders").paused


def test_forecast_as_a_bar_chart(cli: Run, queue: Queue) -> None:
    for i in range(8):
        queue.enqueue("orders", {}, id=f"a{i}", delay=30)
    for i in range(2):
        queue.enqueue("orders", {}, id=f"b{i}", delay=150)
    code, out, _ = cli("forecast", "orders", "--minutes", "4")
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == "orders: 10 delayed jobs due in the next 4 min, by 60 s"
    bars = [line.split()[1:] for line in lines[1:]]
    assert bars == [["8", "█" * 50], ["0"], ["2", "█" * 12], ["0"]]
    code, out, _ = cli("forecast", "orders", "--minutes", "4", "--bucket", "120", "--json")
    assert [bucket["count"] for bucket in json.loads(out)["buckets"]] == [8, 2]


def test_history_minute_by_minute(cli: Run, queue: Queue) -> None:
    counts = Counts({bucket_of(3): 4}, done=3, failed=2, dead=1)
    add_activity_now(queue.redis, queue.keys, "orders", counts)
    code, out, _ = cli("history", "orders", "--minutes", "3")
    rows = table(out)
    assert code == 0
    assert rows[0] == ["MINUTE", "STARTED", "DONE", "FAILED", "DEAD", "P50", "MS", "P99", "MS"]
    assert len(rows) == 4
    assert [sum(int(row[i]) for row in rows[1:]) for i in range(1, 5)] == [4, 3, 2, 1]
    assert all(row[0].endswith(":00.000Z") for row in rows[1:])
    code, out, _ = cli("history", "orders", "--minutes", "2", "--json")
    assert (code, len(json.loads(out)["minutes"])) == (0, 2)
    code, _, err = cli("history", "orders", "--minutes", "0")
    assert (code, err) == (2, "delayq history: minutes: must be an integer from 1 to 1440\n")


def test_dead_letters_grouped_by_error(cli: Run, queue: Queue) -> None:
    for n in range(3):
        kill(queue, "orders", f"t{n}", f"TimeoutError: too slow\n{n}")
    kill(queue, "orders", "r0", "HTTP 503")
    code, out, _ = cli("dead", "orders", "--errors")
    assert code == 0
    assert table(out) == [
        ["COUNT", "LAST", "DIED", "AT", "EXAMPLE", "ERROR"],
        ["3", iso_utc(queue.get("orders", "t2").dead_at_ms or 0), "t2", "TimeoutError:", "too", "slow"],
        ["1", iso_utc(queue.get("orders", "r0").dead_at_ms or 0), "r0", "HTTP", "503"],
    ]
    code, out, _ = cli("dead", "orders", "--errors", "--json")
    assert json.loads(out) == answers_of(queue.dead_errors("orders"))
    assert cli("dead", "reminders", "--errors")[:2] == (1, "no dead jobs in reminders\n")


# ------------------------------------------------------------------------------------- errors and exit codes


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["job", "orders", "nope"], 1, "delayq job: no job 'nope' in topic 'orders'\n"),
        (["jobs", "orders", "--state", "ready", "--limit", "0"], 2,
         "delayq jobs: limit: must be an integer from 1 to 1000\n"),
        (["jobs", "orders", "--state", "ready", "--cursor", "bogus"], 2,
         "delayq jobs: cursor: must be the 'next' of a previous page\n"),
        (["forecast", "orders", "--minutes", "10080", "--bucket", "60"], 2,
         "delayq forecast: bucket: at most 1440 buckets: for 10080 minutes, at least 420 s\n"),
        (["job", "bad!", "x"], 2, "delayq job: topic: must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$\n"),
    ],
)  # fmt: skip
def test_refusals_say_what_is_wrong_and_exit_with_their_code(
    cli: Run, argv: list[str], code: int, message: str
) -> None:
    assert cli(*argv) == (code, "", message)


def test_errors_with_json_are_the_apis_error_documents(cli: Run) -> None:
    code, out, err = cli("job", "orders", "nope", "--json")
    assert (code, err) == (1, "")
    assert json.loads(out) == {
        "status": 404,
        "error": "not_found",
        "field": "id",
        "message": "no job 'nope' in topic 'orders'",
    }


def test_usage_errors_exit_2(cli: Run) -> None:
    for argv in (["jobs", "orders"], ["jobs", "orders", "--state", "waiting"], ["topics", "--all", "--cursor", "x"],
                 ["forecast", "orders", "--minutes", "soon"], ["nosuchcommand"]):  # fmt: skip
        with pytest.raises(SystemExit) as exited:
            cli(*argv)
        assert exited.value.code == 2, argv


@pytest.mark.parametrize("command", ENTRY_POINTS, ids=["python -m delayq", "delayq"])
def test_the_installed_command(command: list[str], handler_env: dict[str, str], redis_client: redis.Redis) -> None:
    """As a user runs it: the console script and ``python -m delayq``, with their exit codes."""
    env = {"PATH": "/usr/bin:/bin", **handler_env}
    done = subprocess.run(
        [*command, "topics", "--json"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, json.loads(done.stdout)["next"]) == (0, None)
    assert [t["topic"] for t in json.loads(done.stdout)["topics"]] == sorted(set(DEFAULT_TOPICS) - {"*"})
    done = subprocess.run(
        [*command, "jobs", "--help"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0
    assert "GET /topics/{topic}/jobs" in done.stdout
    assert "exit codes: 0 done; 1 not found or nothing" in " ".join(done.stdout.split())
    down = env | {"DELAYQ_REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([*command, "topics"], env=down, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr.startswith("delayq topics: Redis")
    assert "unavailable" in done.stderr
    done = subprocess.run(
        [*command, "jobs", "orders"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2


# ------------------------------------------------------------------------------------- schedules


def test_schedules_listed_and_shown(cli: Run, queue: Queue) -> None:
    assert cli("schedules") == (1, "no schedules\n", "")
    daily = queue.schedule("orders", "daily", cron="0 8 * * 1-5", timezone="Europe/Paris", body={"report": "d"})
    queue.schedule("orders", "tick", every=300)
    queue.schedule("reminders", "nightly", cron="@daily")

    code, out, _ = cli("schedules")
    assert code == 0
    rows = table(out)
    assert rows[0] == ["TOPIC", "NAME", "CALENDAR", "TIMEZONE", "NEXT", "RUN", "AT"]
    assert [row[:2] for row in rows[1:]] == [["orders", "daily"], ["orders", "tick"], ["reminders", "nightly"]]
    assert " ".join(rows[1][2:7]) == "0 8 * * 1-5"
    assert rows[2][2:4] == ["every", "300s"]

    code, out, _ = cli("schedules", "orders", "--json")
    assert (code, json.loads(out)) == (0, answers.schedules(queue.schedules("orders")))
    assert [s["name"] for s in json.loads(out)["schedules"]] == ["daily", "tick"]

    code, out, _ = cli("schedules", "orders", "daily")
    assert code == 0
    assert "calendar    0 8 * * 1-5 (Europe/Paris)" in out
    assert ", ".join(iso for iso in daily.to_dict()["next_runs"]) in out
    assert '"report": "d"' in out
    code, out, _ = cli("schedules", "orders", "daily", "--json")
    assert json.loads(out) == queue.get_schedule("orders", "daily").to_dict()

    code, out, err = cli("schedules", "orders", "nope")
    assert (code, out) == (1, "")
    assert "nope" in err or "schedule" in err
    code, out, _ = cli("schedules", "orders", "nope", "--json")
    assert (code, json.loads(out)["status"]) == (1, 404)


# ------------------------------------------------------------------------------------- writing


def test_enqueue_creates_a_job_and_refuses_what_it_cannot(cli: Run, queue: Queue) -> None:
    code, out, _ = cli("enqueue", "orders", "--id", "e1", "--delay", "60", "--body", '{"order": 1}', "--key", "acme")
    info = queue.get("orders", "e1")
    assert (code, out) == (0, f"created orders/e1: due {iso_utc(info.run_at_ms)}\n")
    assert (info.state, info.body, info.key) == ("delayed", {"order": 1}, "acme")
    code, out, _ = cli("enqueue", "orders", "--run-at", "2026-01-01T00:00:00Z", "--json")  # the past: due now
    answer = json.loads(out)
    assert (code, queue.get("orders", answer["id"]).state) == (0, "ready")
    assert set(answer) == {"topic", "id", "run_at", "run_at_ms"}  # what POST /jobs answers
    tomorrow = int(time.time()) + 86400
    code, out, _ = cli("enqueue", "orders", "--run-at", f"{tomorrow}.5", "--json")  # epoch seconds, as the API's run_at
    assert (code, json.loads(out)["run_at_ms"]) == (0, tomorrow * 1000 + 500)
    code, out, err = cli("enqueue", "orders", "--id", "e1")
    assert (code, out) == (2, "")
    assert "e1" in err
    code, _, err = cli("enqueue", "orders", "--body", "{bad")
    assert code == 2
    assert err.startswith("delayq enqueue: body: is not JSON")


def test_schedule_writes_and_unschedule_deletes(cli: Run, queue: Queue) -> None:
    code, out, _ = cli("schedule", "orders", "tick", "--every", "60", "--body", '{"beat": true}')
    assert code == 0
    assert out.splitlines()[0] == "schedule orders/tick created"
    assert queue.get_schedule("orders", "tick").schedule.every == 60
    code, out, _ = cli("schedule", "orders", "tick", "--cron", "0 8 * * *", "--timezone", "Europe/Paris")
    assert (code, out.splitlines()[0]) == (0, "schedule orders/tick replaced")
    assert queue.get_schedule("orders", "tick").schedule.timezone == "Europe/Paris"
    code, _, err = cli("schedule", "orders", "tock", "--cron", "0 8 * * *", "--timezone", "EST")
    assert code == 2
    assert "abbreviation" in err
    code, out, _ = cli("unschedule", "orders", "tick")
    assert (code, out) == (0, "schedule orders/tick deleted, its pending occurrence cancelled\n")
    code, _, err = cli("unschedule", "orders", "tick")
    assert (code, err) == (1, "delayq unschedule: no schedule 'tick' in topic 'orders'\n")
