"""Run delayq's loops as plain processes, outside Lambda (a container, a VM, a test):

    python -m delayq sweep   [--seconds N]               the sweep loop
    python -m delayq consume [--seconds N] [--topic T]   the consume loop
    python -m delayq local   [--port 8000]               the local stack (API + both loops)

Settings come from the ``DELAYQ_*`` environment. Without ``--seconds`` a loop runs until SIGTERM or
SIGINT, then finishes what it started, releases its locks, prints its summary as JSON and exits,
even if a handler that outlived its timeout (settled as a failed attempt) is still running.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from typing import Any

from .consumer import Consumer
from .loop import Budget
from .queue import Queue
from .sweeper import Sweeper
from .version import VERSION


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="delayq", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"delayq {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("sweep", "consume"):
        command = commands.add_parser(name, help=f"the {name} loop")
        command.add_argument("--seconds", type=float, help="loop this long (0: one pass); default: until stopped")
        if name == "consume":
            command.add_argument("--topic", action="append", help="consume only this topic (repeatable)")
    local = commands.add_parser("local", help="the local stack: the API with both loops")
    local.add_argument("--host", default="127.0.0.1")
    local.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)

    if args.command == "local":
        from .local import main as local_main  # noqa: PLC0415 - only this command needs the HTTP server

        local_main(["--host", args.host, "--port", str(args.port)])
        return

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    queue = Queue.from_env()
    budget = Budget.forever() if args.seconds is None else Budget.of(args.seconds)
    loop: Sweeper | Consumer = Sweeper(queue) if args.command == "sweep" else Consumer(queue, topics=args.topic)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: loop.request_stop())
    summary: dict[str, Any] = loop.run(budget)
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")


def exit_now() -> None:
    """Exits without waiting for threads. A handler past its timeout was settled as a failed attempt,
    but its thread cannot be killed; the consumer's workers are daemon threads, but a handler may have
    started threads of its own, and the interpreter would wait for those at exit for as long as they
    hang: a process told to stop would not stop."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(0)


def run() -> None:
    """The ``delayq`` command (and ``python -m delayq``)."""
    main()
    exit_now()


if __name__ == "__main__":
    run()
