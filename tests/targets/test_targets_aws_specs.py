"""AWS target specs: queue URLs, ARNs (good and bad), the region they name, the FIFO ids, the error
texts, and how ``resolve_target`` routes them. No AWS calls: making a target makes no client."""

from __future__ import annotations

import hashlib

import pytest

from delayq import Settings
from delayq.aws import clients
from delayq.core.errors import ConfigError
from delayq.core.settings import TopicConfig
from delayq.targets import aws, resolve_target

from support.aws import make_job

pytestmark = pytest.mark.usefixtures("aws_env")  # fake credentials, an empty client cache

QUEUE_URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/jobs", True),
        ("https://sqs.us-gov-west-1.amazonaws.com/123456789012/jobs.fifo", True),
        ("https://sqs.ap-southeast-2.amazonaws.com/123456789012/j", True),
        ("https://eu-west-1.queue.amazonaws.com/123456789012/jobs", True),
        # a queue host with a bad path is still a queue URL: sqs_target refuses it with a clear error
        ("https://sqs.eu-west-1.amazonaws.com/jobs", True),
        ("https://example.com/hooks/jobs", False),
        ("https://sqs.example.com/123456789012/jobs", False),
        ("https://sqs.eu-west-1.amazonaws.com.evil.example/123456789012/jobs", False),
        ("https://hooks.sqs.eu-west-1.amazonaws.com/123456789012/jobs", False),
        ("https://sqs.amazonaws.com/123456789012/jobs", False),
        ("https://queue.amazonaws.com/123456789012/jobs", False),
        ("https://sns.eu-west-1.amazonaws.com/123456789012/jobs", False),
        ("http://sqs.eu-west-1.amazonaws.com/123456789012/jobs", False),
        ("https://sqs.eu-west-1.amazonaws.com", False),
        ("arn:aws:sqs:eu-west-1:123456789012:jobs", False),
        ("", False),
    ],
)
def test_is_queue_url(spec: str, expected: bool) -> None:
    assert aws.is_queue_url(spec) is expected


@pytest.mark.parametrize(
    ("spec", "region", "url", "fifo"),
    [
        ("arn:aws:sqs:eu-west-1:123456789012:jobs", "eu-west-1", QUEUE_URL, False),
        (QUEUE_URL, "eu-west-1", QUEUE_URL, False),
        (
            "https://ap-south-1.queue.amazonaws.com/123456789012/jobs.fifo",
            "ap-south-1",
            "https://sqs.ap-south-1.amazonaws.com/123456789012/jobs.fifo",
            True,
        ),
        (
            "arn:aws:sqs:il-central-1:123456789012:a-b_c.fifo",
            "il-central-1",
            "https://sqs.il-central-1.amazonaws.com/123456789012/a-b_c.fifo",
            True,
        ),
        ("arn:aws:sqs:eu-west-1:123456789012:" + "q" * 80, "eu-west-1", QUEUE_URL[:-4] + "q" * 80, False),
    ],
)
def test_queue_specs(spec: str, region: str, url: str, fifo: bool) -> None:
    queue = aws.parse_queue(spec)
    assert (queue.region, queue.url, queue.fifo) == (region, url, fifo)


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("arn:aws:sqs:eu-west-1:12345:jobs", "'12345' is not a 12-digit account id"),
        ("arn:aws:sqs::123456789012:jobs", "'' is not an AWS region"),
        ("arn:aws:sqs:Europe:123456789012:jobs", "'Europe' is not an AWS region"),
        ("arn:aws:sqs:eu-west-1:123456789012:", "'' is not a queue name"),
        ("arn:aws:sqs:eu-west-1:123456789012:my/queue", "'my/queue' is not a queue name"),
        ("arn:aws:sqs:eu-west-1:123456789012:" + "q" * 81, "is not a queue name"),
        ("arn:aws:sqs:eu-west-1:123456789012:" + "q" * 76 + ".fifo", "is not a queue name"),
        ("arn:aws:sqs:eu-west-1:123456789012:jobs.txt", "is not a queue name"),
        ("arn:aws:sqs:eu-west-1", "expected arn:aws:sqs:REGION:ACCOUNT:QUEUE"),
        ("https://sqs.eu-west-1.amazonaws.com/jobs", "expected arn:aws:sqs:REGION:ACCOUNT:QUEUE"),
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/jobs/extra", "expected arn:aws:sqs"),
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/jobs?x=1", "is not a queue name"),
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/", "expected arn:aws:sqs"),
    ],
)
def test_bad_queue_specs(spec: str, complaint: str) -> None:
    with pytest.raises(ConfigError) as raised:
        aws.sqs_target(spec)
    assert complaint in raised.value.message
    assert repr(spec) in raised.value.message


@pytest.mark.parametrize(
    ("make", "spec", "region"),
    [
        (aws.lambda_target, "arn:aws:lambda:eu-west-1:123456789012:function:send-mail", "eu-west-1"),
        (aws.lambda_target, "arn:aws:lambda:eu-central-1:123456789012:function:send-mail:live", "eu-central-1"),
        (aws.lambda_target, "arn:aws:lambda:us-east-2:123456789012:function:f_1:$LATEST", "us-east-2"),
        (aws.lambda_target, "arn:aws:lambda:us-east-2:123456789012:function:f:42", "us-east-2"),
        (aws.sns_target, "arn:aws:sns:ap-northeast-1:123456789012:events", "ap-northeast-1"),
        (aws.sns_target, "arn:aws:sns:ap-northeast-1:123456789012:events.fifo", "ap-northeast-1"),
        (aws.eventbridge_target, "arn:aws:events:sa-east-1:123456789012:event-bus/default", "sa-east-1"),
        (aws.eventbridge_target, "arn:aws:events:sa-east-1:123456789012:event-bus/aws.partner/x.com/1/b", "sa-east-1"),
    ],
)
def test_good_arns_make_targets_without_a_client(make, spec: str, region: str) -> None:
    parse = {
        aws.lambda_target: aws.parse_lambda,
        aws.sns_target: aws.parse_sns,
        aws.eventbridge_target: aws.parse_event_bus,
    }[make]
    assert parse(spec).region == region
    assert callable(make(spec))
    assert clients.count() == 0


@pytest.mark.parametrize(
    ("make", "spec", "complaint"),
    [
        (aws.lambda_target, "arn:aws:lambda:eu-west-1:123456789012:send-mail", "is not a function"),
        (aws.lambda_target, "arn:aws:lambda:eu-west-1:123456789012:function:", "is not a function"),
        (aws.lambda_target, "arn:aws:lambda:eu-west-1:123456789012:function:a:b:c", "is not a function"),
        (aws.lambda_target, "arn:aws:lambda:eu-west-1:123456789012:function:" + "f" * 65, "is not a function"),
        (aws.lambda_target, "arn:aws:lambda:eu-west-1:123456789012:layer:x:1", "is not a function"),
        (aws.lambda_target, "arn:aws:lambda:eu-west-1:1234:function:f", "is not a 12-digit account id"),
        (aws.lambda_target, "arn:aws:lambda:*:123456789012:function:f", "is not an AWS region"),
        (aws.lambda_target, "arn:aws-cn:lambda:cn-north-1:123456789012:function:f", "expected arn:aws:lambda"),
        (aws.lambda_target, "arn:aws:sqs:eu-west-1:123456789012:jobs", "expected arn:aws:lambda"),
        (aws.sns_target, "arn:aws:sns:eu-west-1:123456789012:", "is not a topic name"),
        (aws.sns_target, "arn:aws:sns:eu-west-1:123456789012:a:b", "is not a topic name"),
        (aws.sns_target, "arn:aws:sns:eu-west-1:123456789012:" + "t" * 257, "is not a topic name"),
        (aws.sns_target, "arn:aws:sns:eu-west-1:bad:events", "is not a 12-digit account id"),
        (aws.eventbridge_target, "arn:aws:events:eu-west-1:123456789012:rule/nightly", "is not an event bus"),
        (aws.eventbridge_target, "arn:aws:events:eu-west-1:123456789012:event-bus/", "is not an event bus"),
        (aws.eventbridge_target, "arn:aws:events:eu-west-1:123456789012:default", "is not an event bus"),
        (aws.eventbridge_target, "arn:aws:events::123456789012:event-bus/default", "is not an AWS region"),
        (aws.eventbridge_target, "arn:aws:events:eu-west-1:123456789012:event-bus/a b", "is not an event bus"),
    ],
)
def test_bad_arns_are_config_errors(make, spec: str, complaint: str) -> None:
    with pytest.raises(ConfigError) as raised:
        make(spec)
    assert complaint in raised.value.message
    assert raised.value.message.startswith(f"target {spec!r}: ")


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("arn:aws:lambda:eu-west-1:123456789012:function:f", "lambda_target"),
        ("arn:aws:sqs:eu-west-1:123456789012:jobs", "sqs_target"),
        (QUEUE_URL, "sqs_target"),
        ("https://eu-west-1.queue.amazonaws.com/123456789012/jobs", "sqs_target"),
        ("arn:aws:sns:eu-west-1:123456789012:t", "sns_target"),
        ("arn:aws:events:eu-west-1:123456789012:event-bus/default", "eventbridge_target"),
    ],
)
def test_resolve_target_routes_aws_specs(spec: str, kind: str) -> None:
    target = resolve_target(TopicConfig(target=spec), Settings())
    assert target.send.__qualname__ == f"{kind}.<locals>.send"  # type: ignore[attr-defined]
    assert target.__module__ == "delayq.targets.aws"


def test_a_webhook_is_not_mistaken_for_a_queue() -> None:
    target = resolve_target(TopicConfig(target="https://example.com/123456789012/jobs"), Settings())
    assert target.__module__ != "delayq.targets.aws"


def test_malformed_queue_url_is_refused_not_posted_to() -> None:
    with pytest.raises(ConfigError, match="expected arn:aws:sqs"):
        resolve_target(TopicConfig(target="https://sqs.eu-west-1.amazonaws.com/jobs"), Settings())


def test_fifo_ids() -> None:
    first = make_job()
    key = "orders/order-1/1700000000000/1700000060000/1"
    assert aws.deduplication_id(first) == hashlib.sha256(key.encode()).hexdigest()
    assert len(aws.deduplication_id(first)) == 64
    # the same attempt sent again: the same id
    assert aws.deduplication_id(make_job()) == aws.deduplication_id(first)
    others = {
        "attempt 2": make_job(attempt=2, run_at_ms=1_700_000_075_000),
        "same attempt number, later run-at (replayed)": make_job(run_at_ms=1_700_000_999_000),
        "created again": make_job(enqueued_at_ms=1_700_000_500_000, run_at_ms=1_700_000_560_000),
        "another job": make_job(id="order-2"),
        "another topic": make_job(topic="refunds"),
    }
    ids = {name: aws.deduplication_id(job) for name, job in others.items()}
    assert aws.deduplication_id(first) not in ids.values()
    assert len(set(ids.values())) == len(ids)
    # the body does not matter for the same attempt
    assert aws.deduplication_id(make_job(body=None)) == aws.deduplication_id(first)

    assert aws.message_group_id(first) == "orders/order-1"
    assert aws.message_group_id(others["attempt 2"]) == "orders/order-1"
    assert aws.message_group_id(others["another job"]) == "orders/order-2"
    long_job = make_job(topic="t" * 64, id="i" * 128)
    group = aws.message_group_id(long_job)
    assert group == "sha256:" + hashlib.sha256(f"{'t' * 64}/{'i' * 128}".encode()).hexdigest()
    assert len(group) <= 128
    assert aws.message_group_id(make_job(topic="t" * 64, id="j" * 128)) != group


def test_redact_removes_credentials() -> None:
    text = (
        "Authorization=AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20250101/eu-west-1/sqs/aws4_request, "
        "SignedHeaders=host, Signature=0123456789abcdef; X-Amz-Security-Token=FQoGZXIvYXdzE&x=1 "
        "key ASIAZZZZZZZZZZZZZZZZ used"
    )
    clean = aws.redact(text)
    for secret in ("AKIAIOSFODNN7EXAMPLE", "0123456789abcdef", "FQoGZXIvYXdzE", "ASIAZZZZZZZZZZZZZZZZ"):
        assert secret not in clean
    assert "Credential=[redacted]" in clean
    assert "SignedHeaders=host" in clean
    assert clean.endswith("key [redacted] used")
