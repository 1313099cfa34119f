"""The failover harness's producer, a process of its own: ``POST /jobs`` through the API's Lambda handler
(``functions/enqueue.py``, imported from PYTHONPATH: the checkout under test), one request at a time as
one warm Lambda container serves them, at a steady pace.

    python failover_producer.py --rate 200 --seconds 50 --out requests.jsonl

The environment names Redis and the queue (``DELAYQ_*``). Job ``n`` is due to be sent at ``start + n /
rate``, with the id ``<prefix>-<n>`` and a delay uniform in ``--min-delay`` to ``--max-delay`` s; with
``--keys K``, the flow key ``tenant-<n mod K>``.

Slow answers hold it up (one request at a time). A job at most ``CATCH_UP_S`` late is sent at once; a
later one is skipped, never sent: the pace never goes above the rate by more than a tenth of a second's
jobs, however long an answer took (a stall caught up at once would be a burst of its own, seconds of
jobs in a moment). ``"sent"`` then falls short of ``"offered"``.

``--out`` gets JSON lines: first ``{"ev": "ready", "wall_ms"}`` (imports done and one ``GET /health``
answered: the traffic starts now), then one per request, ``{"id", "status", "run_at_ms" (on a 201),
"error" (the answer's code otherwise), "sent_ms", "answered_ms"}`` (wall clock), and last ``{"ev": "done",
"offered", "sent", "max_behind_s"}``. Each line is flushed as written: a producer that dies leaves what
it sent.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

EVENT = Path(__file__).resolve().parents[2] / "events" / "api" / "post_jobs.json"
READY_TIMEOUT_S = 30.0
CATCH_UP_S = 0.1


class Context:
    """The part of a Lambda context the handler reads."""

    function_name = "delayq-failover-producer"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:delayq-failover-producer"
    aws_request_id = "00000000-0000-0000-0000-000000000026"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def api_event(sample: dict[str, Any], method: str, path: str, body: Any = None) -> dict[str, Any]:
    """An API Gateway REST proxy event on the ``events/api/post_jobs.json`` sample, as the tests'
    ``support.events.api_event`` builds one, on a sample read once rather than at every request."""
    event = copy.deepcopy(sample)
    event["httpMethod"] = method
    event["path"] = path
    event["resource"] = "/{proxy+}"
    event["pathParameters"] = {"proxy": path.lstrip("/")}
    event["requestContext"]["httpMethod"] = method
    event["requestContext"]["path"] = "/prod" + path
    event["queryStringParameters"] = None
    event["multiValueQueryStringParameters"] = None
    event["body"] = None if body is None else json.dumps(body)
    return event


def call(handler: Any, event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The handler's answer: status and JSON body (``{}`` when it has none, or not JSON)."""
    response = handler(event, Context())
    try:
        answer = json.loads(response.get("body") or "{}")
    except ValueError:
        answer = {"error": "not json"}
    return int(response["statusCode"]), answer if isinstance(answer, dict) else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200, help="jobs a second (200)")
    parser.add_argument("--seconds", type=float, required=True, help="how long to send")
    parser.add_argument("--out", type=Path, required=True, help="the JSON lines file")
    parser.add_argument("--topic", default="failover")
    parser.add_argument("--prefix", default="job", help="ids are <prefix>-<n>")
    parser.add_argument("--min-delay", type=float, default=1.0)
    parser.add_argument("--max-delay", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--keys", type=int, default=0, help="jobs carry one of this many flow keys, in turn (0: none)")
    args = parser.parse_args(argv)

    from enqueue import lambda_handler  # noqa: PLC0415 - after argparse: --help needs no checkout

    sample = json.loads(EVENT.read_text())
    rng = random.Random(args.seed)
    with args.out.open("a", buffering=1) as out:
        # The container is warm before the clock starts: its Queue made, its connection open.
        deadline = time.monotonic() + READY_TIMEOUT_S
        while call(lambda_handler, api_event(sample, "GET", "/health"))[0] != 200:
            if time.monotonic() > deadline:
                print(f"no 200 from GET /health within {READY_TIMEOUT_S:g} s", file=sys.stderr)
                return 1
            time.sleep(0.1)
        out.write(json.dumps({"ev": "ready", "wall_ms": time.time() * 1000}) + "\n")
        began, behind, total, sent = time.monotonic(), 0.0, round(args.rate * args.seconds), 0
        for n in range(total):
            delay = round(rng.uniform(args.min_delay, args.max_delay), 3)  # drawn for every n: skips shift nothing
            wait = began + n / args.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            behind = max(behind, -wait)
            if -wait > CATCH_UP_S:
                continue
            job = {
                "topic": args.topic,
                "id": f"{args.prefix}-{n:06d}",
                "delay": delay,
                "body": {"n": n},
            }
            if args.keys:
                job["key"] = f"tenant-{n % args.keys}"
            sent_ms = time.time() * 1000
            try:
                status, answer = call(lambda_handler, api_event(sample, "POST", "/jobs", job))
            except Exception as exc:  # a handler that raises is an answer too (API Gateway's 502)
                status, answer = 0, {"error": f"raised {type(exc).__name__}: {exc}"}
            record: dict[str, Any] = {"id": job["id"], "status": status}
            if status == 201:
                record["run_at_ms"] = int(answer["run_at_ms"])
            else:
                record["error"] = answer.get("error")
            record |= {"sent_ms": round(sent_ms, 3), "answered_ms": round(time.time() * 1000, 3)}
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
            sent += 1
        done = {"ev": "done", "offered": total, "sent": sent, "max_behind_s": round(behind, 3)}
        out.write(json.dumps(done) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
