"""Runs one of delayq's entry points the way it runs for real, in this process, for the secret-grep
test (``test_security_secrets.py``), which starts it as a subprocess and reads everything it prints.

    python entry_point.py api|sweep|consume|client      the Lambda handlers, the Python client
    python entry_point.py cli sweep --seconds 0         ``python -m delayq ...``
    python entry_point.py local --port 8123             ``python -m delayq.local ...``

Answers are printed as ``ANSWER <json>`` lines on stdout; logs go where delayq sends them (Powertools
JSON on stdout in the handlers, plain lines on stderr for the command line and the local stack), and
an exception escapes as it would from Lambda or a shell (a traceback on stderr).

``DELAYQ_TEST_SECRETS`` (JSON: secret name -> value) stands Secrets Manager up first, with moto, in
this process, so that ``DELAYQ_REDIS_SECRET`` and ``DELAYQ_WEBHOOK_SECRET_ID`` can name them.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

EVENTS = Path(__file__).resolve().parents[2] / "events"


class Context:
    """The part of a Lambda context the handlers read."""

    function_name = "delayq-secret-grep"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:delayq-secret-grep"
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    def __init__(self) -> None:
        self._deadline = time.monotonic() + 60

    def get_remaining_time_in_millis(self) -> int:
        return int((self._deadline - time.monotonic()) * 1000)


def answer(value: Any) -> None:
    print("ANSWER " + json.dumps(value, default=str), flush=True)


def rest_event(method: str, path: str, body: Any = None) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "api" / "post_jobs.json").read_text())
    event.update(httpMethod=method, path=path, resource="/{proxy+}", pathParameters={"proxy": path.lstrip("/")})
    event["requestContext"].update(httpMethod=method, path="/prod" + path)
    event["queryStringParameters"] = event["multiValueQueryStringParameters"] = None
    event["body"] = None if body is None else json.dumps(body)
    return event


def api() -> None:
    import enqueue  # noqa: PLC0415 - imported after the environment and the fake AWS are set

    for method, path, body in (
        ("GET", "/health", None),
        ("POST", "/jobs", {"topic": "orders", "id": "grep-1", "delay": 60, "body": {"n": 1}}),
        ("GET", "/jobs/orders/grep-1", None),
    ):
        answer(enqueue.lambda_handler(rest_event(method, path, body), Context()))


def loop(name: str) -> None:
    module = __import__(name)  # sweep or consume: the handler module, as Lambda imports it
    answer(module.lambda_handler({"seconds": 0}, Context()))


def client() -> None:
    from delayq import DelayqError, Queue  # noqa: PLC0415

    try:
        queue = Queue.from_env()
        answer(queue.enqueue("orders", {"n": 2}, id="grep-2", delay=60).to_dict())
        answer(queue.get("orders", "grep-2").to_dict())
        answer(queue.stats("orders").to_dict())
    except DelayqError as exc:  # what a caller of the client sees
        answer({"raised": type(exc).__name__, "message": str(exc)})


def main(argv: list[str]) -> None:
    with ExitStack() as stack:
        secrets = json.loads(os.environ.pop("DELAYQ_TEST_SECRETS", "{}"))
        if secrets:
            import boto3  # noqa: PLC0415 - only shapes with secrets need the fake AWS
            from moto import mock_aws  # noqa: PLC0415

            stack.enter_context(mock_aws())
            manager = boto3.client("secretsmanager", region_name=os.environ["AWS_DEFAULT_REGION"])
            for name, value in secrets.items():
                manager.create_secret(Name=name, SecretString=value)
        entry, *rest = argv
        if entry == "api":
            api()
        elif entry in ("sweep", "consume"):
            loop(entry)
        elif entry == "client":
            client()
        else:  # the command line and the local stack, as `python -m` runs them
            sys.argv = ["delayq", *rest]
            runpy.run_module("delayq" if entry == "cli" else "delayq.local", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
