"""DELAYQ_REDIS_SECRET: the Redis URL read from Secrets Manager (moto) through Powertools Parameters,
once per container, and never written to a log or an answer; read again when Redis refuses its
password (a rotation)."""

from __future__ import annotations

import importlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from moto import mock_aws

import enqueue
from delayq import Queue, RedisUnavailable, Settings, Topics
from delayq.core.errors import ConfigError
from delayq.store import connection
from delayq.store.connection import redis_url, split_credentials, url_from_secret

from support.answers import response_json
from support.events import FakeContext, api_event
from support.recorder import DEFAULT_TOPICS
from support.servers import RedisServer

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
    ("value", "url"),
    [
        ({"username": "delayq", "password": "p/w#1?"}, "rediss://delayq:p%2Fw%231%3F@cache.example:6379/0"),
        ('{"password": "pw", "engine": "valkey"}', "rediss://:pw@cache.example:6379/0"),
        ({"username": "delayq", "password": "pw", "url": "redis://h:1/0"}, "redis://h:1/0"),  # a url wins
    ],
)
def test_a_secret_of_credentials_is_for_the_server_of_the_settings_url(value: Any, url: str) -> None:
    """The shape Secrets Manager generates (and its ElastiCache rotation keeps): the template's
    created cache passes its address in DELAYQ_REDIS_URL, its user's password in the secret."""
    assert url_from_secret(value, "rediss://old:gone@cache.example:6379/0") == url


@pytest.mark.parametrize("value", [{"password": 5}, {"username": ["x"], "password": PASSWORD}])
def test_credentials_of_the_wrong_type_are_refused_without_quoting_them(value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        url_from_secret(value)
    assert PASSWORD not in str(info.value)
    assert "DELAYQ_REDIS_SECRET" in str(info.value)


@pytest.mark.parametrize(
    "value", [f"redis://:{PASSWORD}/x@h:1/0?password=y@z", f'{{"url": "redis://:{PASSWORD}@h:S3c"}}']
)
def test_a_secret_url_that_cannot_be_read_is_refused_naming_the_secret_not_the_value(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        url_from_secret(value)
    assert str(info.value).startswith("DELAYQ_REDIS_SECRET")
    assert "s3cr3t" not in str(info.value)
    assert "hunter2" not in str(info.value)


def test_a_created_cache_s_user_secret_connects(aws: Any, locked_redis: RedisServer, namespace: str) -> None:
    """DELAYQ_REDIS_URL names the server, DELAYQ_REDIS_SECRET holds ``{"username", "password"}``."""
    arn = aws.create_secret(Name="delayq/user", SecretString=json.dumps({"username": "app", "password": "old-app"}))
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{locked_redis.port}/0",
        redis_secret=arn["ARN"],
        namespace=namespace,
        topics=Topics.parse(DEFAULT_TOPICS),
    )
    queue = Queue(settings)
    try:
        queue.enqueue("orders", {"n": 1}, id="as-app", delay=60)
        assert queue.redis.acl_whoami() == "app"
    finally:
        queue.close()


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


# ----------------------------------------------------------------------------- rotation


@pytest.mark.parametrize(
    ("url", "bare", "credentials"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", None),
        (f"redis://:{PASSWORD}@127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", (PASSWORD,)),
        (f"rediss://app:{PASSWORD}@cache.example:6380/0", "rediss://cache.example:6380/0", ("app", PASSWORD)),
        ("redis://app:p%40ss%2Fw@h:1/0", "redis://h:1/0", ("app", "p@ss/w")),
        (f"redis://h:1/0?password={PASSWORD}&ssl_cert_reqs=none", "redis://h:1/0?ssl_cert_reqs=none", (PASSWORD,)),
        (f"unix://:{PASSWORD}@/run/redis.sock?db=2", "unix:///run/redis.sock?db=2", (PASSWORD,)),
        ("redis://app@h:1/0", "redis://h:1/0", None),
    ],
)
def test_split_credentials(url: str, bare: str, credentials: tuple[str, ...] | None) -> None:
    assert split_credentials(url) == (bare, credentials)


@pytest.fixture
def locked_redis() -> Iterator[RedisServer]:
    """A private redis-server whose default user needs the password ``old``, and an ACL user
    ``app`` with the password ``old-app``."""
    server = RedisServer("--requirepass", "old")
    try:
        server.start(ready=lambda: server.client(password="old").ping())
        with server.client(password="old") as admin:
            admin.acl_setuser("app", enabled=True, passwords=["+old-app"], keys=["*"], commands=["+@all"])
        yield server
    finally:
        server.close()


def rotate(server: RedisServer, user: str | None, old: str, new: str) -> None:
    """Change a password on the server, and drop every connection: the next ones must use the new one."""
    with server.client(username=user, password=old) as admin:
        if user is None:
            admin.config_set("requirepass", new)
        else:
            admin.acl_setuser("app", enabled=True, passwords=[f"-{old}", f"+{new}"], keys=["*"], commands=["+@all"])
        admin.client_kill_filter(_type="normal", skipme=False)


@pytest.mark.parametrize("user", [None, "app"])
def test_a_rotated_password_is_read_again_from_the_secret(
    aws: Any, locked_redis: RedisServer, namespace: str, user: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    """The secret is cached for a day; when Redis refuses its password, it is read again at once
    and the connection made with the new one: the caller does not notice."""
    old, new = ("old", "new-" + PASSWORD) if user is None else ("old-app", "new-app-" + PASSWORD)
    userinfo = f"{user or ''}:{{}}@"
    url = f"redis://{userinfo}127.0.0.1:{locked_redis.port}/0"
    arn = aws.create_secret(Name=f"delayq/rotating-{user}", SecretString=url.format(old))["ARN"]
    queue = Queue(Settings(redis_secret=arn, namespace=namespace, topics=Topics.parse(DEFAULT_TOPICS)))
    try:
        queue.enqueue("orders", {"n": 1}, id="before", delay=60)
        rotate(locked_redis, user, old, new)
        aws.put_secret_value(SecretId=arn, SecretString=url.format(new))
        queue.enqueue("orders", {"n": 2}, id="after", delay=60)
        assert queue.get("orders", "after").body == {"n": 2}
        assert queue.stats("orders").delayed == 2
    finally:
        queue.close()
    assert "new ones from DELAYQ_REDIS_SECRET are used" in caplog.text
    assert new not in caplog.text


def test_a_secret_updated_after_the_password_is_picked_up_on_a_later_call(
    aws: Any, locked_redis: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until the secret holds the new password, calls fail (503) and the secret is read again at most
    once per ``SECRET_REFRESH_S``; once it does, the next call after that works."""
    monkeypatch.setattr(connection, "SECRET_REFRESH_S", 1.5)
    url = f"redis://:{{}}@127.0.0.1:{locked_redis.port}/0"
    arn = aws.create_secret(Name="delayq/late", SecretString=url.format("old"))["ARN"]
    queue = Queue(Settings(redis_secret=arn, namespace=namespace, topics=Topics.parse(DEFAULT_TOPICS)))
    reads: list[bool] = []
    real_read = connection.read_secret

    def counted_read(secret: str, *, force_fetch: bool = False, **options: Any) -> str:
        reads.append(force_fetch)
        return real_read(secret, force_fetch=force_fetch, **options)

    monkeypatch.setattr(connection, "read_secret", counted_read)
    try:
        assert queue.ping()
        rotate(locked_redis, None, "old", "new")
        for _ in range(3):
            with pytest.raises(RedisUnavailable):
                queue.ping()
        assert reads == [False, True]  # the first read, then one forced read for three refusals
        aws.put_secret_value(SecretId=arn, SecretString=url.format("new"))
        with pytest.raises(RedisUnavailable):
            queue.ping()  # too soon to read the secret again
        time.sleep(1.6)
        assert queue.ping()
        assert reads == [False, True, True]
    finally:
        queue.close()


def test_a_secret_now_naming_another_server_is_not_followed(
    aws: Any, locked_redis: RedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://:old@127.0.0.1:{locked_redis.port}/0"
    arn = aws.create_secret(Name="delayq/moved", SecretString=url)["ARN"]
    queue = Queue(Settings(redis_secret=arn, namespace=namespace, topics=Topics.parse(DEFAULT_TOPICS)))
    try:
        assert queue.ping()
        rotate(locked_redis, None, "old", PASSWORD)
        aws.put_secret_value(SecretId=arn, SecretString=f"redis://:{PASSWORD}@127.0.0.2:6379/0")
        with pytest.raises(RedisUnavailable):
            queue.ping()
    finally:
        queue.close()
    assert "now names another server (redis://127.0.0.2:6379/0)" in caplog.text
    assert PASSWORD not in caplog.text
