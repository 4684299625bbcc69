"""The test layers: each test carries exactly one layer marker (checked at collection),
and the browser layer fails rather than skips where CI=true."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import layer_problems

TESTS = Path(__file__).resolve().parent

MARKED = '''
import pytest

pytestmark = pytest.mark.plugin

def test_module_layer(): pass

@pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.xdist)])
def test_one_param_gets_a_second_layer(n): pass
'''

UNMARKED = '''
import pytest

def test_no_layer(): pass

@pytest.mark.unit
def test_unit(): pass

@pytest.mark.unit
def test_unit_running_pytest(pytester): pass
'''


@pytest.mark.plugin
def test_every_test_needs_exactly_one_layer_and_unit_tests_run_no_pytester(pytester: pytest.Pytester) -> None:
    assert [problem.split("::")[1] for problem in layer_problems(pytester.getitems(pytester.makepyfile(test_marked=MARKED)))] == [
        "test_one_param_gets_a_second_layer[2]: 2 layer markers (xdist, plugin)"]
    problems = layer_problems(pytester.getitems(pytester.makepyfile(test_unmarked=UNMARKED)))
    assert [problem.split("::")[1] for problem in problems] == [
        "test_no_layer: 0 layer markers (none)",
        "test_unit_running_pytest: marked unit but uses pytester; mark it plugin or e2e"]


@pytest.mark.e2e
@pytest.mark.parametrize(("ci", "outcome"), [("true", "error"), ("", "skipped")])
def test_browser_tests_without_chromium_fail_in_ci_and_skip_elsewhere(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, outcome: str) -> None:
    pytest.importorskip("playwright")
    monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("GEO_CHROMIUM", str(pytester.path / "no-chromium"))
    done = pytester.run(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-k", "sorting_by_clicking",
                        str(TESTS / "test_html_browser.py"), timeout=300)
    summary = done.outlines[-1]
    assert f"1 {outcome}" in summary and "passed" not in summary, done.outlines[-20:]
    assert f"Chromium not found at {pytester.path / 'no-chromium'}" in done.stdout.str()
