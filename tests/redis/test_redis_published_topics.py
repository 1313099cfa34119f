"""Tools share the topics the loops run with: the loops (and the local stack) publish their topic
config, without secrets, under the namespace; ``Queue.from_env()``, the command line and ``delayq ui``
use it when they have no ``DELAYQ_TOPICS`` of their own. A consumer never runs on it."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from delayq import Queue
from delayq.__main__ import main
from delayq.core.errors import ConfigError
from delayq.loops.consumer import Consumer

MakeQueue = Callable[..., Queue]
SLACK = "https://hooks.slack.com/services/T000/B000/secret-token?x=hush"
TOPICS = {
    "orders": {"target": "python:shop.jobs:close", "retries": 7, "timeout": 12, "on_dead": "alerts"},
    "alerts": {"target": SLACK},
    "*": {"target": "python:shop.jobs:other"},
}


@pytest.fixture
def tool_env(monkeypatch: pytest.MonkeyPatch, redis_url: str, namespace: str) -> None:
    """A tool's environment: the queue's Redis and namespace, and no DELAYQ_TOPICS."""
    monkeypatch.setenv("DELAYQ_REDIS_URL", redis_url)
    monkeypatch.setenv("DELAYQ_NAMESPACE", namespace)
    monkeypatch.delenv("DELAYQ_TOPICS", raising=False)


def test_a_tool_without_topics_takes_those_the_loops_published(make_queue: MakeQueue, tool_env: None) -> None:
    make_queue(topics=TOPICS).publish_topics("delayq consume")
    tool = Queue.from_env()
    assert tool.topics_from_redis
    assert tool.topic_config("orders").retries == 7
    assert tool.topic_config("orders").timeout == 12
    assert tool.topic_config("orders").on_dead == "alerts"
    assert tool.topic_config("anything").target == "python:shop.jobs:other"  # the * entry
    assert tool.topic_config("alerts").target == "https://hooks.slack.com/…"  # no path, no query: no token
    assert tool.enqueue("orders", {"n": 1}, id="o1").created
    assert tool.get("orders", "o1").retries == 7


def test_nothing_published_leaves_a_tool_as_it_was(tool_env: None) -> None:
    tool = Queue.from_env()
    assert not tool.topics_from_redis
    assert not tool.settings.topics


def test_a_tool_with_topics_of_its_own_keeps_them(
    make_queue: MakeQueue, tool_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_queue(topics=TOPICS).publish_topics("delayq consume")
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps({"orders": {"target": "python:m:f", "retries": 1}}))
    tool = Queue.from_env()
    assert not tool.topics_from_redis
    assert tool.topic_config("orders").retries == 1


def test_what_is_published_holds_no_secret(make_queue: MakeQueue, redis_url: str) -> None:
    queue = make_queue(topics=TOPICS)
    queue.publish_topics("the local stack")
    raw = queue.redis.get(queue.keys.published_topics)
    assert "secret-token" not in raw
    assert "hush" not in raw
    document = json.loads(raw)
    assert document["by"] == "the local stack"
    assert document["topics"]["orders"] == {
        "target": "python:shop.jobs:close",
        "retries": 7,
        "timeout": 12.0,
        "on_dead": "alerts",
    }  # only what differs from the defaults


def test_a_consumer_refuses_topics_read_from_redis(make_queue: MakeQueue, tool_env: None) -> None:
    make_queue(topics=TOPICS).publish_topics("delayq consume")
    with pytest.raises(ConfigError, match="a consumer needs DELAYQ_TOPICS of its own"):
        Consumer(Queue.from_env())


def test_the_loops_publish_when_they_start_and_the_command_line_reads_it(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DELAYQ_REDIS_URL", redis_url)
    monkeypatch.setenv("DELAYQ_NAMESPACE", namespace)
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps(TOPICS))
    assert main(["sweep", "--seconds", "0"]) == 0
    capsys.readouterr()
    monkeypatch.delenv("DELAYQ_TOPICS")
    assert main(["topics", "--json"]) == 0
    listed = {topic["topic"] for topic in json.loads(capsys.readouterr().out)["topics"]}
    assert listed == {"orders", "alerts"}  # the configured topics, as the loops have them
    Queue.from_env().enqueue("orders", {}, id="o2", delay=60)
    assert main(["job", "orders", "o2"]) == 0
    assert "attempts     0 (retries: 7)" in capsys.readouterr().out


def test_a_redis_that_does_not_answer_is_logged_not_raised(
    make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    queue = make_queue(topics=TOPICS, redis_url="redis://127.0.0.1:1/0")
    queue.publish_topics("delayq consume")
    assert "the topic config is not published for tools" in caplog.text
