"""Where the bench's files are: its code in ``bench/``, everything it writes under ``.bench/`` (ignored
by git): the peers' environments, the raw records of each run, and the results."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
STATE = REPO / ".bench"
VENVS = STATE / "venvs"  # the peers' and the plot's environments
RUNS = STATE / "runs"  # each run's raw records: ids, due times, handler starts, the processes' logs
RESULTS = STATE / "results"  # each run's figures: <run>.json, .md and .png; not committed
PROJECT_PYTHON = REPO / ".venv" / "bin" / "python"
