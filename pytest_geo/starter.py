"""`egeo init [DIR]`: a starter project that `pytest --geo-mock` runs as it is.

It writes the packaged prompts (to edit and optimise), a small dataset, a YAML suite
scoring the rewriter on it, and the ini lines that use them. It never overwrites a file
and never writes through a symbolic link (a dangling `pytest.ini` or `prompts` link would
put files wherever it points): what exists, or is a link, is listed as skipped. The ini
lines go into a new `pytest.ini` only when the directory has no pytest configuration (a
new pytest.ini would take precedence over one in pyproject.toml, tox.ini or setup.cfg);
otherwise they are printed to add by hand."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from pytest_geo.settings import PACKAGED_PROMPTS

DATASET = Path("eval/datasets/example.jsonl")
SUITE = Path("eval/suites/rewriter.geo.yaml")
# pythonpath: a suite's `procedure: module:function` (and a metric's) imports modules of
# the project, which pytest cannot import from the rootdir without it.
INI_LINES = "[pytest]\ntestpaths = eval\npythonpath = .\ngeo_prompts = prompts\n"
TOML_LINES = 'testpaths = ["eval"]\npythonpath = ["."]\ngeo_prompts = "prompts"\n'  # [tool.pytest.ini_options]

# Three rows: two name their target, the third leaves it to the seeded choice.
EXAMPLE_ROWS = [
    {"query_id": "kettle", "query": "quiet electric kettle for an office", "target_id": "k3",
     "candidates": [
         {"id": "k1", "title": "SteelBoil 1.7", "description": "1.7 litre stainless steel kettle, 3 kW."},
         {"id": "k2", "title": "TravelKettle Mini", "description": "0.5 litre folding kettle for travel."},
         {"id": "k3", "title": "Hush 1.5", "description": "1.5 litre kettle with a low-noise element, 2.2 kW."}]},
    {"query_id": "backpack", "query": "waterproof backpack for cycling commutes", "target_id": "b2",
     "candidates": [
         {"id": "b1", "title": "Daypack 20", "description": "20 litre polyester daypack with a laptop sleeve."},
         {"id": "b2", "title": "RollTop 25", "description": "25 litre roll-top bag, welded seams, reflective strips."},
         {"id": "b3", "title": "Hiker 40", "description": "40 litre trekking pack with a hip belt."}]},
    {"query_id": "lamp", "query": "desk lamp with adjustable colour temperature",
     "candidates": [
         {"id": "l1", "title": "Arc LED", "description": "LED desk lamp, 2700 K to 6500 K, touch dimmer."},
         {"id": "l2", "title": "Classic Banker", "description": "Brass desk lamp with a green glass shade."},
         {"id": "l3", "title": "Clip Light", "description": "Clip-on LED reading light, USB powered."}]},
]

SUITE_TEXT = """\
# The GEO rank experiment as an eval suite: the rewriter prompt (prompts/rewriter_user.txt)
# scored by the built-in rank_improvement metric over the example dataset.
suite: rewriter
data:
  products: ../datasets/example.jsonl
metric:
  builtin: rank_improvement
  dataset: products
markers: [rank]
"""

CONFIG_FILES = {
    "pytest.ini": None, "pyproject.toml": "[tool.pytest", "tox.ini": "[pytest]", "setup.cfg": "[tool:pytest]",
}


def starter_files() -> dict[Path, str]:
    files = {Path("prompts") / p.name: p.read_text(encoding="utf-8") for p in sorted(PACKAGED_PROMPTS.glob("*.txt"))}
    files[DATASET] = "".join(json.dumps(row) + "\n" for row in EXAMPLE_ROWS)
    files[SUITE] = SUITE_TEXT
    return files


def pytest_config(directory: Path) -> Path | None:
    """The file holding this directory's pytest configuration, if any."""
    for name, marker in CONFIG_FILES.items():
        path = directory / name
        if path.is_file() and (marker is None or marker in path.read_text(encoding="utf-8", errors="replace")):
            return path
    return None


EXISTS = "exists"
A_LINK = "a symbolic link: egeo init never writes through one"


def _link_on_the_way(directory: Path, relative: Path) -> Path | None:
    """The first symlink among `relative`'s components below `directory`, dangling or not:
    writing through it would put the file wherever it points, outside the project."""
    path = directory
    for part in relative.parts:
        path = path / part
        if path.is_symlink():
            return path
    return None


def _write_new(path: Path, text: str) -> bool:
    """Write a file that does not exist yet; False when something is there (exclusive
    creation also refuses a dangling symlink, which `exists()` calls absent)."""
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        return False
    return True


def write_starter(directory: Path) -> tuple[list[Path], list[tuple[Path, str]], list[str]]:
    """Write what is missing; returns (written, skipped with the reason, notes)."""
    written: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    notes: list[str] = []
    for relative, text in starter_files().items():
        path = directory / relative
        link = _link_on_the_way(directory, relative)
        if link is not None:
            if (link, A_LINK) not in skipped:  # a linked prompts/ is one line, not six
                skipped.append((link, A_LINK))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if _write_new(path, text):
            written.append(path)
        else:
            skipped.append((path, EXISTS))
    config = pytest_config(directory)
    ini = directory / "pytest.ini"
    if config is None and ini.is_symlink():  # dangling: a link to a file would be the configuration
        skipped.append((ini, A_LINK))
        notes.append(f"add these lines to your pytest configuration:\n{INI_LINES.rstrip()}")
    elif config is None and _write_new(ini, INI_LINES):
        written.append(ini)
    else:
        config = config or ini
        skipped.append((config, EXISTS))
        lines = TOML_LINES if config.suffix == ".toml" else INI_LINES.replace("[pytest]\n", "")
        notes.append(f"{config} already configures pytest; add these lines to its pytest section:\n{lines.rstrip()}")
    run = "pytest --geo-mock"
    if directory.resolve() != Path.cwd().resolve():
        run = f"cd {shlex.quote(str(directory))} && {run}"
    notes.append(f"next: {run}" if ini in written else f"next: add those lines, then {run}")
    return written, skipped, notes
