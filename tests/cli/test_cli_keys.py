"""``delayq keys TOPIC`` and ``delayq key TOPIC KEY`` against the real Redis: a topic's flow keys as a
table and as the route's JSON, page by page; one key shown, its settings changed first (one
``set_key``), reset; values refused with the field named, never a traceback."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from delayq import Queue
from delayq.__main__ import main
from delayq.core.schedule import iso_utc
from delayq.store import calls
from delayq.store.calls import Failure

Run = Callable[..., tuple[int, str, str]]
HEADER = ["KEY", "DELAYED", "READY", "RESERVED", "CONCURRENCY", "RATE", "BURST", "PAUSED", "HELD", "UNTIL"]


@pytest.fixture
def cli(handler_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> Run:
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


def table(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


def hold(queue: Queue, topic: str, key: str, retry_after_ms: int) -> None:
    """A job of ``key`` answered 429 with a Retry-After, as the consumer settles it: the key is held."""
    queue.enqueue(topic, {}, id=f"held-{key}", key=key, delay=0)
    partition = queue.keys.for_job(topic, f"held-{key}")
    taken = calls.take(partition, topic, count=10, timeout_ms=30_000, grace_ms=0).run(queue.redis)
    failures = [Failure(job.id, token, "429", retry_after_ms=retry_after_ms) for job, token, _ in taken.leases]
    calls.fail(partition, topic, queue.settings.topics.retrying(topic), failures).run(queue.redis)


def test_keys_as_a_table_and_as_json(cli: Run, queue: Queue) -> None:
    for n in range(3):
        queue.enqueue("orders", {}, id=f"t7-{n}", key="tenant-7", delay=600)
    queue.enqueue("orders", {}, id="acme-0", key="acme", delay=0)
    queue.enqueue("orders", {}, id="plain", delay=0)  # no key: not listed
    queue.set_key("orders", "acme", concurrency=2, rate=2.5, paused=True)
    queue.set_key("orders", "quiet", burst=4)  # settings, no job

    code, out, err = cli("keys", "orders")
    assert (code, err) == (0, "")
    rows = table(out)
    assert rows[0] == HEADER
    assert rows[1:] == [
        ["acme", "0", "1", "0", "2", "2.5", "2.5", "yes", "-"],  # the burst of a rate without one: the rate
        ["quiet", "0", "0", "0", "-", "-", "4", "no", "-"],
        ["tenant-7", "3", "0", "0", "-", "-", "-", "no", "-"],
    ]
    code, out, _ = cli("keys", "orders", "--json")
    assert (code, json.loads(out)) == (0, queue.flow_keys("orders").to_dict())
    assert json.loads(out)["keys"][0] == {
        "key": "acme", "delayed": 0, "ready": 1, "reserved": 0, "concurrency": 2, "rate": 2.5, "burst": None,
        "paused": True, "held_until_ms": None,
    }  # fmt: skip


def test_keys_page_by_page(cli: Run, queue: Queue) -> None:
    for n in range(5):
        queue.enqueue("orders", {}, id=f"j{n}", key=f"k{n}", delay=600)
    code, out, _ = cli("keys", "orders", "--limit", "2")
    rows = table(out)
    assert code == 0
    assert [row[0] for row in rows[1:3]] == ["k0", "k1"]
    cursor = queue.flow_keys("orders", limit=2).next
    assert cursor is not None
    assert rows[3] == ["(more:", "--cursor", f"{cursor},", "or", "--all)"]
    code, out, _ = cli("keys", "orders", "--limit", "2", "--cursor", cursor)
    assert [row[0] for row in table(out)[1:3]] == ["k2", "k3"]
    code, out, _ = cli("keys", "orders", "--limit", "2", "--all")
    assert [row[0] for row in table(out)[1:]] == ["k0", "k1", "k2", "k3", "k4"]
    code, out, _ = cli("keys", "orders", "--limit", "2", "--all", "--json")
    pages = [json.loads(line) for line in out.splitlines()]
    assert [[key["key"] for key in page["keys"]] for page in pages] == [["k0", "k1"], ["k2", "k3"], ["k4"]]
    assert pages[-1]["next"] is None


def test_a_topic_without_keys_is_nothing(cli: Run, queue: Queue) -> None:
    queue.enqueue("orders", {}, id="plain", delay=600)
    assert cli("keys", "orders") == (1, "no keys in orders\n", "")
    code, out, _ = cli("keys", "orders", "--json")
    assert (code, json.loads(out)) == (1, {"keys": [], "next": None})


def test_a_held_key_says_until_when(cli: Run, queue: Queue) -> None:
    hold(queue, "orders", "dest", retry_after_ms=120_000)
    until = queue.key("orders", "dest").held_until_ms
    assert until is not None
    code, out, _ = cli("keys", "orders")
    assert code == 0
    assert table(out)[1] == ["dest", "1", "0", "0", "-", "-", "-", "no", iso_utc(until)]  # retried after it
    code, out, _ = cli("key", "orders", "dest")
    assert f"held until   {iso_utc(until)} (a receiver's Retry-After)" in out.splitlines()
    code, out, _ = cli("key", "orders", "dest", "--reset", "--json")
    assert json.loads(out)["held_until_ms"] is None  # the hold cleared too
    assert queue.key("orders", "dest").held_until_ms is None


def test_one_key_shown(cli: Run, queue: Queue) -> None:
    queue.enqueue("orders", {}, id="a", key="tenant-7", delay=600)
    queue.enqueue("orders", {}, id="b", key="tenant-7", delay=0)
    code, out, err = cli("key", "orders", "tenant-7")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "topic        orders",
        "key          tenant-7",
        "jobs         1 delayed, 1 ready, 0 reserved",
        "concurrency  unlimited",
        "rate         unlimited",
        "paused       no",
        "held until   -",
    ]
    code, out, _ = cli("key", "orders", "tenant-7", "--json")
    assert (code, json.loads(out)) == (0, queue.key("orders", "tenant-7").to_dict())
    code, out, _ = cli("key", "orders", "nobody")  # a key holding nothing: all zeros, the topic's limits
    assert (code, out.splitlines()[2]) == (0, "jobs         0 delayed, 0 ready, 0 reserved")


def test_a_keys_settings_changed_then_shown(cli: Run, queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    queue.enqueue("orders", {}, id="a", key="tenant-7", delay=600)
    writes: list[dict[str, object]] = []
    set_key = Queue.set_key

    def counted(self: Queue, topic: str, key: str, **settings: object) -> object:
        writes.append(settings)
        return set_key(self, topic, key, **settings)

    monkeypatch.setattr(Queue, "set_key", counted)
    code, out, err = cli("key", "orders", "tenant-7", "--pause", "--concurrency", "2", "--rate", "10", "--burst", "20")
    assert (code, err) == (0, "")
    assert writes == [{"concurrency": 2, "rate": 10, "burst": 20, "paused": True}]  # one write, every field
    limits = queue.key("orders", "tenant-7").limits
    assert (limits.concurrency, limits.rate, limits.burst, limits.paused) == (2, 10.0, 20, True)
    lines = out.splitlines()
    assert "concurrency  2 at once" in lines
    assert "rate         10 starts/s, burst 20" in lines
    assert "paused       yes: no job of it starts until --resume" in lines

    code, out, _ = cli("key", "orders", "tenant-7", "--resume", "--rate", "none", "--json")
    assert code == 0
    assert json.loads(out) == queue.key("orders", "tenant-7").to_dict()
    assert json.loads(out) | {"delayed": 0} == {
        "key": "tenant-7", "delayed": 0, "ready": 0, "reserved": 0, "concurrency": 2, "rate": None, "burst": 20,
        "paused": False, "held_until_ms": None,
    }  # fmt: skip
    code, out, _ = cli("key", "orders", "tenant-7", "--rate", "0.5")
    assert "rate         0.5 starts/s, burst 20" in out.splitlines()

    code, out, _ = cli("key", "orders", "tenant-7", "--reset")
    assert code == 0
    assert queue.key("orders", "tenant-7").limits.empty  # the topic's defaults: unlimited
    assert "concurrency  unlimited" in out.splitlines()
    code, out, _ = cli("key", "orders", "tenant-7", "--reset", "--pause", "--json")  # reset, then pause
    assert json.loads(out)["paused"] is True
    assert json.loads(out)["concurrency"] is None


def test_pause_and_resume_one_key(cli: Run, queue: Queue) -> None:
    queue.enqueue("orders", {}, id="a", key="acme", delay=0)
    assert cli("key", "orders", "acme", "--pause")[0] == 0
    assert queue.key("orders", "acme").limits.paused
    _, out, _ = cli("keys", "orders")
    assert table(out)[1][7] == "yes"
    assert cli("key", "orders", "acme", "--resume")[0] == 0
    assert not queue.key("orders", "acme").limits.paused


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--concurrency", "abc"], 2,
         "delayq key: concurrency: must be a number, or none (the topic's setting again), not 'abc'\n"),
        (["--concurrency", "0"], 2, "delayq key: concurrency: must be an integer from 1 to 100000, or null\n"),
        (["--concurrency", "1.5"], 2, "delayq key: concurrency: must be an integer from 1 to 100000, or null\n"),
        (["--rate", "-1"], 2, "delayq key: rate: must be from 0.0001 to 100000, or null\n"),
        (["--rate", "fast"], 2,
         "delayq key: rate: must be a number, or none (the topic's setting again), not 'fast'\n"),
        (["--burst", "1e9"], 2, "delayq key: burst: must be an integer from 1 to 100000, or null\n"),
    ],
)  # fmt: skip
def test_bad_values_name_their_field(cli: Run, queue: Queue, argv: list[str], code: int, message: str) -> None:
    queue.set_key("orders", "acme", concurrency=3)
    assert cli("key", "orders", "acme", "--pause", *argv) == (code, "", message)
    limits = queue.key("orders", "acme").limits
    assert (limits.concurrency, limits.paused) == (3, False)  # nothing written


def test_refusals_and_their_exit_codes(cli: Run) -> None:
    assert cli("key", "orders", "bad key!") == (
        2, "", "delayq key: key: must match ^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$\n"
    )  # fmt: skip
    assert cli("keys", "no-such-topic") == (1, "no keys in no-such-topic\n", "")  # covered by "*", empty
    code, out, err = cli("key", "orders", "acme", "--rate", "x", "--json")
    assert (code, err) == (2, "")
    assert json.loads(out)["field"] == "rate"
    assert json.loads(out)["status"] == 422
    for argv in (["key", "orders", "acme", "--pause", "--resume"], ["key", "orders"], ["keys"],
                 ["keys", "orders", "--all", "--cursor", "x"]):  # fmt: skip
        with pytest.raises(SystemExit) as exited:
            cli(*argv)
        assert exited.value.code == 2, argv
