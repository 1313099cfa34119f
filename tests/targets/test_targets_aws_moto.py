"""SQS, SNS and EventBridge targets against moto: what arrives, FIFO deduplication, failures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from delayq import PermanentFailure
from delayq.aws import clients
from delayq.targets import aws
from delayq.targets.payload import payload

from support.aws import ACCOUNT, REGION, make_job

pytestmark = pytest.mark.usefixtures("aws_env")  # fake credentials, an empty client cache


@pytest.fixture
def moto() -> Iterator[None]:
    with mock_aws():
        yield


@pytest.fixture
def sqs(moto: None) -> Any:
    return boto3.client("sqs", region_name=REGION)


def make_queue(sqs: Any, name: str) -> str:
    attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
    return str(sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])


def receive(sqs: Any, url: str, at_least: int = 1) -> list[dict[str, Any]]:
    """Every message in the queue (at least ``at_least`` expected), deleted as they are read."""
    messages: list[dict[str, Any]] = []
    for _ in range(10):
        answer = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
            WaitTimeSeconds=0,
        )
        batch = answer.get("Messages", [])
        for message in batch:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        messages += batch
        if not batch and len(messages) >= at_least:
            break
    return messages


def attributes(message: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {name: (value["DataType"], value["StringValue"]) for name, value in message["MessageAttributes"].items()}


def expected_attributes(job: Any) -> dict[str, tuple[str, str]]:
    return {"topic": ("String", job.topic), "id": ("String", job.id), "attempt": ("Number", str(job.attempt))}


# --------------------------------------------------------------------------------- SQS


@pytest.mark.parametrize("by", ["arn", "url", "legacy url"])
def test_sqs_standard_queue_gets_the_payload_and_attributes(sqs: Any, by: str) -> None:
    url = make_queue(sqs, "jobs")
    assert url == f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/jobs"
    spec = {
        "arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs",
        "url": url,
        "legacy url": f"https://{REGION}.queue.amazonaws.com/{ACCOUNT}/jobs",
    }[by]
    job = make_job()
    aws.sqs_target(spec)(job, 5)

    [message] = receive(sqs, url)
    assert message["Body"] == payload(job)
    assert json.loads(message["Body"])["body"] == {"total": 42, "note": "déjà vu ✓"}
    assert attributes(message) == expected_attributes(job)
    assert "MessageGroupId" not in message["Attributes"]


def test_sqs_queue_in_another_region_than_the_default(sqs: Any) -> None:
    other = boto3.client("sqs", region_name="ap-southeast-2")
    url = make_queue(other, "far")
    make_queue(sqs, "far")  # a namesake in the targets' usual region must stay empty
    aws.sqs_target(f"arn:aws:sqs:ap-southeast-2:{ACCOUNT}:far")(make_job(), 5)
    assert len(receive(other, url)) == 1
    assert receive(sqs, f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/far", at_least=0) == []


@pytest.mark.parametrize("by", ["arn", "url"])
def test_sqs_fifo_keeps_a_retry_distinct_from_a_duplicate(sqs: Any, by: str) -> None:
    url = make_queue(sqs, "jobs.fifo")
    target = aws.sqs_target(f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs.fifo" if by == "arn" else url)
    first = make_job()
    retry = make_job(attempt=2, run_at_ms=first.run_at_ms + 15_000)
    recreated = make_job(enqueued_at_ms=first.enqueued_at_ms + 90_000, run_at_ms=first.run_at_ms + 90_000)

    target(first, 5)
    target(first, 5)  # the same attempt again: a duplicate
    target(retry, 5)
    target(recreated, 5)

    messages = receive(sqs, url, at_least=3)
    assert [json.loads(m["Body"])["attempt"] for m in messages] == [1, 2, 1]
    assert [m["Body"] for m in messages] == [payload(first), payload(retry), payload(recreated)]
    assert [m["Attributes"]["MessageDeduplicationId"] for m in messages] == [
        aws.deduplication_id(first),
        aws.deduplication_id(retry),
        aws.deduplication_id(recreated),
    ]
    assert {m["Attributes"]["MessageGroupId"] for m in messages} == {"orders/order-1"}
    assert attributes(messages[1]) == expected_attributes(retry)


def test_sqs_fifo_jobs_get_groups_of_their_own(sqs: Any) -> None:
    url = make_queue(sqs, "jobs.fifo")
    target = aws.sqs_target(url)
    target(make_job(id="a"), 5)
    target(make_job(id="b"), 5)
    groups = [m["Attributes"]["MessageGroupId"] for m in receive(sqs, url, at_least=2)]
    assert sorted(groups) == ["orders/a", "orders/b"]


def test_sqs_missing_queue_is_permanent(sqs: Any) -> None:
    with pytest.raises(PermanentFailure) as raised:
        aws.sqs_target(f"arn:aws:sqs:{REGION}:{ACCOUNT}:nowhere")(make_job(), 5)
    assert str(raised.value) == (
        f"SQS SendMessage to https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/nowhere failed: "
        "AWS.SimpleQueueService.NonExistentQueue (HTTP 400): The specified queue does not exist."
    )


def test_two_deliveries_with_different_timeouts_make_one_client_in_the_targets_region(sqs: Any) -> None:
    url = make_queue(sqs, "jobs")
    target = aws.sqs_target(url)
    assert clients.count() == 0
    target(make_job(), 5)
    target(make_job(attempt=2), 300)  # a job's own timeout: the same client, the same connections
    assert clients.count() == 1
    client = clients.client("sqs", REGION)
    assert client.meta.region_name == REGION
    assert len(receive(sqs, url, at_least=2)) == 2


# --------------------------------------------------------------------------------- SNS


def subscribe(moto: None, topic: str, *, raw: bool) -> tuple[Any, str, str]:
    """A topic with a queue subscribed: (sqs client, topic ARN, queue URL)."""
    sns = boto3.client("sns", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    fifo = topic.endswith(".fifo")
    arn = sns.create_topic(Name=topic, Attributes={"FifoTopic": "true"} if fifo else {})["TopicArn"]
    url = make_queue(sqs, "from-sns.fifo" if fifo else "from-sns")
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(
        TopicArn=arn,
        Protocol="sqs",
        Endpoint=queue_arn,
        Attributes={"RawMessageDelivery": "true" if raw else "false"},
    )
    return sqs, arn, url


def test_sns_to_sqs_raw_delivery(moto: None) -> None:
    sqs, arn, url = subscribe(moto, "events", raw=True)
    assert arn == f"arn:aws:sns:{REGION}:{ACCOUNT}:events"
    job = make_job()
    aws.sns_target(arn)(job, 5)
    [message] = receive(sqs, url)
    assert message["Body"] == payload(job)
    assert attributes(message) == expected_attributes(job)


def test_sns_to_sqs_through_the_envelope(moto: None) -> None:
    sqs, arn, url = subscribe(moto, "events", raw=False)
    job = make_job(body=[1, "two", None])
    aws.sns_target(arn)(job, 5)
    [message] = receive(sqs, url)
    envelope = json.loads(message["Body"])
    assert envelope["TopicArn"] == arn
    assert envelope["Message"] == payload(job)
    assert {k: (v["Type"], v["Value"]) for k, v in envelope["MessageAttributes"].items()} == expected_attributes(job)


def test_sns_fifo_topic_gets_fifo_ids(moto: None) -> None:
    sqs, arn, url = subscribe(moto, "events.fifo", raw=True)
    first = make_job()
    retry = make_job(attempt=2, run_at_ms=first.run_at_ms + 15_000)
    target = aws.sns_target(arn)
    target(first, 5)
    target(retry, 5)
    messages = receive(sqs, url, at_least=2)
    assert [m["Body"] for m in messages] == [payload(first), payload(retry)]
    assert [m["Attributes"]["MessageDeduplicationId"] for m in messages] == [
        aws.deduplication_id(first),
        aws.deduplication_id(retry),
    ]
    assert {m["Attributes"]["MessageGroupId"] for m in messages} == {"orders/order-1"}


def test_sns_missing_topic_is_permanent(moto: None) -> None:
    arn = f"arn:aws:sns:{REGION}:{ACCOUNT}:nowhere"
    with pytest.raises(PermanentFailure, match=f"^SNS Publish to {arn} failed: NotFound \\(HTTP 404\\): "):
        aws.sns_target(arn)(make_job(), 5)


# --------------------------------------------------------------------------------- EventBridge


def bus_to_queue(moto: None, bus: str, topic: str) -> tuple[Any, str, str]:
    """A bus with a rule for ``topic``'s jobs sending to a queue: (sqs client, bus ARN, queue URL)."""
    events = boto3.client("events", region_name=REGION)
    sqs = boto3.client("sqs", region_name=REGION)
    arn = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{bus}"
    if bus != "default":
        assert events.create_event_bus(Name=bus)["EventBusArn"] == arn
    url = make_queue(sqs, f"from-{bus}")
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = {"source": ["delayq"], "detail-type": [topic]}
    events.put_rule(Name="jobs", EventBusName=bus, EventPattern=json.dumps(pattern))
    events.put_targets(Rule="jobs", EventBusName=bus, Targets=[{"Id": "queue", "Arn": queue_arn}])
    return sqs, arn, url


@pytest.mark.parametrize("bus", ["default", "delayq-jobs"])
def test_eventbridge_rule_sends_the_job_on(moto: None, bus: str) -> None:
    sqs, arn, url = bus_to_queue(moto, bus, "orders")
    target = aws.eventbridge_target(arn)
    job = make_job()
    target(job, 5)
    target(make_job(topic="refunds"), 5)  # another detail-type: not matched by the rule

    [message] = receive(sqs, url)
    event = json.loads(message["Body"])
    assert event["source"] == "delayq"
    assert event["detail-type"] == "orders"
    assert event["detail"] == json.loads(payload(job))
    assert event["region"] == REGION


def test_eventbridge_missing_bus_is_permanent(moto: None) -> None:
    arn = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/nowhere"
    with pytest.raises(PermanentFailure, match="ResourceNotFoundException") as raised:
        aws.eventbridge_target(arn)(make_job(), 5)
    assert str(raised.value).startswith(f"EventBridge PutEvents to {arn} failed: ")


@pytest.mark.parametrize(
    ("entry", "permanent"),
    [
        ({"ErrorCode": "ThrottlingException", "ErrorMessage": "Rate exceeded"}, False),
        ({"ErrorCode": "InternalFailure", "ErrorMessage": "try again"}, False),
        ({"ErrorCode": "NotAuthorizedForSourceException", "ErrorMessage": "not allowed"}, False),
        ({"ErrorCode": "MalformedDetail", "ErrorMessage": "Detail is malformed."}, True),
        ({}, False),
    ],
)
def test_eventbridge_failed_entry_is_a_failed_attempt(entry: dict[str, str], permanent: bool) -> None:
    arn = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default"
    job = make_job()
    with Stubber(clients.client("events", REGION)) as stub:
        expected = {
            "Entries": [{"EventBusName": arn, "Source": "delayq", "DetailType": "orders", "Detail": payload(job)}]
        }
        stub.add_response("put_events", {"FailedEntryCount": 1, "Entries": [entry]}, expected)
        with pytest.raises((PermanentFailure, aws.AwsTargetError)) as raised:
            aws.eventbridge_target(arn)(job, 5)
    assert isinstance(raised.value, PermanentFailure) is permanent
    code = entry.get("ErrorCode", "Unknown")
    message = entry.get("ErrorMessage", "no message")
    assert str(raised.value) == f"EventBridge PutEvents to {arn}: the bus refused the event: {code}: {message}"
