"""Helpers of the HTTP API tier: requests through the real Lambda handler ``functions/enqueue.py``.

``Api.start`` reloads ``enqueue`` so its app reads the environment the test set (``handler_env``, then
any ``monkeypatch`` on top). Every reply is checked on the way: no Python traceback anywhere in it,
and an error is JSON ``{"status", "error", "field", "message"}`` whose ``status`` is the HTTP status.
``Api.snapshot`` dumps every key of the test's namespace with its type and content
(``support.scripts.dump``), so a test can show that a refused request wrote nothing.
"""

from __future__ import annotations

import base64
import importlib
import json
from dataclasses import dataclass
from typing import Any

import redis
from pydantic import BaseModel

import enqueue
from delayq.core.settings import Settings
from delayq.store import calls
from delayq.store.calls import Failure
from delayq.store.keys import Keyspace

from support.events import FakeContext, api_event
from support.scripts import Rules, dump, server_ms

ERROR_KEYS = {"status", "error", "field", "message"}
NOT_REPLICATED_KEYS = {"replicas", "wanted"}  # a 503 not_replicated also says how many replicas
TRACEBACK_MARKERS = ("Traceback", 'File "')
_ABSENT: Any = object()
NO_BODY: Any = _ABSENT  # pass as ``body`` for a request without one


@dataclass
class Reply:
    status: int
    text: str | None
    json: Any
    headers: dict[str, Any]

    @property
    def field(self) -> Any:
        return self.json.get("field") if isinstance(self.json, dict) else None

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.text!r:.300})"


def check_reply(response: dict[str, Any], *, error_shape: bool = True, head: bool = False) -> Reply:
    """The handler's answer as a ``Reply``, after the checks every answer must pass (``head``: the
    answer to a HEAD, which has no body)."""
    assert isinstance(response, dict), response
    status = response["statusCode"]
    text = response.get("body")
    everything = json.dumps(response, default=str)
    for marker in TRACEBACK_MARKERS:
        assert marker not in everything, f"a traceback in the response: {everything[:2000]}"
    if head:
        assert not text, f"a body in the answer to a HEAD: {text!r:.300}"
        return Reply(status, text, None, _headers(response))
    data = None
    if text:
        assert not response.get("isBase64Encoded"), response
        try:
            data = json.loads(text)
        except ValueError:
            raise AssertionError(f"a response that is not JSON: {status} {text[:500]!r}") from None
    if status >= 400 and error_shape:
        assert isinstance(data, dict), f"error {status} without a JSON object body: {text!r}"
        extra = NOT_REPLICATED_KEYS if data.get("error") == "not_replicated" else set()
        assert set(data) == ERROR_KEYS | extra, f"error keys {sorted(data)}: {text}"
        assert data["status"] == status, text
        assert isinstance(data["error"], str), text
        assert data["error"], text
        assert isinstance(data["message"], str), text
        assert data["message"], text
        assert data["field"] is None or isinstance(data["field"], str), text
    headers = _headers(response)
    if text:
        content_type = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
        assert str(content_type).startswith("application/json"), (status, headers)
    return Reply(status, text, data, headers)


def _headers(response: dict[str, Any]) -> dict[str, Any]:
    """An answer's headers, of either payload format (one value per name)."""
    headers = dict(response.get("headers") or {})
    for name, values in (response.get("multiValueHeaders") or {}).items():
        headers.setdefault(name, values[-1] if isinstance(values, list) and values else values)
    return headers


class Api:
    """The enqueue handler, for one test's namespace."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.r = client
        self.namespace = namespace
        self.keys = Keyspace(namespace, 1)

    @classmethod
    def start(cls, client: redis.Redis, namespace: str) -> Api:
        """Reload ``enqueue`` so it reads the current environment; the Api over it."""
        importlib.reload(enqueue)
        return cls(client, namespace)

    # ------------------------------------------------------------------------------ requests

    def send(self, event: dict[str, Any], *, error_shape: bool = True) -> Reply:
        head = str(event.get("httpMethod")).upper() == "HEAD"
        return check_reply(enqueue.lambda_handler(event, FakeContext()), error_shape=error_shape, head=head)

    def call(
        self,
        method: str,
        path: str,
        body: Any = _ABSENT,
        *,
        query: dict[str, str] | None = None,
        raw_body: str | None = None,
        headers: dict[str, str] | None = None,
        error_shape: bool = True,
    ) -> Reply:
        """A request; ``body`` is sent as JSON (``None`` is the JSON ``null``); without it, no body."""
        if body is not _ABSENT and raw_body is None:
            raw_body = json.dumps(body)
        event = api_event(method, path, None, query=query, raw_body=raw_body, headers=headers)
        return self.send(event, error_shape=error_shape)

    def get(self, path: str, **kw: Any) -> Reply:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = _ABSENT, **kw: Any) -> Reply:
        return self.call("POST", path, body, **kw)

    def put(self, path: str, body: Any = _ABSENT, **kw: Any) -> Reply:
        return self.call("PUT", path, body, **kw)

    def patch(self, path: str, body: Any = _ABSENT, **kw: Any) -> Reply:
        return self.call("PATCH", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Reply:
        return self.call("DELETE", path, **kw)

    # ------------------------------------------------------------------------------ shortcuts

    def create(self, topic: str, job_id: str, **fields: Any) -> dict[str, Any]:
        reply = self.post("/jobs", {"topic": topic, "id": job_id, **fields})
        assert reply.status == 201, reply
        return reply.json

    def job(self, topic: str, job_id: str) -> dict[str, Any]:
        reply = self.get(f"/jobs/{topic}/{job_id}")
        assert reply.status == 200, reply
        return reply.json

    def stats(self, topic: str) -> dict[str, Any]:
        reply = self.get(f"/topics/{topic}")
        assert reply.status == 200, reply
        return reply.json

    def snapshot(self) -> dict[str, Any]:
        return dump(self.r, self.namespace)

    def refused(
        self,
        status: int | object,
        field: str | object | None,
        method: str,
        path: str,
        body: Any = _ABSENT,
        *,
        error: str | None = None,
        **kw: Any,
    ) -> Reply:
        """A request that must be refused with ``status`` naming ``field``, leaving Redis as it was.

        ``field=ANY_FIELD`` accepts any field (for errors with no field at fault), ``status=ANY_STATUS``
        any error status (the caller checks it)."""
        before = self.snapshot()
        assert before, "snapshot of an empty namespace: seed some state first"
        reply = self.call(method, path, body, **kw)
        after = self.snapshot()
        if status is not ANY_STATUS:
            assert reply.status == status, reply
        assert reply.status >= 400, reply
        if field is not ANY_FIELD:
            assert reply.field == field, reply
        if error is not None:
            assert reply.json["error"] == error, reply
        assert after == before, "a refused request changed Redis"
        return reply

    # ------------------------------------------------------------------------------ consumer side

    def lease(self, topic: str, job_id: str, timeout_ms: int = 30_000) -> str:
        """Take ``job_id`` as a consumer would (it must be the head of its topic's ready list)."""
        p = self.keys.for_job(topic, job_id)
        taken = calls.take(p, topic, count=1, timeout_ms=timeout_ms, grace_ms=0).run(self.r)
        assert taken.ids == [job_id], f"took {taken.ids!r}, not {job_id!r}"
        return taken.tokens[0]

    def fail(self, topic: str, job_id: str, token: str, error: str, *, retries: int, backoff_ms: int = 60_000) -> str:
        """A failed attempt of a leased job: ``'retried'`` or ``'dead'``."""
        p = self.keys.for_job(topic, job_id)
        rules = Rules(retries, str(backoff_ms))
        failed = calls.fail(p, topic, rules, [Failure(job_id, token, error)]).run(self.r)
        assert failed.retried + failed.dead == 1, failed
        return "dead" if failed.dead else "retried"

    def kill(self, topic: str, job_id: str, error: str = "boom") -> None:
        """Create ``job_id`` due now, lease it and fail it with no retries left: a dead job."""
        self.create(topic, job_id, delay=0, retries=0, body={"dead": job_id})
        token = self.lease(topic, job_id)
        assert self.fail(topic, job_id, token, error, retries=0) == "dead"

    def finish(self, topic: str, job_id: str, **fields: Any) -> int:
        """Create ``job_id`` due now, lease it and acknowledge it as the consumer does, with its topic's
        receipts config: a done job. When its handler started (Redis ms)."""
        self.create(topic, job_id, delay=0, **fields)
        token = self.lease(topic, job_id)
        started = self.server_ms()
        keeping = Settings.from_env().topics.retrying(topic)
        p = self.keys.for_job(topic, job_id)
        assert calls.ack(p, topic, keeping, [(job_id, token, started)]).run(self.r) == 1
        return started

    def server_ms(self) -> int:
        return server_ms(self.r)


ANY_FIELD: Any = object()
ANY_STATUS: Any = object()


def b64_event(method: str, path: str, body: Any) -> dict[str, Any]:
    """An event whose body is base64-encoded JSON, as API Gateway sends binary media types."""
    event = api_event(method, path, None)
    event["body"] = base64.b64encode(json.dumps(body, ensure_ascii=False).encode()).decode()
    event["isBase64Encoded"] = True
    return event


def assert_model(model: type[BaseModel], data: Any, *, exact: bool = True) -> BaseModel:
    """``data`` is what ``model`` documents: it validates strictly, and (``exact``) has no other keys."""
    assert isinstance(data, dict), data
    parsed = model.model_validate_json(json.dumps(data), strict=True)
    if exact:
        assert set(data) == set(model.model_fields), (model.__name__, sorted(data))
    else:
        assert set(data) <= set(model.model_fields), (model.__name__, sorted(data))
    return parsed
