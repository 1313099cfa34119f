"""How long an AWS target waits for AWS: each call waits at most the job's timeout for an answer (a
Lambda invocation: 905 s, longer than any function runs), set per call on the one client of its
service and region, so jobs with their own timeouts share that client and its connections."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import pytest
from botocore.awsrequest import AWSPreparedRequest

from delayq.aws import clients
from delayq.targets import aws

from support.aws import ACCOUNT, REGION, make_job

pytestmark = pytest.mark.usefixtures("aws_env")  # fake credentials, an empty client cache

TARGETS: dict[str, tuple[str, Callable[[str], aws.Target], str]] = {
    "sqs": ("sqs", aws.sqs_target, f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"),
    "sns": ("sns", aws.sns_target, f"arn:aws:sns:{REGION}:{ACCOUNT}:events"),
    "events": ("events", aws.eventbridge_target, f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default"),
    "lambda": ("lambda", aws.lambda_target, f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:send-mail"),
}


class Sent(Exception):
    """Raised in place of sending the request: the test has seen what it needed."""


def read_timeouts_sent(service: str) -> list[Any]:
    """Stops every request of ``service``'s client before it is sent, noting its read timeout."""
    seen: list[Any] = []

    def stop(request: AWSPreparedRequest, **kwargs: Any) -> None:
        seen.append(request.context.get("read_timeout"))
        raise Sent

    clients.client(service, REGION).meta.events.register_first(f"before-send.{service}", stop)
    return seen


@pytest.mark.parametrize("kind", sorted(TARGETS))
def test_each_call_reads_for_the_jobs_timeout_on_one_client(kind: str) -> None:
    service, make_target, spec = TARGETS[kind]
    seen = read_timeouts_sent(service)
    target = make_target(spec)
    for timeout in (1, 7.5, 900):
        with pytest.raises(Sent):
            target(make_job(), timeout)
    if service == "lambda":
        assert seen == [aws.LAMBDA_READ_TIMEOUT_S] * 3
    else:
        assert seen == [1, 7.5, 900]
    assert clients.count() == 1


def test_calls_outside_a_read_timeout_block_keep_the_clients_read_timeout() -> None:
    seen = read_timeouts_sent("sqs")
    client = clients.client("sqs", REGION)
    for timeout in (None, 3, None):
        with pytest.raises(Sent), clients.read_timeout(timeout) if timeout else nullcontext():
            client.send_message(QueueUrl=f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/q", MessageBody="x")
    assert seen == [None, 3, None]
    assert client.meta.config.read_timeout == clients.READ_TIMEOUT_S


@pytest.fixture
def hung_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """An SQS endpoint that takes every request and never answers; yields when each one arrived."""
    arrivals: list[float] = []
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            if conn.recv(65536):
                arrivals.append(time.monotonic())
            held.append(conn)  # open, silent

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setattr(clients, "MAX_ATTEMPTS", 1)  # one wait per delivery: a quick test
    yield arrivals
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()


def test_a_hung_endpoint_holds_a_delivery_for_the_jobs_timeout_only(hung_endpoint: list[float]) -> None:
    """Each call waits its own job's timeout: at least that, and less than the other job's (or the
    client's 60 s). The timeouts are far apart, so a loaded machine that ends a wait late cannot blur
    one into the other."""
    target = aws.sqs_target(f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs")
    waited = []
    short, long = 0.5, 3.0
    for timeout in (short, long):
        start = time.monotonic()
        with pytest.raises(aws.AwsTargetError, match="ReadTimeoutError"):
            target(make_job(), timeout)
        waited.append(time.monotonic() - start)
    assert len(hung_endpoint) == 2
    assert short - 0.1 <= waited[0] < long
    assert long - 0.1 <= waited[1] < clients.READ_TIMEOUT_S
    assert clients.count() == 1
