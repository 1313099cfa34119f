"""``python -m delayq sweep|consume`` stopped by a signal: ``delayq.__main__.run_until_signalled``; what
start-up made is out of the garbage collector's sight (``loop.freeze_start_up``); settings it cannot
run with refused in a line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from delayq.__main__ import main

# A loop whose run holds its stop event's lock (as Event.wait and Event.clear do for a moment) while
# SIGTERM arrives. Were the loop running in the main thread, the handler would run there, inside that
# hold, and wait for the lock forever; the process would never print.
SCRIPT = textwrap.dedent(
    """
    import gc, os, signal, threading, time
    from delayq.__main__ import run_until_signalled
    from delayq.core.loop import Budget

    class Loop:
        def __init__(self):
            self.stop = threading.Event()

        def request_stop(self):
            self.stop.set()

        def run(self, budget):
            with self.stop._cond:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.3)
            return {
                "stopped": self.stop.wait(10),
                "main": threading.current_thread() is threading.main_thread(),
                "start-up frozen": gc.get_freeze_count() > 1000,
            }

    print(run_until_signalled(Loop(), Budget.forever()))
    """
)


def test_a_signal_landing_while_the_loop_holds_its_events_lock_still_stops_it() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'stopped': True, 'main': False, 'start-up frozen': True}"


def test_a_loops_error_is_raised_in_the_main_thread() -> None:
    script = textwrap.dedent(
        """
        from delayq.__main__ import run_until_signalled
        from delayq.core.loop import Budget

        class Loop:
            def request_stop(self):
                pass

            def run(self, budget):
                raise ValueError("bad settings")

        try:
            run_until_signalled(Loop(), Budget.forever())
        except ValueError as exc:
            print("raised:", exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False)
    assert done.stdout.strip() == "raised: bad settings", done.stderr


@pytest.mark.parametrize("loop", ["sweep", "consume"])
def test_a_loop_refuses_settings_it_cannot_run_with_a_line_not_a_traceback(
    loop: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    topics = {"a": {"target": "python:m:f", "on_done": "b"}, "b": {"target": "python:m:f", "on_dead": "a"}}
    monkeypatch.setenv("DELAYQ_TOPICS", json.dumps(topics))
    assert main([loop, "--seconds", "0"]) == 2
    assert capsys.readouterr().err == f"delayq {loop}: DELAYQ_TOPICS: callbacks loop: a on_done -> b, b on_dead -> a\n"
