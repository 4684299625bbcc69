"""`pytest --geo-dataset PATH` (two words) with a dataset outside the project runs as
`--geo-dataset=PATH` does: the project's rootdir, ini file, addopts (their `-p` plugins
and `-o` values) and pythonpath (pytest_layer/invocation.py). Run on the oldest and the
newest pytest the package admits (`.ci/run`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import geo_rows

PYTEST_VERSION = tuple(int(part) for part in pytest.__version__.split(".")[:2])
PYTEST_MAJOR = PYTEST_VERSION[0]


@pytest.fixture
def outside(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A project in proj/ whose ini names a plugin and a seed in its addopts, and a
    dataset in elsewhere/, run from proj/."""
    project = pytester.path / "proj"
    (project / "plugins").mkdir(parents=True)
    (project / "plugins" / "helper.py").write_text(
        "def pytest_report_header(config):\n    return 'helper plugin loaded'\n")
    (project / "pytest.ini").write_text("[pytest]\naddopts = -p helper -o geo_seed=11\n")
    data = pytester.path / "elsewhere" / "x.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(row) + "\n" for row in geo_rows(2)))
    monkeypatch.syspath_prepend(project / "plugins")
    monkeypatch.chdir(project)
    return project, data


def geo_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.stdout.lines
            if line.startswith(("rootdir:", "configfile:", "geo:", "helper plugin"))]


@pytest.mark.plugin
def test_two_words_run_as_one_word_does(pytester: pytest.Pytester, outside: tuple[Path, Path]) -> None:
    project, data = outside
    one_word = pytester.runpytest(f"--geo-dataset={data}", "--geo-mock", "-p", "no:cacheprovider")
    two_words = pytester.runpytest("--geo-dataset", str(data), "--geo-mock", "-p", "no:cacheprovider")
    two_words.assert_outcomes(passed=2)
    assert sorted(geo_lines(two_words)) == sorted(geo_lines(one_word))  # the header hooks' order may differ
    lines = sorted(geo_lines(two_words))
    assert any(line.startswith(f"rootdir: {project}") for line in lines)
    assert any("configfile: pytest.ini" in line for line in lines)
    assert "helper plugin loaded" in lines  # the ini's addopts named it with -p
    if PYTEST_MAJOR >= 9:  # pytest 9.2 applies the -o values of addopts (earlier ones did not)
        assert next(line for line in lines if line.startswith("geo:")).endswith(", seed 11")


@pytest.mark.plugin
@pytest.mark.skipif(PYTEST_VERSION < (8, 4), reason="before 8.4 pytest adds pythonpath after loading addopts' -p "
                                                  "plugins, wherever the dataset is")
def test_the_projects_pythonpath_holds_for_a_dataset_elsewhere(pytester: pytest.Pytester,
                                                               outside: tuple[Path, Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    project, data = outside
    monkeypatch.syspath_prepend(pytester.path)  # and not the plugins directory: only the ini's pythonpath has it
    import sys

    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(project / "plugins")])
    (project / "pytest.ini").write_text("[pytest]\naddopts = -p helper\npythonpath = plugins\n")
    result = pytester.runpytest("--geo-dataset", str(data), "--geo-mock", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert "helper plugin loaded" in geo_lines(result)


@pytest.mark.plugin
def test_a_dataset_inside_another_project_asks_for_one_word(pytester: pytest.Pytester,
                                                            outside: tuple[Path, Path]) -> None:
    project, data = outside
    (data.parent / "pytest.ini").write_text("[pytest]\n")
    result = pytester.runpytest("--geo-dataset", str(data), "--geo-mock", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--geo-dataset {data}: pytest took this path for a test path and used "
                                 f"{data.parent / 'pytest.ini'}; write --geo-dataset={data} (one word) to keep "
                                 "this project's configuration"])
