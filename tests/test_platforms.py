"""pytest-geo imports, and pytest starts, on a platform without `fcntl` (Windows): the
file locks are imported where a lock is taken (llm/file_lock.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_geo.llm import file_lock
from pytest_geo.llm.budget import BudgetError, check_budget
from pytest_geo.settings import Settings

WITHOUT_FCNTL = "import sys; sys.modules['fcntl'] = None\n"


@pytest.mark.e2e
def test_the_plugin_and_pytest_help_start_without_fcntl(tmp_path: Path) -> None:
    code = WITHOUT_FCNTL + ("import pytest_geo.plugin, pytest_geo.cli, pytest\n"
                            "sys.exit(pytest.main(['--help', '-p', 'no:cacheprovider']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--geo-mock" in done.stdout and "fcntl" not in done.stderr


@pytest.mark.e2e
def test_a_mock_run_without_fcntl_passes(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text('{"query": "q", "candidates": [{"id": "a", "title": "A", "description": '
                                         '"x"}, {"id": "b", "title": "B", "description": "y"}]}\n')
    code = WITHOUT_FCNTL + ("import pytest\nsys.exit(pytest.main(['--geo-dataset', 'rows.jsonl', '--geo-mock', "
                            "'-p', 'no:xdist', '-q']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


@pytest.mark.unit
def test_without_fcntl_a_lock_is_a_clear_oserror(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fcntl", None)
    assert not file_lock.locks_available()
    with pytest.raises(OSError, match=r"^file locks \(fcntl\) are not available on this platform: the answer "
                                      r"cache is not written$"):
        file_lock.lock(0, wait=False)


@pytest.mark.unit
def test_without_fcntl_a_budget_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fcntl", None)
    with pytest.raises(BudgetError) as refused:
        check_budget(Settings(budget_tokens=1000))
    assert str(refused.value) == ("--geo-budget: a budget needs file locks (fcntl), which this platform does not "
                                  "have; run without --geo-budget and --geo-budget-tokens")
    check_budget(Settings())  # no budget: nothing to lock
