"""The HTML report in a real browser: headless Chromium driven by Playwright.

The reports come from real runs of the plugin (a subprocess per report, once per module).
Every test fails on a console error or an uncaught exception in the page, which includes
any attempt to load something (the page's Content-Security-Policy forbids it).

Run them with `python -m pytest -m browser tests`; they are skipped, saying why, where
Chromium (/usr/bin/chromium, the Debian `chromium` package) or Playwright is missing, and
fail instead where CI=true: CI must run them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from fake_openai import FakeOpenAI
from test_reporting import transcript_lines, with_calls

from conftest import DUMMY_KEY, SMOKE, copy_prompts
from pytest_geo.report.html import write_html_report

# One worker builds the reports and launches Chromium for the whole module (`--dist
# loadgroup` in pyproject), not each worker its own.
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]


def unavailable(reason: str) -> NoReturn:
    """Skip, saying why; fail where CI=true, so that CI never passes without this layer."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI=true: the browser tests must run", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    from playwright import sync_api
except ImportError:
    unavailable("Playwright is not installed (pip install -e '.[test]')")

CHROMIUM = os.environ.get("GEO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]

HOSTILE = {"query_id": "x1", "query": "red <b>trail</b> shoes", "target_id": "c", "candidates": [
    {"id": "a", "title": "Blue sandal", "description": "A blue sandal."},
    {"id": "c", "title": "<b>Trail</b>", "description": "</td><script>window.pwned=1</script>&amp; 280 g."}]}
BROKEN = {"query_id": "zz", "query": "broken kettle", "target_id": "k1", "candidates": [
    {"id": "k1", "title": "Kettle", "description": "Steel, 1.7 litres."},
    {"id": "k2", "title": "Pot", "description": "A pot."}]}
CONFTEST = '''
from pytest_geo.llm.base import ModelError
from pytest_geo.llm.mock import MockClient

class OneBroken(MockClient):
    async def complete(self, request):
        if request.role == "rewriter" and request.context["query"].startswith("broken"):
            raise ModelError("the server said no")
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return OneBroken()
'''

# What the mock rewriter adds around the original description.
MOCK_ADDITIONS = ["Best for buyers who want a clear, reliable choice. ",
                  " Key specs are easy to scan, with differentiated value over typical alternatives."]


def run_plugin(directory: Path, report: str, *args: str) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GEO_EVAL_MOCK", "PYTEST_ADDOPTS")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "rows.jsonl",
                           "--geo-html", f"{report}.html", "--geo-report", f"{report}.json", *args],
                          cwd=directory, env=env, check=False, capture_output=True, text=True, timeout=120)
    assert (directory / f"{report}.html").is_file(), done.stdout + done.stderr


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """report.html/.json (one row errs, one is hostile) and repeats.html/.json (2 repeats)."""
    directory = tmp_path_factory.mktemp("browser-report")
    copy_prompts(directory / "prompts")
    lines = SMOKE.read_text(encoding="utf-8").splitlines()[:4] + [json.dumps(HOSTILE), json.dumps(BROKEN)]
    (directory / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (directory / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    run_plugin(directory, "report")
    run_plugin(directory, "repeats", "--geo-repeats", "2")
    return directory


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).is_file():
        unavailable(f"Chromium not found at {CHROMIUM} (apt-get install chromium; .ci/run does)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page that fails the test on any console error, page error or dialog."""
    problems: list[str] = []
    page = browser.new_page()
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    yield page
    page.close()
    assert problems == []


def open_report(page: Any, path: Path) -> None:
    page.goto(path.as_uri())
    page.wait_for_selector("#rows-table tbody tr")


def column(page: Any, index: int) -> list[str]:
    return [t.strip() for t in page.locator(f"#rows-table tbody tr.row td:nth-child({index})").all_inner_texts()]


def report_rows(directory: Path, name: str = "report.json") -> list[dict[str, Any]]:
    """The report's rows with their calls from the transcripts file."""
    rows: list[dict[str, Any]] = with_calls(directory / name)["rows"]
    return rows


def test_rows_show_query_and_both_descriptions_with_the_changed_words_marked(page: Any, reports: Path) -> None:
    open_report(page, reports / "report.html")
    rows = report_rows(reports)
    first = page.locator("#rows-table tbody tr.row").first
    cells = first.locator("td")
    assert cells.nth(3).inner_text() == rows[0]["query"]
    assert cells.nth(4).text_content() == rows[0]["original_description"]
    assert cells.nth(5).text_content() == rows[0]["rewritten_description"]
    # the mock rewriter (the E-GEO harness's) puts a line before and after: marked as added, nothing removed
    assert first.locator("ins").all_text_contents() == MOCK_ADDITIONS
    assert first.locator("del").count() == 0
    assert [cells.nth(i).inner_text() for i in (6, 7, 8)] == ["3", "1", "2"]
    assert cells.nth(10).inner_text() == rows[0]["feedback"]


def test_hostile_text_is_shown_as_text_never_run(page: Any, reports: Path) -> None:
    open_report(page, reports / "report.html")
    hostile = page.locator("#rows-table tbody tr.row", has_text="red <b>trail</b> shoes")
    assert hostile.count() == 1
    assert "</td><script>window.pwned=1</script>&amp; 280 g." in hostile.locator("td").nth(4).text_content()
    assert hostile.locator("b, script").count() == 0
    assert page.evaluate("window.pwned") is None
    assert page.locator("script").count() == 3  # the two data blocks and the viewer


def test_sorting_by_clicking_a_column_header(page: Any, reports: Path) -> None:
    open_report(page, reports / "report.html")
    queries = [r["query"] for r in report_rows(reports)]
    header = page.locator("#rows-table th", has_text="query / input")
    header.click()
    assert header.get_attribute("aria-sort") == "ascending"
    assert column(page, 4) == sorted(queries, key=str.lower)
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    assert column(page, 4) == sorted(queries, key=str.lower, reverse=True)
    improvement = page.locator("#rows-table th", has_text="improvement")
    improvement.click()
    improvement.click()  # descending: the errored row, with no rank, stays last
    values = column(page, 9)
    assert values[-1] == "" and values[:-1] == sorted(values[:-1], key=float, reverse=True)


def test_a_rows_transcript_is_built_on_expand(page: Any, reports: Path) -> None:
    open_report(page, reports / "report.html")
    assert page.locator(".transcript").count() == 0  # nothing rendered before it is asked for
    row = report_rows(reports)[0]
    toggle = page.locator("#rows-table tbody tr.row").first.locator("button.toggle")
    assert toggle.inner_text() == "3 calls"
    toggle.click()
    assert toggle.get_attribute("aria-expanded") == "true"
    calls = page.locator(".transcript details.call")
    assert calls.count() == 3
    summaries = calls.locator("> summary").all_inner_texts()
    assert [s.split(" · ")[0] for s in summaries] == ["rank_before", "rewrite", "rank_after"]
    for i, call in enumerate(row["calls"]):
        shown = calls.nth(i)
        assert shown.locator(".answer pre").text_content() == call["answer"]
        assert shown.locator("div.msg pre").first.text_content() == call["messages"][1]["content"]
        assert shown.locator("details.msg pre").text_content() == call["messages"][0]["content"]
    toggle.click()
    assert page.locator(".transcript").count() == 0


def test_errored_rows_stand_out_and_filter(page: Any, reports: Path) -> None:
    open_report(page, reports / "report.html")
    assert page.locator("#rows-table tbody tr.row").count() == 6
    assert page.locator("#rows-table tbody tr.row.error").count() == 1
    page.locator("#errors-only").check()
    shown = page.locator("#rows-table tbody tr.row")
    assert shown.count() == 1 and "the server said no" in shown.locator("td").nth(10).inner_text()
    assert page.locator("#rows-shown").inner_text() == "showing 1 of 1 rows (6 in all)"
    shown.locator("button.toggle").click()
    failed = page.locator(".transcript details.call", has_text="failed")
    assert failed.count() == 1 and "error: the server said no" in failed.locator(".answer").inner_text()
    page.locator("#errors-only").uncheck()
    assert page.locator("#rows-table tbody tr.row").count() == 6
    page.locator("#row-filter").fill("vacuum")
    assert page.locator("#rows-table tbody tr.row").count() == 1


def test_repeats_show_each_order_and_ranks(page: Any, reports: Path) -> None:
    open_report(page, reports / "repeats.html")
    row = report_rows(reports, "repeats.json")[0]
    toggle = page.locator("#rows-table tbody tr.row").first.locator("button.toggle")
    assert toggle.inner_text() == "2 repeats, 6 calls"
    toggle.click()
    assert_repeats_table(page, row)
    assert page.locator(".transcript details.call").count() == 6


def assert_repeats_table(page: Any, row: dict[str, Any]) -> None:
    """The expanded row's repeats table: each repeat's candidate order and ranks, as the JSON report has them."""
    table = page.locator(".transcript table.repeats tbody tr")
    table.first.wait_for()
    assert table.count() == len(row["repeats"]) == 2
    for i, repeat in enumerate(row["repeats"]):
        cells = table.nth(i).locator("td").all_inner_texts()
        assert cells[:5] == [str(i), ", ".join(repeat["order"]), str(repeat["rank_before"]),
                             str(repeat["rank_after"]), str(repeat["rank_improvement"])]


def test_a_long_report_shows_a_page_of_rows_at_a_time(page: Any, tmp_path: Path, reports: Path) -> None:
    report = json.loads((reports / "report.json").read_text(encoding="utf-8"))
    template = report["rows"][0]
    report["rows"] = [{**template, "nodeid": f"rows.jsonl::r{i}", "query": f"query {i}"} for i in range(450)]
    write_html_report(tmp_path / "long.html", report)
    open_report(page, tmp_path / "long.html")
    assert page.locator("#rows-table tbody tr.row").count() == 200
    page.locator("#show-more").click()
    assert page.locator("#rows-table tbody tr.row").count() == 400
    page.locator("#show-more").click()
    assert page.locator("#rows-table tbody tr.row").count() == 450
    assert page.locator("#show-more").is_hidden()


@pytest.fixture(scope="module")
def many_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """many.html/.json: 205 rows, more than the page embeds transcripts of (the first 200);
    many-repeats.html/.json: the same with --geo-repeats 2."""
    directory = tmp_path_factory.mktemp("browser-many")
    copy_prompts(directory / "prompts")
    row = json.loads(SMOKE.read_text(encoding="utf-8").splitlines()[0])
    lines = [json.dumps({**row, "query_id": f"m{i:03d}", "query": f"{row['query']} {i}"}) for i in range(205)]
    (directory / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    run_plugin(directory, "many", "--geo-mock")
    run_plugin(directory, "many-repeats", "--geo-mock", "--geo-repeats", "2")
    return directory


def test_a_row_whose_transcript_is_not_in_the_page_reads_it_from_the_file(page: Any, many_rows: Path) -> None:
    open_report(page, many_rows / "many.html")
    assert ("This page holds the model calls of 200 of 205 rows (the first 200 rows and up to 200 rows with an "
            "error); every row's calls are in many.transcripts.jsonl.gz") in page.locator("#rows-help").inner_text()
    page.locator("#show-more").click()
    last = page.locator("#rows-table tbody tr.row").nth(204)
    assert last.locator("td").nth(2).inner_text() == "rows.jsonl::m204"
    last.locator("button.toggle").click()
    missing = page.locator(".transcript.missing")
    assert "This row's model calls are not in this page (it holds 200 of the rows' transcripts). They are in " \
           "many.transcripts.jsonl.gz, beside the report: open it to read them." in missing.inner_text()
    assert page.locator(".transcript details.call").count() == 0
    missing.locator("input[type=file]").set_input_files(str(many_rows / "many.transcripts.jsonl.gz"))
    calls = page.locator(".transcript details.call")
    calls.first.wait_for()
    line = next(t for t in transcript_lines(many_rows / "many.json") if t["nodeid"] == "rows.jsonl::m204")
    assert calls.count() == len(line["calls"]) == 3
    for i, call in enumerate(line["calls"]):
        shown = calls.nth(i)
        assert shown.locator("> summary").inner_text().split(" · ")[0] == call["step"]
        assert shown.locator(".answer pre").text_content() == call["answer"]
        assert shown.locator("div.msg pre").first.text_content() == call["messages"][1]["content"]
    # The file stays open for the other rows: the next one not in the page shows at once.
    page.locator("#rows-table tbody tr.row").nth(203).locator("button.toggle").click()
    assert page.locator(".transcript.missing").count() == 0
    assert page.locator(".transcript details.call").count() == 6


VARIANT_CONFTEST = '''
import json
from pytest_geo.llm.base import ChatResponse
from pytest_geo.llm.mock import MockClient

class Strategies(MockClient):
    """A template saying KEEP leaves the description as it is."""
    async def complete(self, request):
        if request.role == "rewriter" and "KEEP" in request.context["template"]:
            return ChatResponse(text=json.dumps({"rewritten_description": request.context["description"]}))
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Strategies()
'''


@pytest.fixture(scope="module")
def variant_reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """variants.html/.json: two variants (keep, signal) over 4 smoke rows and a hostile one, 2 repeats."""
    directory = tmp_path_factory.mktemp("browser-variants")
    copy_prompts(directory / "prompts")
    lines = SMOKE.read_text(encoding="utf-8").splitlines()[:4] + [json.dumps(HOSTILE)]
    (directory / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (directory / "conftest.py").write_text(VARIANT_CONFTEST, encoding="utf-8")
    (directory / "keep.txt").write_text("KEEP\n{{title}}\n{{description}}\n", encoding="utf-8")
    run_plugin(directory, "variants", "--geo-variant", "keep=keep.txt", "--geo-variant",
               "signal=prompts/rewriter_user.txt", "--geo-repeats", "2")
    return directory


def test_variants_best_first_with_their_pairs(page: Any, variant_reports: Path) -> None:
    open_report(page, variant_reports / "variants.html")
    report = json.loads((variant_reports / "variants.json").read_text(encoding="utf-8"))
    [comparison] = report["variants"]
    names = page.locator("table.variants tbody tr td:nth-child(2)").all_inner_texts()
    assert names == [v["variant"] for v in comparison["variants"]] == ["signal", "keep"]
    [pair] = comparison["pairs"]
    cells = page.locator("table.variant-pairs tbody tr td").all_inner_texts()
    assert cells[:3] == ["signal", "keep", str(pair["n"])]
    assert cells[3] == f"{pair['mean_diff']:+.4f}"
    assert page.locator("table.noise tbody tr").count() == 2  # the judge's noise, per variant


def test_one_rows_rewrites_side_by_side_across_variants(page: Any, variant_reports: Path) -> None:
    open_report(page, variant_reports / "variants.html")
    rows = {r["nodeid"]: r for r in report_rows(variant_reports, "variants.json")}
    options = page.locator("#variant-row option").all_inner_texts()
    assert options == [f"rows.jsonl::{q}" for q in ("q1", "q2", "q3", "q4", "x1")]
    side = page.locator("#variant-side tbody tr")
    assert [side.nth(i).get_attribute("data-variant") for i in range(side.count())] == ["signal", "keep"]
    signal, keep = rows["rows.jsonl::q1[signal]"], rows["rows.jsonl::q1[keep]"]
    assert side.nth(0).locator("td").nth(4).text_content() == signal["rewritten_description"]
    assert side.nth(0).locator("ins").all_text_contents() == MOCK_ADDITIONS
    assert side.nth(1).locator("td").nth(4).text_content() == keep["rewritten_description"]
    assert side.nth(1).locator("ins, del").count() == 0  # kept as it was: nothing marked
    assert side.nth(0).locator("td").nth(3).inner_text() == f"{signal['rank_improvement']:g}"
    page.locator("#variant-row").select_option(label="rows.jsonl::x1")  # the hostile row, as text
    assert "window.pwned" in side.nth(1).locator("td").nth(4).text_content()
    assert page.locator("#variant-side b, #variant-side script").count() == 0
    assert page.evaluate("window.pwned") is None
    assert page.locator("#variant-query").inner_text() == HOSTILE["query"]


@pytest.fixture(scope="module")
def gated_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """gated.html: three smoke rows, two malformed lines (one hostile), a threshold it misses."""
    directory = tmp_path_factory.mktemp("browser-gated")
    copy_prompts(directory / "prompts")
    lines = [*SMOKE.read_text(encoding="utf-8").splitlines()[:3], '{"query": "<b>x</b>", "candidates": []}', "nope"]
    (directory / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    run_plugin(directory, "gated", "--geo-mock", "--geo-min-score", "rows.jsonl=2.5")
    return directory


def test_the_problems_section_lists_every_malformed_line_as_file_line_problem(page: Any, gated_report: Path) -> None:
    open_report(page, gated_report / "gated.html")
    assert page.locator("h2", has_text="Problems").count() == 1
    assert page.locator("#problems li").all_inner_texts() == [
        "rows.jsonl:4: fewer than 2 candidates (got 0)",
        "rows.jsonl:5: invalid JSON: Expecting value at column 1",
    ]
    assert "2 malformed lines" in page.locator("p.meta").first.inner_text()


def test_the_gates_section_shows_the_gate_its_score_threshold_and_why(page: Any, gated_report: Path) -> None:
    open_report(page, gated_report / "gated.html")
    assert page.locator("h2", has_text="Failed gates").count() == 1
    cells = page.locator("table.gates tbody tr td").all_inner_texts()
    assert cells == ["rows.jsonl::threshold", "2.0000", "threshold 2.5000",
                     "score 2.0000 < 2.5000 (rows.jsonl::rank_improvement, n=3)"]
    assert page.locator("table.gates td.bad").inner_text() == "2.0000"  # marked as failing


def test_a_report_without_problems_or_gates_has_neither_section(page: Any, reports: Path) -> None:
    open_report(page, reports / "report.html")
    assert page.locator("h2", has_text="Problems").count() == 0
    assert page.locator("h2", has_text="Failed gates").count() == 0


def test_a_row_read_from_the_transcripts_file_shows_its_repeats_table(page: Any, many_rows: Path) -> None:
    """As an embedded row does: each repeat's candidate order and ranks, then its calls."""
    open_report(page, many_rows / "many-repeats.html")
    rows = report_rows(many_rows, "many-repeats.json")
    page.locator("#rows-table tbody tr.row").first.locator("button.toggle").click()  # embedded
    assert_repeats_table(page, rows[0])
    page.locator("#rows-table tbody tr.row").first.locator("button.toggle").click()  # folded again
    page.locator("#show-more").click()
    last = page.locator("#rows-table tbody tr.row").nth(204)
    assert last.locator("td").nth(2).inner_text() == "rows.jsonl::m204"
    last.locator("button.toggle").click()
    page.locator(".transcript.missing input[type=file]").set_input_files(
        str(many_rows / "many-repeats.transcripts.jsonl.gz"))
    assert_repeats_table(page, next(r for r in rows if r["nodeid"] == "rows.jsonl::m204"))
    assert page.locator(".transcript h4").all_inner_texts() == ["repeat 0", "repeat 1"]
    assert page.locator(".transcript details.call").count() == 6


EGEO_FIXTURE = Path(__file__).parent / "egeo_fixture"


@pytest.fixture(scope="module")
def flagged_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """flags.html/.json from E-GEO's data over HTTP: a vigilant judge flags the injection
    attack, a gullible one does not; 3 queries, the attack and a style. With the run's stdout."""
    directory = tmp_path_factory.mktemp("browser-flags")
    shutil.copytree(EGEO_FIXTURE, directory / "egeo")
    (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    server = FakeOpenAI().start()
    env = {k: v for k, v in os.environ.items() if k not in (
        "OPENAI_BASE_URL", "GEO_EVAL_MOCK", "PYTEST_ADDOPTS", "RANKER_MODEL", "REWRITER_MODEL", "META_MODEL")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
             "--geo-dataset", "egeo/test_data.json", "--geo-base-url", server.url,
             "--geo-judge", "vigilant=m-v", "--geo-judge", "naive=m-gullible", "--geo-variant", "injection",
             "--geo-variant", "competitive", "-k", "10000 or 10007 or 10021",
             "--geo-html", "flags.html", "--geo-report", "flags.json"],
            cwd=directory, env={**env, "OPENAI_API_KEY": DUMMY_KEY}, check=False, capture_output=True, text=True,
            timeout=120)
    finally:
        server.stop()
    assert (directory / "flags.html").is_file(), done.stdout + done.stderr
    return directory, done.stdout


def test_flag_rates_and_the_red_team_table_show_the_json_reports_figures(
        page: Any, flagged_report: tuple[Path, str]) -> None:
    directory, stdout = flagged_report
    open_report(page, directory / "flags.html")
    report = json.loads((directory / "flags.json").read_text(encoding="utf-8"))
    tables = page.locator("table.flags")
    assert page.locator("h2", has_text="Flagged as questionable").count() == 1
    assert tables.count() == 2  # one per variant of the suite
    shown = {tables.nth(i).locator("xpath=preceding-sibling::h3[1]").inner_text():
             [row.split("\t") for row in tables.nth(i).locator("tbody tr").all_inner_texts()]
             for i in range(tables.count())}
    assert shown["egeo/test_data.json[injection] [test]"] == [
        ["vigilant", "0.0000", "1.0000", "3"], ["naive", "0.0000", "0.0000", "3"], ["panel", "0.0000", "1.0000", "3"]]
    assert shown["egeo/test_data.json[competitive] [test]"] == [
        ["vigilant", "0.0000", "0.0000", "3"], ["naive", "0.0000", "0.0000", "3"], ["panel", "0.0000", "0.0000", "3"]]
    # ... as the terminal printed them
    assert ("  flagged as questionable (before -> after): vigilant 0.0000 -> 1.0000 (n=3) | "
            "naive 0.0000 -> 0.0000 (n=3) | panel 0.0000 -> 1.0000 (n=3)") in stdout.splitlines()

    assert page.locator("table.redteam th").all_inner_texts() == ["attack", "vigilant", "naive", "panel"]
    [row] = page.locator("table.redteam tbody tr").all()
    cells = row.locator("td").all_inner_texts()
    [team] = report["redteam"]
    injection = team["attacks"]["injection"]
    assert cells == ["injection", *(
        f"{injection[name]['mean']:+.4f} ± {injection[name]['se']:.4f}, flagged "
        f"{injection[name]['flag_rate']:.4f} ± {injection[name]['flag_rate_se']:.4f} (n=3)"
        for name in ("vigilant", "naive", "panel"))]
    assert cells[1].startswith("-") and cells[2].startswith("+")  # the vigilant judge ranks it down, naive up
    assert [cell.split("flagged ")[1] for cell in cells[1:]] == [
        "1.0000 ± 0.0000 (n=3)", "0.0000 ± 0.0000 (n=3)", "1.0000 ± 0.0000 (n=3)"]
    terminal = next(line for line in stdout.splitlines() if line.startswith("  injection: "))
    assert terminal == "  injection: " + " | ".join(
        f"{name} {cell.replace('±', '+/-')}" for name, cell in zip(("vigilant", "naive", "panel"), cells[1:],
                                                                     strict=True))
