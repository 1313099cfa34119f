"""End to end: jobs enqueued with delayq, consumed by ``delayq.loops.consumer.Consumer`` (real Redis) and
delivered to an SQS queue (moto) named by its ARN."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from delayq import Queue
from delayq.aws import clients
from delayq.loops.consumer import Consumer

from support.aws import ACCOUNT, REGION
from support.loops import running, state, wait_until

pytestmark = pytest.mark.usefixtures("aws_env")  # fake credentials, an empty client cache

MakeQueue = Callable[..., Queue]


@pytest.fixture
def sqs() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("sqs", region_name=REGION)


def receive_all(sqs: Any, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get(
        "Messages", []
    ):
        messages += batch
        for message in batch:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return messages


def test_job_is_delivered_to_the_queue_exactly_once(make_queue: MakeQueue, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="delayq-orders")["QueueUrl"]
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:delayq-orders"
    queue = make_queue(topics={"orders": {"target": arn, "timeout": 5}}, tick=0.1)
    scheduled = queue.enqueue("orders", {"sku": "A-1", "qty": 2}, id="o-1", delay=0.3)
    assert state(queue, "orders", "o-1") == "delayed"
    assert clients.count() == 0

    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "orders", "o-1") == "done")
    assert consumer.summary is not None
    assert (consumer.summary["succeeded"], consumer.summary["acked"], consumer.summary["failed"]) == (1, 1, 0)

    [message] = receive_all(sqs, url)
    sent = json.loads(message["Body"])
    assert sent["topic"] == "orders"
    assert sent["id"] == "o-1"
    assert sent["body"] == {"sku": "A-1", "qty": 2}
    assert sent["attempt"] == 1
    assert sent["run_at_ms"] == scheduled.run_at_ms
    assert message["MessageAttributes"]["id"]["StringValue"] == "o-1"
    assert clients.count() == 1


def test_missing_queue_sends_the_job_dead_with_a_clear_error(make_queue: MakeQueue, sqs: Any) -> None:
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:no-such-queue"
    queue = make_queue(topics={"lost": {"target": arn, "retries": 3, "backoff": [0.1]}}, tick=0.1)
    queue.enqueue("lost", {"n": 1}, id="l-1")

    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "lost", "l-1") == "dead")
    assert consumer.summary is not None
    assert (consumer.summary["failed"], consumer.summary["dead"], consumer.summary["retried"]) == (1, 1, 0)

    [dead] = queue.dead("lost")
    assert dead.attempts == 1  # a queue that does not exist is not retried: see the target's docstring
    assert dead.body == {"n": 1}
    assert dead.last_error == (
        f"PermanentFailure: SQS SendMessage to https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/no-such-queue failed: "
        "AWS.SimpleQueueService.NonExistentQueue (HTTP 400): The specified queue does not exist."
    )


def test_throttled_queue_is_retried_then_dead(make_queue: MakeQueue, sqs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error that may heal is retried with the topic's backoff until its retries are spent."""
    sqs.create_queue(QueueName="busy")
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:busy"
    queue = make_queue(topics={"busy": {"target": arn, "retries": 2, "backoff": [0.1]}}, tick=0.1)
    queue.enqueue("busy", {"n": 1}, id="b-1")
    client = clients.client("sqs", REGION)
    refused: list[str] = []

    def throttle(**kwargs: Any) -> None:
        refused.append(kwargs["QueueUrl"])
        raise ClientError(
            {
                "Error": {"Code": "RequestThrottled", "Message": "Rate exceeded"},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            },
            "SendMessage",
        )

    monkeypatch.setattr(client, "send_message", throttle)
    with running(Consumer(queue)) as consumer:
        assert wait_until(lambda: state(queue, "busy", "b-1") == "dead")
    assert consumer.summary is not None
    assert (consumer.summary["failed"], consumer.summary["retried"], consumer.summary["dead"]) == (3, 2, 1)
    assert len(refused) == 3
    [dead] = queue.dead("busy")
    assert dead.attempts == 3
    assert dead.last_error.startswith("AwsTargetError: SQS SendMessage to ")
    assert dead.last_error.endswith("failed: RequestThrottled (HTTP 400): Rate exceeded")
