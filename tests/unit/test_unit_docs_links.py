"""Every relative link of the user docs (README.md, docs/*.md, bench/README.md) reaches a file of the
repository, and every ``#anchor`` a heading of the file it names: docs move between files, and a link
that points nowhere is found here rather than by a reader. Links inside code are not links."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md")

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto: ...


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: the rendered text, lower case, without punctuation,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings; a repeated one gets ``-1``, ``-2`` ... as on GitHub."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        found.add(f"{base}-{seen[base]}" if seen[base] else base)
        seen[base] += 1
    return found


def links(path: Path) -> list[str]:
    """The link targets of ``path``, outside fenced code and code spans."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", path.read_text(encoding="utf-8")))
    return _LINK.findall(text)


def broken(doc: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``doc`` that reach no file, or no heading of the file they name (named
    relative to ``root``)."""
    problems = []
    for target in links(doc):
        if _EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            problems.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{target}: no heading #{anchor} in {file.relative_to(root)}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert broken(doc) == []


def test_the_docs_link_to_each_other() -> None:
    """The check above checks something: the docs hold relative links, anchors among them."""
    relative = [target for doc in DOCS for target in links(doc) if not _EXTERNAL.match(target)]
    assert len(relative) > 20
    assert any("#" in target for target in relative)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Settings", "settings"),
        ("delayq at scale: `make bench-scale`", "delayq-at-scale-make-bench-scale"),
        ("Redis URLs", "redis-urls"),
        ("`https://...` webhooks", "https-webhooks"),
        ("What the API's callers may do", "what-the-apis-callers-may-do"),
        ('The run of 2026-11-25 (the "before" of issue 17)', "the-run-of-2026-11-25-the-before-of-issue-17"),
    ],
)
def test_slug_is_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Part two\n", encoding="utf-8")
    doc.write_text(
        "# Doc\n\n[fine](other.md#part-two) [self](#doc) [web](https://example.com/x)\n"
        "[gone](missing.md) [no anchor](other.md#part-three) `[in code](missing.md)`\n"
        "```\n[in a fence](missing.md)\n```\n",
        encoding="utf-8",
    )
    problems = [problem.partition(":")[0] for problem in broken(doc, root=tmp_path)]
    assert problems == ["missing.md", "other.md#part-three"]
