"""What the consumer takes from: each topic it consumes, with its target and the worker threads it may
use, and its lanes, one per partition where the topic has work, each with its own take schedule and
pending settlements. Topics that ``*`` covers share one group of workers and are forgotten once idle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from delayq.core.errors import ConfigError
from delayq.core.flows import UNLIMITED, Shares
from delayq.core.settings import WILDCARD, Settings, TopicConfig
from delayq.store.keys import Partition
from delayq.targets import Target, failing_target, resolve_target, waits_on_network

from .settlement import Pending, Settlement

log = logging.getLogger("delayq.consume")

TAKE_AHEAD_MS = 40  # a take brings the jobs due within this, each started at its run-at (Topic.ahead_ms)
TAKE_WINDOW_S = 0.005  # a lane takes at most once per window while its jobs keep falling due


@dataclass(eq=False)
class Share:
    """Worker threads a group of topics shares: a configured topic alone, or all that ``*`` covers."""

    size: int
    running: int = 0


@dataclass(eq=False)
class Topic:
    name: str
    config: TopicConfig
    target: Target
    share: Share
    running: int = 0  # worker threads busy, including handlers past their timeout
    turn: int = 0  # which due lane takes first, in rotation
    lanes: int = 0  # its lanes (one per partition where it has work)
    rate: tuple[int, int] | None = None  # each partition's share of the rate limit (TopicConfig.rate_share)
    key_limits: Shares = UNLIMITED  # each partition's share (KeyLimits.shares)
    waits: bool = False  # its target waits on the network: a batch's deliveries each get a thread at once

    @property
    def free(self) -> int:
        return min(self.config.concurrency - self.running, self.share.size - self.share.running)

    @property
    def ahead_ms(self) -> int:
        """How far ahead its takes reach: ``TAKE_AHEAD_MS`` while at most half its workers are busy, else
        one ``TAKE_WINDOW_S`` (a busy topic's workers are for the jobs due, not for waiting on the next
        ones, but for those its next take would find late); 0 for a topic with a rate or limits per
        key, whose takes count starts as they are taken (take.lua)."""
        if self.rate is not None or self.key_limits != UNLIMITED:
            return 0
        if 2 * self.free >= min(self.config.concurrency, self.share.size):
            return TAKE_AHEAD_MS
        return round(TAKE_WINDOW_S * 1000)


@dataclass(eq=False)
class Lane:
    """One topic in one partition: its own take schedule and pending settlements."""

    topic: Topic
    partition: Partition
    pending: Pending
    next_check: float = 0.0  # when to take next (inf: when the topic index says it has work)
    held_until: float = 0.0  # paused, or its rate spent: no take before this, whatever the index says
    running: int = 0  # its deliveries not yet finished


def first_due(item: tuple[Topic, list[Lane]]) -> float:
    """When the first of a topic's due lanes fell due: topics take in that order."""
    return min(lane.next_check for lane in item[1])


class Lanes:
    """The topics a consumer consumes (the configured ones, or ``only``; with a ``*`` entry, any other
    that has jobs, made on first use) and their lanes, made when the topic index says they have work."""

    def __init__(
        self,
        settings: Settings,
        settlement: Settlement,
        lock: threading.Lock,
        *,
        partitions: int,
        only: Iterable[str] | None = None,
    ) -> None:
        self.settings = settings
        self.topics: dict[str, Topic] = {}
        self.lanes: dict[tuple[str, int], Lane] = {}
        self.shares: dict[str, Share] = {}  # by configured topic name, or ``*``
        self.run_ms = -1  # the longest timeout a run can ever give a job, in ms; -1: no deadline
        self._settlement = settlement
        self._lock = lock
        self._partitions = partitions
        self._only = None if only is None else set(only)
        self._kept = set(settings.topics.named) | (self._only or set())  # topics never forgotten
        for name in settings.topics.named if self._only is None else sorted(self._only):
            self.topic(name)

    def __iter__(self) -> Iterator[Lane]:
        return iter(self.lanes.values())

    def __len__(self) -> int:
        return len(self.lanes)

    def pool_size(self) -> int:
        """Threads for the whole process: each configured topic's concurrency, and the ``*`` entry's once
        for all the topics it covers."""
        topics = self.settings.topics
        names = sorted(self._only) if self._only is not None else [*topics.named, *([WILDCARD] * topics.has_wildcard)]
        configs = [topics.for_topic(name) for name in names]
        return max(1, sum(config.concurrency for config in configs if config is not None))

    def start_run(self, run_ms: int) -> None:
        """A run begins that can give a job at most ``run_ms`` (-1: no deadline)."""
        self.run_ms = run_ms
        for topic in self.topics.values():
            self._check_timeout(topic)

    def topic(self, name: str) -> Topic | None:
        """The topic named ``name`` (made on first use); None if this consumer does not consume it."""
        topic = self.topics.get(name)
        if topic is not None or not self._consumes(name):
            return topic
        config = self.settings.topics.for_topic(name)
        if config is None:
            return None
        try:
            target = resolve_target(config, self.settings)
        except ConfigError as exc:
            log.error("topic %s: %s; its jobs will fail until this is fixed", name, exc.message)
            target = failing_target(exc.message)
        topic = Topic(name, config, target, self._share(name, config))
        topic.rate = config.rate_share(self._partitions)
        topic.key_limits = config.key_limits.shares(self._partitions)
        topic.waits = waits_on_network(config.target)
        self.topics[name] = topic
        self._check_timeout(topic)
        return topic

    def lane(self, topic: Topic, partition: Partition) -> Lane:
        """The topic's lane in ``partition`` (made on first use)."""
        lane = self.lanes.get((topic.name, partition.index))
        if lane is None:
            pending = self._settlement.lane(partition, topic.name, topic.config)
            lane = self.lanes[(topic.name, partition.index)] = Lane(topic, partition, pending, float("inf"))
            topic.lanes += 1
        return lane

    def shares_with(self, name: str) -> Share | None:
        """The workers the topic ``name`` would run on: its own (a configured topic), or ``*``'s."""
        return self.shares.get(self._share_key(name))

    def forget_idle(self) -> None:
        """Lanes with nothing due soon, nothing running and nothing to settle are forgotten; so are the
        topics ``*`` covers once they have no lane and nothing running."""
        with self._lock:
            idle = [lane for lane in self.lanes.values() if lane.next_check == float("inf") and not lane.running]
            for lane in idle:
                if not lane.pending:
                    del self.lanes[(lane.topic.name, lane.partition.index)]
                    self._settlement.drop(lane.pending)
                    lane.topic.lanes -= 1
                    self.forget_topic(lane.topic)

    def forget_topic(self, topic: Topic) -> None:
        """With the lock held: forgets a topic that ``*`` covers once it has no lane and nothing running
        (checked when its last lane goes)."""
        if not (topic.lanes or topic.running or topic.name in self._kept):
            self.topics.pop(topic.name, None)

    def _share_key(self, name: str) -> str:
        return name if name in self.settings.topics or self._only is not None else WILDCARD

    def _share(self, name: str, config: TopicConfig) -> Share:
        key = self._share_key(name)
        share = self.shares.get(key)
        if share is None:
            share = self.shares[key] = Share(config.concurrency)
        return share

    def _consumes(self, name: str) -> bool:
        return name in self._only if self._only is not None else self.settings.topics.for_topic(name) is not None

    def _check_timeout(self, topic: Topic) -> None:
        """A topic whose timeout is longer than a run can last is never taken from: say so, loudly."""
        if 0 <= self.run_ms < topic.config.timeout_ms:
            log.error(
                "topic %s: timeout %gs is longer than a consume run can last (%ds): its jobs are never taken;"
                " lower the topic's timeout or raise the consume function's timeout",
                topic.name,
                topic.config.timeout,
                self.run_ms // 1000,
                extra={"topic": topic.name, "timeout_s": topic.config.timeout, "run_s": self.run_ms / 1000},
            )
