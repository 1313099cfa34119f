"""Helpers of the hostile-input tier: requests through the real Lambda handler ``functions/enqueue.py``,
and the oracle that judges every answer.

Every answer must pass ``support.api.check_reply`` (no traceback, JSON, the error shape for 4xx), be
strict JSON (no ``NaN``/``Infinity``, no lone surrogates) and never be a 5xx: Redis is up. Around
every request the test's namespace is snapshotted and must keep the namespace invariant
(``invariants``: every id of every index, body and error belongs to a job, each job is in exactly the
one place its state says); a refused request (4xx) leaves every key and value as it was; an accepted
one changes exactly the jobs the response names, and ``GET`` agrees with it.

``wsgi_app`` serves the same handler as a WSGI application (each HTTP request becomes the API Gateway
event the local stack builds, ``delayq.surfaces.localhttp``), so schemathesis can call it in-process, without a network.
"""

from __future__ import annotations

import base64
import importlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import enqueue
from delayq.core.models import ID_PATTERN, MAX_BODY_DEPTH, MAX_DELAY_S, TOPIC_PATTERN
from delayq.core.schedule import parse_run_at, seconds_to_ms
from delayq.store import calls
from delayq.store.calls import Failure
from delayq.store.keys import Keyspace
from delayq.surfaces.localhttp import lambda_app

from support.api import Reply, check_reply
from support.events import FakeContext, api_event
from support.invariants import Broken, Snapshot, StoredJob, check, namespace_keys, read_keys, topic_of_key
from support.recorder import DEFAULT_TOPICS
from support.scripts import Rules, server_ms

# Reproducible in CI: the same examples on every run, nothing written to a .hypothesis directory.
HOSTILE = settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
HOSTILE_SCHEMA = settings(HOSTILE, max_examples=100)  # per operation, each mode

TOPICS = [name for name in DEFAULT_TOPICS if name != "*"]  # configured topics; "*" takes any other
SEED_TOPIC = "orders"
SEED_IDS = ("seed-delayed", "seed-ready", "seed-dead", "seed-reserved")


# ------------------------------------------------------------------------------------------ answers


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} in a response: not JSON")


def strict_json(text: str) -> Any:
    """``text`` parsed as RFC 8259 JSON: no NaN/Infinity, and no string that is not Unicode text."""
    data = json.loads(text, parse_constant=_refuse_constant)
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8")  # a lone surrogate raises
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return data


def judge(response: Any, *, head: bool = False) -> Reply:
    """The checks every answer must pass, whatever was asked (``head``: a HEAD, answered without a
    body): the reply."""
    reply = check_reply(response, head=head)
    assert reply.status < 500, f"a server error while Redis is up: {reply}"
    assert reply.status in KNOWN_STATUSES, reply
    if reply.text:
        strict_json(reply.text)
    if reply.status >= 400 and not head:
        assert reply.json["error"] in ERRORS_BY_STATUS[reply.status], reply
    return reply


KNOWN_STATUSES = {200, 201, 204, 400, 404, 405, 409, 413, 422}
ERRORS_BY_STATUS = {
    400: {"malformed"},
    404: {"not_found"},
    405: {"method_not_allowed"},
    409: {"exists", "reserved", "dead"},
    413: {"too_large"},
    422: {"invalid"},
}


# ------------------------------------------------------------------------------------------ Redis state


class State:
    """The namespace as readable content (``invariants.Snapshot``), kept up to date cheaply: ``refresh``
    re-reads only the keys whose ``DUMP`` bytes changed since the last call, so a snapshot around every
    request stays cheap however many jobs accumulate. The bytes only say where to look: a hash table's
    serialisation order may change without a write (incremental rehashing), so what is compared is
    the content.

    Every refresh checks the namespace invariant (``invariants.check``): in full the first time, then
    for the topics whose keys changed since, or whose jobs or leases changed in the partition's hashes
    and sets of them (a topic none of whose changed keeps the verdict it had), plus the keys and topic
    sets of the whole namespace every time. ``jobs`` is every job of the
    namespace as of the last refresh."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.r = client
        self.namespace = namespace
        self.keyspace = Keyspace(namespace, 1)
        self.dumps: dict[str, bytes] = {}
        self.view: Snapshot = {}
        self.jobs: dict[tuple[str, str], StoredJob] = {}
        self.checked = False

    def raw(self) -> dict[str, bytes]:
        keys = namespace_keys(self.r, self.namespace)
        pipe = self.r.pipeline(transaction=False)
        for key in keys:
            pipe.dump(key)
        return {key: value for key, value in zip(keys, pipe.execute(), strict=True) if value is not None}

    def touched_in_partition_keys(self, view: Snapshot, keys: list[str]) -> set[tuple[int, str]]:
        """The topics whose jobs changed in the partition's job hashes and lease sets among ``keys``
        (fields and members ``topic/id``): what changed there, compared with the last view."""
        p = self.keyspace.partitions[0]
        touched: set[tuple[int, str]] = set()
        for key in set(keys) & {p.metas, p.bodies, p.leases, p.leases_lex}:
            before, after = self.view.get(key, ("", {}))[1], view.get(key, ("", {}))[1]
            before, after = dict(before), dict(after)  # a hash, or a sorted set's (member, score) pairs
            for name in before.keys() | after.keys():
                if before.get(name) != after.get(name):
                    touched.add((p.index, name.partition("/")[0]))
        return touched

    def refresh(self) -> tuple[Snapshot, dict[tuple[str, str], StoredJob]]:
        """The namespace now, and its jobs; raises ``invariants.Broken`` if it breaks the invariant."""
        dumps = self.raw()
        changed = [key for key, value in dumps.items() if self.dumps.get(key) != value]
        gone = self.dumps.keys() - dumps.keys()
        view = {key: value for key, value in self.view.items() if key in dumps}
        view.update(read_keys(self.r, changed))
        if not self.checked:
            jobs = check(view, self.namespace, now_ms=server_ms(self.r))
            self.checked = True
        elif changed or gone:
            touched = {(p.index, topic) for key in [*changed, *gone] if (where := topic_of_key(key, self.keyspace))
                       for p, topic, _ in [where]}  # fmt: skip
            touched |= self.touched_in_partition_keys(view, [*changed, *gone])
            fresh = check(view, self.namespace, now_ms=server_ms(self.r), topics=touched)
            jobs = {key: job for key, job in self.jobs.items() if (0, key[0]) not in touched}
            jobs.update(fresh)
        else:  # nothing changed since the last check: the same verdict, the same jobs
            jobs = self.jobs
        self.dumps, self.view, self.jobs = dumps, view, jobs
        return dict(view), dict(jobs)


# ------------------------------------------------------------------------------------------ the handler


class Hostile:
    """The enqueue handler for one test's namespace, with the oracle around every request."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.r = client
        self.namespace = namespace
        self.keys = Keyspace(namespace, 1)
        self.statuses: dict[int, int] = {}  # of the requests under test (``send``), for coverage checks
        self._killed = 0
        self.state = State(client, namespace)

    @classmethod
    def start(cls, client: redis.Redis, namespace: str) -> Hostile:
        """Reload ``enqueue`` so it reads the test's environment (``handler_env``); seed the namespace."""
        importlib.reload(enqueue)
        api = cls(client, namespace)
        api.seed()
        api.state.refresh()  # the first check of the invariant, in full
        return api

    def server_ms(self) -> int:
        return server_ms(self.r)

    def snapshot(self) -> Snapshot:
        return self.state.refresh()[0]

    def jobs(self) -> dict[tuple[str, str], StoredJob]:
        """Every job of the namespace now, after checking the namespace invariant."""
        return self.state.refresh()[1]

    def raw(self, event: dict[str, Any]) -> Reply:
        """The handler's answer to ``event``, judged; no state checks (the seed, the oracle's reads)."""
        head = str(event.get("httpMethod")).upper() == "HEAD"
        return judge(enqueue.lambda_handler(event, FakeContext()), head=head)

    def send(self, event: dict[str, Any]) -> Reply:
        """``event`` through the handler, with the state checks: the namespace keeps its invariant
        before and after; a refusal changes nothing, an acceptance changes exactly what the response
        says."""
        before, jobs_before = self.state.refresh()
        server_before = self.server_ms()
        reply = self.raw(event)
        self.statuses[reply.status] = self.statuses.get(reply.status, 0) + 1
        try:
            after, jobs_after = self.state.refresh()
        except Broken as broken:
            raise AssertionError(f"{broken}\nafter {reply}\nto {event_summary(event)}") from None
        if reply.status >= 400:
            changed = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
            assert not changed, f"a refused request changed Redis: {changed}\n{reply}\n{event_summary(event)}"
        else:
            Accepted(self, event, reply, before, after, jobs_before, jobs_after, server_before).check()
        return reply

    def call(self, method: str, path: str, raw_body: str | None = None, **kw: Any) -> Reply:
        return self.send(api_event(method, path, None, raw_body=raw_body, **kw))

    def seed(self) -> None:
        """A delayed, a ready, a dead and a reserved job in ``orders``: the snapshot is never empty,
        and every conflict (exists, dead, reserved) is reachable."""
        for job_id, fields in zip(
            SEED_IDS, [{"delay": 3600}, {"delay": 0}, {"delay": 0, "retries": 0}, {"delay": 0}], strict=True
        ):
            body = json.dumps({"topic": SEED_TOPIC, "id": job_id, **fields, "body": {"seed": job_id}})
            assert self.raw(api_event("POST", "/jobs", None, raw_body=body)).status == 201
        self.kill(SEED_TOPIC, SEED_IDS[2])
        self.lease(SEED_TOPIC, SEED_IDS[3])

    def reseed(self) -> None:
        """Every seeded job back in its seeded state: cancel what is left of them, seed again."""
        for job_id in SEED_IDS:
            self.raw(api_event("DELETE", f"/jobs/{SEED_TOPIC}/{job_id}", None))
        self.seed()

    def kill_again(self) -> None:
        """One more dead job in the seed topic, for replays to find."""
        self._killed += 1
        job_id = f"dead-{self._killed}"
        body = json.dumps({"topic": SEED_TOPIC, "id": job_id, "delay": 0, "retries": 0, "body": self._killed})
        assert self.raw(api_event("POST", "/jobs", None, raw_body=body)).status == 201
        self.kill(SEED_TOPIC, job_id)

    def lease(self, topic: str, job_id: str) -> str:
        """Take the ready job ``job_id`` as a consumer would (an hour's lease); its lease token."""
        p = self.keys.for_job(topic, job_id)
        keys = p.topic_keys(topic)
        assert self.r.lrem(keys[1], 1, job_id) == 1, f"{job_id} is not ready"
        self.r.lpush(keys[1], job_id)
        taken = calls.take(p, topic, count=1, timeout_ms=3_600_000, grace_ms=0).run(self.r)
        assert taken.ids == [job_id], taken
        return taken.tokens[0]

    def kill(self, topic: str, job_id: str) -> None:
        """Lease the ready job ``job_id`` and fail it for good: a dead job (the consumer's scripts)."""
        token = self.lease(topic, job_id)
        failure = Failure(job_id, token, "seeded failure", permanent=True)
        failed = calls.fail(self.keys.for_job(topic, job_id), topic, Rules(0, "1000"), [failure]).run(self.r)
        assert failed[:2] == (0, 1)


def event_summary(event: dict[str, Any]) -> str:
    body = event.get("body")
    return f"{event.get('httpMethod')!r} {event.get('path')!r} body={str(body)[:300]!r}"


# ------------------------------------------------------------------------------------------ the oracle

ROUTE_JOB = re.compile(r"^/jobs/([^/]+)/([^/]+)$")
ROUTE_TOPIC = re.compile(r"^/topics/([^/]+)$")
ROUTE_DEAD = re.compile(r"^/topics/([^/]+)/dead$")
ROUTE_REPLAY = re.compile(r"^/topics/([^/]+)/dead/replay$")
ROUTE_TOPIC_JOBS = re.compile(r"^/topics/([^/]+)/jobs$")


def _topic_retries(topic: str) -> int:
    config = DEFAULT_TOPICS.get(topic, DEFAULT_TOPICS["*"])
    return int(config.get("retries", 2))


@dataclass
class Accepted:
    """The checks of an accepted request (2xx): exactly the change its response describes."""

    api: Hostile
    event: dict[str, Any]
    reply: Reply
    before: Snapshot
    after: Snapshot
    jobs_before: dict[tuple[str, str], StoredJob]
    jobs_after: dict[tuple[str, str], StoredJob]
    server_before: int

    def check(self) -> None:
        method = str(self.event["httpMethod"]).upper()
        path = str(self.event["path"])
        self.partition_keys_kept()
        if method in ("GET", "HEAD", "OPTIONS"):
            assert self.after == self.before, f"a {method} changed Redis: {path}"
            return
        document = self.document()
        if (method, path) == ("POST", "/jobs"):
            self.created([(document, self.reply.json)], status=201)
        elif method == "POST" and (match := ROUTE_TOPIC_JOBS.match(path)):
            self.created([({**document, "topic": match.group(1)}, self.reply.json)], status=201)
        elif (method, path) == ("POST", "/jobs/batch"):
            results = self.reply.json["results"]
            assert len(results) == len(document["jobs"]), "one result per job, in order"
            made = list(zip(document["jobs"], results, strict=True))
            self.created([(item, result) for item, result in made if result["status"] == 201], status=201)
            for result in results:
                assert result["status"] in (201, 409, 422), result
                if result["status"] != 201:
                    assert set(result["error"]) == {"status", "error", "field", "message"}, result
        elif method == "PUT" and (match := ROUTE_JOB.match(path)):
            self.put(match.group(1), match.group(2), document)
        elif method == "PATCH" and (match := ROUTE_JOB.match(path)):
            self.rescheduled(match.group(1), match.group(2), document)
        elif method == "DELETE" and (match := ROUTE_JOB.match(path)):
            key = (match.group(1), match.group(2))
            assert key in self.jobs_before, "cancelled a job that did not exist"
            self.only_changed({key})
            assert key not in self.jobs_after
        elif method == "POST" and (match := ROUTE_REPLAY.match(path)):
            self.replayed(match.group(1), document)
        elif method == "DELETE" and (match := ROUTE_DEAD.match(path)):
            topic = match.group(1)
            dead = {key for key, job in self.jobs_before.items() if key[0] == topic and job.place == "dead"}
            assert self.reply.json == {"purged": len(dead)}, self.reply
            self.only_changed(dead)
            assert not dead & self.jobs_after.keys()
        else:
            raise AssertionError(f"an accepted request the oracle does not know: {method} {path} {self.reply}")

    def partition_keys_kept(self) -> None:
        """The partition's own keys: the lock and lease counter untouched, the topics set only grown by
        the topics of the jobs the response says were written."""
        p = self.api.keys.partitions[0]
        for key in (p.lock, p.seq):
            assert self.before.get(key) == self.after.get(key), key
        old = set(self.before.get(p.topics, ("set", []))[1])
        new = set(self.after.get(p.topics, ("set", []))[1])
        assert old <= new, (old, new)
        answers = self.reply.json.get("results", [self.reply.json]) if isinstance(self.reply.json, dict) else []
        written = {item.get("topic") for item in answers if item.get("status", self.reply.status) in (200, 201)}
        assert new - old <= written, f"topics {new - old} listed, but no job of theirs written: {self.reply}"

    def document(self) -> Any:
        body = self.event.get("body")
        if not body:
            return None
        if self.event.get("isBase64Encoded"):
            body = base64.b64decode(body).decode("utf-8")
        return json.loads(body)

    def only_changed(self, keys: Iterable[tuple[str, str]]) -> None:
        """No job other than ``keys`` was created, changed or removed."""
        changed = set(keys)
        for key in (self.jobs_before.keys() | self.jobs_after.keys()) - changed:
            assert self.jobs_before.get(key) == self.jobs_after.get(key), f"job {key} changed by {self.reply}"

    def created(self, made: list[tuple[dict[str, Any], dict[str, Any]]], *, status: int) -> None:
        keys = [(result["topic"], result["id"]) for _, result in made]
        assert len(set(keys)) == len(keys), f"two results name one job: {keys}"
        for key in keys:
            assert key not in self.jobs_before, f"created {key}, which existed"
        self.only_changed(keys)
        for item, result in made:
            assert result.get("status", status) == status, result
            if item.get("id") is not None:  # absent or null: generated
                assert result["id"] == item["id"], (item, result)
            assert result["topic"] == item["topic"], (item, result)
            self.stored_as_answered(item, result)

    def put(self, topic: str, job_id: str, document: dict[str, Any]) -> None:
        existed = (topic, job_id) in self.jobs_before
        assert self.reply.status == (200 if existed else 201), (existed, self.reply)
        if existed:
            assert self.jobs_before[(topic, job_id)].place != "leased", "replaced a reserved job"
        self.only_changed({(topic, job_id)})
        self.stored_as_answered({**document, "topic": topic, "id": job_id}, self.reply.json)

    def rescheduled(self, topic: str, job_id: str, document: dict[str, Any]) -> None:
        old = self.jobs_before[(topic, job_id)]
        assert old.place in ("delayed", "ready"), old
        self.only_changed({(topic, job_id)})
        new = self.jobs_after[(topic, job_id)]
        assert (new.body, new.error) == (old.body, old.error), "a reschedule changed more than the run-at"
        info = self.get(topic, job_id)
        assert info["run_at_ms"] == self.reply.json["run_at_ms"], (info, self.reply)
        self.due_as_asked(document, self.reply.json["run_at_ms"])

    def replayed(self, topic: str, document: dict[str, Any] | None) -> None:
        dead = {key for key, job in self.jobs_before.items() if key[0] == topic and job.place == "dead"}
        ids = None if not document or document.get("ids") is None else set(document["ids"])
        expected = dead if ids is None else {key for key in dead if key[1] in ids}
        assert self.reply.json == {"replayed": len(expected)}, (self.reply, expected)
        self.only_changed(expected)
        for key in expected:
            assert self.jobs_after[key].place == "ready", key

    def get(self, topic: str, job_id: str) -> dict[str, Any]:
        reply = self.api.raw(api_event("GET", f"/jobs/{topic}/{job_id}", None))
        assert reply.status == 200, reply
        return dict(reply.json)

    def stored_as_answered(self, item: dict[str, Any], result: dict[str, Any]) -> None:
        """The job ``result`` names is stored as ``item`` asked, and ``GET`` says what ``result`` said."""
        topic, job_id = result["topic"], result["id"]
        info = self.get(topic, job_id)
        assert (info["topic"], info["id"]) == (topic, job_id), info
        assert info["run_at_ms"] == result["run_at_ms"], (info, result)
        assert info["run_at"] == result["run_at"], (info, result)
        assert info["state"] in ("delayed", "ready"), info
        assert info["state"] == self.jobs_after[(topic, job_id)].place, (info, self.jobs_after[(topic, job_id)])
        assert info["attempts"] == 0, info
        assert info["last_error"] is None, info
        assert info["body"] == item.get("body"), (info["body"], item.get("body"))
        expected_retries = item["retries"] if item.get("retries") is not None else _topic_retries(topic)
        assert info["retries"] == expected_retries, (info, item)
        self.due_as_asked(item, result["run_at_ms"])

    def due_as_asked(self, item: dict[str, Any], run_at_ms: int) -> None:
        """Exactly when asked, and never early: ``run_at`` (or now, when it is past), or now plus the
        delay, "now" being Redis' time while the request ran."""
        server_after = self.api.server_ms()
        if item.get("run_at") is not None:
            asked = parse_run_at(item["run_at"])
            assert max(asked, self.server_before) <= run_at_ms <= max(asked, server_after), (item, run_at_ms)
        else:
            delay_ms = seconds_to_ms(item.get("delay") or 0)
            assert self.server_before + delay_ms <= run_at_ms <= server_after + delay_ms, (item, run_at_ms)


# ------------------------------------------------------------------------------------------ WSGI

# The enqueue handler as a WSGI application, through the local stack's adapter (each request becomes
# the API Gateway event ``delayq.surfaces.localhttp.request_event`` builds). The handler is looked up at each
# request: tests reload ``enqueue`` for their namespace.
wsgi_app = lambda_app(lambda event, _context: enqueue.lambda_handler(event, FakeContext()))


# ------------------------------------------------------------------------------------------ strategies

# Any character, lone surrogates included: json.dumps writes them as \\udXXX escapes, valid JSON syntax.
ANY_CHAR = st.characters(exclude_categories=())
any_text = st.text(ANY_CHAR, max_size=12)
huge_ints = st.sampled_from([2**53 + 1, 2**63, -(2**63) - 1, 10**20, 10**308, 10**400, -(10**400)])
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | huge_ints
    | st.floats()  # NaN and +-Infinity too: json.dumps writes them as the bare literals
    | any_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)
_few_topics = st.sampled_from([*TOPICS, "other.topic", "T-9"])
# Mostly a few topics (each topic adds eight keys to every snapshot), sometimes any valid name.
valid_topics = st.one_of(*[_few_topics] * 7, st.from_regex(TOPIC_PATTERN, fullmatch=True))
valid_ids = st.sampled_from(SEED_IDS) | st.from_regex(ID_PATTERN, fullmatch=True)


@dataclass(frozen=True)
class RelativeTime:
    """A ``run_at`` ``offset_s`` seconds from the server's now, as epoch seconds or ISO-8601 (with
    ``zone``, or none): made concrete by ``materialize`` at request time."""

    offset_s: float
    form: str  # "epoch", "epoch_ms_int", "iso"
    zone: str | None

    def value(self, now_ms: int) -> Any:
        seconds = now_ms / 1000 + self.offset_s
        if self.form == "epoch":
            return seconds
        if self.form == "epoch_int":
            return int(seconds)
        from datetime import UTC, datetime, timedelta, timezone  # noqa: PLC0415

        try:
            when = datetime.fromtimestamp(seconds, tz=UTC)
        except (OverflowError, ValueError, OSError):
            return "99999-01-01T00:00:00Z"
        if self.zone is None:
            return when.replace(tzinfo=None).isoformat()
        if self.zone == "Z":
            return when.isoformat().replace("+00:00", "Z")
        hours = int(self.zone)
        return when.astimezone(timezone(timedelta(hours=hours))).isoformat()


relative_times = st.builds(
    RelativeTime,
    offset_s=st.floats(-10 * 86400, 400 * 86400) | st.sampled_from([0, -1e9, MAX_DELAY_S - 60, MAX_DELAY_S + 60]),
    form=st.sampled_from(["epoch", "epoch_int", "iso"]),
    zone=st.sampled_from([None, "Z", "0", "5", "-14", "14"]),
)
iso_junk = st.sampled_from(
    ["", " ", "now", "2026-13-01T00:00:00Z", "2026-11-22", "2026-11-22T10:00:00", "2026-11-22T10:00:00+25:00",
     "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "1e999", "NaN", "\u0000", "+1795341600"]
)  # fmt: skip

FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "id": valid_ids | json_values,
    "body": json_values,
    "delay": st.floats(-5, 2 * MAX_DELAY_S) | st.integers(-5, 10**9) | huge_ints | json_values,
    "run_at": relative_times | iso_junk | st.floats() | huge_ints | json_values,
    "retries": st.integers(-3, 30) | huge_ints | json_values,
    "timeout": st.floats(-1, 1000) | st.integers(0, 1000) | json_values,
    "backoff": st.lists(st.floats(-1, 2 * MAX_DELAY_S) | st.integers(-1, 10**6), max_size=70) | json_values,
}
extra_fields = st.dictionaries(
    st.sampled_from(["delay_s", "runAt", "Topic", "state", "attempts", "run_at_ms", ""]) | any_text,
    json_values,
    max_size=2,
)


# Valid job options (no topic): the accepted path, and the conflicts behind it.
clean_options = st.fixed_dictionaries(
    {"body": json_values},
    optional={
        "delay": st.floats(0, MAX_DELAY_S) | st.integers(0, 3600),
        "retries": st.integers(0, 25),
        "timeout": st.floats(1, 900),
        "backoff": st.lists(st.floats(0, 3600), min_size=1, max_size=5),
    },
)

# PATCH bodies: mostly one valid time, sometimes both, none, or junk.
reschedules = st.one_of(
    st.fixed_dictionaries({"delay": st.floats(0, MAX_DELAY_S) | st.integers(0, 10**6)}),
    st.fixed_dictionaries({"run_at": relative_times}),
    st.fixed_dictionaries({}, optional={"delay": FIELDS["delay"], "run_at": FIELDS["run_at"]}),
)


@st.composite
def near_valid_jobs(draw: st.DrawFn, *, with_topic: bool = True) -> dict[str, Any]:
    """A job object for ``POST /jobs``: mostly valid fields, some of the wrong type or range,
    sometimes a field missing or one too many."""
    job: dict[str, Any] = {}
    if with_topic and draw(st.integers(0, 9)):
        job["topic"] = draw(valid_topics | json_values) if draw(st.integers(0, 9)) == 0 else draw(valid_topics)
    for name, strategy in FIELDS.items():
        if draw(st.booleans()):
            job[name] = draw(strategy)
    if "delay" in job and "run_at" in job and draw(st.integers(0, 3)):
        del job[draw(st.sampled_from(["delay", "run_at"]))]  # mostly at most one of them
    if draw(st.integers(0, 5)) == 0:
        job.update(draw(extra_fields))
    return job


def materialize(value: Any, now_ms: int) -> Any:
    """``value`` with every ``RelativeTime`` made concrete against the server's ``now_ms``."""
    if isinstance(value, RelativeTime):
        return value.value(now_ms)
    if isinstance(value, dict):
        return {key: materialize(item, now_ms) for key, item in value.items()}
    if isinstance(value, list):
        return [materialize(item, now_ms) for item in value]
    return value


def dumps(value: Any, *, ascii_only: bool = True) -> str:
    """Python's JSON text of ``value``: ``NaN``/``Infinity`` as bare literals, as a hostile client
    written in Python would send them."""
    return json.dumps(value, ensure_ascii=ascii_only)


@st.composite
def raw_texts(draw: st.DrawFn, document: Any) -> str:
    """The text of ``document``, sometimes mangled: truncated, with garbage after it, with a
    duplicate key, whitespace, a BOM, or raw non-ASCII."""
    text = dumps(document, ascii_only=draw(st.booleans()))
    how = draw(st.sampled_from(["plain"] * 6 + ["truncate", "garbage", "duplicate", "space", "bom", "comment"]))
    if how == "truncate" and len(text) > 1:
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif how == "garbage":
        text += draw(st.sampled_from(["x", "}", "]", ",", " {}", "\x00", "NaN"]))
    elif how == "duplicate" and text.startswith("{") and len(text) > 2:
        text = '{"topic": "orders", "topic": ' + dumps(draw(json_values)) + ", " + text[1:]
    elif how in MANGLES:
        text = MANGLES[how].format(text)
    return text


MANGLES = {"space": " \t\r\n{}\n ", "bom": "\ufeff{}", "comment": "/* hi */{}"}


def deep(depth: int, leaf: str = "1") -> str:
    """JSON arrays and objects nested ``depth`` deep around ``leaf``, as text."""
    opens, closes = [], []
    for level in range(depth):
        if level % 2:
            opens.append('{"k":')
            closes.append("}")
        else:
            opens.append("[")
            closes.append("]")
    return "".join(opens) + leaf + "".join(reversed(closes))


DEPTHS = st.sampled_from(
    [MAX_BODY_DEPTH - 1, MAX_BODY_DEPTH, MAX_BODY_DEPTH + 1, 2 * MAX_BODY_DEPTH + 1]
) | st.integers(1, 5000)
