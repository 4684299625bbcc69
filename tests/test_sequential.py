"""--geo-sequential: the anytime-valid test (its error rate by simulation, its savings),
the rows it stops, and what the reports say."""

from __future__ import annotations

import json
import math
import random
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fake_openai import FakeOpenAI

from conftest import PROMPTS, GeoProject, copy_prompts, egeo_workdir, prices_ini
from pytest_geo.cli import main
from pytest_geo.report import progress
from pytest_geo.report.sequential import BETTER, EQUIVALENT, WORSE, ConfidenceSequence
from pytest_geo.report.stopping import run_order, simulate, simulated_differences

COMPARISONS = 2000
POOL = 200


@pytest.mark.unit
def test_no_true_difference_is_decided_wrongly_at_most_alpha_of_the_time() -> None:
    """2,000 seeded comparisons of 200 rows with no true difference, read every 10 rows
    (20 looks: a fixed-sample test read that often would err far more than 5%).

    Tolerance: if the true error rate were exactly 0.05, the count of wrong decisions
    would be Binomial(2000, 0.05): mean 100, sd sqrt(2000 * 0.05 * 0.95) = 9.7. Allowing
    3 sd (129) fails a correct method once in ~700 runs; the seed is fixed, so this run
    either always passes or always fails."""
    rng = random.Random(2025)
    wrong = 0
    for _ in range(COMPARISONS):
        decision, _ = simulate(simulated_differences(rng, POOL, mean=0.0, spread=2.0), bound=9, alpha=0.05)
        wrong += decision in (BETTER, WORSE)
    limit = COMPARISONS * 0.05 + 3 * math.sqrt(COMPARISONS * 0.05 * 0.95)
    assert wrong <= limit, f"{wrong} wrong decisions of {COMPARISONS}, more than {limit:.0f}"
    assert wrong > 0  # the test does bet: it is not trivially never deciding


@pytest.mark.unit
def test_a_half_rank_difference_is_decided_within_30_percent_of_a_1000_row_pool() -> None:
    """Differences of mean 0.5 rank, spread 2 ranks (40% ties) over 10 candidates."""
    rng = random.Random(7)
    used = []
    for _ in range(40):
        decision, rows = simulate(simulated_differences(rng, 1000, mean=0.5, spread=2.0), bound=9, round_size=16)
        assert decision == BETTER
        used.append(rows)
    assert sum(used) / len(used) <= 300


@pytest.mark.unit
def test_equivalence_is_decided_once_the_interval_lies_within_the_margin() -> None:
    rng = random.Random(3)
    decision, rows = simulate(simulated_differences(rng, 1000, mean=0.0, spread=1.0), bound=9, margin=0.5)
    assert decision == EQUIVALENT and rows < 1000
    # A true difference of 1 rank is never equivalent within 0.5: it is decided better.
    decision, _ = simulate(simulated_differences(rng, 1000, mean=1.0, spread=1.0), bound=9, margin=0.5)
    assert decision == BETTER


@pytest.mark.unit
def test_the_interval_narrows_round_by_round_and_agrees_with_the_decision() -> None:
    sequence = ConfidenceSequence(bound=9, horizon=50)
    widths = []
    for _ in range(5):
        for d in [1, 2, 0, 1, 3, 1, 0, 2, 1, 1]:
            sequence.add(d)
        decision = sequence.read()
        widths.append(sequence.high - sequence.low)
        assert (decision == BETTER) == (sequence.low > 0)
    assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]
    assert sequence.decision == BETTER and 0 < sequence.low < 1.3 < sequence.high < 3


@pytest.mark.unit
def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ConfidenceSequence(bound=0)


# --- end to end, against the fake OpenAI server ----------------------------------------

SIGNAL = "Query: {{query}}\nTitle: {{title}}\nOriginal description: {{description}}\nRewrite it.\n"
KEEP = "KEEP it as it is.\nTitle: {{title}}\nOriginal description: {{description}}\n"


def strategies(project: GeoProject, rows: int) -> list[str]:
    project.dataset(rows)
    (project.pytester.path / "signal.txt").write_text(SIGNAL, encoding="utf-8")
    (project.pytester.path / "keep.txt").write_text(KEEP, encoding="utf-8")
    return ["rows.jsonl", "--geo-variant", "signal=signal.txt", "--geo-variant", "keep=keep.txt", "--geo-no-cache"]


def report(project: GeoProject, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project.pytester.path / name).read_text(encoding="utf-8"))
    schema = json.loads(resources.files("pytest_geo").joinpath("schemas/report.schema.json").read_text("utf-8"))
    jsonschema.validate(data, schema)
    return data


@pytest.mark.plugin
def test_a_sequential_variant_run_stops_early_with_the_full_runs_decision(served_project: GeoProject) -> None:
    args = strategies(served_project.priced(), 100)  # priced: the dollars not spent
    full = served_project.run(*args, "--geo-report", "full.json")
    full.assert_outcomes(passed=200)
    [pair] = report(served_project, "full.json")["variants"][0]["pairs"]
    assert (pair["better"], pair["worse"], pair["sign_test_p"] < 0.05) == ("signal", "keep", True)
    served_project.server.reset()

    result = served_project.run(*args, "--geo-sequential", "--geo-report", "seq.json", "--geo-html", "seq.html",
                                "--geo-concurrency", "4", "-rs")
    # Rows of 3 candidates, target last: signal moves it up 2 places, keep none. Rounds of
    # 10 rows; the test decides after the first round.
    result.assert_outcomes(passed=20, skipped=180)
    result.stdout.fnmatch_lines([
        "*SKIPPED [[]180[]] rows.jsonl: not needed: the comparison was decided after 10 rows",
        "sequential: variants of rows.jsonl [[]train[]]: decided after 10 of 100 rows (10 ran, 0 with an error "
        "left out); $0.0* not spent",
        "  signal better than keep after 10 rows: mean_diff=+2.0000 over 10 rows, anytime-valid interval [[]+*, "
        "+2.0000[]]",
        "  guarantee: with probability at least 95%, the interval held the true mean difference after every "
        "round, so stopping as soon as it was decided keeps the chance of a wrong decision at or below 5%",
    ])
    assert "partial run" not in result.stdout.str()
    data = report(served_project, "seq.json")
    assert (data["complete"], data["not_run"]) == (True, 0)
    [entry] = data["sequential"]
    assert (entry["decided"], entry["rows_used"], entry["rows_run"], entry["rows_available"]) == (True, 10, 10, 100)
    assert entry["pairs"][0]["decision"] == "better" and entry["pairs"][0]["first"] == "signal"
    # The run's spend per item, times the 180 items not run.
    spent = data["cost"]["total"]
    assert entry["dollars_not_spent"] == pytest.approx(spent / 20 * 180)
    # The server saw only the rows that ran: rank_before once per row, a rewrite and a rank_after per variant.
    assert len(served_project.server.requests) == 10 * (1 + 2 * 2)
    html = (served_project.pytester.path / "seq.html").read_text(encoding="utf-8")
    assert "<h2>Sequential comparisons</h2>" in html and "signal better than keep" in html
    # The rows that ran are the first ten of the seeded order, whatever it is.
    ran = sorted(r["nodeid"].removesuffix("[signal]") for r in data["rows"] if r["variant"] == "signal")
    order = sorted((run_order(7, f"rows.jsonl::r{i}"), f"rows.jsonl::r{i}") for i in range(100))
    assert ran == sorted(unit for _, unit in order[:10])


@pytest.mark.xdist
def test_under_xdist_the_controller_decides_on_the_pooled_rows(served_project: GeoProject) -> None:
    args = strategies(served_project.priced(), 200)  # priced: the dollars not spent
    result = served_project.pytester.runpytest(
        *args, "--geo-base-url", served_project.server.url, "-n", "2", "--geo-sequential", "--geo-concurrency", "4",
        "--geo-report", "seq.json")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] + outcomes["skipped"] == 400
    data = report(served_project, "seq.json")
    [entry] = data["sequential"]
    # The test read the first round in the seeded order, as under -n 0. xdist had sent each
    # worker a chunk of rows at the start, so the second worker ran rows further on in the
    # meantime: those are reported and scored (rows_run), and the overshoot is the price
    # of the design (README: "Reading a sequential result").
    assert (entry["decided"], entry["rows_used"], entry["pairs"][0]["verdict"]) == (True, 10, "signal better than keep")
    assert 10 <= entry["rows_run"] <= 100 and outcomes["skipped"] >= 200
    assert entry["rows_run"] <= outcomes["passed"] <= 2 * entry["rows_run"]  # a row's variants may part ways
    # Rows a worker had in flight when it learnt the decision are cancelled: their calls
    # so far are spent (and counted in the usage; a cancelled call may not have reached
    # the server), the rest are not made.
    calls = sum(role["calls"] for role in data["usage"].values())
    assert len(served_project.server.requests) <= calls <= 200 * (1 + 2 * 2) // 2
    result.stdout.fnmatch_lines([f"sequential: variants of rows.jsonl [[]train[]]: decided after 10 of 200 rows "
                                 f"({entry['rows_run']} ran, 0 with an error left out); $* not spent"])


@pytest.mark.plugin
def test_a_sequential_baseline_gate_stops_once_the_drop_is_decided(served_project: GeoProject) -> None:
    served_project.priced().dataset(100)  # priced: the dollars not spent
    served_project.run("rows.jsonl", "--geo-report", "base.json").assert_outcomes(passed=100)
    (served_project.pytester.path / "prompts" / "rewriter_user.txt").write_text(KEEP, encoding="utf-8")
    served_project.server.reset()
    result = served_project.run("rows.jsonl", "--geo-baseline", "base.json", "--geo-sequential", "--geo-no-cache",
                                "--geo-fail-on-regression", "--geo-concurrency", "4", "--geo-report", "seq.json")
    # The rewrite now keeps every target where it was (0 against the baseline's 2): a drop.
    # Differences against a baseline are bounded by twice a rank's range (+-4 here, as
    # rank_before may differ too), so two rounds are needed where variants needed one.
    result.assert_outcomes(passed=20, skipped=80, failed=1)
    result.stdout.fnmatch_lines([
        "dropped against the baseline: the sequential test decided the baseline better (mean_diff=-2.0000 over 20 "
        "paired rows)",
        "sequential: against the baseline: rows.jsonl [[]train[]]: decided after 20 of 100 rows (20 ran, 0 with an "
        "error left out); $* not spent",
        "  baseline better than this run after 20 rows: mean_diff=-2.0000 over 20 rows, anytime-valid interval "
        "[[]-2.*, -0.*[]]",
    ])
    data = report(served_project, "seq.json")
    assert data["baseline"]["suites"][0]["regression"] is True
    assert data["sequential"][0]["kind"] == "baseline"
    assert len(served_project.server.requests) == 20 * 3
    # A decided-better run passes the gate: the baseline's own prompts against the KEEP run.
    served_project.run("rows.jsonl", "--geo-report", "keep.json", "--geo-no-cache").assert_outcomes(passed=100)
    (served_project.pytester.path / "prompts" / "rewriter_user.txt").unlink()
    copy_prompts(served_project.pytester.path / "prompts")
    better = served_project.run("rows.jsonl", "--geo-baseline", "keep.json", "--geo-sequential",
                                "--geo-fail-on-regression", "--geo-no-cache")
    better.assert_outcomes(passed=16, skipped=84)  # rounds of 16 rows: --geo-concurrency auto starts at 16
    better.stdout.fnmatch_lines(["  this run better than baseline after 16 rows: *"])


@pytest.mark.plugin
def test_sequential_needs_a_comparison_and_margin_needs_sequential(served_project: GeoProject) -> None:
    served_project.dataset(3)
    alone = served_project.run("rows.jsonl", "--geo-sequential")
    alone.stderr.fnmatch_lines(["ERROR: --geo-sequential needs a paired comparison: two or more --geo-variant, "
                                "or --geo-baseline PATH"])
    margin = served_project.run("rows.jsonl", "--geo-margin", "0.5")
    margin.stderr.fnmatch_lines(["ERROR: --geo-margin needs --geo-sequential"])
    bad = served_project.run("rows.jsonl", "--geo-alpha", "1")
    bad.stderr.fnmatch_lines(["*--geo-alpha: '1' must be between 0 and 1, both excluded"])


@pytest.mark.e2e
def test_egeo_evaluate_sequential_stops_early_with_the_full_runs_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=100)
    (tmp_path / "pytest.ini").write_text(prices_ini(), encoding="utf-8")  # egeo reads the project's geo_prices
    (tmp_path / "signal.txt").write_text(SIGNAL, encoding="utf-8")
    (tmp_path / "keep.txt").write_text(KEEP, encoding="utf-8")
    args = ["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--no-cache", "--base-url",
            fake_openai.url, "--variant", "signal=signal.txt", "--variant", "keep=keep.txt", "--concurrency", "4"]
    assert main([*args, "--report", "full.json"]) == 0
    full = capsys.readouterr()
    # stdout: the harness's metrics, per variant.
    assert json.loads(full.out)["signal"]["avg_rank_improvement"] == 2.0
    assert json.loads(full.out)["keep"]["avg_rank_improvement"] == 0.0
    assert "  signal - keep: n=100 mean_diff=+2.0000" in full.err
    assert len(fake_openai.requests) == 100 * (1 + 2 * 2)
    fake_openai.reset()

    assert main([*args, "--sequential", "--report", "seq.json"]) == 0
    seq = capsys.readouterr()
    assert ("sequential: variants of rows.jsonl [train]: decided after 10 of 100 rows (10 ran, 0 with an error left "
            "out); $") in seq.err
    assert "  signal better than keep after 10 rows: mean_diff=+2.0000 over 10 rows" in seq.err
    assert len(fake_openai.requests) == 10 * (1 + 2 * 2)
    [entry] = json.loads((tmp_path / "seq.json").read_text(encoding="utf-8"))["sequential"]
    assert (entry["rows_used"], entry["rows_available"], entry["pairs"][0]["decision"]) == (10, 100, "better")


@pytest.mark.e2e
def test_egeo_sequential_needs_two_variants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    egeo_workdir(tmp_path, monkeypatch, rows=3)
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--dataset", "rows.jsonl", "--mock", "--sequential"])
    assert exit_info.value.code == 2
    assert "egeo: error: --sequential needs two or more --variant to compare" in capsys.readouterr().err


@pytest.mark.plugin
def test_errored_rows_stay_out_of_the_test_and_repeats_keep_their_noise_floor(served_project: GeoProject) -> None:
    args = strategies(served_project, 100)
    first = sorted((run_order(7, f"rows.jsonl::r{i}"), i) for i in range(100))[:2]
    broken = {f"Query: red kettle number {i}\n" for _, i in first}  # two rows of the first round

    def fault(body: dict[str, Any]) -> str | None:
        text = json.dumps(body)
        rewriter = "rewritten_description" in text
        return "500" if rewriter and "Rewrite it." in text and any(json.dumps(b)[1:-1] in text for b in broken) else None

    served_project.server.fault_for = fault
    result = served_project.run(*args, "--geo-sequential", "--geo-repeats", "2", "--geo-max-retries", "0",
                                "--geo-max-error-rate", "1", "--geo-concurrency", "4", "--geo-report", "seq.json")
    outcomes = result.parseoutcomes()
    assert outcomes["xfailed"] == 2  # the signal variant of the two broken rows, tolerated
    data = report(served_project, "seq.json")
    [entry] = data["sequential"]
    [pair] = entry["pairs"]
    assert entry["rows_excluded"] == 2 and pair["n"] == entry["rows_used"] - 2 and pair["decision"] == "better"
    assert outcomes["passed"] + outcomes["xfailed"] == 2 * entry["rows_run"]
    assert all("judge_noise" in s for s in data["suites"])  # --geo-repeats 2: the noise floor is still there


@pytest.mark.plugin
def test_the_ini_twins(served_project: GeoProject) -> None:
    served_project.dataset(3)
    served_project.pytester.makeini("[pytest]\ngeo_sequential = true\n")
    served_project.run("rows.jsonl").stderr.fnmatch_lines(["ERROR: --geo-sequential needs a paired comparison*"])
    served_project.pytester.makeini("[pytest]\ngeo_alpha = 2\n")
    served_project.run("rows.jsonl").stderr.fnmatch_lines(
        ["ERROR: ini option geo_alpha: '2' must be between 0 and 1, both excluded"])


@pytest.mark.e2e
def test_egeo_sequential_status_line_counts_every_round_against_the_runs_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    fake_openai.latency = 0.05  # every row holds the output back a little: a status line per wait
    egeo_workdir(tmp_path, monkeypatch, rows=100)
    (tmp_path / "signal.txt").write_text(SIGNAL, encoding="utf-8")
    (tmp_path / "keep.txt").write_text(KEEP, encoding="utf-8")
    assert main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--no-cache", "--base-url",
                 fake_openai.url, "--variant", "signal=signal.txt", "--variant", "keep=keep.txt",
                 "--concurrency", "4", "--sequential"]) == 0
    status = [line for line in capsys.readouterr().err.splitlines() if line.startswith("geo: ")]
    done = [int(m.group(1)) for line in status if (m := re.match(r"geo: (\d+)/200 rows done, ", line))]
    # 100 rows of two variants, whichever round is running (not the round's 20: rounds add up)
    assert len(done) == len(status) > 1
    assert max(done) <= 20  # decided after the first round of 10 rows: the rest never ran
