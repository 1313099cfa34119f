"""The Lua scripts in ``lua/``, and how they are called.

Each script is one atomic operation; its header documents KEYS, ARGV and what it returns. A line
``-- @include name`` pulls in ``lua/includes/name.lua`` (once, wherever it is first asked for).

Calls go out as EVALSHA; when the server answers NOSCRIPT (a restart, a ``SCRIPT FLUSH``, another node
behind a proxy) the same call is repeated as EVAL, which runs the script and caches it. Never
``SCRIPT LOAD``: Codis and twemproxy refuse it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import NoScriptError, ResponseError

from .connection import RedisClient

INCLUDE = re.compile(r"^-- @include (\w+)[ \t]*$", re.MULTILINE)
Arg = str | int | float | bytes


def _read(path: str) -> str:
    return resources.files(__package__).joinpath(f"lua/{path}").read_text(encoding="utf-8")


def build_source(name: str) -> str:
    """The source of ``lua/<name>.lua`` with its includes (and theirs) pulled in, each once."""
    seen: set[str] = set()

    def expand(text: str) -> str:
        def include(match: re.Match[str]) -> str:
            dep = match.group(1)
            if dep in seen:
                return ""
            seen.add(dep)
            return expand(_read(f"includes/{dep}.lua")).rstrip("\n")

        return INCLUDE.sub(include, text)

    return expand(_read(f"{name}.lua"))


@dataclass(frozen=True)
class Script:
    name: str
    source: str
    sha: str

    @classmethod
    def load(cls, name: str) -> Script:
        source = build_source(name)
        return cls(name, source, hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest())

    def __call__(self, client: RedisClient, keys: Sequence[str], args: Sequence[Arg] = ()) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)


@dataclass(frozen=True)
class Call:
    """One script call, for ``run_many``."""

    script: Script
    keys: Sequence[str]
    args: Sequence[Arg] = ()


def run_many(client: RedisClient, calls: Sequence[Call], *, return_exceptions: bool = False) -> list[Any]:
    """Run several script calls in one round trip (a pipeline without MULTI); results in call order.

    Calls answered NOSCRIPT are repeated one by one as EVAL. Any other error is raised, or, with
    ``return_exceptions``, returned in its call's place (an error of the connection itself is raised).
    """
    if len(calls) == 1 and not return_exceptions:
        return [calls[0].script(client, calls[0].keys, calls[0].args)]
    pipe = client.pipeline(transaction=False)
    for call in calls:
        # Not pipe.evalsha(): redis-py's cluster pipeline refuses that method (RedisClusterException).
        route = _route(client, call.keys)
        pipe.execute_command("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args, **route)
    results: list[Any] = pipe.execute(raise_on_error=False)
    for i, result in enumerate(results):
        if isinstance(result, NoScriptError):
            call = calls[i]
            try:
                results[i] = client.eval(call.script.source, len(call.keys), *call.keys, *call.args)
            except ResponseError as exc:
                if not return_exceptions:
                    raise
                results[i] = exc
        elif isinstance(result, Exception) and not return_exceptions:
            raise result
    return results


def _route(client: RedisClient, keys: Sequence[str]) -> dict[str, Any]:
    """In cluster mode, the node of the keys' slot, for a pipelined call: without it redis-py 8 asks a
    server where each EVALSHA goes (COMMAND GETKEYS with all its arguments, one round trip per call)."""
    if isinstance(client, RedisCluster) and keys:
        return {"target_nodes": client.get_node_from_key(keys[0])}  # type: ignore[no-untyped-call]
    return {}


class Scripts:
    """Every script, loaded once per process."""

    enqueue = Script.load("enqueue")
    take = Script.load("take")
    ack = Script.load("ack")
    fail = Script.load("fail")
    sweep = Script.load("sweep")
    cancel = Script.load("cancel")
    reschedule = Script.load("reschedule")
    replay = Script.load("replay")
    purge = Script.load("purge")
    inspect = Script.load("inspect")
    stats = Script.load("stats")
    dead = Script.load("dead")
    unlock = Script.load("unlock")


def all_scripts() -> list[Script]:
    return [value for value in vars(Scripts).values() if isinstance(value, Script)]
