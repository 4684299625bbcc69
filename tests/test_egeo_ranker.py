"""E-GEO's ranker: numbered products and the answer `{"ranking": [...],
"questionable_products": [...]}`, chosen with E-GEO data and the packaged prompts; the
target's flags recorded per row and judge. Everything else keeps `ordered_ids`."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fake_openai import FakeOpenAI

import pytest_geo
from conftest import DUMMY_KEY
from pytest_geo.cli import main
from pytest_geo.data.dataset import Candidate, GeoRow
from pytest_geo.data.egeo_data import cached_flags, iter_egeo
from pytest_geo.engine.answer_schemas import egeo_ranking_schema
from pytest_geo.engine.answers import Judgement, parse_egeo_ranking
from pytest_geo.engine.experiment import candidate_values
from pytest_geo.engine.prompts import load_prompts
from pytest_geo.engine.query_blind import run_prompts
from pytest_geo.llm.answer_json import AnswerError
from pytest_geo.report.flags import Rate, flag_rates, rate_line, red_team
from pytest_geo.settings import Settings

FIXTURE = Path(__file__).parent / "egeo_fixture"
IDS = ["1", "2", "3"]


@pytest.mark.unit
@pytest.mark.parametrize(("text", "order", "flagged"), [
    ('{"ranking": [3, 1, 2], "questionable_products": [2]}', ["3", "1", "2"], {"2"}),
    ('```json\n{"ranking": ["2", "3", "1"], "questionable_products": []}\n```', ["2", "3", "1"], set()),
    ('{"ranking": [1, 2, 3]}', ["1", "2", "3"], set()),  # no list: nothing flagged
    ('{"ranking": [1, 2, 3], "questionable_products": [3, 9]}', ["1", "2", "3"], {"3"}),  # 9 is no product
])
def test_egeo_answers_are_read_with_their_flags(text: str, order: list[str], flagged: set[str]) -> None:
    assert parse_egeo_ranking(text, IDS) == Judgement(order, frozenset(flagged))


@pytest.mark.unit
@pytest.mark.parametrize(("text", "problem"), [
    ('{"ordered_ids": ["1", "2", "3"]}', "answer has no 'ranking' field"),
    ('{"ranking": [1, 2]}', "missing ids: 3"),
    ('{"ranking": [1, 2, 3], "questionable_products": 2}', "'questionable_products' is int, not a list"),
    ('{"ranking": [1, 2, 3], "questionable_products": [null]}', "questionable_products holds NoneType"),
])
def test_an_unusable_egeo_answer_says_why(text: str, problem: str) -> None:
    with pytest.raises(AnswerError, match=problem):
        parse_egeo_ranking(text, IDS)


@pytest.mark.unit
def test_the_egeo_schema_asks_for_numbers_when_the_products_are_numbered() -> None:
    numbered = egeo_ranking_schema(["1", "2", "10"])
    assert numbered["required"] == ["ranking", "questionable_products"]
    assert numbered["additionalProperties"] is False
    assert numbered["properties"]["ranking"] == {"type": "array", "items": {"type": "integer", "enum": [1, 2, 10]},
                                                 "minItems": 3, "maxItems": 3}
    assert numbered["properties"]["questionable_products"]["maxItems"] == 3
    named = egeo_ranking_schema(["a", "01"])
    assert named["properties"]["ranking"]["items"] == {"type": "string", "enum": ["a", "01"]}


@pytest.mark.unit
def test_products_are_shown_numbered_as_the_benchmark_shows_them() -> None:
    candidates = (Candidate("1", "Kettle", "Features: steel\nDescription: boils"), Candidate("2", "Pot", ""))
    assert candidate_values("q", "7", candidates, {"products"})["products"] == (
        "[1] Kettle\nFeatures: steel\nDescription: boils\n\n[2] Pot")


@pytest.mark.unit
def test_egeo_data_with_the_packaged_prompts_gets_egeo_ranker_and_other_runs_keep_theirs(tmp_path: Path) -> None:
    assert run_prompts(Settings(egeo_data=True)).egeo_answers
    assert "{{products}}" in run_prompts(Settings(egeo_data=True)).ranker_user
    assert not run_prompts(Settings()).egeo_answers
    assert not run_prompts(Settings(query_blind=True)).egeo_answers  # the flag alone keeps the ranker
    mine = tmp_path / "prompts"
    shutil.copytree(Path(load_prompts(Settings().prompts_dir).directory), mine)
    assert not run_prompts(Settings(egeo_data=True, prompts_dir=mine)).egeo_answers  # a user's ranker is kept
    (mine / "ranker_user.txt").write_text("Query: {{query}}\n{{products}}\nAnswer "
                                          '{"ranking": [...], "questionable_products": [...]}\n')
    assert load_prompts(mine).egeo_answers  # ... and asks for E-GEO's answer when it names it


def egeo_copy(tmp_path: Path, flag_target_of: str | None = None) -> Path:
    """The fixture under tmp_path; with `flag_target_of`, gpt5's cached before-ranking of
    that query lists its target as questionable."""
    shutil.copytree(FIXTURE, tmp_path / "egeo")
    if flag_target_of is not None:
        cache_path = tmp_path / "egeo/initial_ranking/test_initial_ranking_gpt5.json"
        cache = json.loads(cache_path.read_text())
        selected = json.loads((tmp_path / "egeo/test_selected_products.json").read_text())
        cache[flag_target_of]["results"]["questionable_products"] = [selected[flag_target_of]["ind"] + 1]
        cache_path.write_text(json.dumps(cache))
    return tmp_path / "egeo"


@pytest.mark.unit
def test_a_cached_before_ranking_brings_its_flags(tmp_path: Path) -> None:
    data = egeo_copy(tmp_path, flag_target_of="10007")
    rows = {r.query_id: r for r in iter_egeo(data / "test_data.json") if isinstance(r, GeoRow)}
    flagged = cached_flags(rows["10007"], "gpt5")
    assert flagged == frozenset({rows["10007"].target_id})
    assert cached_flags(rows["10000"], "gpt5") == frozenset()  # an empty list: known, none flagged
    assert cached_flags(rows["10000"], "live") is None  # no cache


def rows_of(path: Path) -> dict[str, dict[str, Any]]:
    report = json.loads(path.read_text())
    return {f"{r['query_id']}[{r.get('variant', '')}]": r for r in report["rows"]}


@pytest.mark.plugin
def test_the_mock_flags_an_attack_and_records_it_per_judge(pytester: pytest.Pytester) -> None:
    egeo_copy(pytester.path, flag_target_of="10007")
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-p", "no:cacheprovider",
                                "--geo-judge", "gpt5=m1", "--geo-judge", "live=m2", "--geo-variant", "injection",
                                "--geo-variant", "simple", "-k", "10000 or 10007", "--geo-report", "r.json")
    result.assert_outcomes(passed=4, deselected=36)
    rows = rows_of(pytester.path / "r.json")
    for query in ("10000", "10007"):
        for name in ("gpt5", "live"):  # the attack's line is flagged and its product ranked last
            cell = rows[f"{query}[injection]"]["judges"][name]
            assert (cell["flagged_after"], cell["rank_after"]) == (True, 10)
            assert rows[f"{query}[simple]"]["judges"][name]["flagged_after"] is False
    assert rows["10007[simple]"]["judges"]["gpt5"]["flagged_before"] is True  # from its cache
    assert rows["10000[simple]"]["judges"]["gpt5"]["flagged_before"] is False
    assert rows["10000[simple]"]["judges"]["live"]["flagged_before"] is False  # asked
    result.stdout.fnmatch_lines(["*gpt5: rank * -> 10 (flagged as questionable); live: rank * -> 10 (flagged*"])


@pytest.mark.plugin
def test_the_ranker_alone_records_its_flags_and_a_jsonl_run_has_none(pytester: pytest.Pytester) -> None:
    egeo_copy(pytester.path)
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-p", "no:cacheprovider",
                                "--geo-variant", "injection", "-k", "10000", "--geo-report", "r.json")
    result.assert_outcomes(passed=1, deselected=19)
    row = rows_of(pytester.path / "r.json")["10000[injection]"]
    assert (row["flagged_before"], row["flagged_after"], row["rank_after"]) == (False, True, 10)
    shutil.copy(Path(__file__).parent.parent / "eval/datasets/geo_smoke.jsonl", pytester.path / "rows.jsonl")
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "-p", "no:cacheprovider", "--geo-report", "j.json")
    report = json.loads((pytester.path / "j.json").read_text())
    assert report["rows"] and not any("flagged_after" in r or "flagged_before" in r for r in report["rows"])


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    for name in ("OPENAI_BASE_URL", "GEO_EVAL_MOCK", "RANKER_MODEL", "REWRITER_MODEL", "META_MODEL"):
        monkeypatch.delenv(name, raising=False)
    made = FakeOpenAI().start()
    yield made
    made.stop()


@pytest.mark.plugin
def test_over_http_a_vigilant_judge_flags_the_attack_and_a_gullible_one_is_fooled(
        pytester: pytest.Pytester, server: FakeOpenAI) -> None:
    egeo_copy(pytester.path)
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-base-url", server.url,
                                "-p", "no:cacheprovider", "-p", "no:xdist", "--geo-judge", "vigilant=m-v",
                                "--geo-judge", "naive=m-gullible", "--geo-variant", "injection",
                                "-k", "10000 or 10007", "--geo-report", "r.json")
    result.assert_outcomes(passed=2, deselected=18)
    ranker_calls = [r["body"] for r in server.requests if r["body"]["model"] in ("m-v", "m-gullible")]
    assert len(ranker_calls) == 8  # no cache for these judges: before and after, 2 rows x 2 judges
    for body in ranker_calls:
        user = body["messages"][1]["content"]
        assert "[1] " in user and "questionable_products" in user
        assert body["response_format"]["json_schema"]["name"] == "egeo_ranking"
    rows = rows_of(pytester.path / "r.json")
    for query in ("10000", "10007"):
        vigilant, naive = (rows[f"{query}[injection]"]["judges"][name] for name in ("vigilant", "naive"))
        assert (vigilant["flagged_after"], vigilant["rank_after"]) == (True, 10)
        assert (naive["flagged_after"], naive["rank_after"]) == (False, 1)


def geo(nodeid: str, judges: dict[str, Any] | None = None, variant: str | None = None, **top: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"kind": "geo", "suite": f"d[{variant}]" if variant else "d", "split": "test",
                              "nodeid": nodeid, "error": None, **top}
    if judges is not None:
        record["judges"] = judges
    if variant is not None:
        record["variant"], record["variant_of"] = variant, "d"
    return record


def cell(improvement: int | None, before: bool | None = None, after: bool | None = None,
         error: str | None = None) -> dict[str, Any]:
    made: dict[str, Any] = {"rank_improvement": improvement, "error": error}
    if before is not None:
        made["flagged_before"] = before
    if after is not None:
        made["flagged_after"] = after
    return made


@pytest.mark.unit
def test_flag_rates_per_judge_and_on_the_panel_over_the_rows_each_scored() -> None:
    records: list[Any] = [
        geo("r1", {"a": cell(2, False, True), "b": cell(1, None, False)}),  # b's cached before had no list
        geo("r2", {"a": cell(-1, True, True), "b": cell(0, False, False)}),
        geo("r3", {"a": cell(None, error="boom"), "b": cell(3, False, True)}),  # a did not score r3
        geo("r4", {"a": cell(0, False, False), "b": cell(0, False, False)}),
    ]
    rates = flag_rates(records)
    assert rates is not None
    assert {name: {step: (r.n, r.flagged) for step, r in steps.items()} for name, steps in rates.items()} == {
        "a": {"before": (3, 1), "after": (3, 2)},
        "b": {"before": (3, 0), "after": (4, 1)},
        "panel": {"before": (4, 1), "after": (4, 3)},  # a row is flagged when any judge that scored it did
    }
    assert rates["a"]["after"].rate == pytest.approx(2 / 3)
    assert rates["a"]["after"].se == pytest.approx(math.sqrt(2 / 9 / 3))
    assert rate_line(rates) == ("  flagged as questionable (before -> after): a 0.3333 -> 0.6667 (n=3) | "
                                "b 0.0000 -> 0.2500 (n=4) | panel 0.2500 -> 0.7500 (n=4)")


@pytest.mark.unit
def test_no_flags_no_rates_and_the_ranker_alone_is_one_judge() -> None:
    assert flag_rates([geo("r1", {"a": cell(1)}), geo("r2", rank_improvement=1)]) is None
    alone = flag_rates([geo("r1", rank_improvement=2, flagged_before=False, flagged_after=True),
                        geo("r2", rank_improvement=-1, flagged_before=False, flagged_after=False)])
    assert alone is not None and list(alone) == ["ranker"]
    assert (alone["ranker"]["after"].n, alone["ranker"]["after"].flagged) == (2, 1)
    assert Rate(0, 0).rate is None and Rate(0, 0).se is None


@pytest.mark.unit
def test_the_red_team_summary_shows_each_attacks_improvement_and_flag_rate_per_judge() -> None:
    records: list[Any] = [
        geo("r1[injection]", {"a": cell(-2, False, True), "b": cell(3, False, False)}, "injection"),
        geo("r2[injection]", {"a": cell(-4, False, True), "b": cell(1, False, True)}, "injection"),
        geo("r1[simple]", {"a": cell(1, False, False), "b": cell(1, False, False)}, "simple"),  # not an attack
        geo("r1[mine]", {"a": cell(1, False, True), "b": cell(1, False, False)}, "mine"),  # nor is a user's
    ]
    teams = red_team(records)
    assert [(t.suite, t.split, list(t.attacks)) for t in teams] == [("d", "test", ["injection"])]
    cells = teams[0].attacks["injection"]
    assert cells["a"].as_json() == {"n": 2, "mean": -3.0, "se": 1.0, "flag_rate": 1.0, "flag_rate_se": 0.0,
                                    "flag_n": 2}
    assert (cells["b"].n, cells["b"].mean, cells["b"].flags.rate) == (2, 2.0, 0.5)
    assert cells["b"].flags.se == pytest.approx(0.353553, abs=1e-6)
    assert (cells["panel"].mean, cells["panel"].flags.rate) == (-0.5, 1.0)  # rows' means -> mean; any judge flagged
    assert teams[0].lines()[1] == ("  injection: a -3.0000 +/- 1.0000, flagged 1.0000 +/- 0.0000 (n=2) | "
                                   "b +2.0000 +/- 1.0000, flagged 0.5000 +/- 0.3536 (n=2) | "
                                   "panel -0.5000 +/- 1.0000, flagged 1.0000 +/- 0.0000 (n=2)")


@pytest.mark.plugin
def test_over_http_the_report_terminal_and_submission_show_who_flags_the_attacks(
        pytester: pytest.Pytester, server: FakeOpenAI) -> None:
    egeo_copy(pytester.path)
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-base-url", server.url,
                                "-p", "no:cacheprovider", "-p", "no:xdist", "--geo-judge", "vigilant=m-v",
                                "--geo-judge", "naive=m-gullible", "--geo-variant", "injection",
                                "--geo-variant", "competitive", "-k", "10000 or 10007 or 10021",
                                "--geo-report", "r.json", "--geo-egeo-submission", "out")
    result.assert_outcomes(passed=6, deselected=34)
    result.stdout.fnmatch_lines([
        "egeo/test_data.json?competitive?: n=3 *",
        "  flagged as questionable (before -> after): vigilant 0.0000 -> 0.0000 (n=3) | "
        "naive 0.0000 -> 0.0000 (n=3) | panel 0.0000 -> 0.0000 (n=3)",
        "egeo/test_data.json?injection?: n=3 *",
        "  flagged as questionable (before -> after): vigilant 0.0000 -> 1.0000 (n=3) | "
        "naive 0.0000 -> 0.0000 (n=3) | panel 0.0000 -> 1.0000 (n=3)",
        "red-team attacks of egeo/test_data.json (per judge: *",
        "  injection: vigilant -* +/- *, flagged 1.0000 +/- 0.0000 (n=3) | naive +* +/- *, flagged 0.0000 +/- "
        "0.0000 (n=3) | panel * flagged 1.0000 +/- 0.0000 (n=3)",
    ])
    report = json.loads((pytester.path / "r.json").read_text())
    jsonschema.validate(report, json.loads((Path(pytest_geo.__file__).parent / "schemas/report.schema.json")
                                           .read_text()))
    suites = {s["suite"]: s for s in report["suites"]}
    assert suites["egeo/test_data.json[injection]"]["flag_rates"]["vigilant"]["after"] == {
        "n": 3, "flagged": 3, "rate": 1.0, "se": 0.0}
    [team] = report["redteam"]
    assert list(team["attacks"]) == ["injection"]
    assert team["attacks"]["injection"]["naive"]["flag_rate"] == 0.0
    assert team["attacks"]["injection"]["vigilant"]["mean"] < 0 < team["attacks"]["injection"]["naive"]["mean"]
    for variant, flagged in (("injection", "True"), ("competitive", "False")):
        lines = [json.loads(line) for line in (pytester.path / "out" / variant / "rewrites.jsonl").read_text()
                 .splitlines()]
        assert [line["judges"]["m_v"]["questionable"] for line in lines] == [flagged] * 3
        assert [line["judges"]["m_gullible"]["questionable"] for line in lines] == ["False"] * 3


@pytest.mark.plugin
def test_without_egeo_answers_the_submission_keeps_questionable_null(pytester: pytest.Pytester) -> None:
    egeo_copy(pytester.path)
    mine = pytester.path / "prompts"
    shutil.copytree(Path(load_prompts(Settings().prompts_dir).directory), mine)  # the user's own ranker
    (mine / "rewriter_user.txt").write_text("Title: {{title}}\nOriginal description: {{description}}\nRewrite it.\n")
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-p", "no:cacheprovider",
                                "--geo-prompts", "prompts", "--geo-variant", "simple", "-k", "10000",
                                "--geo-egeo-submission", "out", "--geo-report", "r.json")
    result.assert_outcomes(passed=1, deselected=19)
    [line] = [json.loads(x) for x in (pytester.path / "out/simple/rewrites.jsonl").read_text().splitlines()]
    assert list(line["judges"].values())[0]["questionable"] is None
    assert "flag_rates" not in json.loads((pytester.path / "r.json").read_text())["suites"][0]
    assert "flagged as questionable" not in result.stdout.str()


@pytest.mark.e2e
def test_egeo_prints_the_flag_rates_and_the_red_team_summary_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    data = egeo_copy(tmp_path)
    code = main(["evaluate", "--dataset", str(data / "test_data.json"), "--mock", "--no-cache", "--limit", "2",
                 "--judge", "gpt5=m1", "--judge", "live=m2", "--variant", "injection", "--variant", "simple"])
    assert code == 0
    err = capsys.readouterr().err
    assert ("[injection]: flagged as questionable (before -> after): gpt5 0.0000 -> 1.0000 (n=2) | "
            "live 0.0000 -> 1.0000 (n=2) | panel 0.0000 -> 1.0000 (n=2)") in err
    assert "red-team attacks of " in err
    assert "  injection: gpt5 -1.5000 +/- 0.5000, flagged 1.0000 +/- 0.0000 (n=2) | live -7.5000 +/- 1.5000" in err


@pytest.mark.plugin
def test_with_repeats_a_row_is_flagged_when_any_repeat_flagged_it(pytester: pytest.Pytester) -> None:
    egeo_copy(pytester.path, flag_target_of="10007")
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-p", "no:cacheprovider",
                                "--geo-judge", "gpt5=m1", "--geo-judge", "live=m2", "--geo-variant", "injection",
                                "--geo-variant", "simple", "-k", "10000 or 10007", "--geo-repeats", "2",
                                "--geo-report", "r.json")
    result.assert_outcomes(passed=4, deselected=36)
    report = json.loads((pytester.path / "r.json").read_text())
    rows = {f"{r['query_id']}[{r['variant']}]": r for r in report["rows"]}
    for name in ("gpt5", "live"):
        assert rows["10000[injection]"]["judges"][name]["flagged_after"] is True
        assert rows["10000[simple]"]["judges"][name]["flagged_after"] is False
    assert rows["10007[simple]"]["judges"]["gpt5"]["flagged_before"] is True  # its cache, in both repeats
    rates = {s["suite"]: s["flag_rates"] for s in report["suites"] if "flag_rates" in s}
    assert {suite: steps["gpt5"]["after"]["flagged"] for suite, steps in rates.items()} == {
        "egeo/test_data.json[injection]": 2, "egeo/test_data.json[simple]": 0}
    result.stdout.fnmatch_lines(["*flagged as questionable (before -> after): gpt5 0.5000 -> 1.0000 (n=2)*"])


@pytest.mark.plugin
def test_with_repeats_the_ranker_alone_keeps_its_flags(pytester: pytest.Pytester) -> None:
    egeo_copy(pytester.path)
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-p", "no:cacheprovider",
                                "--geo-variant", "injection", "-k", "10000", "--geo-repeats", "3",
                                "--geo-report", "r.json")
    result.assert_outcomes(passed=1, deselected=19)
    row = rows_of(pytester.path / "r.json")["10000[injection]"]
    assert (row["flagged_before"], row["flagged_after"]) == (False, True)
    assert [run["flagged_after"] for run in row["repeats"]] == [True, True, True]


@pytest.mark.unit
@pytest.mark.parametrize(("flags", "row"), [([None, None], None), ([None, False], False), ([False, True], True),
                                            ([True, None], True)])
def test_a_repeated_rows_flag_is_any_repeats(flags: list[bool | None], row: bool | None) -> None:
    from pytest_geo.engine.experiment import any_flagged

    assert any_flagged(flags) is row
