"""The lateness distribution per system of one run, as a PNG: one ECDF per system, burst and steady.

    .bench/venvs/plot/bin/python bench/compare/plot.py .bench/results/<run>.json [out.png]

Runs in the bench's own environment (matplotlib is no dependency of the project). The x axis is
symmetric-log: linear within ±1 ms, so a delivery before its due time (negative) shows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt

SCENARIOS = (
    ("burst", "burst: {jobs:,} jobs due at one instant"),
    ("steady", "steady: {rate:g} jobs/s, delays {lo:g}-{hi:g} s"),
)


def main(path: str, out: str | None = None) -> None:
    run = json.loads(Path(path).read_text())
    params = run["meta"]["params"]
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.5), sharey=True)
    for ax, (key, title) in zip(axes, SCENARIOS, strict=True):
        for name, system in run["systems"].items():
            quantiles = (system.get(key) or {}).get("quantiles_ms") or []
            if not quantiles:
                continue
            fractions = [i / (len(quantiles) - 1) for i in range(len(quantiles))]
            ax.step(quantiles, fractions, where="post", label=name, linewidth=1.6)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.axvline(0, color="grey", linewidth=0.8, linestyle=":")
        ax.set_title(
            title.format(jobs=params["jobs"], rate=params["rate"], lo=params["min_delay"], hi=params["max_delay"])
        )
        ax.set_xlabel("lateness: handler start - due (ms, symlog; < 0 is early)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("fraction of jobs started")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=9, frameon=False)
    meta = run["meta"]
    small = " (small run: a check, not a measurement)" if meta.get("small_run") else ""
    fig.suptitle(f"delayq and peers, lateness distribution, {meta['date']}, {meta['machine']}{small}")
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    target = Path(out) if out else Path(path).with_suffix(".png")
    fig.savefig(target, dpi=110)
    print(target)


if __name__ == "__main__":
    main(*sys.argv[1:3])
