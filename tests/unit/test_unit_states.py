"""A job's states are named once, in ``delayq.core.job``: the Lua scripts' letters for them
(``store/lua/includes/meta.lua``), the names ``inspect.lua`` answers with, and the web view's list are
checked against it here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from delayq.core import job

PACKAGE = Path(job.__file__).resolve().parents[1]
LUA = PACKAGE / "store" / "lua"


def test_the_scripts_store_the_states_with_the_letters_python_reads() -> None:
    source = (LUA / "includes" / "meta.lua").read_text()
    found = re.search(r"^local QUEUED, RESERVED, DEAD, DONE = '(\w)', '(\w)', '(\w)', '(\w)'", source, re.M)
    assert found is not None, "meta.lua names its states on one line"
    assert found.groups() == (job.QUEUED, job.LEASED, job.DEAD, job.DONE)


def test_no_script_spells_a_state_letter_out() -> None:
    """Every script compares and writes states by their names (``state == RESERVED``), not by letter."""
    spelled = re.compile(r"(?:state|m\.state)\s*(?:==|=|~=)\s*'[qlxd]'|'[qlxd]\|'")
    found = [
        f"{path.relative_to(LUA)}:{n}"
        for path in sorted(LUA.rglob("*.lua"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if not line.lstrip().startswith("--") and spelled.search(line)
    ]
    assert found == []


def test_inspect_answers_with_the_api_names() -> None:
    names = set(re.findall(r"'(delayed|ready|reserved|dead|done|\w+)'", (LUA / "inspect.lua").read_text()))
    assert names & set(job.STATES) == set(job.STATES)


def test_the_web_view_lists_the_states_in_their_order() -> None:
    source = (PACKAGE / "surfaces" / "ui" / "app.js").read_text()
    found = re.search(r"^const STATES = (\[.*?\]);", source, re.M)
    assert found is not None
    assert tuple(json.loads(found.group(1))) == job.STATES


def test_a_history_is_kept_as_python_reads_it() -> None:
    """history.lua keeps as many attempts as ``job.HISTORY_KEEP`` says and separates them the same way;
    the outcomes the scripts write are among ``job.OUTCOMES``."""
    source = (LUA / "includes" / "history.lua").read_text()
    keep = re.search(r"^local HISTORY_KEEP = (\d+)$", source, re.M)
    separator = re.search(r"^local RS = '\\(\d+)'", source, re.M)
    assert keep is not None, "history.lua names HISTORY_KEEP on a line of its own"
    assert separator is not None, "history.lua names RS on a line of its own"
    assert int(keep.group(1)) == job.HISTORY_KEEP
    assert chr(int(separator.group(1))) == job.HISTORY_SEPARATOR
    scripts = "\n".join(path.read_text() for path in LUA.rglob("*.lua"))
    written = set(re.findall(r"history_add\([^)]*'(\w+)'", scripts))
    written |= set(re.findall(r"failed_attempt\(.{0,300}?'(\w+)'\s*\)", scripts, re.S))
    assert written == {"error", "lease_expired"}  # the take's give-up, the sweep's; fail.lua's come from the consumer
    assert written <= set(job.OUTCOMES)
