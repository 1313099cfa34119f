"""``Namespace``: one delayq namespace in one Redis, what every part that talks to Redis shares: the
settings, the keys, the client (connected and checked at its first use), the telemetry, what a create
waits for, and which server holds what (for messages). ``Queue`` is the public client on top of it;
the loops, the schedules and the metrics take a namespace."""

from __future__ import annotations

import json
import logging
import time
from contextlib import suppress

from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, ResponseError

from delayq.core.errors import ConfigError, DelayqError, RedisUnavailable, UnknownTopic
from delayq.core.observability import Telemetry
from delayq.core.settings import ENV, Settings, TopicConfig, Topics

from . import calls
from .connection import RedisClient, connect, redact, redis_errors, server_address
from .keys import Keyspace, Partition
from .scripts import Replicas

log = logging.getLogger("delayq")

MOVED_CHECK_S = 60.0  # how often a process asks again whether the sweeper moved a partition's jobs


class Namespace:
    """The namespace of ``settings`` (``DELAYQ_NAMESPACE``) on the Redis they name; ``redis`` to share
    a client (or any redis-py compatible one)."""

    def __init__(self, settings: Settings, *, redis: RedisClient | None = None, telemetry: Telemetry | None = None):
        self.settings = settings
        self.keys = Keyspace(settings.namespace, settings.partitions)
        # What a create waits for before it is answered (DELAYQ_MIN_REPLICAS): None, nothing.
        self.replicas = (
            Replicas(settings.min_replicas, settings.min_replicas_wait_ms) if settings.min_replicas else None
        )
        self.telemetry = telemetry or Telemetry.disabled()
        self._redis = redis
        self._layout_checked = False
        self._moved_check_at: float | None = 0.0  # when to ask which partitions' jobs are moved; None: all are
        self.topics_from_redis = False  # its topics are those the loops published (``adopt_published_topics``)

    @property
    def redis(self) -> RedisClient:
        """The client, checked once against the namespace's partition count (``_check_layout``)."""
        if self._redis is None:
            self._redis = connect(self.settings)
        if not self._layout_checked:
            self._check_layout(self._redis)
        if self._moved_check_at is not None and time.monotonic() >= self._moved_check_at:
            self._check_moved(self._redis)
        return self._redis

    def _check_layout(self, client: RedisClient) -> None:
        """Records the partition count at the namespace's first use, and refuses another one after:
        jobs written with one count are found only by clients with the same count. With min replicas,
        refuses a server that refuses ``WAIT``."""
        partitions = self.settings.partitions
        with redis_errors(self.server):
            recorded, new = calls.layout(self.keys).run(client)
            if self.replicas is not None:
                self._check_wait(client)
            if new:  # no version before the partitions' job hashes kept a job here
                for partition in self.keys.partitions:
                    partition.moved.known = calls.jobs_moved(partition, mark=True).run(client)
        if recorded != partitions:
            raise ConfigError(
                f"{ENV.PARTITIONS} is {partitions}, but namespace {self.settings.namespace!r} has {recorded} "
                f"partitions, where its jobs are: set {ENV.PARTITIONS}={recorded} (a namespace's partition count "
                "is fixed; use a new namespace for another)"
            )
        self._layout_checked = True

    def _check_moved(self, client: RedisClient) -> None:
        """Learns which partitions hold no job in their topics' own hashes any more (the sweeper moved
        them, ``Partition.key_group``), asking again every ``MOVED_CHECK_S`` until all do. Only a cost
        is at stake (the scripts look in both places meanwhile): a Redis that does not answer is
        asked again later."""
        self._moved_check_at = time.monotonic() + MOVED_CHECK_S
        try:
            with redis_errors(self.server):
                for partition in self.keys.partitions:
                    if not partition.moved.known:
                        partition.moved.known = calls.jobs_moved(partition).run(client)
        except RedisUnavailable as exc:
            log.debug("which partitions' jobs are moved is asked again later: %s", exc.message)
            return
        if all(partition.moved.known for partition in self.keys.partitions):
            self._moved_check_at = None

    def _check_wait(self, client: RedisClient) -> None:
        """``ConfigError`` naming ``DELAYQ_MIN_REPLICAS`` if the server refuses ``WAIT``: an error reply,
        or, as twemproxy does, a hang-up on a server that answers a PING."""
        try:
            client.execute_command("WAIT", 0, 0)  # type: ignore[no-untyped-call]
        except (RedisConnectionError, ResponseError) as exc:
            if isinstance(exc, RedisConnectionError):
                client.ping()  # Redis answers (else RedisUnavailable): it was WAIT that was refused
            raise ConfigError(
                f"{ENV.MIN_REPLICAS} is {self.settings.min_replicas}, but {self.server()} refuses WAIT "
                f"({type(exc).__name__}), which it needs (a proxy such as twemproxy does): unset it, or connect "
                "to the primary itself"
            ) from None

    def publish_topics(self, by: str) -> None:
        """Writes the topic config this process runs with (``Topics.published``: no secrets) where tools
        without a ``DELAYQ_TOPICS`` of their own read it; ``by``: who, for people reading it. A Redis
        that does not answer is logged: the process starts anyway, and tools keep what they had."""
        document = {"topics": self.settings.topics.published(), "by": by, "at_ms": int(time.time() * 1000)}
        try:
            with redis_errors(self.server):
                self.redis.set(self.keys.published_topics, json.dumps(document, separators=(",", ":")))
        except RedisUnavailable as exc:  # an outage; settings that cannot work are the caller's to report
            log.warning("the topic config is not published for tools: %s", exc.message)

    def adopt_published_topics(self) -> bool:
        """Without topics of its own (no ``DELAYQ_TOPICS``), takes those the loops published, so that a
        tool next to them knows their topics, retries and timeouts; whether it did. What cannot be read
        (Redis away, nothing published, a config this version refuses) leaves it as it was."""
        if self.settings.topics:
            return False
        try:
            with redis_errors(self.server):
                raw = self.redis.get(self.keys.published_topics)
            topics = Topics.parse(json.loads(raw)["topics"]) if raw else None
        except (DelayqError, ValueError, KeyError, TypeError) as exc:
            log.debug("no published topic config: %s", exc)
            return False
        if not topics:
            return False
        self.settings = self.settings.with_(topics=topics)
        self.topics_from_redis = True
        return True

    def topic_config(self, topic: str) -> TopicConfig:
        """``topic``'s config, its own or the ``*`` entry's; ``UnknownTopic`` (422) without either."""
        config = self.settings.topics.for_topic(topic)
        if config is None:
            raise UnknownTopic(topic)
        return config

    def node(self, partition: Partition) -> str | None:
        """On a cluster, the node that holds ``partition`` as the client's slot table has it
        (``host:port``); None on one server, or before the client connected."""
        if isinstance(self._redis, RedisCluster):
            with suppress(RedisClusterException):
                found = self._redis.get_node_from_key(partition.lock)  # type: ignore[no-untyped-call]
                return str(found.name)
        return None

    def server(self, partition: Partition | None = None) -> str:
        """Which Redis this namespace is on, or holds ``partition`` (on a cluster: its slot's master, as
        the client's slot table has it), for messages: its host and port, never a password."""
        node = None if partition is None else self.node(partition)
        if node is not None:
            return f"Redis at {node}"
        if self._redis is not None:
            return f"Redis at {server_address(self._redis)}"
        if self.settings.redis_secret:
            return f"Redis (the URL in {ENV.REDIS_SECRET})"
        return f"Redis at {redact(self.settings.redis_url)}"

    def ping(self) -> bool:
        """True when every partition's Redis answers."""
        with redis_errors(self.server):
            return bool(self.redis.ping())

    def close(self) -> None:
        """Closes the connections it opened, if any; the next call opens new ones."""
        if self._redis is not None:
            self._redis.close()
