"""The `geo:` header line: the model, prompts and seed, and the server's host, shown
when a run has pytest-geo items and only then."""

from __future__ import annotations

import pytest

from conftest import DUMMY_KEY, SMOKE, copy_prompts
from pytest_geo.settings import DEFAULT_SEED


@pytest.mark.plugin
def test_the_header_shows_for_a_dataset_on_the_command_line(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--collect-only")
    result.stdout.fnmatch_lines([f"geo: model mock, prompts *, seed {DEFAULT_SEED}"])
    plain = geo_project.runpytest("--geo-mock", "--collect-only", "-p", "no:xdist")
    plain.stdout.no_fnmatch_line("geo: *")  # no dataset, no header


PROMPT_SUITE = '''
import pytest_geo

headline = pytest_geo.prompt("headline", "Write a headline for: {{input}}")
headline_eval = pytest_geo.suite(headline, data={"rows": [("red kettle", "red kettle")]})
headline_eval.metric(lambda rows, expected: headline(rows) == expected, name="echoed")
'''


def header_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.stdout.lines if line.startswith("geo: model")]


@pytest.mark.plugin
def test_a_suites_only_run_shows_the_header_with_the_servers_host(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    copy_prompts(pytester.path / "prompts")
    pytester.makepyfile(test_headline=PROMPT_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only",
                                "--geo-base-url", "https://user:secret@models.example.com:8443/v1?key=x")
    assert header_lines(result) == [
        f"geo: model ranker=gpt-4o-mini rewriter=gpt-4o-mini, server models.example.com, "
        f"prompts {pytester.path / 'prompts'}, seed 7"]
    assert "secret" not in result.stdout.str() and "8443" not in result.stdout.str()


@pytest.mark.plugin
def test_the_header_names_the_openai_api_without_a_base_url(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text(SMOKE.read_text().splitlines()[0] + "\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "rows.jsonl")
    assert header_lines(result) == [f"geo: model ranker=gpt-4o-mini rewriter=gpt-4o-mini, server api.openai.com, "
                                    f"prompts {pytester.path / 'prompts'}, seed 7"]  # once


@pytest.mark.plugin
def test_a_run_without_pytest_geo_items_has_no_header(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert header_lines(result) == []
