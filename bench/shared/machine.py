"""The machine a run ran on, for its results: CPU, cores, OS, Python and Node versions, the load at
the start (the machines this bench runs on are often shared), and a slug for the file names."""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any


def machine_facts() -> dict[str, Any]:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    cores = os.cpu_count() or 0
    node = (
        subprocess.run(["node", "--version"], capture_output=True, text=True, check=False).stdout.strip()
        if shutil.which("node")
        else "-"
    )
    slug = re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-")
    return {
        "cpu": cpu,
        "cores": cores,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "node": node.lstrip("v"),
        "slug": f"{cores}c-{slug}",
        "loadavg_at_start": os.getloadavg(),
    }
