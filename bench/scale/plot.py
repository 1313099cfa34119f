"""The scale run's figures against the scale, as a PNG: a row per figure, a column per axis that
varies (topics, backlog, load), a line per server and side. Along one axis the other two stay at their
first value, as in ``run.py``'s default grid.

    .bench/venvs/plot/bin/python bench/scale/plot.py .bench/results/scale-<run>.json [out.png]

Runs in the bench's plot environment (matplotlib is no dependency of the project).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt
from matplotlib import ticker

AXES = (("topics", "topics"), ("backlog", "backlog: jobs waiting"), ("rate", "steady load: jobs/s"))
FIGURES = (
    ("idle_redis_cpu_ms_per_s", "idle Redis CPU (ms/s)"),
    ("lateness_ms", "lateness (ms): p50 --, p99 -, max :"),
    ("redis_cpu_us_per_job", "Redis CPU per job (µs)"),
    ("commands_per_job", "Redis commands per job"),
    ("memory_bytes_per_job", "Redis memory per backlog job (B)"),
)
LATENESS = (("p50", "--"), ("p99", "-"), ("max", ":"))


def short(value: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:g}{unit}"
    return f"{value:g}"


def along(rows: list[dict[str, Any]], axis: str, base: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows where only ``axis`` moves off the base point, in its order."""
    others = [a for a, _ in AXES if a != axis]
    return sorted((r for r in rows if all(r[o] == base[o] for o in others)), key=lambda r: r[axis])


def draw(ax: Any, rows: list[dict[str, Any]], axis: str, figure: str, style: dict[str, str]) -> None:
    """One server and side's line: ``style`` holds its color and label."""
    xs = [r[axis] for r in rows]
    color, label = style["color"], style["label"]
    if figure == "lateness_ms":
        for quantile, dash in LATENESS:
            ys = [(r.get(figure) or {}).get(quantile) for r in rows]
            ax.plot(xs, ys, dash, marker="o", color=color, label=label if quantile == "p99" else None)
    else:
        ax.plot(xs, [r.get(figure) for r in rows], "-", marker="o", color=color, label=label)


def scale(ax: Any, values: list[float], *, log_y: bool, zero: bool) -> None:
    """Log axes (symlog for the backlog, where 0 has a place), ticks at the measured values, plain numbers."""
    if zero:
        ax.set_xscale("symlog", linthresh=1)
    else:
        ax.set_xscale("log")
    ax.set_xlim(values[0] * 0.7 - (0.5 if values[0] == 0 else 0), values[-1] * 1.4)
    ax.set_xticks(values, [short(v) for v in values])
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    if log_y:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def main(path: str, out: str | None = None) -> None:
    run = json.loads(Path(path).read_text())
    params = run["meta"]["params"]
    base = {"topics": params["topics"][0], "backlog": params["backlog"][0], "rate": params["rates"][0]}
    rows = [r for r in run["points"] if "error" not in r]
    axes = [(a, title) for a, title in AXES if len({r[a] for r in rows}) > 1] or [AXES[0]]
    size = (5 * len(axes) + 1, 3.2 * len(FIGURES))
    fig, grid = plt.subplots(len(FIGURES), len(axes), figsize=size, squeeze=False, sharey="row")  # one scale a figure
    sides = [side["name"] for side in run["sides"]]
    lines = sorted({(r["server"], r["side"]) for r in rows}, key=lambda line: (line[0], sides.index(line[1])))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for col, (axis, title) in enumerate(axes):
        for row, (figure, label) in enumerate(FIGURES):
            ax = grid[row][col]
            for n, (server, side) in enumerate(lines):
                mine = along([r for r in rows if (r["server"], r["side"]) == (server, side)], axis, base)
                draw(ax, mine, axis, figure, {"color": colors[n % len(colors)], "label": f"{side}, {server}"})
            scale(ax, sorted({r[axis] for r in rows}), log_y=figure != "memory_bytes_per_job", zero=axis == "backlog")
            if not ax.lines or all(y is None for line in ax.lines for y in line.get_ydata()):
                ax.text(0.5, 0.5, "not measured here", ha="center", va="center", transform=ax.transAxes, color="grey")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xlabel(title)
            if col == 0:
                ax.set_ylabel(label)
    memory = [figure for figure, _ in FIGURES].index("memory_bytes_per_job")
    grid[memory][0].set_ylim(bottom=0)  # after every panel of the row is drawn: the axis is shared
    handles, labels = grid[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(2, len(labels) or 1), frameon=False)
    meta = run["meta"]
    fig.suptitle(f"delayq at scale, {meta['date']}\n{meta['machine']}")
    fig.tight_layout(rect=(0, 0.02 + 0.012 * len(labels), 1, 1))
    target = Path(out) if out else Path(path).with_suffix(".png")
    fig.savefig(target, dpi=100)
    print(target)


if __name__ == "__main__":
    main(*sys.argv[1:3])
