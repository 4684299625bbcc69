"""--geo-variant: rewriting strategies compared in one run (items per row and variant,
rank_before shared, the paired comparison), and the judge's noise floor with repeats."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from test_reporting import POSITION_CONFTEST, with_calls  # a judge with pure position bias

from conftest import PROMPTS, SMOKE, GeoProject, copy_prompts, without_run_dependent
from pytest_geo.data.dataset import GeoRow, iter_dataset
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.mock import MockClient
from pytest_geo.llm.stack import build_stack
from pytest_geo.settings import Settings

# The mock rewriter adds the signal its ranker rewards; a template saying KEEP makes it
# return the description unchanged: one strategy moves targets, the other cannot.
KEEP_CONFTEST = '''
import json
from pytest_geo.llm.base import ChatResponse
from pytest_geo.llm.mock import MockClient

CALLS = []

class Strategies(MockClient):
    async def complete(self, request):
        CALLS.append(request.role)
        if request.role == "rewriter" and "KEEP" in request.context["template"]:
            return ChatResponse(text=json.dumps({"rewritten_description": request.context["description"]}))
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Strategies()

def pytest_sessionfinish(session):
    (session.config.rootpath / "calls.json").write_text(json.dumps(CALLS))
'''

SIGNAL_TEMPLATE = "Query: {{query}}\nTitle: {{title}}\nOriginal description: {{description}}\nRewrite it.\n"
KEEP_TEMPLATE = "KEEP it as it is.\nTitle: {{title}}\nOriginal description: {{description}}\n"

class _Keep(MockClient):
    """KEEP_CONFTEST's client, for tests that build the engine directly."""

    def __init__(self) -> None:
        self.roles: list[str] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.roles.append(request.role)
        if request.role == "rewriter" and "KEEP" in request.context["template"]:
            return ChatResponse(text=json.dumps({"rewritten_description": request.context["description"]}))
        return await super().complete(request)


def read(pytester: pytest.Pytester, name: str) -> dict[str, Any]:
    """The JSON report, checked against the shipped schema."""
    report: dict[str, Any] = json.loads((pytester.path / name).read_text(encoding="utf-8"))
    schema = json.loads(resources.files("pytest_geo").joinpath("schemas/report.schema.json").read_text("utf-8"))
    jsonschema.validate(report, schema)
    return report


@pytest.fixture
def strategies(geo_project: pytest.Pytester) -> pytest.Pytester:
    geo_project.makeconftest(KEEP_CONFTEST)
    (geo_project.path / "signal.txt").write_text(SIGNAL_TEMPLATE, encoding="utf-8")
    (geo_project.path / "keep.txt").write_text(KEEP_TEMPLATE, encoding="utf-8")
    return geo_project


VARIANTS = ("--geo-variant", "keep=keep.txt", "--geo-variant", "signal=signal.txt")


@pytest.mark.plugin
def test_two_variants_compared_row_by_row_best_first(strategies: pytest.Pytester) -> None:
    result = strategies.runpytest("data/smoke.jsonl", *VARIANTS, "--geo-report", "r.json", "-v")
    result.assert_outcomes(passed=16)
    result.stdout.fnmatch_lines(["*data/smoke.jsonl::q1?keep? PASSED*", "*data/smoke.jsonl::q1?signal? PASSED*"])
    report = read(strategies, "r.json")
    scores = {s["suite"]: s["score"] for s in report["suites"]}
    assert scores == {"data/smoke.jsonl[keep]": 0.0, "data/smoke.jsonl[signal]": 2.0}
    [comparison] = report["variants"]
    assert comparison["suite"] == "data/smoke.jsonl"
    assert [v["variant"] for v in comparison["variants"]] == ["signal", "keep"]  # best first
    [pair] = comparison["pairs"]
    assert (pair["better"], pair["worse"], pair["n"]) == ("signal", "keep", 8)
    assert pair["mean_diff"] == pytest.approx(2.0) and pair["improved"] == 8 and pair["worsened"] == 0
    assert pair["sign_test_p"] == pytest.approx(2 / 2**8) and pair["sign_test_p"] < 0.05  # exact, two-sided
    assert pair["ci95"] == pytest.approx([2.0, 2.0])
    rows = {r["nodeid"]: r for r in report["rows"]}
    assert rows["data/smoke.jsonl::q1[keep]"]["variant"] == "keep"
    assert rows["data/smoke.jsonl::q1[keep]"]["variant_of"] == "data/smoke.jsonl"
    result.stdout.fnmatch_lines([
        "variants of data/smoke.jsonl, best first: signal 2.0000 > keep 0.0000",
        "  signal - keep: n=8 mean_diff=+2.0000 stderr=0.0000 ci95=[[]2.0000, 2.0000[]] sign_test_p=0.0078 "
        "(8 better, 0 worse, 0 tied)",
    ])
    # rank_before once per row, then a rewrite and a rank_after per variant: 1 + 2V.
    calls = json.loads((strategies.path / "calls.json").read_text())
    assert calls.count("ranker") == 8 * (1 + 2) and calls.count("rewriter") == 8 * 2


@pytest.mark.plugin
def test_pairs_leave_out_rows_with_an_error_in_either_variant(strategies: pytest.Pytester) -> None:
    broken = "Title: {{title}}\nOriginal description: {{description}}\n"
    conftest = KEEP_CONFTEST.replace(
        "        return await super().complete(request)\n\ndef",
        "        if request.role == 'rewriter' and 'waterproof' in request.context['query'] "
        "and 'Rewrite' in request.context['template']:\n"
        "            raise RuntimeError('rewriter down')\n"
        "        return await super().complete(request)\n\ndef")
    strategies.makeconftest(conftest)
    (strategies.path / "other.txt").write_text(broken, encoding="utf-8")
    result = strategies.runpytest("data/smoke.jsonl", *VARIANTS, "--geo-variant", "other=other.txt",
                                  "--geo-report", "r.json")
    result.assert_outcomes(passed=23, failed=1)  # q3 [signal]: its rewriter failed
    pairs = {(p["better"], p["worse"]): p for p in read(strategies, "r.json")["variants"][0]["pairs"]}
    assert pairs[("other", "signal")]["n"] == 7 and pairs[("other", "signal")]["excluded"] == 1
    assert pairs[("signal", "keep")]["n"] == 7 and pairs[("signal", "keep")]["excluded"] == 1
    assert pairs[("other", "keep")]["n"] == 8 and pairs[("other", "keep")]["excluded"] == 0
    assert len(pairs) == 3  # every pair of three variants


@pytest.mark.plugin
def test_variant_items_select_like_any_test(strategies: pytest.Pytester) -> None:
    result = strategies.runpytest("data/smoke.jsonl", *VARIANTS, "-k", "signal and (q1 or q2)", "--geo-report",
                                  "r.json")
    result.assert_outcomes(passed=2)
    report = read(strategies, "r.json")
    assert "variants" not in report  # one variant ran: nothing to compare
    assert [r["nodeid"] for r in report["rows"]] == ["data/smoke.jsonl::q1[signal]", "data/smoke.jsonl::q2[signal]"]
    calls = json.loads((strategies.path / "calls.json").read_text())
    assert calls.count("ranker") == 2 * 2  # deselected variants cost nothing


@pytest.mark.plugin
def test_thresholds_apply_per_variant(strategies: pytest.Pytester) -> None:
    result = strategies.runpytest("data/smoke.jsonl", *VARIANTS, "--geo-min-score", "data/smoke.jsonl[keep]=0.5",
                                  "--geo-min-score", "data/smoke.jsonl[signal]=1.5")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["FAILED data/smoke.jsonl[[]keep[]]::threshold - score 0.0000 < 0.5000*"])
    assert "FAILED data/smoke.jsonl[signal]::threshold" not in result.stdout.str()
    strategies.makefile(".geo.yaml", rewriter="suite: rewriter\ndata:\n  products: data/smoke.jsonl\n"
                                              "metric:\n  builtin: rank_improvement\n  dataset: products\n"
                                              "threshold: 1.0\n")
    result = strategies.runpytest("rewriter.geo.yaml", *VARIANTS, "-v")
    result.stdout.fnmatch_lines(["*rewriter.geo.yaml::rewriter::train[[]q1[]][[]keep[]] PASSED*"])
    result.stdout.fnmatch_lines(["FAILED rewriter[[]keep[]]::threshold - score 0.0000 < 1.0000*",  # short summary
                                 "variants of rewriter, best first: signal 2.0000 > keep 0.0000"])  # then ours
    assert "FAILED rewriter[signal]::threshold" not in result.stdout.str()


@pytest.mark.plugin
def test_baseline_matches_variant_rows_by_node_id(strategies: pytest.Pytester) -> None:
    strategies.runpytest("data/smoke.jsonl", *VARIANTS, "--geo-report", "before.json").assert_outcomes(passed=16)
    result = strategies.runpytest("data/smoke.jsonl", *VARIANTS, "--geo-baseline", "before.json",
                                  "--geo-report", "after.json")
    result.assert_outcomes(passed=16)
    compared = {c["suite"]: c["paired"]["n"] for c in read(strategies, "after.json")["baseline"]["suites"]}
    assert compared == {"data/smoke.jsonl[keep]": 8, "data/smoke.jsonl[signal]": 8}


@pytest.mark.plugin
def test_variants_from_the_ini_and_outside_a_project_with_prompts(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """No prompts/ of its own (the packaged prompts), variants named in the ini relative
    to the rootdir, run from a subdirectory."""
    monkeypatch.delenv("GEO_EVAL_MOCK", raising=False)
    shutil.copy(SMOKE, pytester.path / "rows.jsonl")
    (pytester.path / "strategies").mkdir()
    (pytester.path / "strategies" / "keep.txt").write_text(KEEP_TEMPLATE, encoding="utf-8")
    (pytester.path / "strategies" / "signal.txt").write_text(SIGNAL_TEMPLATE, encoding="utf-8")
    pytester.makeini("[pytest]\ngeo_variants =\n    keep = strategies/keep.txt\n    signal=strategies/signal.txt\n")
    pytester.makeconftest(KEEP_CONFTEST)
    (pytester.path / "sub").mkdir()
    monkeypatch.chdir(pytester.path / "sub")
    result = pytester.runpytest("../rows.jsonl", "--geo-report", "r.json")
    result.assert_outcomes(passed=16)
    report = json.loads((pytester.path / "sub" / "r.json").read_text())
    assert report["metadata"]["prompts_dir"].endswith("pytest_geo/prompts")
    assert [v["variant"] for v in report["variants"][0]["variants"]] == ["signal", "keep"]
    # The command line replaces the ini's list.
    result = pytester.runpytest("../rows.jsonl", "--geo-variant", "only=../strategies/signal.txt")
    result.assert_outcomes(passed=8)


@pytest.mark.plugin
def test_a_directory_variant_overrides_the_rewriters_prompts_only(strategies: pytest.Pytester) -> None:
    variant = copy_prompts(strategies.path / "v2")  # egeo init's layout, then an edit
    (variant / "rewriter_system.txt").write_text("You are the v2 rewriter. Answer JSON.\n", encoding="utf-8")
    result = strategies.runpytest("data/smoke.jsonl", "--geo-variant", "v2=v2", "--geo-variant", "keep=keep.txt",
                                  "--geo-report", "r.json")
    result.assert_outcomes(passed=16)
    rows = {r["nodeid"]: r for r in with_calls(strategies.path / "r.json")["rows"]}
    system = {c["step"]: c["messages"][0]["content"] for c in rows["data/smoke.jsonl::q1[v2]"]["calls"]}
    assert system["rewrite"] == "You are the v2 rewriter. Answer JSON.\n"
    assert system["rank_before"] == (PROMPTS / "ranker_system.txt").read_text(encoding="utf-8")
    keep_calls = rows["data/smoke.jsonl::q1[keep]"]["calls"]
    assert [c["step"] for c in keep_calls] == ["rank_before", "rewrite", "rank_after"]  # the shared call heads both
    assert keep_calls[0] == rows["data/smoke.jsonl::q1[v2]"]["calls"][0]
    assert "KEEP" in keep_calls[1]["messages"][1]["content"]


@pytest.mark.plugin
@pytest.mark.parametrize(
    ("setup", "args", "expected"),
    [
        ({"bad.txt": "{{title}} {{description}} {{price}}"}, ("--geo-variant", "bad=bad.txt"),
         "ERROR: variant bad: */bad.txt: unknown placeholder {{price}}*"),
        ({"bad.txt": "{{title}} only"}, ("--geo-variant", "bad=bad.txt"),
         "ERROR: variant bad: */bad.txt: missing placeholder {{description}}*"),
        ({}, ("--geo-variant", "gone=missing.txt"),
         "ERROR: variant gone: */missing.txt: no such template file or prompts directory"),
        ({"d/ranker_user.txt": "Rank {{candidates}} for {{query}} differently"}, ("--geo-variant", "d=d"),
         "ERROR: variant d: */d: has neither rewriter_user.txt nor rewriter_system.txt"),
        ({"d/rewriter_user.txt": "{{title}} {{description}}", "d/ranker_user.txt": "Rank {{candidates}} {{query}}"},
         ("--geo-variant", "d=d"),
         "ERROR: variant d: */d/ranker_user.txt: differs from the run's */prompts/ranker_user.txt; a variant may "
         "change the rewriter's prompts only, never the ranker's (the judge)"),
        ({"a.txt": "{{title}} {{description}}"}, ("--geo-variant", "a=a.txt", "--geo-variant", "a=a.txt"),
         "ERROR: --geo-variant: variant 'a' is given twice"),
        ({}, ("--geo-variant", "no-path"), "*--geo-variant: 'no-path' is not NAME=PATH, nor the name of a packaged style (authoritative, *"),
        ({}, ("--geo-variant", "a b=x.txt"), "*variant name 'a b' may use only letters, digits*"),
    ],
)
def test_a_broken_variant_is_a_usage_error_naming_the_file(
    strategies: pytest.Pytester, setup: dict[str, str], args: tuple[str, ...], expected: str
) -> None:
    for name, text in setup.items():
        (strategies.path / name).parent.mkdir(exist_ok=True)
        (strategies.path / name).write_text(text, encoding="utf-8")
    result = strategies.runpytest("data/smoke.jsonl", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert not (strategies.path / "calls.json").exists() or json.loads((strategies.path / "calls.json").read_text()) == []


@pytest.mark.plugin
def test_a_bad_ini_variant_line_is_a_usage_error(strategies: pytest.Pytester) -> None:
    strategies.makeini("[pytest]\ngeo_variants =\n    keep = keep.txt\n    nonsense\n")
    result = strategies.runpytest("data/smoke.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option geo_variants: 'nonsense' is not NAME=PATH, nor the name of a packaged style*"])


@pytest.mark.plugin
def test_calls_per_row_are_one_plus_two_per_variant_over_http(served_project: GeoProject) -> None:
    """The real openai SDK against the loopback server, no cache: its request count."""
    served_project.dataset(5)
    user = (PROMPTS / "rewriter_user.txt").read_text(encoding="utf-8")
    for i in range(3):
        (served_project.pytester.path / f"v{i}.txt").write_text(f"Strategy {i}.\n{user}", encoding="utf-8")
    server = served_project.server
    for variants, repeats in ((1, 1), (3, 1), (3, 2)):
        server.reset()
        flags = [a for i in range(variants) for a in ("--geo-variant", f"v{i}=v{i}.txt")]
        result = served_project.run("rows.jsonl", "--geo-no-cache", "--geo-repeats", str(repeats), *flags)
        result.assert_outcomes(passed=5 * variants)
        assert len(server.requests) == 5 * repeats * (1 + 2 * variants), (variants, repeats)
    server.reset()
    served_project.run("rows.jsonl", "--geo-no-cache").assert_outcomes(passed=5)
    assert len(server.requests) == 5 * 3  # without variants: as before


@pytest.mark.plugin
def test_repeats_share_each_orders_across_variants(strategies: pytest.Pytester) -> None:
    # The position-biased judge, and the KEEP strategy on top of it.
    strategies.makeconftest(POSITION_CONFTEST.replace("return PositionBiased()", "return Strategies()")
                            + KEEP_CONFTEST.split("CALLS = []")[1].split("def pytest_geo_make_client")[0]
                            .replace("(MockClient)", "(PositionBiased)").replace("CALLS.append(request.role)", "")
                            + "from pytest_geo.llm.base import ChatResponse\n")
    result = strategies.runpytest("data/smoke.jsonl", *VARIANTS, "--geo-repeats", "3", "--geo-report", "r.json")
    result.assert_outcomes(passed=16)
    by_row: dict[str, dict[str, Any]] = defaultdict(dict)
    for row in read(strategies, "r.json")["rows"]:
        by_row[row["nodeid"].removesuffix(f"[{row['variant']}]")][row["variant"]] = row
    assert len(by_row) == 8
    orders_seen = set()
    for variants in by_row.values():
        keep, signal = variants["keep"]["repeats"], variants["signal"]["repeats"]
        assert [r["order"] for r in keep] == [r["order"] for r in signal]
        assert [r["rank_before"] for r in keep] == [r["rank_before"] for r in signal]  # one shared judgement
        assert all(r["rank_after"] == r["rank_before"] for r in keep)  # unchanged text: the same order, same rank
        assert all(r["rank_after"] == 1 for r in signal)
        orders_seen.update(tuple(r["order"]) for r in keep)
    assert len(orders_seen) > 8  # orders differ per row and repeat


@pytest.mark.plugin
def test_judge_noise_floor_beside_the_gain(geo_project: pytest.Pytester) -> None:
    geo_project.makeconftest(POSITION_CONFTEST)
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-repeats", "4", "--geo-report", "r.json")
    result.assert_outcomes(passed=8)
    report = read(geo_project, "r.json")
    noises, moved, within = [], 0, 0
    for row in report["rows"]:
        ranks = [r["order"].index(row["target_id"]) + 1 for r in row["repeats"]]
        assert [r["rank_before"] for r in row["repeats"]] == ranks  # the judge saw only the order
        mean = sum(ranks) / len(ranks)
        noise = sum(abs(r - mean) for r in ranks) / len(ranks)
        assert row["judge_noise"] == pytest.approx(noise)
        noises.append(noise)
        moved += row["rank_improvement"] != 0
        within += 0 < abs(row["rank_improvement"]) <= noise
    [suite] = report["suites"]
    floor = sum(noises) / len(noises)
    assert floor > 0 and suite["judge_noise"] == pytest.approx(floor)
    assert (suite["rows_moved"], suite["rows_within_noise"]) == (moved, within)
    assert 0 < within < moved  # this data has both kinds, so the count is tested, not just 0
    result.stdout.fnmatch_lines([
        f"data/smoke.jsonl: n=8 avg_rank_improvement={suite['score']:.4f} (judge noise {floor:.4f}) win_rate=*",
        f"  judge noise={floor:.4f} over 8 rows *; {within} of {moved} moved rows within their own noise",
    ])
    single = geo_project.runpytest("data/smoke.jsonl", "--geo-report", "one.json")
    assert "judge noise" not in single.stdout.str()  # one order: no noise to measure
    assert "judge_noise" not in read(geo_project, "one.json")["suites"][0]


def _stable(report: dict[str, Any]) -> dict[str, Any]:
    stable = {key: report[key] for key in ("suites", "rows", "variants", "geo")}
    stable["rows"] = without_run_dependent(stable["rows"])
    return stable


@pytest.mark.xdist
def test_xdist_gives_the_same_report(strategies: pytest.Pytester) -> None:
    args = ("data/smoke.jsonl", *VARIANTS, "--geo-repeats", "2")
    strategies.runpytest(*args, "-p", "no:xdist", "--geo-report", "one.json").assert_outcomes(passed=16)
    result = strategies.runpytest(*args, "-n", "2", "--geo-report", "two.json")
    result.assert_outcomes(passed=16)
    assert _stable(read(strategies, "two.json")) == _stable(read(strategies, "one.json"))
    result.stdout.fnmatch_lines(["variants of data/smoke.jsonl, best first: signal 2.0000 > keep 0.0000"])


def _variant_rows(tmp_path: Path, variants: list[str]) -> tuple[Settings, list[GeoRow]]:
    (tmp_path / "keep.txt").write_text(KEEP_TEMPLATE, encoding="utf-8")
    (tmp_path / "signal.txt").write_text(SIGNAL_TEMPLATE, encoding="utf-8")
    settings = Settings(prompts_dir=PROMPTS, mock=True, variants={v: tmp_path / f"{v}.txt" for v in variants})
    rows = [r for r in iter_dataset(SMOKE, 7) if isinstance(r, GeoRow)]
    return settings, [replace(r, variant=v) for r in rows for v in variants]


@pytest.mark.unit
def test_shared_ranks_are_dropped_once_every_variant_ended(tmp_path: Path) -> None:
    settings, rows = _variant_rows(tmp_path, ["keep", "signal"])
    client = _Keep()
    session = GeoSession(settings, build_stack(settings, client))
    try:
        outcomes = session.evaluate(rows)
    finally:
        session.close()
    # nothing kept after the run: read once the runner's thread ended, since the last
    # variant's done callback runs there just after its result wakes this thread
    assert len(session.shared_ranks) == 0
    assert client.roles.count("ranker") == 8 * 3
    assert [o.rank_improvement for o in outcomes] == [0, 2] * 8


@pytest.mark.unit
def test_rank_before_is_shared_when_variants_start_apart(tmp_path: Path) -> None:
    """Concurrency 1: a row's second variant starts only after the first ended (as when
    other rows sit between them); it still reuses the first one's rank_before."""
    settings, rows = _variant_rows(tmp_path, ["keep", "signal"])
    settings.concurrency = 1
    client = _Keep()
    session = GeoSession(settings, build_stack(settings, client))
    try:
        session.evaluate(rows[::2] + rows[1::2])  # every row's keep, then every row's signal
    finally:
        session.close()
    assert len(session.shared_ranks) == 0  # read after the runner's thread ended, as above
    assert client.roles.count("ranker") == 8 * 3
