"""The package's shape: the plugin loads without the engine, and no module imports
itself back through another at import time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_geo"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_time_imports(path: Path) -> set[str]:
    """pytest_geo modules imported when `path` is imported: module-level statements,
    not those under `if TYPE_CHECKING:` or inside functions (which run later)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {t for t in import_time_imports(path) if t in modules}
        # Importing a.b.c runs a/__init__ and a/b/__init__ too, unless they are the
        # importer's own packages, which are already importing.
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        for target in list(targets):
            parts = target.split(".")
            targets.update(".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules)
        graph[name] = targets - own - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


@pytest.mark.unit
def test_no_import_cycles() -> None:
    graph = import_graph()
    assert "pytest_geo.plugin" in graph and graph["pytest_geo.pytest_layer.items"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


@pytest.mark.unit
def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    graph = import_graph()
    graph["pytest_geo.data.dataset"] = graph["pytest_geo.data.dataset"] | {"pytest_geo.plugin"}
    cycle = find_cycle(graph)
    assert cycle is not None and "pytest_geo.plugin" in cycle and cycle[0] == cycle[-1]


@pytest.mark.e2e
def test_importing_the_package_or_plugin_leaves_the_engine_unimported() -> None:
    """The plugin loads in every pytest run of every project that installs it; the
    engine, asyncio and the model SDK wait for a run that needs them."""
    for module in ("pytest_geo", "pytest_geo.plugin"):
        code = (f"import sys, pytest; before = set(sys.modules); import {module}; "
                "print(sorted(m for m in set(sys.modules) - before if m.startswith('pytest_geo.engine') "
                "or m.split('.')[0] in ('asyncio', 'multiprocessing', 'openai', 'jsonschema', 'yaml')))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert done.stdout.strip() == "[]", module


@pytest.mark.unit
def test_each_subpackage_says_what_it_owns() -> None:
    for init in PACKAGE.glob("*/__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert docstring, f"{init} has no docstring"


@pytest.mark.unit
def test_the_model_layer_imports_nothing_from_the_engine() -> None:
    """Imports point down: the engine is handed a ready client stack (llm/stack.py), so
    nothing under llm/ imports the engine, at import time or later."""
    upward = []
    for path in sorted((PACKAGE / "llm").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            upward += [f"{path.name}: {name}" for name in names if name.startswith("pytest_geo.engine")]
    assert upward == []
