"""``make bench --compare``: which systems a run measures, their names, and whose ``functions/`` each imports.

The comparison's modules import each other by their plain names (``bench/compare/`` is their
directory), so the fixture puts ``bench/compare/`` on the path for these tests. Nothing here starts
Redis or a benchmark.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "compare"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        import processes  # noqa: PLC0415 - from bench/compare/, on the path only here
        import run  # noqa: PLC0415

        yield run, processes
    finally:
        sys.path.remove(str(BENCH))


def git(root: Path, *args: str) -> str:
    command = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    return subprocess.run([*command, *args], capture_output=True, text=True, check=True).stdout.strip()


def checkout(root: Path) -> str:
    """A committed tree with a ``functions/delayq`` package; its short commit id."""
    (root / "functions" / "delayq").mkdir(parents=True)
    (root / "functions" / "delayq" / "__init__.py").write_text('"""another engine"""\n')
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "an engine")
    return git(root, "rev-parse", "--short", "HEAD")


def systems(run, *argv: str) -> list:
    return run.select(run.parse_args(list(argv)))


def test_compare_is_delayq_once_more_right_after_delayq_with_its_own_functions(bench, tmp_path):
    run, processes = bench
    commit = checkout(tmp_path / "before")
    chosen = systems(run, "--only", "delayq,delayq-tuned,arq", "--compare", str(tmp_path / "before"))
    assert [s.name for s in chosen] == ["delayq", f"delayq@{commit}", "delayq-tuned", "arq"]
    delayq, other = chosen[0], chosen[1]
    assert other.command() == delayq.command()  # this checkout's .venv and adapter
    assert (other.worker_args, other.fed, other.base) == (delayq.worker_args, delayq.fed, None)
    paths = [processes.child_env(s)["PYTHONPATH"].split(":")[0] for s in (delayq, other)]
    assert paths == [str(ROOT / "functions"), str((tmp_path / "before" / "functions").resolve())]
    assert "PYTHONPATH" not in processes.child_env(chosen[3])  # a peer's own environment


def test_labels_go_to_the_checkouts_in_order_and_a_dirty_tree_says_so(bench, tmp_path):
    run, _ = bench
    checkout(tmp_path / "a")
    second = checkout(tmp_path / "b")
    (tmp_path / "b" / "functions" / "delayq" / "__init__.py").write_text('"""changed"""\n')
    compare = ["--compare", str(tmp_path / "a"), "--compare", str(tmp_path / "b"), "--compare-label", "before-18"]
    chosen = systems(run, "--only", "delayq", *compare)
    assert [s.name for s in chosen] == ["delayq", "delayq@before-18", f"delayq@{second}+dirty"]


def test_compare_without_delayq_in_the_run_comes_first(bench, tmp_path):
    run, _ = bench
    commit = checkout(tmp_path / "x")
    assert [s.name for s in systems(run, "--only", "arq", "--compare", str(tmp_path / "x"))] == [
        f"delayq@{commit}",
        "arq",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compare", "{x}", "--compare", "{x}"], "--compare-label"),  # both delayq@<the same commit>
        (["--compare", "{x}", "--compare-label", "a", "--compare-label", "b"], "2 --compare-label for 1"),
        (["--compare", "{x}", "--compare-label", "a/b"], "letters, digits"),
        (["--compare", "{x}/functions"], "not a delayq checkout"),
    ],
)
def test_compare_refuses(bench, tmp_path, argv, message):
    run, _ = bench
    checkout(tmp_path / "x")
    with pytest.raises(SystemExit, match=message):
        systems(run, "--only", "delayq", *(arg.format(x=tmp_path / "x") for arg in argv))
