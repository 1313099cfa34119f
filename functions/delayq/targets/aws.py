"""AWS targets: a Lambda function (``Invoke``), an SQS queue (``SendMessage``), an SNS topic
(``Publish``) or an EventBridge bus (``PutEvents``), each sent ``payload(job)``. A spec is parsed when
the target is made; its client is made at the first delivery (``delayq.aws.clients``), and each call
waits at most the job's timeout (a Lambda invocation up to 905 s). An error that the request can
never get past (no such target, a message the service refuses) is a ``PermanentFailure``; any other
is a failed attempt. What each service gets and which errors are which: docs/topics.md's "AWS
targets" section. Error texts never carry credentials.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from delayq.aws import clients
from delayq.core.errors import ConfigError, PermanentFailure
from delayq.core.job import Job

from .payload import answer_of, payload
from .target import Target

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient

LAMBDA_READ_TIMEOUT_S = clients.SERVICE_READ_TIMEOUT_S["lambda"]  # longer than any function can run (900 s)
MAX_GROUP_ID_CHARS = 128
MAX_ERROR_TYPE_CHARS = 200
MAX_ERROR_MESSAGE_CHARS = 1000
EVENT_SOURCE = "delayq"

LAMBDA_PERMANENT = frozenset(
    {
        "ResourceNotFoundException",
        "InvalidRequestContentException",
        "InvalidParameterValueException",
        "RequestTooLargeException",
        "UnsupportedMediaTypeException",
    }
)
SQS_PERMANENT = frozenset(
    {
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "InvalidMessageContents",
        "InvalidParameterValue",
    }
)
SNS_PERMANENT = frozenset({"NotFound", "NotFoundException", "InvalidParameter", "InvalidParameterValue"})
EVENTS_PERMANENT = frozenset({"ResourceNotFoundException", "ValidationException"})
EVENTS_ENTRY_PERMANENT = frozenset({"MalformedDetail", "InvalidArgument", "ResourceNotFoundException"})

_REGION = r"[a-z]{2}(?:-[a-z]+)+-\d{1,2}"
_ACCOUNT = r"\d{12}"
_ARN = re.compile(r"^arn:aws:(?P<service>[a-z0-9-]+):(?P<region>[^:]*):(?P<account>[^:]*):(?P<resource>.*)$")
_REGION_RE = re.compile(rf"^{_REGION}$")
_ACCOUNT_RE = re.compile(rf"^{_ACCOUNT}$")
_LAMBDA_RESOURCE = re.compile(
    r"^function:(?P<name>[A-Za-z0-9_-]{1,64})(?::(?P<qualifier>\$LATEST|[A-Za-z0-9_-]{1,128}))?$"
)
_NAME = re.compile(r"^[A-Za-z0-9_-]+(?:\.fifo)?$")  # of a queue or topic, the .fifo suffix included
MAX_QUEUE_NAME_CHARS = 80
MAX_TOPIC_NAME_CHARS = 256
_BUS_RESOURCE = re.compile(r"^event-bus/(?P<name>[A-Za-z0-9._/-]{1,256})$")
# The hosts of SQS queue URLs: an https:// spec on one of these is a queue, never a webhook.
_QUEUE_HOST = re.compile(rf"^https://(?:sqs\.(?P<region>{_REGION})|(?P<legacy>{_REGION})\.queue)\.amazonaws\.com/")
_QUEUE_PATH = re.compile(rf"^(?P<account>{_ACCOUNT})/(?P<name>[^/]+)$")
_SECRETS = re.compile(
    r"(?P<name>Credential|Signature|X-Amz-Credential|X-Amz-Signature|X-Amz-Security-Token|SessionToken)=[^\s,&;'\"]+"
)
_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA|ANPA|ANVA|APKA)[A-Z0-9]{12,}\b")


class AwsTargetError(Exception):
    """A failed attempt at an AWS target, retried with the topic's backoff."""


# --------------------------------------------------------------------------------- specs


@dataclass(frozen=True, slots=True)
class Arn:
    """The parts of an ``arn:aws:...`` ARN delayq needs."""

    service: str
    region: str
    account: str
    resource: str


@dataclass(frozen=True, slots=True)
class SqsQueue:
    """An SQS queue, from its ARN or its URL."""

    region: str
    account: str
    name: str

    @property
    def url(self) -> str:
        return f"https://sqs.{self.region}.amazonaws.com/{self.account}/{self.name}"

    @property
    def fifo(self) -> bool:
        return self.name.endswith(".fifo")


def parse_arn(spec: str, service: str, expected: str) -> Arn:
    """The ARN ``spec`` of ``service``, or ``ConfigError`` naming the form ``expected``."""
    match = _ARN.fullmatch(spec)
    if not match or match["service"] != service:
        raise ConfigError(f"target {spec!r}: expected {expected}")
    arn = Arn(match["service"], match["region"], match["account"], match["resource"])
    if not _REGION_RE.fullmatch(arn.region):
        raise ConfigError(f"target {spec!r}: {arn.region!r} is not an AWS region (expected {expected})")
    if not _ACCOUNT_RE.fullmatch(arn.account):
        raise ConfigError(f"target {spec!r}: {arn.account!r} is not a 12-digit account id (expected {expected})")
    return arn


def is_queue_url(spec: str) -> bool:
    """Whether ``spec`` is an SQS queue URL: ``https://sqs.REGION.amazonaws.com/...`` or the legacy
    ``https://REGION.queue.amazonaws.com/...``. Only the scheme and host are looked at, so a malformed
    path on a queue host is refused by ``sqs_target`` rather than posted to as a webhook."""
    return _QUEUE_HOST.match(spec) is not None


def parse_queue(spec: str) -> SqsQueue:
    """The SQS queue an ARN or a queue URL names. Raises ``ConfigError`` when malformed."""
    expected = (
        "arn:aws:sqs:REGION:ACCOUNT:QUEUE or https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE "
        "(QUEUE: up to 80 letters, digits, - and _, FIFO queues ending in .fifo)"
    )
    if spec.startswith("arn:"):
        arn = parse_arn(spec, "sqs", expected)
        queue = SqsQueue(arn.region, arn.account, arn.resource)
    else:
        host = _QUEUE_HOST.match(spec)
        path = _QUEUE_PATH.fullmatch(spec[host.end() :]) if host else None
        if host is None or path is None:
            raise ConfigError(f"target {spec!r}: expected {expected}")
        queue = SqsQueue(host["region"] or host["legacy"], path["account"], path["name"])
    if not _NAME.fullmatch(queue.name) or len(queue.name) > MAX_QUEUE_NAME_CHARS:
        raise ConfigError(f"target {spec!r}: {queue.name!r} is not a queue name (expected {expected})")
    return queue


def parse_lambda(spec: str) -> Arn:
    """The Lambda function ARN ``spec`` (with an optional version or alias)."""
    expected = "arn:aws:lambda:REGION:ACCOUNT:function:NAME or ...:function:NAME:VERSION_OR_ALIAS"
    return _parse_resource(spec, "lambda", expected, "a function", _LAMBDA_RESOURCE.fullmatch)


def parse_sns(spec: str) -> Arn:
    """The SNS topic ARN ``spec``."""
    expected = "arn:aws:sns:REGION:ACCOUNT:TOPIC (TOPIC: up to 256 letters, digits, - and _, FIFO ending in .fifo)"
    return _parse_resource(
        spec, "sns", expected, "a topic name", lambda name: len(name) <= MAX_TOPIC_NAME_CHARS and _NAME.fullmatch(name)
    )


def parse_event_bus(spec: str) -> Arn:
    """The EventBridge event bus ARN ``spec`` (rules, archives and other resources are refused)."""
    expected = "arn:aws:events:REGION:ACCOUNT:event-bus/NAME"
    return _parse_resource(spec, "events", expected, "an event bus", _BUS_RESOURCE.fullmatch)


def _parse_resource(spec: str, service: str, expected: str, kind: str, valid: Callable[[str], object]) -> Arn:
    """The ARN ``spec`` of ``service`` whose resource is ``valid``, or ``ConfigError`` saying it is not ``kind``."""
    arn = parse_arn(spec, service, expected)
    if not valid(arn.resource):
        raise ConfigError(f"target {spec!r}: {arn.resource!r} is not {kind} (expected {expected})")
    return arn


# --------------------------------------------------------------------------------- messages


def message_group_id(job: Job) -> str:
    """The FIFO message group: one per job, ``TOPIC/ID`` (hashed when longer than SQS allows)."""
    group = f"{job.topic}/{job.id}"
    if len(group) <= MAX_GROUP_ID_CHARS:
        return group
    return "sha256:" + hashlib.sha256(group.encode()).hexdigest()


def deduplication_id(job: Job) -> str:
    """The FIFO deduplication id: the same for the same attempt of the same job, different for any
    other attempt, and for a job created, replaced or replayed later under the same id."""
    key = f"{job.topic}/{job.id}/{job.enqueued_at_ms}/{job.run_at_ms}/{job.attempt}"
    return hashlib.sha256(key.encode()).hexdigest()


def message_attributes(job: Job) -> dict[str, Any]:
    """The attributes an SQS message and an SNS notification carry: ``topic``, ``id`` and ``attempt``
    (the shape both services read; typed loosely, as their SDK types differ only in fields unused here)."""
    return {
        "topic": {"DataType": "String", "StringValue": job.topic},
        "id": {"DataType": "String", "StringValue": job.id},
        "attempt": {"DataType": "Number", "StringValue": str(job.attempt)},
    }


def fifo_ids(job: Job, fifo: bool) -> dict[str, Any]:
    """The FIFO group and deduplication ids of a message to a FIFO queue or topic; none otherwise."""
    if not fifo:
        return {}
    return {"MessageGroupId": message_group_id(job), "MessageDeduplicationId": deduplication_id(job)}


# --------------------------------------------------------------------------------- errors


def redact(text: str) -> str:
    """``text`` without the access key ids, signatures and tokens an AWS error may echo back."""
    text = _SECRETS.sub(lambda match: f"{match['name']}=[redacted]", text)
    return _KEY_ID.sub("[redacted]", text)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _failure(permanent: bool, text: str) -> Exception:
    text = redact(text)
    return PermanentFailure(text) if permanent else AwsTargetError(text)


@contextmanager
def _aws_errors(what: str, permanent: frozenset[str]) -> Iterator[None]:
    """Turns what the SDK raises while doing ``what`` into a failed attempt, permanent when the
    error's code is one of ``permanent`` (and the answer not a 5xx)."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "Unknown")
        message = _clip(str(error.get("Message") or "no message"), MAX_ERROR_MESSAGE_CHARS)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        shown = f" (HTTP {status})" if status else ""
        raise _failure(code in permanent and status < 500, f"{what} failed: {code}{shown}: {message}") from exc
    except ParamValidationError as exc:
        raise _failure(True, f"{what}: the request is invalid: {exc}") from exc
    except BotoCoreError as exc:  # connection errors, timeouts, missing credentials
        raise _failure(False, f"{what} failed: {type(exc).__name__}: {exc}") from exc
    except UnicodeEncodeError as exc:
        raise _failure(True, f"{what}: the message cannot be encoded as UTF-8: {exc.reason}") from exc


# --------------------------------------------------------------------------------- clients


def _client(service: str, region: str) -> Any:
    """The container's client for ``service`` in ``region``, made at the first call."""
    return clients.client(service, region)


# --------------------------------------------------------------------------------- targets


@dataclass(frozen=True, slots=True)
class AwsTarget:
    """The target every AWS kind is: ``send(client, job)`` with the container's client for ``service``
    in ``region``, each answer awaited at most ``read_timeout_s`` (the job's timeout when None), the
    SDK's errors turned into failed attempts, permanent when their code is in ``permanent``. The kinds
    differ only in their ``send``, which returns the job's result (None for all but Lambda's)."""

    service: str
    region: str
    what: str  # the call and its destination, as failed attempts name them
    permanent: frozenset[str]
    send: Callable[[Any, Job], Any]
    read_timeout_s: float | None = None

    def __call__(self, job: Job, timeout: float) -> Any:
        client = _client(self.service, self.region)
        with clients.read_timeout(self.read_timeout_s or timeout), _aws_errors(self.what, self.permanent):
            return self.send(client, job)


def lambda_target(arn: str) -> Target:
    """Invokes the function synchronously with the message; a function error is a failed attempt, and
    what the function returned is the job's result."""
    function = parse_lambda(arn)

    def send(client: LambdaClient, job: Job) -> Any:
        answer = client.invoke(FunctionName=arn, InvocationType="RequestResponse", Payload=payload(job).encode())
        returned = answer["Payload"].read()
        if answer.get("FunctionError"):
            failed = f"Lambda function {arn} failed ({answer['FunctionError']}): {_function_error(returned)}"
            raise AwsTargetError(redact(failed))
        return answer_of(returned)

    what = f"Lambda Invoke of {arn}"
    return AwsTarget("lambda", function.region, what, LAMBDA_PERMANENT, send, read_timeout_s=LAMBDA_READ_TIMEOUT_S)


def _function_error(returned: bytes) -> str:
    """``errorType: errorMessage`` from what a failed function returned (clipped)."""
    text = returned.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        return _clip(text, MAX_ERROR_MESSAGE_CHARS) or "no details"
    if not isinstance(data, dict):
        return _clip(text, MAX_ERROR_MESSAGE_CHARS)
    error_type = _clip(str(data.get("errorType") or "Error"), MAX_ERROR_TYPE_CHARS)
    message = data.get("errorMessage")
    return f"{error_type}: {_clip(str(message) if message is not None else 'no message', MAX_ERROR_MESSAGE_CHARS)}"


def sqs_target(spec: str) -> Target:
    """Sends the message to the queue an ARN or queue URL names, with FIFO ids on a FIFO queue."""
    queue = parse_queue(spec)
    url = queue.url

    def send(client: SQSClient, job: Job) -> None:
        attributes = message_attributes(job)
        client.send_message(
            QueueUrl=url, MessageBody=payload(job), MessageAttributes=attributes, **fifo_ids(job, queue.fifo)
        )

    return AwsTarget("sqs", queue.region, f"SQS SendMessage to {url}", SQS_PERMANENT, send)


def sns_target(arn: str) -> Target:
    """Publishes the message to the topic, with FIFO ids on a FIFO topic."""
    topic = parse_sns(arn)
    fifo = topic.resource.endswith(".fifo")

    def send(client: SNSClient, job: Job) -> None:
        attributes = message_attributes(job)
        client.publish(TopicArn=arn, Message=payload(job), MessageAttributes=attributes, **fifo_ids(job, fifo))

    return AwsTarget("sns", topic.region, f"SNS Publish to {arn}", SNS_PERMANENT, send)


def eventbridge_target(arn: str) -> Target:
    """Puts one event on the bus: source ``delayq``, detail-type the topic, detail the message."""
    bus = parse_event_bus(arn)
    what = f"EventBridge PutEvents to {arn}"

    def send(client: EventBridgeClient, job: Job) -> None:
        entry: PutEventsRequestEntryTypeDef = {
            "EventBusName": arn,
            "Source": EVENT_SOURCE,
            "DetailType": job.topic,
            "Detail": payload(job),
        }
        answer = client.put_events(Entries=[entry])
        if answer.get("FailedEntryCount", 0) > 0:
            failed = answer["Entries"][0] if answer.get("Entries") else {}
            code = str(failed.get("ErrorCode") or "Unknown")
            message = _clip(str(failed.get("ErrorMessage") or "no message"), MAX_ERROR_MESSAGE_CHARS)
            raise _failure(code in EVENTS_ENTRY_PERMANENT, f"{what}: the bus refused the event: {code}: {message}")

    return AwsTarget("events", bus.region, what, EVENTS_PERMANENT, send)


__all__ = [
    "Arn",
    "AwsTarget",
    "AwsTargetError",
    "SqsQueue",
    "Target",
    "deduplication_id",
    "eventbridge_target",
    "fifo_ids",
    "is_queue_url",
    "lambda_target",
    "message_attributes",
    "message_group_id",
    "parse_arn",
    "parse_event_bus",
    "parse_lambda",
    "parse_queue",
    "parse_sns",
    "redact",
    "sns_target",
    "sqs_target",
]
