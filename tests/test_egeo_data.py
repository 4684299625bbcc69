"""E-GEO benchmark data files read as they ship: rows, targets, cached before-rankings,
and a malformed entry as a problem naming the file and the query id."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_geo.data.dataset import DatasetError, GeoRow, RowProblem, iter_dataset
from pytest_geo.data.egeo_data import cached_before_rankings, iter_egeo, product_text

FIXTURE = Path(__file__).parent / "egeo_fixture"


def write_data(directory: Path, data: object, selected: object) -> Path:
    (directory / "test_data.json").write_text(json.dumps(data), encoding="utf-8")
    (directory / "test_selected_products.json").write_text(json.dumps(selected), encoding="utf-8")
    return directory / "test_data.json"


PRODUCTS = [{"title": "A", "features": "['steel', 'lid']", "description": "Plain text."},
            {"title": "B", "features": "", "description": "['One.', 'Two.']"}]


@pytest.mark.unit
@pytest.mark.parametrize(("value", "text"), [
    ("['a', 'b']", "a b"),
    ("[]", ""),
    ("plain words", "plain words"),
    ("[not a literal", "[not a literal"),
    (["a list", "not a string"], ""),
    (None, ""),
    (3, ""),
])
def test_product_texts_are_read_as_the_benchmark_reads_them(value: object, text: str) -> None:
    assert product_text(value) == text


@pytest.mark.unit
def test_the_fixture_reads_as_twenty_rows_with_numbered_products() -> None:
    rows = list(iter_dataset(FIXTURE / "test_data.json", seed=7))
    assert len(rows) == 20
    assert all(isinstance(row, GeoRow) for row in rows)
    first = rows[0]
    assert isinstance(first, GeoRow)
    assert (first.query_id, first.line, first.query) == ("10000", 1, "what kettle will last me a lifetime?")
    assert [c.id for c in first.candidates] == [str(n) for n in range(1, 11)]
    selected = json.loads((FIXTURE / "test_selected_products.json").read_text())["10000"]
    assert first.target_id == str(selected["ind"] + 1)
    assert first.target.title == selected["product"]["title"]


@pytest.mark.unit
def test_a_product_shows_its_features_and_description(tmp_path: Path) -> None:
    path = write_data(tmp_path, {"7": {"query": "q", "products": PRODUCTS}}, {"7": {"ind": 1, "product": {}}})
    (row,) = iter_egeo(path)
    assert isinstance(row, GeoRow)
    assert row.candidates[0].description == "Features: steel lid\nDescription: Plain text."
    assert row.candidates[1].description == "Description: One. Two."
    assert row.target_id == "2"


@pytest.mark.unit
@pytest.mark.parametrize(("entry", "selected", "problem"), [
    ({"query": "", "products": PRODUCTS}, {"ind": 0}, "query 7: no query text"),
    ({"query": "q", "products": PRODUCTS[:1]}, {"ind": 0}, "query 7: 'products' must be a list of at least 2 products"),
    ({"query": "q", "products": PRODUCTS}, {"ind": 2}, "query 7: selected 'ind' 2 is not an index of its 2 products"),
    ({"query": "q", "products": PRODUCTS}, {"ind": True}, "query 7: selected 'ind' True is not an index of its 2 products"),
    ({"query": "q", "products": PRODUCTS}, None, "query 7: no entry in the selected products file"),
    ({"query": "q", "products": [PRODUCTS[0], {"title": ""}]}, {"ind": 0}, "query 7: product 2 has no title"),
    ({"query": "q", "products": [PRODUCTS[0], "x"]}, {"ind": 0}, "query 7: product 2 is a JSON str, not an object"),
])
def test_a_malformed_entry_is_a_problem_naming_the_file_and_query(tmp_path: Path, entry: object, selected: object,
                                                                    problem: str) -> None:
    good = {"query": "q", "products": PRODUCTS}
    path = write_data(tmp_path, {"6": good, "7": entry, "8": good},
                      {"6": {"ind": 0}, "8": {"ind": 1}, **({"7": selected} if selected is not None else {})})
    lines = list(iter_egeo(path, display="data/test_data.json"))
    assert [type(line).__name__ for line in lines] == ["GeoRow", "RowProblem", "GeoRow"]
    assert isinstance(lines[1], RowProblem)
    assert str(lines[1]) == f"data/test_data.json:2: {problem}"


@pytest.mark.unit
def test_a_missing_selected_products_file_fails_the_dataset(tmp_path: Path) -> None:
    (tmp_path / "test_data.json").write_text("{}", encoding="utf-8")
    with pytest.raises(DatasetError, match="test_selected_products.json: cannot read"):
        list(iter_egeo(tmp_path / "test_data.json"))


@pytest.mark.unit
def test_a_data_file_that_is_not_an_object_fails_the_dataset(tmp_path: Path) -> None:
    path = write_data(tmp_path, [1, 2], {})
    with pytest.raises(DatasetError, match=r"test_data.json: not an object keyed by query id \(it is a JSON list\)"):
        list(iter_egeo(path))


@pytest.mark.unit
def test_cached_before_rankings_are_read_per_judge_and_unscored_queries_dropped() -> None:
    gpt5 = cached_before_rankings(FIXTURE / "test_data.json", "gpt5")
    claude = cached_before_rankings(FIXTURE / "test_data.json", "claude")  # results held as JSON strings
    assert gpt5 is not None and claude is not None
    assert len(gpt5) == 20 and len(claude) == 19 and "10133" not in claude  # its results are null
    cache = json.loads((FIXTURE / "initial_ranking/test_initial_ranking_gpt5.json").read_text())
    assert gpt5["10000"] == [str(n) for n in cache["10000"]["results"]["ranking"]]
    assert cached_before_rankings(FIXTURE / "test_data.json", "gemini") is None  # no file
    assert cached_before_rankings(FIXTURE / "test_data.json", "mine") is None  # no such cache


@pytest.mark.plugin
def test_pytest_runs_an_egeo_data_file_as_named(pytester: pytest.Pytester) -> None:
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-p", "no:cacheprovider",
                                "-k", "10000 or 10007")
    result.assert_outcomes(passed=2, deselected=18)
    result.stdout.fnmatch_lines(["egeo/test_data.json: n=2 avg_rank_improvement=*"])


@pytest.mark.plugin
def test_a_json_file_not_named_is_not_collected(pytester: pytest.Pytester) -> None:
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest("--geo-mock", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.plugin
def test_judges_named_after_a_cache_take_their_before_ranking_from_it(pytester: pytest.Pytester) -> None:
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-mock", "-p", "no:cacheprovider",
                                "--geo-judge", "gpt5=m1", "--geo-judge", "claude=m2", "--geo-judge", "live=m3",
                                "-k", "10000 or 10007 or 10133", "--geo-report", "r.json")
    result.assert_outcomes(passed=2, failed=1, deselected=17)
    # a before call for the live judge only, an after call for each: 3 rows x (1 + 3), less claude's
    # rank_after of 10133, which its cache leaves out (the cell cannot be scored: nothing is asked)
    result.stdout.fnmatch_lines(["egeo/test_data.json:20: error: judge claude: no cached before-ranking of query 10133 in "
                                 "test_initial_ranking_claude.json*", "  ranker: calls=11 *", "  rewriter: calls=3 *"])
    report = json.loads((pytester.path / "r.json").read_text())
    row = next(r for r in report["rows"] if r["query_id"] == "10000")
    gpt5, claude = (cached_before_rankings(FIXTURE / "test_data.json", name) for name in ("gpt5", "claude"))
    assert gpt5 is not None and claude is not None and gpt5["10000"] != claude["10000"]
    for name, cache in (("gpt5", gpt5), ("claude", claude)):
        assert row["judges"][name]["order_before"] == cache["10000"]
        assert row["judges"][name]["rank_before"] == cache["10000"].index(row["target_id"]) + 1
    assert report["geo"]["datasets"]["egeo/test_data.json"]["n"] == 3


@pytest.mark.plugin
def test_egeo_test_data_rows_report_the_test_split_in_both_front_ends(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """test_data.json is E-GEO's held-out split: its rows and aggregates say `test`, as a
    suite's `test_data` does; a JSONL dataset's rows stay `train` (a suite's `data`)."""
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    pytester.makefile(".jsonl", rows=json.dumps({
        "query_id": "j1", "query": "kettle", "target_id": "b",
        "candidates": [{"id": "a", "title": "A", "description": "steel"}, {"id": "b", "title": "B", "description": "lid"}]}))
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "rows.jsonl", "--geo-mock", "-p",
                                "no:cacheprovider", "-k", "10000 or 10007 or j1", "--geo-report", "r.json")
    result.assert_outcomes(passed=3, deselected=18)
    report = json.loads((pytester.path / "r.json").read_text())
    assert sorted((r["query_id"], r["split"]) for r in report["rows"]) == [
        ("10000", "test"), ("10007", "test"), ("j1", "train")]
    assert sorted((s["suite"], s["split"]) for s in report["suites"]) == [
        ("egeo/test_data.json", "test"), ("rows.jsonl", "train")]

    from pytest_geo import cli
    monkeypatch.chdir(pytester.path)
    assert cli.main(["evaluate", "--dataset", "egeo/test_data.json", "--mock", "--limit", "2", "--report", "e.json"]) == 0
    egeo = json.loads((pytester.path / "e.json").read_text())
    assert [r["split"] for r in egeo["rows"]] == ["test", "test"]
