"""Scoring rewrites made elsewhere (E-GEO's mode A): `egeo score --rewrites FILE` and
`--geo-rewrites FILE` call the rankers only, and a bad file is one clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI

from conftest import DUMMY_KEY, egeo_fixture_dir
from pytest_geo.cli import main
from pytest_geo.data.egeo_data import iter_egeo
from pytest_geo.data.rewrites_file import RewritesError, check_rewrites, load_rewrites

FIXTURE = Path(__file__).parent / "egeo_fixture"


def fixture_lines() -> list[dict[str, Any]]:
    """A rewrites.jsonl for every query of the fixture, in the leaderboard's shape."""
    selected = json.loads((FIXTURE / "test_selected_products.json").read_text())
    return [{"query_id": query_id, "rand_idx": entry["ind"], "initial_product": entry["product"]["title"],
             "optimized_product": f"Given rewrite of {entry['product']['title']}.", "judges": {}}
            for query_id, entry in selected.items()]


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def fixture_rows() -> list[Any]:
    return list(iter_egeo(FIXTURE / "test_data.json"))


@pytest.mark.unit
def test_a_jsonl_file_and_a_json_array_read_alike(tmp_path: Path) -> None:
    lines = fixture_lines()
    jsonl = load_rewrites(write_lines(tmp_path / "rewrites.jsonl", lines))
    array_path = tmp_path / "rewrites.json"
    array_path.write_text(json.dumps(lines[:2], indent=2), encoding="utf-8")
    array = load_rewrites(array_path)
    assert len(jsonl) == 20
    assert array["10000"].text == jsonl["10000"].text == "Given rewrite of Waterproof Kettle 6."
    assert (array["10000"].rand_idx, array["10000"].line) == (5, 2)
    assert array["10007"].line == 9  # the line its object opens on, for errors
    check_rewrites("rewrites.jsonl", jsonl, fixture_rows(), every_row=True)  # the fixture's rules hold


@pytest.mark.unit
@pytest.mark.parametrize(("change", "message"), [
    (lambda lines: lines.insert(1, "{not json"), ":2: not valid JSON"),
    (lambda lines: lines.__setitem__(2, [1]), ":3: a rewrite must be a JSON object, not a JSON list"),
    (lambda lines: lines[3].pop("query_id"), ":4: no query_id"),
    (lambda lines: lines[4].__setitem__("rand_idx", "5"), ":5: query 10028: rand_idx must be an integer"),
    (lambda lines: lines[5].__setitem__("optimized_product", " "), ":6: query 10035: optimized_product must be "
     "a non-empty string"),
    (lambda lines: lines[6].pop("initial_product"), ":7: query 10042: initial_product must be a non-empty string"),
    (lambda lines: lines.append(dict(lines[0])), ":21: query 10000 is given twice (first on line 1)"),
])
def test_a_malformed_line_names_the_file_and_line(tmp_path: Path, change: Any, message: str) -> None:
    lines: list[Any] = fixture_lines()
    change(lines)
    path = tmp_path / "rewrites.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    with pytest.raises(RewritesError) as caught:
        load_rewrites(path)
    assert str(caught.value).startswith(f"{path}{message}")


@pytest.mark.unit
def test_missing_extra_and_misplaced_queries_are_refused(tmp_path: Path) -> None:
    lines = fixture_lines()
    rows = fixture_rows()
    missing = load_rewrites(write_lines(tmp_path / "missing.jsonl", lines[1:]))
    with pytest.raises(RewritesError, match=r"^r.jsonl: no rewrite of query 10000 \(every query of the run"):
        check_rewrites("r.jsonl", missing, rows, every_row=True)
    extra = load_rewrites(write_lines(tmp_path / "extra.jsonl", [*lines, {**lines[0], "query_id": "99999"}]))
    with pytest.raises(RewritesError, match=r"^r.jsonl:21: query 99999 is not among the run's rows$"):
        check_rewrites("r.jsonl", extra, rows, every_row=True)
    check_rewrites("r.jsonl", extra, rows, every_row=False)  # a limited run leaves the rest out
    lines[2]["rand_idx"] = 0
    moved = load_rewrites(write_lines(tmp_path / "moved.jsonl", lines))
    with pytest.raises(RewritesError, match=r"^r.jsonl:3: query 10014: rand_idx 0 is not its target's index 1$"):
        check_rewrites("r.jsonl", moved, rows, every_row=True)


@pytest.fixture
def egeo_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    egeo_fixture_dir(tmp_path, monkeypatch)
    write_lines(tmp_path / "rewrites.jsonl", fixture_lines())
    return tmp_path


def models_asked(server: FakeOpenAI) -> list[str]:
    return [request["body"]["model"] for request in server.requests]


@pytest.mark.e2e
def test_egeo_score_calls_the_rankers_only(egeo_dir: Path, fake_openai: FakeOpenAI,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["score", "--dataset", "egeo/test_data.json", "--rewrites", "rewrites.jsonl", "--no-cache",
                 "--base-url", fake_openai.url, "--ranker-model", "rank-model", "--rewriter-model", "rewrite-model",
                 "--egeo-submission", "out", "--submission-meta", "name=re-scored",
                 "--submission-meta", "contact=me@example.com"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert models_asked(fake_openai) == ["rank-model"] * 40  # rank_before and rank_after of 20 rows
    assert json.loads(captured.out)["n"] == 20
    written = [json.loads(line) for line in (egeo_dir / "out" / "rewrites.jsonl").read_text().splitlines()]
    assert {line["optimized_product"] for line in written if line["query_id"] == "10000"} == {
        "Given rewrite of Waterproof Kettle 6."}


@pytest.mark.e2e
def test_egeo_score_with_cached_judges_calls_only_rank_after(egeo_dir: Path, fake_openai: FakeOpenAI,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    main(["score", "--dataset", "egeo/test_data.json", "--rewrites", "rewrites.jsonl", "--no-cache",
          "--base-url", fake_openai.url, "--rewriter-model", "rewrite-model",
          "--judge", "gpt5=judge-a", "--judge", "claude=judge-b"])
    asked = models_asked(fake_openai)
    assert "rewrite-model" not in asked
    # the before-rankings come from the fixture's caches: rank_after alone is asked, 20 a judge,
    # less claude's of 10133, which its cache leaves out (that cell cannot be scored)
    assert (asked.count("judge-a"), asked.count("judge-b")) == (20, 19)
    assert len(asked) == 39


@pytest.mark.e2e
def test_egeo_score_refuses_a_bad_file_before_any_call(egeo_dir: Path, fake_openai: FakeOpenAI,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    write_lines(egeo_dir / "short.jsonl", fixture_lines()[:-1])
    code = main(["score", "--dataset", "egeo/test_data.json", "--rewrites", "short.jsonl", "--no-cache",
                 "--base-url", fake_openai.url])
    assert code == 2
    assert "egeo: error: short.jsonl: no rewrite of query" in capsys.readouterr().err
    assert fake_openai.requests == []


@pytest.mark.e2e
def test_egeo_score_needs_its_file(egeo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["score", "--dataset", "egeo/test_data.json", "--mock"])
    assert "score needs --rewrites FILE" in capsys.readouterr().err


@pytest.mark.plugin
def test_the_plugin_scores_given_rewrites(pytester: pytest.Pytester, fake_openai: FakeOpenAI,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    write_lines(pytester.path / "rewrites.jsonl", fixture_lines())
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-rewrites", "rewrites.jsonl",
                                "--geo-base-url", fake_openai.url, "--geo-rewriter-model", "rewrite-model",
                                "--geo-ranker-model", "rank-model", "-p", "no:cacheprovider", "-p", "no:xdist",
                                "--geo-no-cache")
    result.assert_outcomes(passed=20)
    assert models_asked(fake_openai) == ["rank-model"] * 40


@pytest.mark.plugin
def test_the_plugin_refuses_a_bad_file_and_variants(pytester: pytest.Pytester, fake_openai: FakeOpenAI,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    lines = fixture_lines()
    lines[0]["rand_idx"] = 1
    write_lines(pytester.path / "rewrites.jsonl", lines)
    args = ["--geo-dataset", "egeo/test_data.json", "--geo-rewrites", "rewrites.jsonl",
            "--geo-base-url", fake_openai.url, "-p", "no:cacheprovider", "-p", "no:xdist"]
    result = pytester.runpytest(*args)
    result.stderr.fnmatch_lines(["*rewrites.jsonl:1: query 10000: rand_idx 1 is not its target's index 5*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    variants = pytester.runpytest(*args, "--geo-variant", "competitive")
    variants.stderr.fnmatch_lines(["*given rewrites (--geo-rewrites, egeo --rewrites) are one rewriter's*"])
    assert fake_openai.requests == []


@pytest.mark.plugin
def test_a_plan_of_a_run_that_cannot_start_is_not_printed(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """--geo-plan checks what the run checks first: a bad rewrites file is the run's usage
    error, with no plan printed before it."""
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    shutil.copytree(FIXTURE, pytester.path / "egeo")
    lines = fixture_lines()
    lines[0]["rand_idx"] = 1
    write_lines(pytester.path / "rewrites.jsonl", lines)
    result = pytester.runpytest("--geo-dataset", "egeo/test_data.json", "--geo-rewrites", "rewrites.jsonl",
                                "--geo-plan", "-p", "no:cacheprovider", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*rewrites.jsonl:1: query 10000: rand_idx 1 is not its target's index 5*"])
    assert "geo plan:" not in result.stdout.str()


@pytest.mark.e2e
def test_egeo_plan_of_a_run_that_cannot_start_is_an_error(egeo_dir: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    write_lines(egeo_dir / "short.jsonl", fixture_lines()[:-1])
    assert main(["plan", "--dataset", "egeo/test_data.json", "--rewrites", "short.jsonl"]) == 2
    out, err = capsys.readouterr()
    assert "egeo: error: short.jsonl: no rewrite of query" in err and "geo plan:" not in out
