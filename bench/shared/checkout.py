"""A source tree whose delayq is measured, and the environment of the processes that run it.

Every delayq process of the bench runs this checkout's ``.venv`` with a tree's ``functions/`` first on
PYTHONPATH, so the same harness measures the engine of any checkout, unchanged (``--compare`` in the
peers compare, the scale run and the failover table).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path


@dataclass(frozen=True)
class Checkout:
    root: Path

    @classmethod
    def of(cls, root: Path) -> Checkout:
        root = root.resolve()
        if not (root / "functions" / "delayq" / "__init__.py").exists():
            raise SystemExit(f"{root} holds no functions/delayq: not a delayq checkout")
        return cls(root)

    @cached_property
    def commit(self) -> str:
        """The short commit id, ``+dirty`` when its ``functions/`` has uncommitted changes."""
        commit = _git(self.root, "rev-parse", "--short", "HEAD") or "?"
        return commit + ("+dirty" if _git(self.root, "status", "--porcelain", "functions") else "")

    @property
    def name(self) -> str:
        """``<directory>@<commit>``: how a run's tables name this side."""
        return f"{self.root.name}@{self.commit}"

    def pythonpath(self, *more: Path) -> str:
        """PYTHONPATH of this checkout's delayq processes: its ``functions/`` first, then ``more``."""
        return os.pathsep.join(str(path) for path in (self.root / "functions", *more))


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False).stdout.strip()


def base_env() -> dict[str, str]:
    """The environment of the bench's processes: this one's, without any ``DELAYQ_*`` setting, virtual
    environment or PYTHONPATH of the caller's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DELAYQ_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env
