"""The Lambda target, with botocore's Stubber on the very client ``delayq.aws.clients`` hands it (moto
cannot run a function's code without Docker), and what every AWS target does with SDK errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from botocore.stub import Stubber

from delayq import PermanentFailure
from delayq.aws import clients
from delayq.targets import aws
from delayq.targets.payload import payload

from support.aws import REGION, make_job, streaming

pytestmark = pytest.mark.usefixtures("aws_env")  # fake credentials, an empty client cache

ARN = f"arn:aws:lambda:{REGION}:123456789012:function:send-mail:live"


@pytest.fixture
def stub() -> Iterator[Stubber]:
    """A Stubber on the Lambda client the target will use (the same cache key: positional args)."""
    client = clients.client("lambda", REGION)
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def expect_invoke(stub: Stubber, response: dict[str, Any], job: Any = None) -> None:
    params = {
        "FunctionName": ARN,
        "InvocationType": "RequestResponse",
        "Payload": payload(job or make_job()).encode(),
    }
    stub.add_response("invoke", response, params)


def test_success_invokes_synchronously_with_the_payload_and_its_answer_is_the_result(stub: Stubber) -> None:
    expect_invoke(stub, {"StatusCode": 200, "Payload": streaming({"ok": True})})
    target = aws.lambda_target(ARN)
    assert target(make_job(), 30) == {"ok": True}  # the Stubber checks the parameters


def test_a_function_that_returns_nothing_gives_no_result(stub: Stubber) -> None:
    expect_invoke(stub, {"StatusCode": 200, "Payload": streaming(None)})
    assert aws.lambda_target(ARN)(make_job(), 30) is None


def test_client_in_the_functions_region_reads_longer_than_any_function_runs(stub: Stubber) -> None:
    expect_invoke(stub, {"StatusCode": 200, "Payload": streaming(None)})
    aws.lambda_target(ARN)(make_job(), 3)
    client = clients.client("lambda", REGION)
    assert client.meta.region_name == REGION
    assert client.meta.config.read_timeout >= 900
    assert clients.count() == 1


@pytest.mark.parametrize("kind", ["Unhandled", "Handled"])
def test_function_error_is_a_failed_attempt_with_its_type_and_message(stub: Stubber, kind: str) -> None:
    error = {"errorType": "ValueError", "errorMessage": "no such customer", "stackTrace": ["x"]}
    expect_invoke(stub, {"StatusCode": 200, "FunctionError": kind, "Payload": streaming(error)})
    with pytest.raises(aws.AwsTargetError) as raised:
        aws.lambda_target(ARN)(make_job(), 30)
    assert not isinstance(raised.value, PermanentFailure)
    assert str(raised.value) == f"Lambda function {ARN} failed ({kind}): ValueError: no such customer"


def test_function_error_message_is_truncated(stub: Stubber) -> None:
    error = {"errorType": "E" * 5000, "errorMessage": "m" * 50_000}
    expect_invoke(stub, {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": streaming(error)})
    with pytest.raises(aws.AwsTargetError) as raised:
        aws.lambda_target(ARN)(make_job(), 30)
    text = str(raised.value)
    assert len(text) < 1400
    assert "EEE...: mmm" in text
    assert text.endswith("m...")


@pytest.mark.parametrize(
    ("returned", "shown"),
    [
        (b"Task timed out", "Task timed out"),
        (b'{"errorMessage": "2024-01-01 Task timed out after 3.00 seconds"}', "Error: 2024-01-01 Task timed out"),
        (b'["not", "an", "object"]', '["not", "an", "object"]'),
        (b"", "no details"),
    ],
)
def test_function_error_in_other_shapes(stub: Stubber, returned: bytes, shown: str) -> None:
    expect_invoke(stub, {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": streaming(returned)})
    with pytest.raises(aws.AwsTargetError, match="failed \\(Unhandled\\): ") as raised:
        aws.lambda_target(ARN)(make_job(), 30)
    assert shown in str(raised.value)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ResourceNotFoundException", 404),
        ("InvalidRequestContentException", 400),
        ("RequestTooLargeException", 413),
    ],
)
def test_errors_that_cannot_heal_are_permanent(stub: Stubber, code: str, status: int) -> None:
    stub.add_client_error("invoke", code, "Function not found: x", http_status_code=status)
    with pytest.raises(PermanentFailure) as raised:
        aws.lambda_target(ARN)(make_job(), 30)
    assert str(raised.value) == f"Lambda Invoke of {ARN} failed: {code} (HTTP {status}): Function not found: x"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("TooManyRequestsException", 429),
        ("ThrottlingException", 400),
        ("ServiceException", 500),
        ("ResourceConflictException", 409),  # the function is being updated
        ("AccessDeniedException", 403),  # fixed in IAM: worth retrying
        ("KMSAccessDeniedException", 502),
        ("ResourceNotFoundException", 503),  # a 5xx is the service's trouble whatever its code
    ],
)
def test_throttling_service_and_access_errors_are_retried(stub: Stubber, code: str, status: int) -> None:
    stub.add_client_error("invoke", code, "slow down", http_status_code=status)
    with pytest.raises(aws.AwsTargetError) as raised:
        aws.lambda_target(ARN)(make_job(), 30)
    assert not isinstance(raised.value, PermanentFailure)
    assert f"{code} (HTTP {status}): slow down" in str(raised.value)


def test_credentials_echoed_in_an_error_are_redacted(stub: Stubber) -> None:
    message = "Authorization header: Credential=AKIAIOSFODNN7EXAMPLE/20250101/eu-west-1/lambda/aws4_request"
    stub.add_client_error("invoke", "IncompleteSignatureException", message, http_status_code=400)
    with pytest.raises(aws.AwsTargetError) as raised:
        aws.lambda_target(ARN)(make_job(), 30)
    assert "AKIAIOSFODNN7EXAMPLE" not in str(raised.value)
    assert "Credential=[redacted]" in str(raised.value)


def test_a_body_that_cannot_be_utf8_is_permanent() -> None:
    with pytest.raises(PermanentFailure, match="cannot be encoded as UTF-8"):
        aws.lambda_target(ARN)(make_job(body="\ud800"), 30)


@pytest.mark.parametrize(
    "error",
    [
        EndpointConnectionError(endpoint_url="https://lambda.eu-west-1.amazonaws.com/"),
        ReadTimeoutError(endpoint_url="https://lambda.eu-west-1.amazonaws.com/"),
    ],
)
def test_connection_errors_and_timeouts_are_retried(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    monkeypatch.setattr(time, "sleep", lambda seconds: None)  # the SDK's own retries back off
    client = clients.client("lambda", REGION)
    sent: list[str] = []

    def fail(request: Any, **kwargs: Any) -> None:
        sent.append(request.url)
        raise error

    client.meta.events.register("before-send.lambda.Invoke", fail)
    with pytest.raises(aws.AwsTargetError) as raised:
        aws.lambda_target(ARN)(make_job(), 30)
    assert not isinstance(raised.value, PermanentFailure)
    assert str(raised.value).startswith(f"Lambda Invoke of {ARN} failed: {type(error).__name__}: ")
    assert "lambda.eu-west-1.amazonaws.com" in str(raised.value)
    assert len(sent) > 1  # the SDK retried on its own before the attempt failed
    assert sent[0].startswith("https://lambda.eu-west-1.amazonaws.com/")


def test_making_targets_makes_no_client() -> None:
    targets = [
        aws.lambda_target(ARN),
        aws.sqs_target("arn:aws:sqs:eu-west-1:123456789012:jobs"),
        aws.sqs_target("https://sqs.eu-west-1.amazonaws.com/123456789012/jobs.fifo"),
        aws.sns_target("arn:aws:sns:eu-west-1:123456789012:events"),
        aws.eventbridge_target("arn:aws:events:eu-west-1:123456789012:event-bus/default"),
    ]
    assert all(callable(target) for target in targets)
    assert clients.count() == 0


def test_deliveries_share_one_client(stub: Stubber) -> None:
    made = clients.count()  # the stub fixture made the client
    for _ in range(2):
        stub.add_response("invoke", {"StatusCode": 200, "Payload": streaming({})})
    target = aws.lambda_target(ARN)
    target(make_job(), 30)
    target(make_job(attempt=2), 900)
    assert clients.count() == made == 1
