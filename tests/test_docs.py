"""The documentation stays true: the README's quick start and every offline command in the
README and the docs pages run as written, in a copy of the project's example files."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
OFFLINE = re.compile(r"(^|\s)--(geo-)?mock(\s|$)")


def commands(page: Path) -> list[str]:
    """The shell commands of a page's ```sh blocks, continuation lines joined, comments cut."""
    found = []
    for block in SH_BLOCK.findall(page.read_text(encoding="utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                found.append(line)
    return found


def offline(command: str) -> bool:
    words = command.split("&&")[-1].split()
    return bool(words) and words[0] in {"pytest", "egeo"} and OFFLINE.search(command) is not None


def as_run(command: str) -> list[str]:
    """The command's last part (any install before `&&` is what this environment did) with
    `pytest` and `egeo` as this interpreter runs them."""
    words = shlex.split(command.split("&&")[-1])
    head = {"pytest": [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
            "egeo": [sys.executable, "-m", "pytest_geo"]}[words[0]]
    return head + words[1:]


OFFLINE_COMMANDS = sorted({(page.relative_to(REPO).as_posix(), command)
                           for page in PAGES for command in commands(page) if offline(command)})


def test_the_readme_is_short_and_its_quick_start_has_two_commands() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = SH_BLOCK.findall(quick_start)
    assert [len(commands_in.strip().splitlines()) for commands_in in blocks] == [1, 1]
    assert "--mock" in blocks[0] and "pytest" in blocks[1] and "pip install" in blocks[1]


def test_offline_commands_are_found() -> None:
    pages = {page for page, _ in OFFLINE_COMMANDS}
    assert {"README.md", "docs/getting-started.md", "docs/running.md", "docs/suites.md"} <= pages


@pytest.mark.parametrize(("page", "command"), OFFLINE_COMMANDS)
def test_offline_command_runs(page: str, command: str, tmp_path: Path) -> None:
    shutil.copytree(REPO / "eval", tmp_path / "eval")
    (tmp_path / "data.jsonl").write_text((REPO / "eval/datasets/geo_smoke.jsonl").read_text(encoding="utf-8"))
    done = subprocess.run(as_run(command), cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "GEO_EVAL_MOCK": ""})
    assert done.returncode == 0, f"{page}: {command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
