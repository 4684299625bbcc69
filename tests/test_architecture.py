"""The package's shape: the plugin loads without the engine, and no module imports
itself back through another at import time."""

from __future__ import annotations

import ast
import functools
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
    """A fresh copy each call (a test may plant an edge); the package is parsed once."""
    return {name: set(targets) for name, targets in _import_graph().items()}


@functools.cache
def _import_graph() -> dict[str, frozenset[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, frozenset[str]] = {}
    for name, path in modules.items():
        targets = {t for t in import_time_imports(path) if t in modules}
        # Importing a.b.c runs a/__init__ and a/b/__init__ too, unless they are the
        # importer's own packages, which are already importing.
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        for target in list(targets):
            parts = target.split(".")
            targets.update(".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules)
        graph[name] = frozenset(targets - own - {name})
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


# --- imports point down ---------------------------------------------------------------------

# The package's layers, lowest first, by the top-level module or subpackage: a module
# imports only from its own layer or one below, whether at import time or inside a
# function (not under `if TYPE_CHECKING:`: a type names what it needs, and runs nothing).
# The package itself (`from pytest_geo import __version__`) is loaded before any of its
# modules, so it is no layer.
LAYERS = (
    {"text", "price", "judge", "local_server", "newhooks"},  # plain values and rules, no other module
    {"settings"},  # every default, and the Settings a run is built from
    {"scoring", "templates", "starter", "data"},  # read settings, rows and prompts
    {"llm"},  # the model clients
    {"engine"},  # rows into outcomes
    {"suites"},  # eval suites over the engine
    {"report"},  # results, summaries and report files
    {"optimize"},  # prompt search over suites and reports
    {"options", "option_spec"},  # every flag and its validator, which may ask any layer what is valid
    {"pytest_layer", "plugin", "cli", "__main__", "project_config"},  # the two front ends, and egeo's pytest ini
)
LAYER_OF = {unit: index for index, units in enumerate(LAYERS) for unit in units}
# Upward imports on main that the integrator is moving down (Judge for settings.py,
# extract_json_object for the cache): test_pending_upward_imports_are_gone flips when they land.
PENDING = {("pytest_geo.settings", "pytest_geo.engine.judges"), ("pytest_geo.llm.cache", "pytest_geo.engine.answers")}


def unit_of(module: str) -> str:
    return module.split(".")[1]


def runtime_imports(path: Path) -> set[str]:
    """pytest_geo modules `path` imports anywhere (functions included) but under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                 and "TYPE_CHECKING" in ast.unparse(block.test) for node in ast.walk(block)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("pytest_geo.")}


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """`importer -> imported` for every import of a higher layer."""
    return sorted(f"{importer} -> {imported}" for importer, targets in edges.items() for imported in targets
                  if LAYER_OF[unit_of(imported)] > LAYER_OF[unit_of(importer)] and (importer, imported) not in PENDING)


def package_imports() -> dict[str, set[str]]:
    """A fresh copy each call (a test may plant an import); the package is parsed once."""
    return {name: set(imported) for name, imported in _package_imports().items()}


@functools.cache
def _package_imports() -> dict[str, frozenset[str]]:
    return {module_name(path): frozenset(runtime_imports(path)) for path in PACKAGE.rglob("*.py")
            if module_name(path) != "pytest_geo"}


@pytest.mark.unit
def test_every_module_has_a_layer() -> None:
    units = {unit_of(name) for name in package_imports()}
    assert units == set(LAYER_OF), units ^ set(LAYER_OF)


@pytest.mark.unit
def test_imports_point_down() -> None:
    assert upward_imports(package_imports()) == []


@pytest.mark.unit
def test_an_upward_import_is_found() -> None:
    edges = package_imports()
    edges["pytest_geo.settings"] = edges["pytest_geo.settings"] | {"pytest_geo.llm.prices"}
    edges["pytest_geo.report.terminal"] = edges["pytest_geo.report.terminal"] | {"pytest_geo.optimize.run"}
    assert upward_imports(edges) == ["pytest_geo.report.terminal -> pytest_geo.optimize.run",
                                     "pytest_geo.settings -> pytest_geo.llm.prices"]


@pytest.mark.unit
def test_settings_imports_only_plain_values() -> None:
    assert runtime_imports(PACKAGE / "settings.py") == {
        "pytest_geo.judge", "pytest_geo.local_server", "pytest_geo.price"}
    for plain in ("judge.py", "local_server.py", "price.py"):
        assert runtime_imports(PACKAGE / plain) == set(), plain


@pytest.mark.unit
def test_pending_upward_imports_are_gone() -> None:
    edges = package_imports()
    assert sorted(f"{a} -> {b}" for a, b in PENDING if b in edges[a]) == []
