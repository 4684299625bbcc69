"""Cost in dollars: from the price table per model, per role and in total, in the
summary and the JSON report; no price means tokens only; cache hits cost nothing and
the summary shows what they saved."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_reporting import validate

from conftest import GeoProject
from pytest_geo.llm.prices import PriceError, format_dollars, parse_price_lines
from pytest_geo.price import Price


def report(project: GeoProject, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project.pytester.path / name).read_text(encoding="utf-8"))
    return data


def expected_dollars(usage: dict[str, int], price: Price, cached: bool = False) -> float:
    prefix = "cached_" if cached else ""
    return (usage[f"{prefix}prompt_tokens"] * price.input_per_million
            + usage[f"{prefix}completion_tokens"] * price.output_per_million) / 1e6


@pytest.mark.plugin
def test_cost_per_role_and_total_from_the_price_table(served_project: GeoProject) -> None:
    result = served_project.priced().run(str(served_project.dataset(4)), "--geo-report", "r.json")
    result.assert_outcomes(passed=4)
    data = report(served_project, "r.json")
    validate(data)
    price = Price(0.15, 0.60)  # gpt-4o-mini, the default model of every role (no cached tokens here)
    for role in ("ranker", "rewriter"):
        assert data["cost"]["roles"][role]["cost"] == pytest.approx(expected_dollars(data["usage"][role], price))
        assert data["usage"][role]["prompt_tokens"] > 0
    assert data["cost"]["total"] == pytest.approx(sum(r["cost"] for r in data["cost"]["roles"].values()))
    assert data["cost"]["unpriced_roles"] == []
    total = round(data["cost"]["total"] * 1e9)
    result.stdout.fnmatch_lines(["  ranker: calls=8 * cost=$*", f"cost: {format_dollars(total)} at list prices*"])
    result.stdout.no_fnmatch_line("*saved*")  # no cache hits yet


@pytest.mark.plugin
def test_geo_prices_adds_and_overrides_entries(served_project: GeoProject) -> None:
    served_project.pytester.makeini("[pytest]\ngeo_prices =\n    gpt-4o-mini = 1000, 2000\n    house-model = 1, 3\n")
    served_project.run(str(served_project.dataset(2)), "--geo-rewriter-model", "house-model",
                       "--geo-report", "r.json").assert_outcomes(passed=2)
    data = report(served_project, "r.json")
    assert data["cost"]["roles"]["ranker"]["cost"] == pytest.approx(
        expected_dollars(data["usage"]["ranker"], Price(1000, 2000)))
    assert data["cost"]["roles"]["rewriter"]["cost"] == pytest.approx(
        expected_dollars(data["usage"]["rewriter"], Price(1, 3)))


@pytest.mark.plugin
def test_a_model_without_price_shows_tokens_only(served_project: GeoProject) -> None:
    result = served_project.priced().run(str(served_project.dataset(2)), "--geo-ranker-model", "llama-local",
                                "--geo-report", "r.json")
    result.assert_outcomes(passed=2)
    data = report(served_project, "r.json")
    validate(data)
    assert data["cost"]["roles"]["ranker"] == {"cost": None, "saved_by_cache": None}
    assert data["cost"]["roles"]["rewriter"]["cost"] > 0
    assert data["cost"]["total"] is None and data["cost"]["unpriced_roles"] == ["ranker"]
    ranker = next(line for line in result.stdout.lines if line.startswith("  ranker:"))
    assert "completion_tokens=" in ranker and "$" not in ranker
    result.stdout.fnmatch_lines(["cost: unknown, no price for the model of ranker (the built-in prices are OpenAI's, for its own API only; "
                                 "add it to the ini option geo_prices)*"])


@pytest.mark.plugin
def test_cache_hits_cost_nothing_and_the_summary_shows_the_saving(served_project: GeoProject) -> None:
    served_project.priced()
    dataset = str(served_project.dataset(3))
    served_project.run(dataset, "--geo-report", "first.json").assert_outcomes(passed=3)
    result = served_project.run(dataset, "--geo-report", "second.json")
    result.assert_outcomes(passed=3)
    first, second = report(served_project, "first.json"), report(served_project, "second.json")
    assert second["cost"]["total"] == 0
    assert second["cost"]["saved_by_cache"] == pytest.approx(first["cost"]["total"])
    ranker = second["usage"]["ranker"]
    assert ranker["cached_prompt_tokens"] == first["usage"]["ranker"]["prompt_tokens"]
    saved = round(second["cost"]["saved_by_cache"] * 1e9)
    result.stdout.fnmatch_lines(["  ranker: * cost=$0.00 saved_by_cache=$*",
                                 f"cost: $0.00 at list prices*; cache hits saved {format_dollars(saved)}"])


@pytest.mark.plugin
def test_the_mock_shows_no_cost(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock")
    result.stdout.fnmatch_lines(["model usage:"])
    result.stdout.no_fnmatch_line("cost: *")
    result.stdout.no_fnmatch_line("*cost=*")


@pytest.mark.plugin
def test_a_bad_price_line_is_a_usage_error_naming_the_line(served_project: GeoProject) -> None:
    served_project.pytester.makeini("[pytest]\ngeo_prices =\n    gpt-4o = 2.5, 10\n    gpt-x = cheap\n")
    result = served_project.run(str(served_project.dataset(1)))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option geo_prices: line 2 'gpt-x = cheap': expected "
                                 "'model = input_per_million, output_per_million[, cached_input_per_million"
                                 "[, cache_write_per_million]]'"])


@pytest.mark.unit
@pytest.mark.parametrize("line", ["gpt = 1", "= 1, 2", "gpt = 1, 2, 3", "gpt = -1, 2", "gpt = nan, 2", "gpt 1, 2"])
def test_price_lines_that_are_rejected(line: str) -> None:
    with pytest.raises(PriceError, match="line 1"):
        parse_price_lines([line])


@pytest.mark.unit
def test_price_lines_skip_blanks_and_comments() -> None:
    assert parse_price_lines(["", "# list prices", "m = 0.5, 1.5  # ours"]) == {"m": Price(0.5, 1.5)}


@pytest.mark.unit
def test_dollars_are_readable_at_every_size() -> None:
    assert format_dollars(0) == "$0.00"
    assert format_dollars(12_345_678) == "$0.01235"  # four significant digits below $10
    assert format_dollars(1_500) == "$0.000001500"
    assert format_dollars(12_345_000_000_000) == "$12,345.00"


@pytest.mark.plugin
def test_the_html_report_shows_cost_per_role_and_in_total(served_project: GeoProject) -> None:
    served_project.priced().run(str(served_project.dataset(2)), "--geo-ranker-model", "llama-local", "--geo-report", "r.json",
                       "--geo-html", "r.html").assert_outcomes(passed=2)
    data = report(served_project, "r.json")
    page = (served_project.pytester.path / "r.html").read_text(encoding="utf-8")
    usage = page[page.index("<h2>Model usage and cost</h2>"):]
    usage = usage[:usage.index("</table>")]
    ranker = usage[usage.index("<td>ranker</td>"):].split("</tr>")[0]
    rewriter = usage[usage.index("<td>rewriter</td>"):].split("</tr>")[0]
    assert f">{data['usage']['ranker']['prompt_tokens']}<" in ranker and "$" not in ranker  # no price: tokens only
    assert f"${data['cost']['roles']['rewriter']['cost']:.6f}".rstrip("0") in rewriter
    assert "total unknown: no price for ranker" in page
