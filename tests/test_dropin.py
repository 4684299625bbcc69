"""pytest-geo in a user's own project: no prompts/ of its own, `egeo init`, `--geo-dataset`
in a project with testpaths, and datasets outside the rootdir."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROMPTS, SMOKE, GeoProject, cache_entries, copy_prompts, geo_rows
from pytest_geo import cli
from pytest_geo.settings import PACKAGED_PROMPTS


@pytest.fixture
def fresh(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A user's project: its own ini and tests, no prompts/, no key."""
    for name in ("OPENAI_API_KEY", "GEO_EVAL_MOCK", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_app.py").write_text("def test_app():\n    assert True\n")
    shutil.copy(SMOKE, pytester.path / "data.jsonl")
    return pytester


def header(result: pytest.RunResult) -> str:
    return next(line for line in result.stdout.lines if line.startswith("geo: "))


@pytest.mark.plugin
def test_a_fresh_project_uses_the_packaged_prompts(fresh: pytest.Pytester) -> None:
    assert not (fresh.path / "prompts").exists()
    result = fresh.runpytest("data.jsonl", "--geo-mock")
    result.assert_outcomes(passed=8)
    assert header(result) == f"geo: model mock, prompts {PACKAGED_PROMPTS} (packaged defaults), seed 7"


@pytest.mark.unit
def test_the_packaged_prompts_are_the_ones_the_tests_use() -> None:
    """One copy of the default prompt text: the repository has no top-level prompts/."""
    assert PROMPTS == PACKAGED_PROMPTS
    assert not (PROMPTS.parent.parent / "prompts").exists()


@pytest.mark.plugin
def test_prompts_lookup_order(fresh: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """--geo-prompts, ini geo_prompts, <rootdir>/prompts, <invocation dir>/prompts, packaged."""
    root = fresh.path
    sub = root / "sub"
    for directory in (root / "named", root / "from_ini", root / "prompts", sub / "prompts"):
        copy_prompts(directory)
    shutil.copy(SMOKE, sub / "data.jsonl")
    monkeypatch.chdir(sub)

    def used(*args: str) -> str:
        result = fresh.runpytest("data.jsonl", "--geo-mock", "--collect-only", *args)
        return header(result).split("prompts ", 1)[1].split(", seed")[0]

    assert used("--geo-prompts", "../named") == str(root / "named")
    fresh.makeini("[pytest]\ntestpaths = tests\ngeo_prompts = from_ini\n")
    assert used("--geo-prompts", "../named") == str(root / "named")
    assert used() == str(root / "from_ini")
    fresh.makeini("[pytest]\ntestpaths = tests\n")
    assert used() == str(root / "prompts")
    shutil.rmtree(root / "prompts")
    assert used() == str(sub / "prompts")
    shutil.rmtree(sub / "prompts")
    assert used() == f"{PACKAGED_PROMPTS} (packaged defaults)"


@pytest.mark.e2e
def test_egeo_evaluate_outside_the_repository_uses_the_packaged_prompts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(SMOKE, tmp_path / "data.jsonl")
    assert cli.main(["evaluate", "--dataset", "data.jsonl", "--mock", "--limit", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 2


@pytest.mark.e2e
def test_python_dash_m_pytest_geo_runs_egeo(tmp_path: Path) -> None:
    env = {**os.environ, "GEO_EVAL_MOCK": "1"}
    env.pop("OPENAI_API_KEY", None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest_geo", "evaluate", "--dataset", str(SMOKE), "--limit", "3"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    ).stdout
    assert json.loads(out) == {"avg_rank_improvement": 2.0, "n": 3, "stderr_rank_improvement": 0.0, "win_rate": 1.0}


@pytest.mark.e2e
def test_optimize_refuses_to_write_into_the_packaged_prompts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    before = {p.name: p.read_bytes() for p in PACKAGED_PROMPTS.iterdir() if p.is_file()}
    code = cli.main(["optimize-prompts", "--train", str(SMOKE), "--val", str(SMOKE), "--mock", "--iters", "1"])
    assert code == 2
    assert "egeo init" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in PACKAGED_PROMPTS.iterdir() if p.is_file()} == before


# --- egeo init ----------------------------------------------------------------


@pytest.mark.plugin
def test_egeo_init_then_pytest_passes(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = pytester.path / "shop"
    assert cli.main(["init", str(project)]) == 0
    assert f"wrote {project / 'pytest.ini'}" in capsys.readouterr().out
    assert {p.name for p in (project / "prompts").iterdir()} == {p.name for p in PACKAGED_PROMPTS.iterdir() if p.is_file()}
    monkeypatch.chdir(project)
    result = pytester.runpytest("--geo-mock")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["- rewriter::rank_improvement: *"])
    # The example dataset also runs on its own.
    result = pytester.runpytest("--geo-dataset", "eval/datasets/example.jsonl", "--geo-mock")
    result.assert_outcomes(passed=3)
    assert header(result) == f"geo: model mock, prompts {project / 'prompts'}, seed 7"


@pytest.mark.e2e
def test_egeo_init_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["init", str(tmp_path)]) == 0
    mine = tmp_path / "prompts" / "rewriter_user.txt"
    mine.write_text("My own {{title}} {{description}}\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -q\n")
    capsys.readouterr()
    assert cli.main(["init", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert mine.read_text() == "My own {{title}} {{description}}\n"
    assert (tmp_path / "pytest.ini").read_text() == "[pytest]\naddopts = -q\n"
    assert f"skipped {mine} (exists)" in out
    assert f"skipped {tmp_path / 'pytest.ini'} (exists)" in out
    assert "add these lines" in out and "testpaths = eval" in out
    assert "wrote" not in out


@pytest.mark.e2e
def test_egeo_init_leaves_a_pyproject_configuration_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-q"\n')
    assert cli.main(["init", str(tmp_path)]) == 0
    assert not (tmp_path / "pytest.ini").exists()  # it would silently replace the pyproject section
    assert 'testpaths = ["eval"]' in capsys.readouterr().out


# --- --geo-dataset ----------------------------------------------------------------


@pytest.mark.plugin
def test_geo_dataset_alone_runs_only_the_dataset(fresh: pytest.Pytester) -> None:
    (fresh.path / "tests" / "conftest.py").write_text("raise RuntimeError('tests/conftest.py was loaded')\n")
    result = fresh.runpytest("--geo-dataset", "data.jsonl", "--geo-mock", "-v")
    result.assert_outcomes(passed=8)
    result.stdout.no_fnmatch_line("*test_app*")


@pytest.mark.plugin
def test_geo_dataset_with_positional_args_adds_to_them(fresh: pytest.Pytester) -> None:
    fresh.runpytest("tests", "--geo-dataset", "data.jsonl", "--geo-mock").assert_outcomes(passed=9)


@pytest.mark.plugin
def test_ini_datasets_add_to_an_ordinary_run(fresh: pytest.Pytester) -> None:
    fresh.makeini("[pytest]\ntestpaths = tests\ngeo_datasets = data.jsonl\n")
    fresh.runpytest("--geo-mock").assert_outcomes(passed=9)


@pytest.mark.xdist
def test_geo_dataset_alone_under_xdist(fresh: pytest.Pytester) -> None:
    result = fresh.runpytest_subprocess("--geo-dataset", "data.jsonl", "--geo-mock", "-n", "2")
    result.assert_outcomes(passed=8)


# --- datasets outside the rootdir ---------------------------------------------------


@pytest.fixture
def outside(fresh: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """The project in proj/ (ini, tests, prompts), two datasets named x.jsonl elsewhere."""
    project = fresh.path / "proj"
    project.mkdir()
    (fresh.path / "tox.ini").unlink()  # pytester's makeini
    (project / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    shutil.move(str(fresh.path / "tests"), project / "tests")
    copy_prompts(project / "prompts")
    first, second = fresh.path / "a" / "x.jsonl", fresh.path / "b" / "x.jsonl"
    for path, n in ((first, 3), (second, 2)):
        path.parent.mkdir()
        path.write_text("".join(json.dumps(r) + "\n" for r in geo_rows(n)))
    monkeypatch.chdir(project)
    return project, first, second


@pytest.mark.plugin
def test_geo_dataset_outside_keeps_the_projects_rootdir(
    fresh: pytest.Pytester, outside: tuple[Path, Path, Path]
) -> None:
    project, first, second = outside
    result = fresh.runpytest("--geo-dataset", str(first), "--geo-dataset", str(second), "--geo-mock",
                             "--collect-only", "-q")
    result.stdout.fnmatch_lines([f"{first}::r0", f"{first}::r2", f"{second}::r1"])
    result = fresh.runpytest("--geo-dataset", str(first), "--geo-dataset", str(second), "--geo-mock")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines([f"rootdir: {project}", "configfile: pytest.ini"])
    assert header(result) == f"geo: model mock, prompts {project / 'prompts'}, seed 7"
    result.stdout.fnmatch_lines([f"{first}: n=3 *", f"{second}: n=2 *", "all GEO rows: n=5 *"])


@pytest.mark.plugin
def test_positional_dataset_outside_the_rootdir_is_named_by_its_path(
    fresh: pytest.Pytester, outside: tuple[Path, Path, Path]
) -> None:
    project, first, second = outside
    result = fresh.runpytest(str(first), str(second), "--rootdir", str(project), "--geo-mock")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines([f"{first}: n=3 *", f"{second}: n=2 *"])
    result.stdout.no_fnmatch_line(": n=*")


@pytest.mark.plugin
def test_geo_dataset_outside_uses_the_projects_cache(
    pytester: pytest.Pytester, served_project: GeoProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = pytester.path / "proj"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    shutil.move(str(pytester.path / "prompts"), project / "prompts")
    data = served_project.dataset(2, "elsewhere.jsonl")
    monkeypatch.chdir(project)
    served_project.run("--geo-dataset", str(data)).assert_outcomes(passed=2)
    assert len(cache_entries(project / ".pytest_cache" / "d" / "geo")) == 6  # 3 calls per row
    assert not (pytester.path / ".pytest_cache").exists()
    served_project.server.reset()
    served_project.run("--geo-dataset", str(data)).assert_outcomes(passed=2)
    assert served_project.server.requests == []


# --- egeo init and symlinks ----------------------------------------------------------------


@pytest.mark.plugin
def test_egeo_init_never_writes_through_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "pytest.ini").symlink_to(outside / "pytest.ini")  # dangling
    (project / "prompts").symlink_to(outside / "prompts")  # dangling
    (project / "eval").symlink_to(outside)  # a real directory elsewhere
    assert cli.main(["init", str(project)]) == 0
    assert list(outside.iterdir()) == []
    out = capsys.readouterr().out
    link = "(a symbolic link: egeo init never writes through one)"
    assert out.splitlines()[:3] == [f"skipped {project / 'prompts'} {link}", f"skipped {project / 'eval'} {link}",
                                    f"skipped {project / 'pytest.ini'} {link}"]
    assert "add these lines to your pytest configuration:\n[pytest]\ntestpaths = eval\npythonpath = .\ngeo_prompts = prompts\n" in out
    assert "Traceback" not in out
    assert [p.name for p in project.iterdir() if not p.is_symlink()] == []
