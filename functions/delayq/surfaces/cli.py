"""The operator's commands of ``delayq`` (and ``python -m delayq``), on the ``DELAYQ_*`` settings:

    delayq topics   [--limit N] [--cursor C | --all]              topics with their counts
    delayq jobs     TOPIC --state S [--limit N] [--cursor C | --all]  a topic's jobs in one state
    delayq job      TOPIC ID                                      one job, whole
    delayq dead     TOPIC [--limit N | --errors]                  dead jobs, newest first, or grouped by error
    delayq replay   TOPIC [ID ...]                                dead jobs due again now (all without ids)
    delayq purge    TOPIC                                         dead jobs deleted for good
    delayq cancel   TOPIC --state S [--yes]                       every job of the topic in one state cancelled
    delayq pause    TOPIC                                         no consumer starts the topic's jobs
    delayq resume   TOPIC                                         ... until this
    delayq forecast TOPIC [--minutes N] [--bucket S]              delayed jobs falling due, as a bar chart
    delayq history  TOPIC [--minutes N]                           what happened to its jobs, minute by minute
    delayq schedules [TOPIC [NAME]]                               recurring schedules, or one with its next runs
    delayq keys     TOPIC [--limit N] [--cursor C | --all]        a topic's flow keys: counts, limits, holds
    delayq key      TOPIC KEY [--pause | --resume] [--concurrency N] [--rate R] [--burst B] [--reset]
                                                                  one flow key, its settings changed first

Tables for people by default (times in ISO-8601 UTC, bodies and errors cut short); ``--json`` prints
exactly what the matching HTTP route answers (the same ``to_dict`` and ``answers``), errors too; with
``--all``, one page per line. Exit codes, for scripts: 0 done; 1 not found or nothing (no such job
or topic, an empty list, nothing replayed, purged or cancelled); 2 usage, or a value delayq refuses (or
a cancel not confirmed); 3 Redis unavailable.
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

from delayq.core.activity import DEFAULT_MINUTES as DEFAULT_HISTORY_MINUTES
from delayq.core.errors import DelayqError, InvalidField, JobNotFound, RedisUnavailable
from delayq.core.flows import KeyPage, KeyState
from delayq.core.job import RESULT_MAX_BYTES, STATES, DeadJob, JobInfo, TopicStats
from delayq.core.recurring import ScheduleInfo
from delayq.core.schedule import iso_utc
from delayq.store.listing import (
    CANCELLABLE,
    DEFAULT_BUCKET_S,
    DEFAULT_LIMIT,
    DEFAULT_MINUTES,
    DeadErrors,
    Forecast,
    JobPage,
    TopicPage,
    check_cancellable,
)
from delayq.store.queue import Queue

from . import answers

OK, NOTHING, USAGE, UNAVAILABLE = 0, 1, 2, 3
Page = TypeVar("Page", JobPage, TopicPage, KeyPage)
Item = TypeVar("Item", JobInfo, TopicStats, KeyState)
SHORT_BODY = 40  # characters of a body in a table
SHORT_ERROR = 60  # of a last error
BAR_WIDTH = 50  # characters of the forecast's longest bar

EXIT_CODES = f"""exit codes: {OK} done; {NOTHING} not found or nothing (no such job or topic, an empty list,
nothing replayed, purged or cancelled); {USAGE} usage, or a value delayq refuses (or a cancel or purge not confirmed);
{UNAVAILABLE} Redis unavailable"""


class Printer:
    """Where a command's answer goes: JSON documents, aligned tables, lines."""

    def __init__(self, out: TextIO, *, as_json: bool) -> None:
        self.out = out
        self.as_json = as_json

    def json(self, document: Any) -> None:
        self.out.write(json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n")

    def line(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def table_or(
        self, nothing: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Iterable[int] = ()
    ) -> None:
        """The table, or when there are no rows, the line ``nothing``."""
        if rows:
            self.table(headers, rows, right=right)
        else:
            self.line(nothing)

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Iterable[int] = ()) -> None:
        """``rows`` under ``headers``, columns aligned (those in ``right`` to the right: numbers)."""
        widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
        numbers = set(right)
        for row in [headers, *rows]:
            cells = [cell.rjust(widths[i]) if i in numbers else cell.ljust(widths[i]) for i, cell in enumerate(row)]
            self.line("  ".join(cells).rstrip())


# ------------------------------------------------------------------------------------ text for people


def printable(text: str) -> str:
    """``text`` safe for a terminal: control and format characters (escape sequences, newlines,
    bidirectional overrides) written as escapes. Last errors come from handlers and remote servers."""
    return "".join(
        char.encode("unicode_escape").decode("ascii") if unicodedata.category(char)[0] == "C" else char for char in text
    )


def short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_body(body: Any) -> str:
    return short(json.dumps(body, ensure_ascii=False, separators=(",", ":")), SHORT_BODY)


def short_error(error: str | None) -> str:
    return "-" if error is None else short(printable(error), SHORT_ERROR)


def duration(ms: int) -> str:
    """``1.5s``, ``4m05s``, ``2h10m``, ``3d04h``: how long, to a glance's precision."""
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def when(ms: int | None) -> str:
    return "-" if ms is None else iso_utc(ms)


def took(started_ms: int | None, ended_ms: int | None) -> str:
    """How long an attempt took: ``12ms`` under a second, else as ``duration``; ``-`` if not known."""
    if started_ms is None or ended_ms is None:
        return "-"
    ms = ended_ms - started_ms
    return f"{ms}ms" if ms < 1000 else duration(ms)


# ------------------------------------------------------------------------------------ the commands


def _pages(fetch: Callable[[str | None], Page], args: argparse.Namespace) -> Iterator[Page]:
    """One page at ``--cursor``, or with ``--all`` every page from there on."""
    cursor = args.cursor
    while True:
        page = fetch(cursor)
        yield page
        cursor = page.next
        if not args.all or cursor is None:
            return


def _gathered(
    fetch: Callable[[str | None], Page], items: Callable[[Page], list[Item]], args: argparse.Namespace, printer: Printer
) -> tuple[list[Item], str | None]:
    """The items of the pages ``_pages`` reads (each page printed as it comes with ``--json``), and
    the last page's ``next``."""
    found: list[Item] = []
    following = None
    for page in _pages(fetch, args):
        if printer.as_json:
            printer.json(page.to_dict())
        found += items(page)
        following = page.next
    return found, following


def topics(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    found, following = _gathered(
        lambda cursor: queue.topics(args.limit, cursor), lambda page: page.topics, args, printer
    )
    if not printer.as_json:
        rows = [
            [
                stats.topic,
                str(stats.delayed),
                str(stats.ready),
                str(stats.reserved),
                str(stats.dead),
                str(stats.done),
                when(stats.next_run_at_ms),
                duration(stats.oldest_ready_ms) if stats.oldest_ready_ms else "-",
                "paused" if stats.paused else "",
            ]
            for stats in found
        ]
        headers = ["TOPIC", "DELAYED", "READY", "RESERVED", "DEAD", "DONE", "NEXT RUN AT", "OLDEST READY", "STATE"]
        printer.table_or("no topics", headers, rows, right=(1, 2, 3, 4, 5))
        _more(printer, following)
    return OK if found else NOTHING


def jobs(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    found, following = _gathered(
        lambda cursor: queue.jobs(args.topic, args.state, args.limit, cursor), lambda page: page.jobs, args, printer
    )
    if printer.as_json:
        return OK if found else NOTHING
    if args.state == "done":  # receipts: no body nor error kept, but when each ran
        rows = [
            [job.id, iso_utc(job.run_at_ms), when(job.started_at_ms), when(job.done_at_ms), str(job.attempts)]
            for job in found
        ]
        headers = ["ID", "RUN AT", "STARTED AT", "DONE AT", "ATTEMPTS"]
        printer.table_or(f"no done jobs in {args.topic}", headers, rows, right=(4,))
    else:
        rows = [
            [job.id, iso_utc(job.run_at_ms), str(job.attempts), str(job.retries), short_body(job.body),
             short_error(job.last_error)]
            for job in found
        ]  # fmt: skip
        headers = ["ID", "RUN AT", "ATTEMPTS", "RETRIES", "BODY", "LAST ERROR"]
        printer.table_or(f"no {args.state} jobs in {args.topic}", headers, rows, right=(2, 3))
    _more(printer, following)
    return OK if found else NOTHING


def _more(printer: Printer, cursor: str | None) -> None:
    if cursor is not None:
        printer.line(f"(more: --cursor {cursor}, or --all)")


def job(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    info = queue.get(args.topic, args.id)
    if printer.as_json:
        printer.json(info.to_dict())
        return OK
    fields = [
        ("topic", info.topic),
        ("id", info.id),
        ("key", "-" if info.key is None else info.key),
        ("state", info.state),
        ("run at", iso_utc(info.run_at_ms)),
        ("enqueued at", iso_utc(info.enqueued_at_ms)),
        ("attempts", f"{info.attempts} (retries: {info.retries})"),
        ("last error", "-" if info.last_error is None else printable(info.last_error)),
    ]
    if info.started_at_ms is not None and info.done_at_ms is not None:  # a receipt: no body kept
        fields[6:] = [
            ("started at", iso_utc(info.started_at_ms)),
            ("done at", iso_utc(info.done_at_ms)),
            ("attempts", str(info.attempts)),
            ("body", "- (a done job's receipt keeps no body)"),
        ]
    if info.dead_at_ms is not None:
        fields.append(("dead at", iso_utc(info.dead_at_ms)))
    for name, value in fields:
        printer.line(f"{name:<12} {value}")
    if info.history:
        printer.line("history")
        rows = [
            [
                str(attempt.attempt),
                when(attempt.started_at_ms),
                when(attempt.ended_at_ms),
                took(attempt.started_at_ms, attempt.ended_at_ms),
                attempt.outcome,
                short_error(attempt.error),
            ]
            for attempt in info.history
        ]
        printer.table_or("", ["ATTEMPT", "STARTED AT", "ENDED AT", "TOOK", "OUTCOME", "ERROR"], rows, right=(0, 3))
    if info.state == "done":
        cut = f" (cut to its first {RESULT_MAX_BYTES // 1024} KiB)" if info.result_truncated else ""
        printer.line("result" + cut)
        shown = json.dumps(info.result, ensure_ascii=False, indent=2) if info.result is not None else "-"
    else:
        printer.line("body")
        shown = json.dumps(info.body, ensure_ascii=False, indent=2)
    for line in shown.splitlines():
        printer.line("  " + line)
    return OK


def dead(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    if args.errors:
        return dead_errors(queue, args, printer)
    found: list[DeadJob] = queue.dead(args.topic, args.limit)
    if printer.as_json:
        printer.json(answers.dead_jobs(found))
    else:
        rows = [
            [job.id, iso_utc(job.died_at_ms), str(job.attempts), short_error(job.last_error), short_body(job.body)]
            for job in found
        ]
        headers = ["ID", "DIED AT", "ATTEMPTS", "LAST ERROR", "BODY"]
        printer.table_or(f"no dead jobs in {args.topic}", headers, rows, right=(2,))
    return OK if found else NOTHING


def dead_errors(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    grouped: DeadErrors = queue.dead_errors(args.topic)
    if printer.as_json:
        printer.json(grouped.to_dict())
    else:
        rows = [
            [str(group.count), iso_utc(group.last_at_ms), group.example_id, short(printable(group.error), SHORT_ERROR)]
            for group in grouped.errors
        ]
        printer.table_or(
            f"no dead jobs in {args.topic}", ["COUNT", "LAST DIED AT", "EXAMPLE", "ERROR"], rows, right=(0,)
        )
        if grouped.scanned < grouped.dead:
            printer.line(f"(the newest {grouped.scanned} of {grouped.dead} dead jobs)")
    return OK if grouped.errors else NOTHING


def replay(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    """Replays the dead jobs named (all without ``ids``); names those that were not dead on stderr."""
    not_dead = {job_id: _state_of(queue, args.topic, job_id) for job_id in args.ids}
    not_dead = {job_id: state for job_id, state in not_dead.items() if state != "dead"}
    count = queue.replay(args.topic, args.ids or None)
    if printer.as_json:
        printer.json(answers.replayed(count))
    else:
        printer.line(f"{count} dead job{'s' * (count != 1)} of {args.topic} replayed: due now")
    for job_id, state in not_dead.items():
        sys.stderr.write(f"delayq replay: {printable(job_id)} not replayed: {state}\n")
    return OK if count else NOTHING


def _state_of(queue: Queue, topic: str, job_id: str) -> str:
    try:
        return queue.get(topic, job_id).state
    except JobNotFound:
        return "no such job"


def purge(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    """Without ``--yes``, asks first (on a terminal; elsewhere it refuses, exit code 2, nothing done)."""
    if not args.yes:
        dead = queue.stats(args.topic).dead
        if dead and not _confirmed(f"delete {dead} dead job{'s' * (dead != 1)} of {args.topic} for good? [y/N] "):
            sys.stderr.write("delayq purge: nothing deleted (--yes deletes without asking)\n")
            return USAGE
    count = queue.purge(args.topic)
    if printer.as_json:
        printer.json(answers.purged(count))
    else:
        printer.line(f"{count} dead job{'s' * (count != 1)} of {args.topic} deleted")
    return OK if count else NOTHING


def cancel(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    """Without ``--yes``, asks first (on a terminal; elsewhere it refuses, exit code 2, nothing done)."""
    state = check_cancellable(args.state)
    if not args.yes:
        waiting = queue.stats(args.topic).to_dict()[state]
        if waiting and not _confirmed(f"cancel {waiting} {state} job{'s' * (waiting != 1)} of {args.topic}? [y/N] "):
            sys.stderr.write("delayq cancel: nothing cancelled (--yes cancels without asking)\n")
            return USAGE
    count = queue.cancel_all(args.topic, state)
    if printer.as_json:
        printer.json(answers.cancelled(count))
    else:
        printer.line(f"{count} {state} job{'s' * (count != 1)} of {args.topic} cancelled")
    return OK if count else NOTHING


def _confirmed(question: str) -> bool:
    """Whether the person at the terminal answers yes to ``question``; never, without a terminal."""
    if not sys.stdin.isatty():
        return False
    sys.stderr.write(question)
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def enqueue(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    delay = None if args.delay is None and args.run_at is not None else (args.delay or 0)
    run_at = _run_at(args.run_at)
    scheduled = queue.enqueue(args.topic, _body(args.body), id=args.id, delay=delay, run_at=run_at, key=args.key)
    if printer.as_json:
        printer.json(scheduled.to_dict())
    else:
        printer.line(f"created {args.topic}/{scheduled.id}: due {iso_utc(scheduled.run_at_ms)}")
    return OK


def schedule(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    every = None if args.every is None else int(args.every)
    info = queue.schedule(
        args.topic, args.name, cron=args.cron, every=every, timezone=args.timezone, body=_body(args.body), key=args.key
    )
    if not printer.as_json:
        printer.line(f"schedule {args.topic}/{args.name} {'created' if info.created else 'replaced'}")
    return _schedule(info, printer)


def unschedule(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    queue.unschedule(args.topic, args.name)
    if printer.as_json:
        printer.json({"deleted": True})
    else:
        printer.line(f"schedule {args.topic}/{args.name} deleted, its pending occurrence cancelled")
    return OK


def _run_at(text: str | None) -> float | str | None:
    """``--run-at`` as the API takes ``run_at``: a number is epoch seconds, anything else ISO-8601 text."""
    if text is not None and text.replace(".", "", 1).isdigit():
        return float(text)
    return text


def _body(text: str | None) -> Any:
    """A job's body as the command line gives it: JSON text (none: null)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidField("body", f"is not JSON: {exc}") from None


def pause(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    queue.pause(args.topic)
    if printer.as_json:
        printer.json(answers.paused(True))
    else:
        printer.line(f"{args.topic} paused: no consumer starts its jobs until 'delayq resume {args.topic}'")
    return OK


def resume(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    queue.resume(args.topic)
    if printer.as_json:
        printer.json(answers.paused(False))
    else:
        printer.line(f"{args.topic} resumed")
    return OK


def forecast(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    found: Forecast = queue.forecast(args.topic, args.minutes, args.bucket)
    if printer.as_json:
        printer.json(found.to_dict())
        return OK
    total = sum(bucket.count for bucket in found.buckets)
    printer.line(
        f"{args.topic}: {total} delayed job{'s' * (total != 1)} due in the next {args.minutes} min, by {args.bucket} s"
    )
    most = max((bucket.count for bucket in found.buckets), default=0)
    width = len(str(most))
    for bucket in found.buckets:
        bar = "█" * (round(bucket.count / most * BAR_WIDTH) if most else 0)
        if bucket.count and not bar:
            bar = "▏"  # a few among many: not nothing
        printer.line(f"{iso_utc(bucket.from_ms)}  {bucket.count:>{width}}  {bar}".rstrip())
    return OK


def history(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    found = queue.history(args.topic, args.minutes)
    if printer.as_json:
        printer.json(answers.history(found))
        return OK
    rows = []
    for minute in found:
        shown = minute.to_dict()
        counts = [str(shown[name]) for name in ("started", "done", "failed", "dead")]
        lateness = ["-" if shown[name] is None else _number(shown[name]) for name in ("p50_ms", "p99_ms")]
        rows.append([iso_utc(minute.from_ms), *counts, *lateness])
    headers = ["MINUTE", "STARTED", "DONE", "FAILED", "DEAD", "P50 MS", "P99 MS"]
    printer.table_or("", headers, rows, right=(1, 2, 3, 4, 5, 6))
    return OK


def schedules(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    if args.name is not None:
        return _schedule(queue.get_schedule(args.topic, args.name), printer)
    found = queue.schedules(args.topic)
    if printer.as_json:
        printer.json(answers.schedules(found))
    else:
        rows = [
            [info.topic, info.name, calendar(info), info.schedule.timezone, when(info.next_run_at_ms)] for info in found
        ]
        headers = ["TOPIC", "NAME", "CALENDAR", "TIMEZONE", "NEXT RUN AT"]
        printer.table_or("no schedules" + (f" in {args.topic}" if args.topic else ""), headers, rows)
    return OK if found else NOTHING


def _schedule(info: ScheduleInfo, printer: Printer) -> int:
    if printer.as_json:
        printer.json(info.to_dict())
        return OK
    definition = info.schedule
    start_ms, end_ms = definition.start_ms(), definition.end_ms()
    fields = [
        ("topic", info.topic),
        ("name", info.name),
        ("calendar", f"{calendar(info)} ({definition.timezone})"),
        ("starts", "-" if start_ms is None else iso_utc(start_ms)),
        ("ends", "-" if end_ms is None else iso_utc(end_ms)),
        ("written at", iso_utc(info.created_at_ms)),
        ("next runs", ", ".join(iso_utc(ms) for ms in info.next_runs_ms) or "none: it has ended"),
    ]
    for name, value in fields:
        printer.line(f"{name:<11} {value}")
    printer.line("body")
    for line in json.dumps(definition.body, ensure_ascii=False, indent=2).splitlines():
        printer.line("  " + line)
    return OK


def calendar(info: ScheduleInfo) -> str:
    """A schedule's calendar in a few characters: its cron expression, or ``every 300s``."""
    every = info.schedule.every
    return printable(info.schedule.cron or "") if every is None else f"every {every}s"


# ------------------------------------------------------------------------------------ flow keys

CLEAR = ("none", "null")  # what ``--concurrency``, ``--rate`` and ``--burst`` take to clear a key's own setting
KEY_NUMBERS = ("concurrency", "rate", "burst")


def keys(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    found, following = _gathered(
        lambda cursor: queue.flow_keys(args.topic, args.limit, cursor), lambda page: page.keys, args, printer
    )
    if printer.as_json:
        return OK if found else NOTHING
    rows = [
        [printable(state.key), str(state.delayed), str(state.ready), str(state.reserved), *_limits(state),
         "yes" if state.limits.paused else "no", when(state.held_until_ms)]
        for state in found
    ]  # fmt: skip
    headers = ["KEY", "DELAYED", "READY", "RESERVED", "CONCURRENCY", "RATE", "BURST", "PAUSED", "HELD UNTIL"]
    printer.table_or(f"no keys in {args.topic}", headers, rows, right=(1, 2, 3, 4, 5, 6))
    _more(printer, following)
    return OK if found else NOTHING


def key(queue: Queue, args: argparse.Namespace, printer: Printer) -> int:
    """Shows one key; ``--reset`` first clears its own settings and hold, then the settings given are
    written in one ``set_key``, and the key is shown as they leave it."""
    changes: dict[str, Any] = {name: _key_number(name, getattr(args, name)) for name in KEY_NUMBERS}
    changes = {name: value for name, value in changes.items() if value is not _UNSET}
    if args.paused is not None:
        changes["paused"] = args.paused
    if args.reset:
        queue.reset_key(args.topic, args.key)
    state = queue.set_key(args.topic, args.key, **changes) if changes else queue.key(args.topic, args.key)
    if printer.as_json:
        printer.json(state.to_dict())
        return OK
    concurrency, rate, burst = _limits(state, unlimited="unlimited")
    fields = [
        ("topic", args.topic),
        ("key", printable(state.key)),
        ("jobs", f"{state.delayed} delayed, {state.ready} ready, {state.reserved} reserved"),
        ("concurrency", concurrency if state.limits.concurrency is None else f"{concurrency} at once"),
        ("rate", rate if state.limits.rate is None else f"{rate} starts/s, burst {burst}"),
        ("paused", "yes: no job of it starts until --resume" if state.limits.paused else "no"),
        ("held until", when(state.held_until_ms) + (" (a receiver's Retry-After)" if state.held_until_ms else "")),
    ]
    for name, value in fields:
        printer.line(f"{name:<12} {value}")
    return OK


class _Unset:
    pass


_UNSET: Any = _Unset()


def _key_number(name: str, value: str | None) -> Any:
    """``--concurrency``, ``--rate`` or ``--burst`` as ``set_key`` takes it: a number (``set_key``
    checks its range), None for ``none`` (back to the topic's), ``_UNSET`` when not given."""
    if value is None:
        return _UNSET
    if value.strip().lower() in CLEAR:
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    raise InvalidField(name, f"must be a number, or none (the topic's setting again), not {value!r}")


def _limits(state: KeyState, unlimited: str = "-") -> list[str]:
    """The concurrency, rate and burst in force for the key, as people read them; the burst of a rate
    without one is the rate."""
    limits = state.limits
    burst = limits.burst if limits.burst is not None or limits.rate is None else limits.rate
    return [unlimited if value is None else _number(value) for value in (limits.concurrency, limits.rate, burst)]


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


# ------------------------------------------------------------------------------------ the parser


@dataclass(frozen=True)
class Command:
    run: Callable[[Queue, argparse.Namespace, Printer], int]
    help: str
    description: str


COMMANDS: dict[str, Command] = {
    "topics": Command(topics, "topics with their counts, by name", "Every configured topic and every topic holding "
                      "jobs, by name: its jobs in each state, its next run-at, how long its oldest due job has waited, "
                      "and whether it is paused. GET /topics."),
    "jobs": Command(jobs, "a topic's jobs in one state", "A topic's jobs in one state, a page at a time: delayed by "
                    "run-at (soonest first), ready in the order they will be taken, reserved by lease deadline, dead "
                    "newest first. GET /topics/{topic}/jobs."),
    "job": Command(job, "one job: its attempts, body, result", "One job in any state: its attempts, its body or (done) "
                   "its result. GET /jobs/{topic}/{id}."),
    "dead": Command(dead, "dead jobs, newest first, or grouped by error", "A topic's dead jobs, newest first, with "
                    "their last error: GET /topics/{topic}/dead. With --errors, grouped by the first line of their "
                    "error, most frequent first: GET /topics/{topic}/dead/errors."),
    "replay": Command(replay, "make dead jobs due again now", "The dead jobs given (all of the topic's without ids) "
                      "are due again now, with fresh attempts; an id that was not dead is named. "
                      "POST /topics/{topic}/dead/replay."),
    "purge": Command(purge, "delete a topic's dead jobs", "Deletes every dead job of the topic for good. Asks first "
                     "unless --yes is given; without a terminal to ask, --yes is needed. DELETE /topics/{topic}/dead."),
    "cancel": Command(cancel, "cancel every job of a topic in one state", "Cancels every job of the topic in one "
                      "state (delayed, ready or dead): each is gone, as DELETE /jobs/{topic}/{id} leaves it. Asks "
                      "first unless --yes is given; without a terminal to ask, --yes is needed. "
                      "DELETE /topics/{topic}/jobs?state=S."),
    "pause": Command(pause, "stop consumers starting a topic's jobs", "From the next tick no consumer, anywhere, "
                     "starts a job of the topic. Jobs keep falling due (ready grows), creates are accepted, jobs "
                     "already started finish. Idempotent. POST /topics/{topic}/pause."),
    "resume": Command(resume, "undo a pause", "Consumers start the topic's jobs again. Idempotent. "
                      "POST /topics/{topic}/resume."),
    "forecast": Command(forecast, "delayed jobs falling due, as a bar chart", "How many delayed jobs of the topic "
                        "fall due in each bucket of time from now (Redis' time) on. GET /topics/{topic}/forecast."),
    "history": Command(history, "what happened to a topic's jobs, minute by minute", "For each of the last minutes "
                       "(Redis' time; a day is kept): attempts started, jobs done, failed attempts, jobs gone dead, "
                       "and the lateness of the starts. GET /topics/{topic}/history."),
    "schedules": Command(schedules, "recurring schedules, or one with its next runs", "Every schedule (of TOPIC, if "
                         "given) with its calendar and next run; with TOPIC and NAME, that schedule whole, with its "
                         "next five runs. GET /schedules, GET /schedules/{topic}/{name}."),
    "enqueue": Command(enqueue, "create a job", "Creates a job of the topic, due after --delay seconds (0: now) or at "
                       "--run-at (ISO-8601 or epoch seconds), its body the JSON of --body; refused as existing when "
                       "--id is taken. POST /jobs."),
    "schedule": Command(schedule, "create or replace a recurring schedule", "Writes the schedule NAME of the topic: "
                        "--cron (five fields, wall-clock times in --timezone) or --every seconds, each occurrence a "
                        "job of --body. PUT /schedules/{topic}/{name}."),
    "unschedule": Command(unschedule, "delete a recurring schedule", "Deletes the schedule and cancels its pending "
                          "occurrence (unless it has started). DELETE /schedules/{topic}/{name}."),
    "keys": Command(keys, "a topic's flow keys: counts, limits, holds", "The topic's flow keys holding jobs, "
                    "settings or a hold, by name: each key's jobs by state, the concurrency, rate and burst in force "
                    "for it ('-' where unlimited), whether it is paused, and until when a receiver's Retry-After "
                    "holds it. Counting walks the topic's jobs. GET /topics/{topic}/keys."),
    "key": Command(key, "one flow key, its settings changed first", "One flow key of the topic, as 'keys' shows "
                   "it. With --pause, --resume, --concurrency, --rate or --burst, those of the key's own settings are "
                   "written first (at once, in one call; 'none' gives a setting back to the topic's key_* config), "
                   "and every consumer applies them from its next take; with --reset, the key's own settings and "
                   "hold are cleared before that. GET, PUT and DELETE /topics/{topic}/keys/{key}."),
}  # fmt: skip


def add_commands(commands: Any) -> None:
    """Adds the operator's commands to ``commands``, the subparsers of ``delayq``'s parser."""
    for name, command in COMMANDS.items():
        parser: argparse.ArgumentParser = commands.add_parser(
            name, help=command.help, description=command.description, epilog=EXIT_CODES
        )
        parser.add_argument("--json", action="store_true", help="print what the matching HTTP route answers")
        if name == "schedules":
            parser.add_argument("topic", metavar="TOPIC", nargs="?", help="only this topic's schedules")
            parser.add_argument("name", metavar="NAME", nargs="?", help="this schedule, whole")
        elif name == "key":
            _key_options(parser)
        elif name != "topics":
            parser.add_argument("topic", metavar="TOPIC")
        if name == "job":
            parser.add_argument("id", metavar="ID")
        if name in ("jobs", "cancel"):
            states = STATES if name == "jobs" else CANCELLABLE
            parser.add_argument("--state", required=True, choices=states, help="which of the topic's jobs")
        if name in ("cancel", "purge"):
            parser.add_argument("--yes", action="store_true", help=f"{name} without asking first")
        if name in ("enqueue", "schedule", "unschedule"):
            _write_options(name, parser)
        if name == "replay":
            # default=[]: argparse then does not name ID among the missing arguments (it is optional)
            parser.add_argument(
                "ids", metavar="ID", nargs="*", default=[], help="the dead jobs to replay (default: all)"
            )
        _read_options(name, parser)


def _read_options(name: str, parser: argparse.ArgumentParser) -> None:
    """The options of the commands that list or count: pages, windows."""
    if name in ("topics", "jobs", "dead", "keys"):
        parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="per page, 1 to 1000 (%(default)s)")
    if name in ("topics", "jobs", "keys"):
        where = parser.add_mutually_exclusive_group()
        where.add_argument("--cursor", help="start after the previous page's 'next'")
        where.add_argument("--all", action="store_true", help="every page (with --json: one page per line)")
    if name == "dead":
        parser.add_argument("--errors", action="store_true", help="grouped by error, most frequent first")
    if name == "history":
        parser.add_argument("--minutes", type=int, default=DEFAULT_HISTORY_MINUTES, help="how far back (%(default)s)")
    if name == "forecast":
        parser.add_argument("--minutes", type=int, default=DEFAULT_MINUTES, help="how far ahead (%(default)s)")
        parser.add_argument("--bucket", type=int, default=DEFAULT_BUCKET_S, help="seconds per bar (%(default)s)")


def _write_options(name: str, parser: argparse.ArgumentParser) -> None:
    """The options of the commands that write jobs or schedules (after TOPIC)."""
    if name == "enqueue":
        parser.add_argument("--id", help="the job's id (default: a new one)")
        when = parser.add_mutually_exclusive_group()
        when.add_argument("--delay", type=float, help="seconds from now (default: 0, due now)")
        when.add_argument("--run-at", help="when: ISO-8601 (2027-01-31T18:30:00Z) or epoch seconds")
    else:
        parser.add_argument("name", metavar="NAME", help="the schedule's name within the topic")
    if name == "schedule":
        calendar = parser.add_mutually_exclusive_group(required=True)
        calendar.add_argument("--cron", help="five fields: minute hour day-of-month month day-of-week")
        calendar.add_argument("--every", type=float, metavar="SECONDS", help="an occurrence every this many s")
        parser.add_argument("--timezone", default="UTC", help="an IANA zone for --cron (%(default)s)")
    if name != "unschedule":
        parser.add_argument("--body", help="the job's body, JSON (default: null)")
        parser.add_argument("--key", help="its flow key")


def _key_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("key", metavar="KEY")
    pausing = parser.add_mutually_exclusive_group()
    pausing.add_argument("--pause", dest="paused", action="store_const", const=True, help="no job of the key starts")
    pausing.add_argument("--resume", dest="paused", action="store_const", const=False, help="undo --pause")
    parser.add_argument("--concurrency", metavar="N", help="jobs of the key reserved at once (none: the topic's)")
    parser.add_argument("--rate", metavar="R", help="starts of the key's jobs per second (none: the topic's)")
    parser.add_argument("--burst", metavar="B", help="starts allowed at once above the rate (none: the topic's)")
    parser.add_argument("--reset", action="store_true", help="first clear the key's own settings and its hold")


def run(args: argparse.Namespace, *, queue: Queue | None = None, out: TextIO | None = None) -> int:
    """Runs the operator's command ``args.command``; its exit code."""
    printer = Printer(out or sys.stdout, as_json=args.json)
    try:
        return COMMANDS[args.command].run(queue or Queue.from_env(), args, printer)
    except DelayqError as exc:
        if printer.as_json:
            printer.json(exc.to_dict())
        else:
            field = f"{exc.field}: " if isinstance(exc, InvalidField) else ""
            sys.stderr.write(f"delayq {args.command}: {field}{printable(exc.message)}\n")
        return _exit_code(exc)


def _exit_code(exc: DelayqError) -> int:
    if isinstance(exc, RedisUnavailable):
        return UNAVAILABLE
    return NOTHING if exc.status == 404 else USAGE  # refused, or the settings are wrong (ConfigError)
