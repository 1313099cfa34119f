"""``delayq`` (also ``python -m delayq``): delayq's loops as plain processes, outside Lambda (a
container, a VM, a test), the local stack and the web view, and the operator's commands
(``surfaces/cli.py``; ``delayq --help`` lists them all):

    delayq sweep   [--seconds N] [--metrics-port P]               the sweep loop
    delayq consume [--seconds N] [--topic T] [--metrics-port P]   the consume loop
    delayq local   [--port 8000]    the local stack (API + both loops, the web view, metrics)
    delayq ui      [--port 8001]    the web view and the jobs gauge of the queue the settings name
    delayq topics | jobs | job | ...           see delayq <command> --help

Settings come from the ``DELAYQ_*`` environment. Without ``--seconds`` a loop runs until SIGTERM or
SIGINT, then finishes what it started, releases its locks, prints its summary as JSON and exits,
even if a handler that outlived its timeout (settled as a failed attempt) is still running. With
``--metrics-port`` a loop serves its Prometheus metrics at ``/metrics`` there (``delayq.surfaces.metrics``),
on loopback unless ``--metrics-host`` says otherwise (which needs ``DELAYQ_UI_TOKEN``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .core.errors import ConfigError
from .core.loop import Budget, freeze_start_up
from .core.observability import Telemetry
from .core.settings import Settings
from .local import needs_local_extra
from .loops.consumer import Consumer
from .loops.sweeper import Sweeper
from .store.queue import Queue
from .surfaces import cli
from .version import VERSION

DESCRIPTION = "delayq's loops, local stack, web view and operator commands, on the DELAYQ_* settings."
LOOPS = {
    "sweep": "Sweeps every partition whose lock it can hold: moves due jobs no consumer took, takes back "
    "expired leases, forgets expired receipts, makes schedules' occurrences and callbacks' jobs. Prints its "
    "summary as JSON when it stops (SIGTERM, SIGINT, or --seconds).",
    "consume": "Takes due jobs of every configured topic (or those of --topic) and hands them to their "
    "targets, settling each: done, retried after its backoff, or dead. Prints its summary as JSON when it "
    "stops (SIGTERM, SIGINT, or --seconds).",
}
SERVERS = {  # name: (its line in the list of commands, its description, its default port)
    "local": (
        "the local stack: the API with both loops, the web view, metrics",
        "The HTTP API (the resolver the Lambda runs) with a sweep and a consume loop in one process, the web "
        "view at /ui/ and Prometheus metrics at /metrics, on the DELAYQ_* settings (example topics without "
        "DELAYQ_TOPICS; a redis-server of its own, or an embedded one, when none answers).",
        8000,
    ),
    "ui": (
        "the web view (and the jobs gauge) of the queue the settings name",
        "The web view at /ui/ (and Prometheus' jobs gauge at /metrics) of the queue the DELAYQ_* settings "
        "name, speaking the JSON API; no loop runs.",
        8001,
    ),
}


def main(argv: list[str] | None = None) -> int:
    """Runs one command; its exit code."""
    parser = argparse.ArgumentParser(prog="delayq", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"delayq {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, description in LOOPS.items():
        command = commands.add_parser(name, help=f"the {name} loop", description=description)
        command.add_argument("--seconds", type=float, help="loop this long (0: one pass); default: until stopped")
        if name == "consume":
            command.add_argument("--topic", action="append", help="consume only this topic (repeatable)")
        command.add_argument("--metrics-port", type=int, help="serve Prometheus metrics at /metrics on this port")
        command.add_argument("--metrics-host", default="127.0.0.1", help="anything but loopback needs DELAYQ_UI_TOKEN")
    for name, (listed, description, port) in SERVERS.items():
        server = commands.add_parser(name, help=listed, description=description)
        server.add_argument("--host", default="127.0.0.1", help="the address to listen on (%(default)s; anything "
                            "but loopback needs DELAYQ_UI_TOKEN)")  # fmt: skip
        server.add_argument("--port", type=int, default=port, help="the port to listen on (%(default)s)")
    cli.add_commands(commands)
    args = parser.parse_args(argv)

    if args.command in cli.COMMANDS:
        return cli.run(args)
    if args.command in ("local", "ui"):
        serve = needs_local_extra(lambda: _server_main(args.command), f"delayq {args.command}")
        serve(["--host", args.host, "--port", str(args.port)])
        return 0

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    try:
        settings = Settings.from_env()
        with _metrics(args, settings) as telemetry:
            queue = Queue(settings, telemetry=telemetry)
            queue.publish_topics(f"delayq {args.command}")  # for the tools run beside it
            budget = Budget.forever() if args.seconds is None else Budget.of(args.seconds)
            loop = Sweeper(queue) if args.command == "sweep" else Consumer(queue, topics=args.topic)
            summary = run_until_signalled(loop, budget)
    except ConfigError as exc:  # the settings are wrong: say which, as the operator's commands do
        sys.stderr.write(f"delayq {args.command}: {exc.message}\n")
        return cli.USAGE
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")
    return 0


def run_until_signalled(loop: Sweeper | Consumer, budget: Budget) -> dict[str, Any]:
    """``loop.run(budget)`` in a thread of its own, stopped by SIGTERM or SIGINT; its summary.

    Python runs a signal handler in the main thread, between two of its bytecodes; ``request_stop``
    sets the loop's events, and setting an event takes its lock. Were the loop running in the main
    thread, a signal landing while the loop held that lock (waiting on or clearing the event) would
    wait for itself forever: the process would never stop. Here the main thread holds nothing: it
    waits for the loop, and its handler waits at most a moment for the loop's thread to let go."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["summary"] = loop.run(budget)
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
            outcome["error"] = exc

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: loop.request_stop())
    freeze_start_up()
    thread = threading.Thread(target=run, name=type(loop).__name__.lower())
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    summary: dict[str, Any] = outcome["summary"]
    return summary


def _server_main(command: str) -> Callable[[list[str]], None]:
    """The main of ``local`` or ``ui``: imported only for them (they need the ``local`` extra)."""
    if command == "local":
        from .surfaces.local import main  # noqa: PLC0415 - only this command needs the HTTP server
    else:
        from .surfaces.webview import main  # noqa: PLC0415 - only this command needs the HTTP server
    return main


@contextmanager
def _metrics(args: argparse.Namespace, settings: Settings) -> Iterator[Telemetry]:
    """The loop's telemetry: counting for Prometheus, served at ``--metrics-port`` while the loop runs."""
    if args.metrics_port is None:
        yield Telemetry.disabled()
        return

    def load() -> Any:
        from .surfaces import localhttp, metrics, webview  # noqa: PLC0415 - only --metrics-port needs them

        return localhttp, metrics, webview

    localhttp, metrics, webview = needs_local_extra(load, f"delayq {args.command} --metrics-port")
    counted = metrics.LoopMetrics(settings.metrics_topics)
    telemetry = Telemetry.disabled(sink=counted)
    program = f"delayq {args.command}"
    server = localhttp.listen(args.metrics_host, args.metrics_port, settings.ui_token, program=program)
    app = webview.metrics_surface(metrics.Metrics(Queue(settings), counted).app)
    thread = threading.Thread(target=server.serve, args=(app,), name="metrics", daemon=True)
    thread.start()
    logging.getLogger("delayq.metrics").info("%s: Prometheus metrics at %s/metrics", program, server.binding.url)
    try:
        yield telemetry
    finally:
        server.stop()
        thread.join(5)


def exit_now(code: int = 0) -> None:
    """Exits without waiting for threads. A handler past its timeout was settled as a failed attempt,
    but its thread cannot be killed; the consumer's workers are daemon threads, but a handler may have
    started threads of its own, and the interpreter would wait for those at exit for as long as they
    hang: a process told to stop would not stop."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


def run() -> None:
    """The ``delayq`` command (and ``python -m delayq``)."""
    exit_now(main())


if __name__ == "__main__":
    run()
