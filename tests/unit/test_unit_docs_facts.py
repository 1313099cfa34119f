"""The reference docs agree with the code they describe: every setting of ``delayq.core.settings.ENV`` is a
row of docs/settings.md, every topic key of ``TopicConfig`` a row of docs/topics.md with its default,
every network the webhook guard refuses is in the guard's table, and every parameter and output of
infra/template.yaml is a row of docs/deploy.md, parameters with their defaults. A setting added
without its doc, or a default changed in one place only, fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from delayq.core.settings import ENV, TopicConfig
from delayq.targets.webhook import REFUSED

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_ROW = re.compile(r"^\|(.+)\|\s*$", re.MULTILINE)
_NAME = re.compile(r"`([^`]+)`")


def rows(path: Path) -> list[list[str]]:
    """The cells of every table row of ``path`` (header and separator rows included)."""
    return [[cell.strip() for cell in row.split("|")] for row in _ROW.findall(path.read_text(encoding="utf-8"))]


def documented(path: Path) -> dict[str, str]:
    """Each name in code quotes in the first cell of a table row of ``path`` -> the row's second cell.
    A row naming several names, whose second cell has as many comma-separated values, pairs them in
    order (`ApiRateLimit`, `ApiBurstLimit` | `100`, `200`)."""
    found: dict[str, str] = {}
    for cells in rows(path):
        if len(cells) < 2:
            continue
        names, second = _NAME.findall(cells[0]), cells[1]
        defaults = [part.strip() for part in second.split(",")]
        if len(defaults) != len(names):
            defaults = [second] * len(names)
        for name, default in zip(names, defaults, strict=True):
            found.setdefault(name, default)
    return found


def as_value(cell: str) -> Any:
    """A default as the docs write it (`30`, `[15, 180]`, false, empty) as the code holds it."""
    text = cell.strip().strip("`")
    if text in ("", "empty"):
        return ""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


ENV_NAMES = sorted(value for name, value in vars(ENV).items() if not name.startswith("_"))


@pytest.mark.parametrize("variable", ENV_NAMES)
def test_every_setting_is_documented(variable: str) -> None:
    assert variable in documented(DOCS / "settings.md")


def test_settings_md_documents_no_setting_the_code_lacks() -> None:
    named = [name for name in documented(DOCS / "settings.md") if name.startswith("DELAYQ_")]
    assert named
    assert set(named) <= set(ENV_NAMES)


@pytest.mark.parametrize("key", sorted(TopicConfig.model_fields))
def test_every_topic_key_is_documented_with_its_default(key: str) -> None:
    doc = documented(DOCS / "topics.md")
    assert key in doc
    field = TopicConfig.model_fields[key]
    if field.is_required():
        assert doc[key] == "required"
    else:
        default = field.default
        assert as_value(doc[key]) == (list(default) if isinstance(default, tuple) else default)


@pytest.mark.parametrize("network", [str(network) for network, _ in REFUSED], ids=str)
def test_every_refused_network_is_in_the_guard_table(network: str) -> None:
    text = (DOCS / "topics.md").read_text(encoding="utf-8")
    guard = text[text.index("### The address guard") :]
    single = network.removesuffix("/32").removesuffix("/128")  # a single address is written bare
    assert f"`{network}`" in guard or f"`{single}`" in guard


TEMPLATE = yaml_parse((ROOT / "infra" / "template.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("parameter", sorted(TEMPLATE["Parameters"]))
def test_every_template_parameter_is_documented_with_its_default(parameter: str) -> None:
    doc = documented(DOCS / "deploy.md")
    assert parameter in doc
    default = TEMPLATE["Parameters"][parameter].get("Default")
    if default is None:
        assert doc[parameter] == "(required)"
    else:
        assert as_value(doc[parameter]) == default


@pytest.mark.parametrize("output", sorted(TEMPLATE["Outputs"]))
def test_every_template_output_is_documented(output: str) -> None:
    assert output in documented(DOCS / "deploy.md")
