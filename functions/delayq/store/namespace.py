"""``Namespace``: one delayq namespace in one Redis, what every part that talks to Redis shares: the
settings, the keys, the client (connected and checked at its first use), the telemetry, what a create
waits for, and which server holds what (for messages). ``Queue`` is the public client on top of it;
the loops, the schedules and the metrics take a namespace."""

from __future__ import annotations

from contextlib import suppress

from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, ResponseError

from delayq.core.errors import ConfigError, UnknownTopic
from delayq.core.observability import Telemetry
from delayq.core.settings import ENV, Settings, TopicConfig

from . import calls
from .connection import RedisClient, connect, redact, redis_errors, server_address
from .keys import Keyspace, Partition
from .scripts import Replicas


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

    @property
    def redis(self) -> RedisClient:
        """The client, checked once against the namespace's partition count (``_check_layout``)."""
        if self._redis is None:
            self._redis = connect(self.settings)
        if not self._layout_checked:
            self._check_layout(self._redis)
        return self._redis

    def _check_layout(self, client: RedisClient) -> None:
        """Records the partition count at the namespace's first use, and refuses another one after:
        jobs written with one count are found only by clients with the same count. With min replicas,
        refuses a server that refuses ``WAIT``."""
        partitions = self.settings.partitions
        with redis_errors(self.server):
            recorded = calls.layout(self.keys).run(client)
            if self.replicas is not None:
                self._check_wait(client)
        if recorded != partitions:
            raise ConfigError(
                f"{ENV.PARTITIONS} is {partitions}, but namespace {self.settings.namespace!r} has {recorded} "
                f"partitions, where its jobs are: set {ENV.PARTITIONS}={recorded} (a namespace's partition count "
                "is fixed; use a new namespace for another)"
            )
        self._layout_checked = True

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
