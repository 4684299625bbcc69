"""What a new user meets first: Kedi's last metric rules, YAML suites that need a
procedure, `egeo init`'s pythonpath, --help on the model and key, the `geo:` header, and
no empty summary after an error that stops the run at start."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import DUMMY_KEY, SMOKE, copy_prompts
from pytest_geo import cli

# --- Kedi: the dataset-free metric, numbers, suite(prompt(...)) ------------------------------


@pytest.mark.plugin
def test_a_dataset_free_metric_runs_once_and_is_the_suites_score(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_legacy='''
import pytest_geo

CALLS = []
legacy_eval = pytest_geo.suite("legacy", data={})

@legacy_eval.metric
def overall():
    CALLS.append(1)
    return 0.75, f"ran {len(CALLS)} time(s)"
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_legacy.py::legacy::once PASSED*"])
    assert result.stdout.lines[-3:-1] == ["Evals:", "- legacy::overall: 0.7500 | ran 1 time(s)"]


@pytest.mark.e2e
def test_a_dataset_free_metric_cannot_drive_optimisation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "evals.py").write_text('''
import pytest_geo

headline = pytest_geo.prompt("headline", "Write a headline for: {{input}}", optimize=True)
headline_eval = pytest_geo.suite(headline, data={})
headline_eval.metric(lambda: 1.0, name="overall")
''')
    monkeypatch.chdir(tmp_path)
    assert cli.main(["optimize", "--suites", "evals.py", "--mock"]) == 2
    assert capsys.readouterr().err == ("egeo: error: suite 'headline': metric 'overall' names no dataset; "
                                       "optimizing needs rows (give the metric a dataset parameter)\n")


@pytest.mark.plugin
@pytest.mark.parametrize("value, shown", [
    ('decimal.Decimal("0.75")', "0.7500"),
    ("fractions.Fraction(1, 4)", "0.2500"),
    ("Half()", "0.5000"),  # any value with __float__, a numpy scalar say
])
def test_a_metric_may_return_any_number_coercible_to_float(pytester: pytest.Pytester, value: str,
                                                            shown: str) -> None:
    pytester.makepyfile(test_numbers=f'''
import decimal, fractions
import pytest_geo

class Half:
    def __float__(self):
        return 0.5

numbers_eval = pytest_geo.suite("numbers", data={{"rows": [("x", "x")]}})

@numbers_eval.metric
def score(rows, expected):
    return {value}
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.stdout.lines[-2] == f"- numbers::score: {shown}"


@pytest.mark.plugin
def test_a_string_is_not_a_number_even_one_that_reads_like_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_numbers='''
import pytest_geo

numbers_eval = pytest_geo.suite("numbers", data={"rows": [("x", "x")]})

@numbers_eval.metric
def score(rows, expected):
    return "0.75"
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["- numbers::score: 0.0000 | error: metric returned str '0.75'; expected a bool, "
                                 "a number or (score, feedback)"])


@pytest.mark.plugin
def test_a_suite_of_a_prompt_procedure_is_named_after_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_prompted='''
import pytest_geo

headline = pytest_geo.prompt("headline", "Write a headline for: {{input}}")
headline_eval = pytest_geo.suite(headline, data={"rows": [("red kettle", "red kettle")]})

@headline_eval.metric
def echoed(rows, expected):
    return headline(rows) == expected

def test_the_name():
    assert headline_eval.name == "headline"
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--geo-mock")
    result.assert_outcomes(passed=2)
    assert result.stdout.lines[-2] == "- headline::echoed: 1.0000"


# --- YAML suites and the project's modules ------------------------------------------------


@pytest.mark.plugin
@pytest.mark.parametrize("builtin", ["exact_match", "contains"])
def test_an_output_metric_without_a_procedure_is_a_collection_error_naming_the_key(
        pytester: pytest.Pytester, builtin: str) -> None:
    pytester.makefile(".geo.yaml", answer=textwrap.dedent(f"""
        suite: answer
        data:
          questions: [{{input: "2 + 2?", expected: "4"}}]
        metric: {{builtin: {builtin}, dataset: questions}}
    """))
    result = pytester.runpytest("-p", "no:cacheprovider", "answer.geo.yaml")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"answer.geo.yaml: procedure: missing: metric '{builtin}' compares the procedure's "
                                 "output with each row's expected value; add `procedure: module:function`"])
    assert "Evals:" not in result.stdout.str()


@pytest.mark.e2e
def test_egeo_init_makes_the_projects_procedures_importable(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    project = pytester.path / "shop"
    assert cli.main(["init", str(project)]) == 0
    assert "pythonpath = .\n" in (project / "pytest.ini").read_text()
    (project / "qa.py").write_text("def answer(question):\n    return {'2 + 2?': '4'}.get(question, '?')\n")
    (project / "eval" / "suites" / "answer.geo.yaml").write_text(textwrap.dedent("""
        suite: answer
        procedure: qa:answer
        data:
          questions: [{input: "2 + 2?", expected: "4"}, {input: "3 + 3?", expected: "6"}]
        metric: {builtin: exact_match, dataset: questions}
    """))
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(pytester.path)  # not the project: only pythonpath = . can find qa.py
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--geo-mock", "eval/suites/answer.geo.yaml")
    result.assert_outcomes(passed=2)  # a wrong answer scores 0.0; only an error fails its row
    assert result.stdout.lines[-2] == "- answer::exact_match: 0.5000"


@pytest.mark.e2e
def test_egeo_init_suggests_pythonpath_for_an_existing_configuration(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-q"\n')
    assert cli.main(["init", str(tmp_path)]) == 0
    assert 'pythonpath = ["."]' in capsys.readouterr().out


# --- --help ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_egeo_help_names_the_default_model_and_where_the_key_comes_from(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("Models default to gpt-4o-mini (change with --*-model or RANKER_MODEL, REWRITER_MODEL, META_MODEL); "
            "the API key comes from OPENAI_API_KEY, the server from OPENAI_BASE_URL (default: the OpenAI API); "
            "--mock runs offline without a key.") in text
    with pytest.raises(SystemExit):
        cli.main(["evaluate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "ranker model (env: RANKER_MODEL; default: gpt-4o-mini)" in text
    assert "its key comes from OPENAI_API_KEY" in text


@pytest.mark.plugin
def test_the_plugins_help_group_names_the_default_model_and_the_key(pytester: pytest.Pytester) -> None:
    text = " ".join(pytester.runpytest("--help").stdout.str().split())
    assert ("LLM prompt evaluation (pytest-geo; models default to gpt-4o-mini (change with --geo-*-model or "
            "RANKER_MODEL, REWRITER_MODEL, META_MODEL); the API key comes from OPENAI_API_KEY, the server from "
            "OPENAI_BASE_URL (default: the OpenAI API); --geo-mock runs offline without a key):") in text
    assert "(ini: geo_ranker_model; env: RANKER_MODEL; default: gpt-4o-mini)" in text


# --- the geo: header -------------------------------------------------------------------------


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


# --- no empty summary after an error that stops the run ----------------------------------------


@pytest.mark.plugin
def test_a_usage_error_at_start_leaves_no_evaluation_summary(pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("GEO_EVAL_MOCK", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "rows.jsonl").write_text(SMOKE.read_text().splitlines()[0] + "\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "rows.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: no model credentials: set OPENAI_API_KEY*"])
    assert "Evals:" not in result.stdout.str() and "pytest-geo evaluation" not in result.stdout.str()
