"""DELAYQ_REDIS_SECRET: the Redis URL read from Secrets Manager (moto) through Powertools Parameters,
once per container, and never written to a log or an answer."""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws

import enqueue
from delayq import Queue, RedisUnavailable, Settings, Topics
from delayq.connection import redis_url, url_from_secret
from delayq.errors import ConfigError

from conftest import DEFAULT_TOPICS, FakeContext, api_event, response_json

PASSWORD = "s3cr3t-hunter2"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_REGION": "eu-west-1",
    }.items():
        monkeypatch.setenv(name, value)
    parameters.clear_caches()
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="eu-west-1")
    parameters.clear_caches()


@pytest.mark.parametrize(
    ("value", "url"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("  rediss://cache.example:6379/0\n", "rediss://cache.example:6379/0"),
        (b"unix:///var/run/redis.sock", "unix:///var/run/redis.sock"),
        ('{"url": "rediss://u:p@cache.example:6379/0"}', "rediss://u:p@cache.example:6379/0"),
        ({"url": "redis://h:1/0", "note": "x"}, "redis://h:1/0"),
    ],
)
def test_url_from_secret(value: Any, url: str) -> None:
    assert url_from_secret(value) == url


@pytest.mark.parametrize(
    "value", [None, "", f"http://:{PASSWORD}@h/", f'{{"uri": "redis://:{PASSWORD}@h"}}', f"{{not json {PASSWORD}", 5]
)
def test_a_secret_that_is_not_a_url_is_refused_without_quoting_it(value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        url_from_secret(value)
    assert PASSWORD not in str(info.value)
    assert "DELAYQ_REDIS_SECRET" in str(info.value)


def test_the_queue_connects_to_the_url_in_the_secret(aws: Any, redis_url: str, namespace: str) -> None:
    arn = aws.create_secret(Name="delayq/redis", SecretString=redis_url)["ARN"]
    settings = Settings(
        redis_url="redis://127.0.0.1:1/0", redis_secret=arn, namespace=namespace, topics=Topics.parse(DEFAULT_TOPICS)
    )
    queue = Queue(settings)
    queue.enqueue("orders", {"n": 1}, id="from-secret", delay=60)
    assert queue.get("orders", "from-secret").body == {"n": 1}


def test_json_secret_by_name_is_read_once_per_container(aws: Any, redis_url: str, namespace: str) -> None:
    aws.create_secret(Name="delayq/redis-json", SecretString=json.dumps({"url": redis_url}))
    settings = Settings(redis_secret="delayq/redis-json", namespace=namespace, topics=Topics.parse(DEFAULT_TOPICS))
    assert redis_url == redis_url_of(settings)
    aws.delete_secret(SecretId="delayq/redis-json", ForceDeleteWithoutRecovery=True)
    assert redis_url_of(settings) == redis_url  # cached: no second read
    assert Queue(settings).ping()


def redis_url_of(settings: Settings) -> str:
    return redis_url(settings)


def test_a_missing_secret_is_a_503_from_the_api(
    aws: Any, handler_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DELAYQ_REDIS_SECRET", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:nope-AbCdEf")
    importlib.reload(enqueue)
    for method, path, body in [("GET", "/health", None), ("POST", "/jobs", {"topic": "orders"})]:
        response = enqueue.lambda_handler(api_event(method, path, body), FakeContext())
        assert response["statusCode"] == 503
        error = response_json(response)
        assert error["error"] == "unavailable"
        assert "DELAYQ_REDIS_SECRET" in error["message"]


def test_the_password_never_reaches_logs_or_answers(
    aws: Any,
    handler_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    closed = f"redis://user:{PASSWORD}@127.0.0.1:1/0"
    arn = aws.create_secret(Name="delayq/down", SecretString=closed)["ARN"]
    monkeypatch.setenv("DELAYQ_REDIS_SECRET", arn)
    caplog.set_level(logging.DEBUG, logger="delayq")  # botocore's own DEBUG lines are botocore's business
    importlib.reload(enqueue)
    answers = [
        enqueue.lambda_handler(api_event(method, path, body), FakeContext())
        for method, path, body in [
            ("GET", "/health", None),
            ("POST", "/jobs", {"topic": "orders"}),
            ("GET", "/jobs/orders/x", None),
        ]
    ]
    assert [a["statusCode"] for a in answers] == [503, 503, 503]
    seen = json.dumps(answers) + caplog.text + "".join(capfd.readouterr())
    assert PASSWORD not in seen
    with pytest.raises(RedisUnavailable):
        Queue.from_env().ping()
