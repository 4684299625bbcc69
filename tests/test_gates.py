"""Gates that fail a run (threshold, regression, error rate) show where CI looks: as
failed tests in pytest's final line, in `-rf`, and in the JUnit XML; the same under xdist."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import ONE_PROCESS_AND_TWO_WORKERS

pytest.importorskip("xdist")

SUITE = '''
import pytest_geo
answer_eval = pytest_geo.suite("answer", data={"q": [(i, i % 2) for i in range(8)]}, threshold=0.9)

@answer_eval.metric
def exact(q, expected):
    return q % 4 == expected
'''

FLAKY_CONFTEST = '''
from pytest_geo.llm.mock import MockClient

class Flaky(MockClient):
    """The ranker fails for the queries listed in failing.txt (read per call)."""
    async def complete(self, request):
        import pathlib
        failing = pathlib.Path(__file__).with_name("failing.txt").read_text().split(",")
        if request.role == "ranker" and any(w and w in request.context.get("query", "") for w in failing):
            raise RuntimeError("ranker down")
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Flaky()
'''


def failures_in_junit(path: Path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    return {f"{case.get('classname')}::{case.get('name')}": failure.get("message", "")
            for case in root.iter("testcase") for failure in case.iter("failure")}


def final_line(result: pytest.RunResult) -> str:
    return result.stdout.lines[-1]


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_threshold_gate_is_a_failed_test(geo_project: pytest.Pytester, workers: str) -> None:
    geo_project.makepyfile(test_answer=SUITE)
    result = geo_project.runpytest("-n", workers, "test_answer.py", "--junitxml", "j.xml", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=8, failed=1)
    assert "1 failed, 8 passed" in final_line(result)
    result.stdout.fnmatch_lines(["FAILED answer::threshold - score 0.5000 < 0.9000 (answer::exact, n=8)"])
    assert failures_in_junit(geo_project.path / "j.xml") == {
        "answer::threshold": "score 0.5000 < 0.9000 (answer::exact, n=8)"}
    root = ET.parse(geo_project.path / "j.xml").getroot()
    suite = next(root.iter("testsuite"))
    assert (suite.get("tests"), suite.get("failures")) == ("9", "1")


@pytest.mark.plugin
def test_met_threshold_adds_no_test(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(test_answer=SUITE.replace("threshold=0.9", "threshold=0.5"))
    result = geo_project.runpytest("test_answer.py", "--junitxml", "j.xml", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=8)
    assert failures_in_junit(geo_project.path / "j.xml") == {}


@pytest.mark.plugin
def test_regression_gate_is_a_failed_test(geo_project: pytest.Pytester) -> None:
    geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "base.json")
    base = json.loads((geo_project.path / "base.json").read_text())
    base["rows"] = [{**r, "score": r["score"] + 0.5} for r in base["rows"]]
    (geo_project.path / "base.json").write_text(json.dumps(base))
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-baseline", "base.json",
                                   "--geo-fail-on-regression", "--junitxml", "j.xml", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "1 failed, 8 passed" in final_line(result)
    result.stdout.fnmatch_lines(["FAILED data/smoke.jsonl::regression - dropped against the baseline*"])
    [(name, message)] = failures_in_junit(geo_project.path / "j.xml").items()
    assert name == "data.smoke.jsonl::regression" and message.startswith("dropped against the baseline: mean_diff=-0.5")


@pytest.mark.plugin
def test_error_rate_gate(geo_project: pytest.Pytester) -> None:
    geo_project.makeconftest(FLAKY_CONFTEST)
    (geo_project.path / "failing.txt").write_text("travel,running")  # 2 of the 8 smoke rows error

    def run(*args: str) -> pytest.RunResult:
        return geo_project.runpytest("data/smoke.jsonl", "--junitxml", "j.xml",
                                     "-p", "no:cacheprovider", "--geo-report", "r.json", *args)

    # Without the flag every errored row fails its own item and no gate is added.
    strict = run()
    strict.assert_outcomes(passed=6, failed=2)
    # With it, errored rows are tolerated one by one (xfailed with their error) and the
    # suite's share of them is the gate.
    tolerant = run("--geo-max-error-rate", "0.25")
    assert tolerant.ret == pytest.ExitCode.OK
    tolerant.assert_outcomes(passed=6, xfailed=2)
    over = run("--geo-max-error-rate", "0.2")
    assert over.ret == pytest.ExitCode.TESTS_FAILED
    over.assert_outcomes(passed=6, xfailed=2, failed=1)
    over.stdout.fnmatch_lines(["error_rate 0.2500 > 0.2000 (2 of 8 rows errored)",
                               "FAILED data/smoke.jsonl::error_rate - error_rate 0.2500 > 0.2000*"])
    assert failures_in_junit(geo_project.path / "j.xml") == {
        "data.smoke.jsonl::error_rate": "error_rate 0.2500 > 0.2000 (2 of 8 rows errored)"}
    geo_project.makeini("[pytest]\ngeo_max_error_rate = 0.2\n")
    run().assert_outcomes(passed=6, xfailed=2, failed=1)


@pytest.mark.plugin
def test_max_error_rate_must_be_a_share(geo_project: pytest.Pytester) -> None:
    for value in ("1.5", "nan", "-0.1"):
        result = geo_project.runpytest("--geo-max-error-rate", value)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
    geo_project.makeini("[pytest]\ngeo_max_error_rate = lots\n")
    result = geo_project.runpytest()
    result.stderr.fnmatch_lines(["*ini option geo_max_error_rate: 'lots' is not a number*"])


@pytest.mark.plugin
def test_interrupted_run_checks_no_gate(geo_project: pytest.Pytester) -> None:
    geo_project.makepyfile(test_answer=SUITE.replace("return q % 4 == expected", "assert q != 3\n    return 1"))
    result = geo_project.runpytest("test_answer.py", "-x", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)
    assert "answer::threshold" not in result.stdout.str()


REPORT_DIRECTORY_GOES = '''
import shutil
from pathlib import Path

def pytest_sessionstart(session):
    # after the start check passed: the report's directory becomes a file
    if Path("out").is_dir():
        shutil.rmtree("out", ignore_errors=True)
        Path("out").write_text("")
'''


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_a_report_that_could_not_be_written_is_a_failed_test_in_junit(geo_project: pytest.Pytester,
                                                                       workers: str) -> None:
    geo_project.makeconftest(REPORT_DIRECTORY_GOES)
    (geo_project.path / "out").mkdir()
    result = geo_project.runpytest("-n", workers, "data/smoke.jsonl", "--geo-mock", "--geo-report", "out/r.json",
                                   "--junitxml", "j.xml", "-p", "no:cacheprovider", "-rf")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "1 failed, 8 passed" in final_line(result)
    result.stdout.fnmatch_lines(["FAILED pytest-geo::report - pytest-geo: --geo-report: cannot write the *"])
    assert failures_in_junit(geo_project.path / "j.xml") == {"pytest-geo::report": (
        "pytest-geo: --geo-report: cannot write the transcripts file out/r.transcripts.jsonl.gz: Not a directory; "
        "pytest-geo: --geo-report: cannot write out/r.json: Not a directory")}
    suite = next(ET.parse(geo_project.path / "j.xml").getroot().iter("testsuite"))
    assert (suite.get("tests"), suite.get("failures")) == ("9", "1")
