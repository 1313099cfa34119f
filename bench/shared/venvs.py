"""The bench's own Python environments under ``.bench/venvs/``: each installed from a pinned
requirements file the first time, then again only when that file changes. The plot's (matplotlib,
no dependency of the project) is shared by the peers compare and the scale run."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from shared import log
from shared.paths import REPO, VENVS

PLOT_REQUIREMENTS = Path(__file__).resolve().parent / "plot-requirements.txt"


def digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()


def ensure_venv(name: str, requirements: Path) -> Path:
    """``.bench/venvs/<name>`` with ``requirements`` (``pip install -r``), installed once per change."""
    venv = VENVS / name
    stamp = venv / ".bench-installed"
    pins = digest(requirements)
    if stamp.exists() and stamp.read_text() == pins and (venv / "bin" / "python").exists():
        return venv
    log(f"installing {name} into {venv.relative_to(REPO)} (pins: {requirements.relative_to(REPO)})")
    base = getattr(sys, "_base_executable", sys.executable)
    if not (venv / "bin" / "python").exists():
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "-r", str(requirements)], check=True)
    stamp.write_text(pins)
    return venv


def plot_python() -> Path:
    """The plot environment's Python, installed on first use."""
    return ensure_venv("plot", PLOT_REQUIREMENTS) / "bin" / "python"
