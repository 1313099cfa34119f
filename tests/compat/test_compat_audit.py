"""Command audit: MONITOR on a private redis-server while delayq runs a whole lifecycle against it
(Queue API, the HTTP API's resolver, Sweeper and Consumer, the sweep lock taken, renewed and
released), then what delayq's connections sent, checked against the contract's list of commands the
data path never sends. INFO commandstats and errorstats of the same window cross-check MONITOR, which
does not show admin commands (CONFIG ...) nor commands the server rejected (e.g. CLIENT SETINFO on
Redis 7.0)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from delayq import Queue
from delayq.core.loop import Budget
from delayq.loops.sweeper import Sweeper
from delayq.store.scripts import all_scripts
from delayq.surfaces.api import create_app

from support import recorder
from support.answers import response_json
from support.compat import (
    OK_IDS,
    TOPIC,
    Monitor,
    Report,
    Seen,
    attempts,
    check_deliveries,
    command_stats,
    direct_client,
    drive,
    error_stats,
    forbidden_in,
    lifecycle,
    make_settings,
)
from support.events import api_event
from support.servers import RedisServer

# Every command delayq may send, from its connections or its scripts: all in Redis 6.2 (the oldest the
# contract supports) with the options used (checked below). A new one must be added here on purpose.
REDIS_6_2_COMMANDS = frozenset(
    ("PING", "EVAL", "EVALSHA", "SET", "GET", "DEL", "SMEMBERS", "SADD", "SCARD", "PEXPIRE", "TIME", "INCRBY",
     "ZADD", "ZREM", "ZRANGE", "ZREVRANGE", "ZRANGEBYSCORE", "ZSCORE", "ZCARD", "ZCOUNT", "ZRANK",
     "HSET", "HSETNX", "HGET", "HMGET", "HDEL", "HINCRBY", "HLEN", "RPUSH", "LPUSH", "LRANGE", "LTRIM", "LLEN",
     "LPOS", "LSET", "LPOP", "SREM", "ZREMRANGEBYSCORE", "PEXPIREAT", "HSCAN", "HGETALL", "ZMSCORE",
     "ZREMRANGEBYRANK", "ZLEXCOUNT", "EXISTS")
)  # fmt: skip


@dataclass
class Audit:
    queue: Queue
    monitor_address: str
    seen: list[Seen]
    stats: Counter[str]
    errors: dict[str, int]

    @property
    def sent(self) -> list[Seen]:
        """What delayq's connections sent (every client of the stream but the test's two)."""
        return [s for s in self.seen if not s.from_lua]

    @property
    def lua(self) -> list[Seen]:
        return [s for s in self.seen if s.from_lua]


def api_calls(queue: Queue, report: Report) -> None:
    """Every route of the HTTP API, through the resolver ``functions/enqueue.py`` serves."""
    app = create_app(queue)

    def call(method: str, path: str, body: Any = None, query: dict[str, str] | None = None) -> tuple[int, Any]:
        response = app.resolve(api_event(method, path, body, query=query), None)
        return response["statusCode"], response_json(response)

    job = {"topic": TOPIC, "id": "api-1", "delay": 60, "body": {"via": "api"}}
    assert call("POST", "/jobs", job)[0] == 201
    assert call("POST", "/jobs", job)[0] == 409
    assert call("PUT", f"/jobs/{TOPIC}/api-2", {"delay": 60})[0] == 201
    assert call("PUT", f"/jobs/{TOPIC}/api-2", {"delay": 30})[0] == 200
    assert call("PATCH", f"/jobs/{TOPIC}/api-1", {"delay": 0})[0] == 200
    status, got = call("GET", f"/jobs/{TOPIC}/api-1")
    assert (status, got["state"], got["body"]) == (200, "ready", {"via": "api"})
    batch = {
        "jobs": [{"topic": TOPIC, "id": "api-f", "retries": 0, "body": {"fail": True}}, {"topic": TOPIC, "id": "api-1"}]
    }
    status, answer = call("POST", "/jobs/batch", batch)
    assert (status, [r["status"] for r in answer["results"]]) == (200, [201, 409])
    assert call("DELETE", f"/jobs/{TOPIC}/api-2")[0] == 204
    assert call("GET", f"/jobs/{TOPIC}/api-2")[0] == 404
    status, topic = call("GET", f"/topics/{TOPIC}")
    assert (status, topic["ready"], topic["delayed"]) == (200, 2, 0)

    drive(queue, lambda: call("GET", f"/topics/{TOPIC}")[1]["dead"] == 1 and attempts("api-1") == [1], report)
    status, dead = call("GET", f"/topics/{TOPIC}/dead", query={"limit": "10"})
    assert (status, [j["id"] for j in dead["jobs"]]) == (200, ["api-f"])
    assert call("POST", f"/topics/{TOPIC}/dead/replay") == (200, {"replayed": 1})
    drive(queue, lambda: len(attempts("api-f")) == 2 and call("GET", f"/topics/{TOPIC}")[1]["dead"] == 1, report)
    assert call("DELETE", f"/topics/{TOPIC}/dead") == (200, {"purged": 1})
    status, page = call("GET", f"/topics/{TOPIC}/jobs", query={"state": "delayed", "limit": "1"})
    assert (status, page["next"]) == (200, None)
    assert call("GET", "/topics")[0] == 200
    assert call("GET", f"/topics/{TOPIC}/forecast")[0] == 200
    assert call("POST", f"/topics/{TOPIC}/pause") == (200, {"paused": True})
    assert call("POST", f"/topics/{TOPIC}/resume") == (200, {"paused": False})
    assert call("DELETE", f"/topics/{TOPIC}/jobs", query={"state": "dead"}) == (200, {"cancelled": 0})
    delayed = call("GET", f"/topics/{TOPIC}")[1]["delayed"]
    assert call("DELETE", f"/topics/{TOPIC}/jobs", query={"state": "delayed"}) == (200, {"cancelled": delayed})
    assert call("GET", f"/topics/{TOPIC}")[1]["delayed"] == 0
    assert call("GET", "/health")[0] == 200
    assert call("GET", "/openapi.json")[0] == 200


@pytest.fixture(scope="module")
def audit() -> Iterator[Audit]:
    """One capture for the module: set-up before MONITOR starts, clean-up after it stops."""
    recorder.reset()
    with RedisServer() as server, direct_client(server.port) as control:
        queue = Queue(make_settings(server.url, partitions=2))  # connects lazily: inside the capture
        control.config_resetstat()
        monitor = Monitor(server.port)
        try:
            report = lifecycle(queue)
            api_calls(queue, report)
            # One sweeper holding both locks over several passes: each sweep call renews its lock.
            summary = Sweeper(queue).run(Budget.of(0.35))
            assert (summary["locks_taken"], summary["locks_lost"], summary["redis_errors"]) == (2, 0, 0)
            assert summary["passes"] >= 2
            queue.ping()
            queue.known_topics()
        finally:
            seen = monitor.stop()
            queue.close()
        check_deliveries([*OK_IDS, "api-1"])
        yield Audit(queue, monitor.address, seen, command_stats(control), error_stats(control))


def test_audit_prints_what_delayq_sent(audit: Audit) -> None:
    sent = Counter(s.name for s in audit.sent)
    lua = Counter(s.name for s in audit.lua)
    print("\ncommands from delayq's connections:", dict(sorted(sent.items())))
    print("commands from its Lua scripts:", dict(sorted(lua.items())))
    assert audit.sent, "MONITOR showed nothing from delayq"
    assert all(s.client not in (audit.monitor_address, "") for s in audit.sent)
    assert len({s.client for s in audit.sent}) >= 1


def test_audit_nothing_forbidden_from_delayq_connections(audit: Audit) -> None:
    sent = Counter(s.name.lower() for s in audit.sent)
    assert forbidden_in(sent) == {}


def test_audit_every_script_call_names_keys(audit: Audit) -> None:
    calls = [s for s in audit.sent if s.name in ("EVAL", "EVALSHA")]
    assert len(calls) >= 50
    assert [s.args[:3] for s in calls if int(s.args[2]) < 1] == []
    assert {s.name for s in calls} == {"EVAL", "EVALSHA"}  # NOSCRIPT on the fresh server: EVAL fallback


def test_audit_time_comes_from_lua_only(audit: Audit) -> None:
    """Server time is read inside Lua (required); the parsing that tells Lua apart still works."""
    assert Counter(s.name for s in audit.lua)["TIME"] >= 20
    assert [s for s in audit.sent if s.name == "TIME"] == []


def test_audit_sweep_lock_taken_renewed_released(audit: Audit) -> None:
    locks = {p.lock for p in audit.queue.keys.partitions}
    taken = {s.args[1] for s in audit.sent if s.name == "SET" and s.args[1] in locks and "NX" in map(str.upper, s.args)}
    renewed = {s.args[1] for s in audit.lua if s.name == "PEXPIRE" and s.args[1] in locks}
    released = {s.args[1] for s in audit.lua if s.name == "DEL" and s.args[1] in locks}
    assert taken == renewed == released == locks


def test_audit_monitor_saw_everything_the_server_ran(audit: Audit) -> None:
    """INFO commandstats counts every command run in the window, admin ones too, which MONITOR hides:
    apart from the test's own (CONFIG RESETSTAT, MONITOR, the end marker's ECHO) it must match MONITOR exactly,
    delayq's commands plus its scripts'. No error but NOSCRIPT: nothing was refused either (a command
    the server rejects shows in neither)."""
    mine = Counter({"config|resetstat": 1, "monitor": 1, "echo": 1})
    monitored = Counter(s.name.lower() for s in audit.seen)
    assert audit.stats - mine == monitored
    assert set(audit.errors) == {"NOSCRIPT"}, audit.errors


def test_audit_commands_exist_in_redis_6_2(audit: Audit) -> None:
    """The contract says Redis >= 6.2: every command delayq or its scripts run is in 6.2, with options
    6.2 knows (PEXPIRE NX/XX/GT/LT are 7.0), and no script uses 7.0's shebang flags or version API."""
    names = {s.name for s in audit.seen}
    assert names <= REDIS_6_2_COMMANDS, names - REDIS_6_2_COMMANDS
    assert all(len(s.args) == 3 for s in audit.seen if s.name == "PEXPIRE")
    set_options = {a.upper() for s in audit.seen if s.name == "SET" for a in s.args[3:] if not a.isdigit()}
    assert set_options <= {"NX", "PX"}, set_options
    for script in all_scripts():
        assert not script.source.startswith("#!"), script.name
        assert not re.search(r"\bredis\.REDIS_VERSION|\bserver\.call\b", script.source), script.name
