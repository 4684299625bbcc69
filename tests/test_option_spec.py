"""The one option table (pytest_geo/option_spec.py) feeds `pytest --help`, `egeo --help`
and the documentation's options table: every option it holds shows in each it claims."""

from __future__ import annotations

import pytest

from pytest_geo import cli
from pytest_geo.option_spec import OPTIONS, Option, options_markdown

PYTEST_FLAGS = [o for o in OPTIONS if o.name is not None]
INI_NAMES = [o for o in OPTIONS if o.ini is not None]


def egeo_help(capsys: pytest.CaptureFixture[str], command: str) -> str:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())


@pytest.fixture(scope="module")
def pytest_help(pytestconfig: pytest.Config) -> str:
    """The plugin's part of `pytest --help`, run once for the module."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, check=True, cwd=pytestconfig.rootpath)
    return " ".join(done.stdout.split())


@pytest.mark.unit
def test_the_table_is_what_a_user_knows() -> None:
    """Spot checks in literal values: the flags, ini names and egeo flags users type."""
    by_name = {o.name: o for o in PYTEST_FLAGS}
    assert len(PYTEST_FLAGS) == 45 and len(INI_NAMES) == 36
    assert (by_name["--geo-seed"].ini, by_name["--geo-seed"].egeo, by_name["--geo-seed"].shown_default) == (
        "geo_seed", "--seed", "7")
    assert by_name["--geo-optimizer-model"].egeo == "--meta-model"
    assert by_name["--geo-optimizer-model"].egeo_aliases == ("--optimizer-model",)
    assert by_name["--geo-timeout"].env == "OPENAI_TIMEOUT_SECONDS"
    assert by_name["--geo-dataset"].ini == "geo_datasets" and by_name["--geo-variant"].ini == "geo_variants"
    assert [o.egeo for o in OPTIONS if o.name is None and o.egeo] == [
        "--endpoint", "--verbose", "--train", "--val", "--suites", "--iters", "--max-metric-calls", "--apply"]


@pytest.mark.e2e
@pytest.mark.xdist_group("pytest-help")  # one worker runs `pytest --help` for them all
@pytest.mark.parametrize("option", PYTEST_FLAGS, ids=lambda o: o.name)
def test_every_pytest_flag_is_in_pytest_help(pytest_help: str, option: Option) -> None:
    assert f" {option.name}" in pytest_help


@pytest.mark.e2e
@pytest.mark.xdist_group("pytest-help")  # one worker runs `pytest --help` for them all
@pytest.mark.parametrize("option", INI_NAMES, ids=lambda o: o.ini)
def test_every_ini_name_is_in_pytest_help(pytest_help: str, option: Option) -> None:
    assert f" {option.ini} " in pytest_help


@pytest.mark.e2e
def test_every_egeo_flag_is_in_its_commands_help(capsys: pytest.CaptureFixture[str]) -> None:
    texts = {command: egeo_help(capsys, command) for command in ("evaluate", "optimize")}
    claimed = [(o.egeo, command) for o in OPTIONS if o.egeo for command in o.egeo_commands]
    assert len(claimed) == 38 + 24
    for flag, command in claimed:
        assert f" {flag} " in texts[command], (flag, command)
    assert "[--sample N]" not in texts["optimize"] and "[--train PATH]" not in texts["evaluate"]


@pytest.mark.e2e
@pytest.mark.xdist_group("pytest-help")  # one worker runs `pytest --help` for them all
def test_help_texts_name_each_front_ends_own_flags(pytest_help: str, capsys: pytest.CaptureFixture[str]) -> None:
    evaluate = egeo_help(capsys, "evaluate")
    assert "upper bound of --geo-concurrency auto, in rows (ini: geo_max_concurrency; default: 256)" in pytest_help
    assert "--max-concurrency N upper bound of --concurrency auto, in rows (default: 256)" in evaluate
    assert "--mock the deterministic offline mock model for every role; no network, no key " \
           "(env: GEO_EVAL_MOCK=1)" in evaluate
    assert "--geo-" not in evaluate


@pytest.mark.unit
def test_options_markdown_lists_every_option() -> None:
    text = options_markdown()
    lines = text.splitlines()
    assert lines[0] == "| pytest flag | ini | environment | egeo flag | default | what it does |"
    assert len(lines) == 2 + len(OPTIONS) == 57
    for option in OPTIONS:
        assert any(f"`{option.name or option.egeo or option.ini}" in line for line in lines[2:]), option
    assert ("| `--geo-seed N` | `geo_seed` |  | `--seed` (evaluate, optimize) | 7 | seed for choosing a missing "
            "target_id, drawing --geo-sample rows") in text
    assert "| `--geo-split test\\|train\\|all` |" in text  # a | in a cell would split it


@pytest.mark.plugin
def test_an_ini_value_is_validated_like_its_flag(pytester: pytest.Pytester) -> None:
    """The ini twin goes through the flag's validator, and the message names the ini option."""
    pytester.makeini("[pytest]\ngeo_max_concurrency = 0\n")
    result = pytester.runpytest("--geo-mock")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option geo_max_concurrency: '0' must be at least 1*"])
