"""The package's layers (docs/contributing.md): each imports only the layers under it, and no module
imports one that imports it back, at run time (imports under ``TYPE_CHECKING`` are for the type
checker alone)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "delayq"
# Each layer, and the layers it may import (itself included).
BELOW: dict[str, set[str]] = {
    "core": {"core"},
    "aws": {"aws", "core"},
    "store": {"store", "aws", "core"},
    "targets": {"targets", "aws", "core"},
    "loops": {"loops", "targets", "store", "aws", "core"},
    "surfaces": {"surfaces", "loops", "targets", "store", "aws", "core"},
}
TOP = {"__init__", "__main__", "local", "version"}  # on top of every layer (version: read by all)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path) -> Iterator[str]:
    """The delayq modules ``path`` imports when it runs: at module level or inside a function, not
    under ``if TYPE_CHECKING``."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
        for node in ast.walk(block)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "delayq":
                continue
            for alias in node.names:
                full = f"{source}.{alias.name}"
                yield full if _is_module(full) else source
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "delayq")


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in BELOW else "top"


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_the_layers_under_it(module: str) -> None:
    mine = layer(module)
    if mine == "top":
        assert module.rsplit(".", maxsplit=1)[-1] in TOP or module == "delayq", f"{module} is in no layer"
        return
    wrong = {
        imported
        for imported in runtime_imports(MODULES[module])
        if layer(imported) not in BELOW[mine] and imported != "delayq.version"
    }
    assert not wrong, f"{module} ({mine}) imports {sorted(wrong)}"


def test_no_module_imports_itself_back() -> None:
    graph = {module: set(runtime_imports(path)) & set(MODULES) for module, path in MODULES.items()}
    graph = {module: {imported for imported in imports if imported != module} for module, imports in graph.items()}
    cycles = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                cycles.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_every_layer_is_a_package_of_the_bundle() -> None:
    """Each layer ships (an ``__init__``), and the Lua scripts and the web view's page beside the
    modules that load them."""
    for name in BELOW:
        assert (PACKAGE / name / "__init__.py").is_file(), name
    assert sorted(p.name for p in (PACKAGE / "store" / "lua").glob("*.lua"))
    assert (PACKAGE / "surfaces" / "ui" / "index.html").is_file()
