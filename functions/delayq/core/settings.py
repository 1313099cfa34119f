"""Settings: one typed, frozen object read from the environment; explicit arguments win.

Every environment variable delayq reads is named in ``ENV`` below and in ``CONTRACT.md``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from .errors import ConfigError
from .flows import MAX_KEY_CONCURRENCY, MAX_RATE, MIN_RATE, KeyLimits, rate_share
from .models import TOPIC_PATTERN, TOPIC_RE
from .schedule import DEFAULT_BACKOFF_S, MAX_DELAY_MS, encode_backoff, seconds_to_ms
from .urls import parse_redis_url

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
WILDCARD = "*"
WEBHOOK_SCHEMES = ("https://", "http://")
# The least wait between two attempts of a webhook job, whatever its topic's or its own backoff says:
# a job with `retries: 25, backoff: [0]` must not become 26 POSTs at once at someone's server.
WEBHOOK_MIN_BACKOFF_S = 1.0
NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
# A custom domain's API mapping: segments of the characters API Gateway allows in one, or nothing.
MAX_METRICS_TOPICS = 10_000  # series per metric stay in the tens of thousands at most
MAX_REPLICAS = 100  # replicas a create may wait for: far beyond any deployment
# How long a create may wait for them: a second under the socket timeout (connection.SOCKET_TIMEOUT_S),
# or a WAIT's answer would read as a server that hangs.
MAX_REPLICAS_WAIT_MS = 4000
BASE_PATH_RE = re.compile(r"^(/[A-Za-z0-9$_.+!*'()-]+)*$")


class ENV:
    """Names of the environment variables, in one place."""

    REDIS_URL = "DELAYQ_REDIS_URL"
    REDIS_MODE = "DELAYQ_REDIS_MODE"
    REDIS_SECRET = "DELAYQ_REDIS_SECRET"  # noqa: S105 - a variable name, not a secret
    NAMESPACE = "DELAYQ_NAMESPACE"
    PARTITIONS = "DELAYQ_PARTITIONS"
    TOPICS = "DELAYQ_TOPICS"
    TICK = "DELAYQ_TICK"
    LOOP_SECONDS = "DELAYQ_LOOP_SECONDS"
    WEBHOOK_SECRET = "DELAYQ_WEBHOOK_SECRET"  # noqa: S105 - a variable name, not a secret
    WEBHOOK_SECRET_ID = "DELAYQ_WEBHOOK_SECRET_ID"  # noqa: S105 - a variable name, not a secret
    UI_TOKEN = "DELAYQ_UI_TOKEN"  # noqa: S105 - the local HTTP surfaces' token (delayq.surfaces.localhttp)
    API_BASE_PATH = "DELAYQ_API_BASE_PATH"
    METRICS_TOPICS = "DELAYQ_METRICS_TOPICS"
    MIN_REPLICAS = "DELAYQ_MIN_REPLICAS"
    MIN_REPLICAS_WAIT_MS = "DELAYQ_MIN_REPLICAS_WAIT_MS"


def shown_target(spec: str) -> str:
    """A target as tools may see it: a webhook's scheme and host alone (its path or query may hold a
    token: Slack's do); any other kind as it is (an ARN, a Python function)."""
    if not is_webhook(spec):
        return spec
    parts = urlsplit(spec)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}/…"


def is_webhook(target: str) -> bool:
    """Whether a topic's ``target`` is a webhook URL (``https://...``, or ``http://...``)."""
    return target.startswith(WEBHOOK_SCHEMES)


class TopicConfig(BaseModel):
    """How one topic's jobs are delivered. ``timeout`` and ``backoff`` are seconds.

    ``error_detail`` (webhooks): a failed delivery's last error shows the URL's path and the start of
    the answer's body. Off by default, since every API caller can read a job's last error, and a
    webhook URL's path (or its server's answer) may hold a token.

    ``keep_done`` (seconds, 0: none) and ``keep_done_max``: how long, and how many, receipts of jobs
    that succeeded are kept (``lua/includes/receipts.lua``).

    ``on_done`` and ``on_dead``: a topic in which a job is created when one of this topic's succeeds,
    or goes dead (``core/callbacks.py``); ``Topics.parse`` refuses callbacks that loop."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    target: str = Field(min_length=1)
    timeout: float = Field(default=30, ge=1, le=900)
    retries: int = Field(default=2, ge=0, le=25)
    backoff: tuple[float, ...] = Field(default=DEFAULT_BACKOFF_S, min_length=1, max_length=64, strict=False)
    batch: int = Field(default=100, ge=1, le=1000)
    concurrency: int = Field(default=8, ge=1, le=1024)
    allow_http: bool = False
    allow_private: bool = False
    error_detail: bool = False
    keep_done: int = Field(default=3600, ge=0, le=MAX_DELAY_MS // 1000)
    keep_done_max: int = Field(default=10_000, ge=1, le=10_000_000)
    rate: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)
    burst: int | None = Field(default=None, ge=1, le=MAX_RATE)
    key_concurrency: int | None = Field(default=None, ge=1, le=MAX_KEY_CONCURRENCY)
    key_rate: float | None = Field(default=None, ge=MIN_RATE, le=MAX_RATE)
    key_burst: int | None = Field(default=None, ge=1, le=MAX_RATE)
    on_done: str | None = Field(default=None, pattern=TOPIC_PATTERN)
    on_dead: str | None = Field(default=None, pattern=TOPIC_PATTERN)

    @field_validator("burst", "key_burst")
    @classmethod
    def _burst_needs_rate(cls, value: int | None, info: ValidationInfo) -> int | None:
        rate = "rate" if info.field_name == "burst" else "key_rate"
        if value is not None and info.data.get(rate) is None:
            raise ValueError(f"a {info.field_name} needs a {rate}")
        return value

    @field_validator("backoff")
    @classmethod
    def _backoff_in_range(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        for seconds in value:
            if not 0 <= seconds * 1000 <= MAX_DELAY_MS:
                raise ValueError("each backoff entry must be between 0 and 366 days in seconds")
        return value

    @property
    def timeout_ms(self) -> int:
        return seconds_to_ms(self.timeout)

    def rate_share(self, partitions: int) -> tuple[int, int] | None:
        """One partition's share of the topic's rate limit, as take.lua's bucket reads it (µs): the
        interval between two starts (``partitions / rate`` s, rounded up) and the tolerance, the
        burst's share (``burst / partitions`` intervals, at least one). Every partition gets an equal
        share, so the starts across all of them never exceed ``rate`` per second plus ``burst``; None
        without a rate."""
        return None if self.rate is None else rate_share(self.rate, self.burst, partitions)

    @property
    def key_limits(self) -> KeyLimits:
        """Every flow key's limits, unless the key has its own (``core/flows.py``)."""
        return KeyLimits(self.key_concurrency, self.key_rate, self.key_burst)

    @property
    def keep_done_ms(self) -> int:
        return self.keep_done * 1000

    @property
    def min_backoff_s(self) -> float:
        """The least wait between two attempts, whatever a backoff says: ``WEBHOOK_MIN_BACKOFF_S``
        for a webhook topic, none for others."""
        return WEBHOOK_MIN_BACKOFF_S if is_webhook(self.target) else 0.0

    @property
    def backoff_csv(self) -> str:
        """The backoff as the Lua scripts read it: comma-separated milliseconds, no entry below
        ``min_backoff_s``."""
        return encode_backoff(self.backoff, floor_s=self.min_backoff_s)


_UNCONFIGURED = TopicConfig(target="-")  # the defaults, for a topic whose config is gone


@dataclass(frozen=True)
class Topics(Mapping[str, TopicConfig]):
    """Topic name -> config; the ``*`` entry, when present, configures every other topic."""

    configs: Mapping[str, TopicConfig] = field(default_factory=dict)

    def __getitem__(self, topic: str) -> TopicConfig:
        return self.configs[topic]

    def __iter__(self) -> Iterator[str]:
        return iter(self.configs)

    def __len__(self) -> int:
        return len(self.configs)

    def for_topic(self, topic: str) -> TopicConfig | None:
        """The config that applies to ``topic``: its own, else the ``*`` entry, else None."""
        return self.configs.get(topic) or self.configs.get(WILDCARD)

    def retrying(self, topic: str) -> TopicConfig:
        """The config whose retries and backoff apply to ``topic``'s failed attempts: ``for_topic``'s,
        or the defaults for a topic no longer configured (its jobs are still retried and dead-lettered,
        as a topic with the default config would have them)."""
        return self.for_topic(topic) or _UNCONFIGURED

    def published(self) -> dict[str, Any]:
        """The configs as the loops publish them for tools (``Namespace.publish_topics``): each without
        what a default gives, its target without secrets (``shown_target``)."""
        return {
            name: config.model_dump(mode="json", exclude_defaults=True) | {"target": shown_target(config.target)}
            for name, config in self.configs.items()
        }

    @property
    def named(self) -> tuple[str, ...]:
        """The explicitly configured topic names (without ``*``)."""
        return tuple(name for name in self.configs if name != WILDCARD)

    @property
    def has_wildcard(self) -> bool:
        return WILDCARD in self.configs

    @classmethod
    def parse(cls, raw: str | Mapping[str, Any] | None) -> Topics:
        """From ``DELAYQ_TOPICS``: a JSON object, ``@path`` to a JSON file, or an already parsed mapping."""
        if raw is None or raw == "":
            return cls()
        if isinstance(raw, str):
            text = raw.strip()
            if text.startswith("@"):
                try:
                    text = Path(text[1:]).read_text(encoding="utf-8")
                except OSError as exc:
                    raise ConfigError(f"{ENV.TOPICS}: cannot read {text[1:]!r}: {exc.strerror}") from None
            try:
                raw = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{ENV.TOPICS} is not valid JSON: {exc}") from None
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{ENV.TOPICS} must be a JSON object of topic name -> config")
        configs: dict[str, TopicConfig] = {}
        for name, value in raw.items():
            if name != WILDCARD and not TOPIC_RE.fullmatch(name):
                raise ConfigError(f"{ENV.TOPICS}: {name!r} is not a valid topic name")
            try:
                configs[name] = TopicConfig.model_validate(value)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                raise ConfigError(f"{ENV.TOPICS}: topic {name!r}: {where}: {first['msg']}") from None
        topics = cls(configs)
        topics.check_callbacks()
        return topics

    def check_callbacks(self) -> None:
        """Refuses an ``on_done`` or ``on_dead`` that names a topic no config covers (no consumer would
        take its jobs), and callbacks that loop: a topic whose jobs' outcomes come back to it, at once
        or through others, would make jobs without end. ``*`` stands for every topic without a config
        of its own, so ``"*": {"on_dead": "dlq"}`` loops unless ``dlq`` has one."""
        edges: dict[str, list[tuple[str, str, str]]] = {}  # config -> (field, topic named, its config)
        for name, config in self.configs.items():
            for kind in ("on_done", "on_dead"):
                target = getattr(config, kind)
                if target is None:
                    continue
                home = target if target in self.configs else WILDCARD if self.has_wildcard else None
                if home is None:
                    raise ConfigError(f"{ENV.TOPICS}: topic {name!r}: {kind} names {target!r}, which has no config")
                edges.setdefault(name, []).append((kind, target, home))
        done: set[str] = set()  # configs from which no loop starts

        def visit(node: str, stack: list[str], steps: list[str]) -> None:
            """Follows ``node``'s callbacks; ``stack``: the configs that led here, ``steps`` how."""
            for kind, target, home in edges.get(node, ()):
                step = f"{node} {kind} -> {target}"
                if home == node or home in stack:
                    first = stack.index(home) if home in stack else len(stack)
                    raise ConfigError(f"{ENV.TOPICS}: callbacks loop: {', '.join([*steps, step][first:])}")
                if home not in done:
                    visit(home, [*stack, node], [*steps, step])
            done.add(node)

        for name in edges:
            if name not in done:
                visit(name, [], [])


RedisMode = Literal["standalone", "cluster"]


@dataclass(frozen=True)
class Settings:
    """Everything delayq reads from the environment. Secrets are kept out of ``repr``."""

    redis_url: str = field(default=DEFAULT_REDIS_URL, repr=False)
    redis_mode: RedisMode = "standalone"
    redis_secret: str | None = None
    namespace: str = "delayq"
    partitions: int = 1
    topics: Topics = field(default_factory=Topics)
    tick: float = 1.0
    loop_seconds: float = 60.0
    webhook_secret: str | None = field(default=None, repr=False)
    webhook_secret_id: str | None = None
    ui_token: str | None = field(default=None, repr=False)
    api_base_path: str = ""  # stripped from request paths before routing: "/delayq" for a custom domain's mapping
    metrics_topics: int = 100  # topics named in Prometheus metrics, the busiest; the rest summed as "_other"
    min_replicas: int = 0  # replicas that must hold a create before it is answered (Redis WAIT); 0: none
    min_replicas_wait_ms: int = 1000  # how long a create waits for them before answering 503

    def __post_init__(self) -> None:
        parse_redis_url(self.redis_url, ENV.REDIS_URL)  # refused here, before redis-py quotes a piece of it
        if self.webhook_secret and self.webhook_secret_id:
            raise ConfigError(f"set {ENV.WEBHOOK_SECRET} or {ENV.WEBHOOK_SECRET_ID}, not both")
        if self.redis_mode not in ("standalone", "cluster"):
            raise ConfigError(f"{ENV.REDIS_MODE} must be 'standalone' or 'cluster', not {self.redis_mode!r}")
        if not NAMESPACE_RE.fullmatch(self.namespace):
            raise ConfigError(f"{ENV.NAMESPACE} must match {NAMESPACE_RE.pattern} (no braces, no spaces)")
        if not 1 <= self.partitions <= 16384:
            raise ConfigError(f"{ENV.PARTITIONS} must be between 1 and 16384")
        if not 0.001 <= self.tick <= 60:
            raise ConfigError(f"{ENV.TICK} must be between 0.001 and 60 seconds")
        if not 0 <= self.loop_seconds <= 900:
            raise ConfigError(f"{ENV.LOOP_SECONDS} must be between 0 and 900 seconds")
        if not 1 <= self.metrics_topics <= MAX_METRICS_TOPICS:
            raise ConfigError(f"{ENV.METRICS_TOPICS} must be between 1 and {MAX_METRICS_TOPICS}")
        if not 0 <= self.min_replicas <= MAX_REPLICAS:
            raise ConfigError(f"{ENV.MIN_REPLICAS} must be between 0 and {MAX_REPLICAS}")
        if not 1 <= self.min_replicas_wait_ms <= MAX_REPLICAS_WAIT_MS:
            raise ConfigError(f"{ENV.MIN_REPLICAS_WAIT_MS} must be between 1 and {MAX_REPLICAS_WAIT_MS}")
        if not BASE_PATH_RE.fullmatch(self.api_base_path):
            raise ConfigError(f"{ENV.API_BASE_PATH} must be a path such as /delayq, not {self.api_base_path!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:  # noqa: PLR0912 - one branch a variable
        """Read the environment (``os.environ`` by default); keyword arguments override it. An empty
        variable is an unset one (templates often pass empty strings)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        if env.get(ENV.REDIS_URL):
            values["redis_url"] = env[ENV.REDIS_URL]
        if env.get(ENV.REDIS_MODE):
            values["redis_mode"] = env[ENV.REDIS_MODE].strip().lower()
        if env.get(ENV.REDIS_SECRET):
            values["redis_secret"] = env[ENV.REDIS_SECRET]
        if env.get(ENV.NAMESPACE):
            values["namespace"] = env[ENV.NAMESPACE]
        if env.get(ENV.PARTITIONS):
            values["partitions"] = _number(env, ENV.PARTITIONS, int)
        if env.get(ENV.TOPICS):
            values["topics"] = Topics.parse(env[ENV.TOPICS])
        if env.get(ENV.TICK):
            values["tick"] = _number(env, ENV.TICK, float)
        if env.get(ENV.LOOP_SECONDS):
            values["loop_seconds"] = _number(env, ENV.LOOP_SECONDS, float)
        if env.get(ENV.WEBHOOK_SECRET):
            values["webhook_secret"] = env[ENV.WEBHOOK_SECRET]
        if env.get(ENV.WEBHOOK_SECRET_ID):
            values["webhook_secret_id"] = env[ENV.WEBHOOK_SECRET_ID]
        if env.get(ENV.UI_TOKEN):
            values["ui_token"] = env[ENV.UI_TOKEN]
        if env.get(ENV.API_BASE_PATH):
            values["api_base_path"] = base_path(env[ENV.API_BASE_PATH])
        if env.get(ENV.METRICS_TOPICS):
            values["metrics_topics"] = _number(env, ENV.METRICS_TOPICS, int)
        if env.get(ENV.MIN_REPLICAS):
            values["min_replicas"] = _number(env, ENV.MIN_REPLICAS, int)
        if env.get(ENV.MIN_REPLICAS_WAIT_MS):
            values["min_replicas_wait_ms"] = _number(env, ENV.MIN_REPLICAS_WAIT_MS, int)
        if isinstance(overrides.get("topics"), (str, dict)):
            overrides["topics"] = Topics.parse(overrides["topics"])
        values.update(overrides)
        return cls(**values)

    def with_(self, **changes: Any) -> Settings:
        """A copy with some fields changed."""
        return replace(self, **changes)


def base_path(text: str) -> str:
    """A base path as the environment gives it, written one way: ``delayq``, ``/delayq`` and
    ``/delayq/`` are ``/delayq``; ``/`` is none (``""``)."""
    inner = text.strip().strip("/")
    return f"/{inner}" if inner else ""


def _number(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> Any:
    try:
        return kind(env[name])
    except ValueError:
        raise ConfigError(f"{name} must be a number, not {env[name]!r}") from None
