"""--geo-limit and --geo-sample: a few rows first, deselected the pytest way, the same
rows on every run and under xdist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import geo_rows
from pytest_geo.data.sampling import chosen_indices
from pytest_geo.settings import DEFAULT_SEED


def write_rows(path: Path, n: int, prefix: str = "r") -> None:
    rows = geo_rows(n)
    for row in rows:
        row["query_id"] = prefix + str(row["query_id"])[1:]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def ran(project: pytest.Pytester, report: str = "report.json") -> list[str]:
    data = json.loads((project.path / report).read_text())
    return sorted(row["nodeid"] for row in data["rows"])


@pytest.mark.plugin
def test_limit_runs_the_first_rows_of_each_dataset(counting_client: pytest.Pytester) -> None:
    write_rows(counting_client.path / "more.jsonl", 5, prefix="m")
    result = counting_client.runpytest("data/smoke.jsonl", "more.jsonl", "--geo-mock", "--geo-limit", "3",
                                       "--geo-report", "report.json", "-p", "no:xdist")
    result.assert_outcomes(passed=6, deselected=7)
    assert ran(counting_client) == sorted(
        [f"data/smoke.jsonl::q{i}" for i in (1, 2, 3)] + [f"more.jsonl::m{i}" for i in (0, 1, 2)])
    report = json.loads((counting_client.path / "report.json").read_text())
    assert report["geo"]["overall"]["n"] == 6
    queried = {query for _, query in json.loads((counting_client.path / "calls.json").read_text())}
    assert len(queried) == 6  # deselected rows never reach the model


@pytest.mark.plugin
def test_limit_counts_the_rows_left_by_k(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-limit", "2", "-k", "not q1",
                                   "--geo-report", "report.json", "-p", "no:xdist")
    result.assert_outcomes(passed=2, deselected=6)
    assert ran(geo_project) == ["data/smoke.jsonl::q2", "data/smoke.jsonl::q3"]


@pytest.mark.plugin
def test_sample_is_seeded_and_the_same_on_every_run(geo_project: pytest.Pytester) -> None:
    write_rows(geo_project.path / "rows.jsonl", 30)
    runs = []
    for name in ("a.json", "b.json"):
        result = geo_project.runpytest("rows.jsonl", "--geo-mock", "--geo-sample", "5", "--geo-seed", "7",
                                       "--geo-report", name, "-p", "no:xdist")
        result.assert_outcomes(passed=5, deselected=25)
        runs.append(ran(geo_project, name))
    assert runs[0] == runs[1]
    names = [f"r{i}" for i in range(30)]
    assert runs[0] == sorted(f"rows.jsonl::{names[i]}" for i in chosen_indices(names, None, 5, 7))


@pytest.mark.unit
def test_the_sample_follows_the_seed() -> None:
    names = [f"r{i}" for i in range(200)]
    samples = {tuple(chosen_indices(names, None, 10, seed)) for seed in range(5)}
    assert len(samples) > 1
    assert all(len(s) == 10 and list(s) == sorted(set(s)) for s in samples)


@pytest.mark.plugin
def test_sample_and_limit_from_the_ini_file(geo_project: pytest.Pytester) -> None:
    geo_project.makeini("[pytest]\ngeo_sample = 3\ngeo_limit = 6\n")
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "report.json",
                                   "-p", "no:xdist")
    result.assert_outcomes(passed=3, deselected=5)
    names = [f"q{i}" for i in range(1, 9)]
    assert ran(geo_project) == sorted(f"data/smoke.jsonl::{names[i]}" for i in chosen_indices(names, 6, 3, DEFAULT_SEED))


@pytest.mark.plugin
def test_sample_larger_than_the_dataset_keeps_every_row(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-sample", "50", "-p", "no:xdist")
    result.assert_outcomes(passed=8)


@pytest.mark.plugin
def test_suite_rows_are_limited_per_suite(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(test_answer="""
        import pytest_geo
        answer_eval = pytest_geo.suite("answer", data={"n": [(i, i) for i in range(10)]})

        @answer_eval.metric
        def same(n, expected):
            return n == expected

        def test_plain():
            pass
    """)
    result = geo_project.runpytest("test_answer.py", "--geo-mock", "--geo-limit", "4", "-p", "no:xdist")
    result.assert_outcomes(passed=5, deselected=6)  # ordinary tests are never deselected


@pytest.mark.plugin
@pytest.mark.parametrize("args, message", [
    (["--geo-limit", "0"], "*--geo-limit*'0' must be at least 1*"),
    (["--geo-sample", "x"], "*--geo-sample*'x' is not a whole number*"),
])
def test_bad_values_are_usage_errors(geo_project: pytest.Pytester, args: list[str], message: str) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


@pytest.mark.plugin
def test_bad_ini_value_names_the_ini_option(geo_project: pytest.Pytester) -> None:
    geo_project.makeini("[pytest]\ngeo_sample = many\n")
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option geo_sample: 'many' is not a whole number*"])


@pytest.mark.xdist
@pytest.mark.parametrize("flag", ["--geo-limit", "--geo-sample"])
def test_xdist_workers_pick_the_rows_one_process_picks(geo_project: pytest.Pytester, flag: str) -> None:
    pytest.importorskip("xdist")
    write_rows(geo_project.path / "rows.jsonl", 40)
    picked = {}
    for workers in ("0", "2"):
        result = geo_project.runpytest(
            "-p", "no:cacheprovider", "-n", workers, "rows.jsonl", "--geo-mock", flag, "6",
            "--geo-report", f"n{workers}.json")
        result.assert_outcomes(passed=6, deselected=34 if workers == "0" else 0)
        picked[workers] = ran(geo_project, f"n{workers}.json")
    assert picked["0"] == picked["2"]
    assert len(picked["0"]) == 6
