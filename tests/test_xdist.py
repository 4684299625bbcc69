"""Real xdist workers give the same aggregates, report, JUnit properties and exit status
as a single process."""

from __future__ import annotations

import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from test_reporting import transcript_lines

from conftest import ONE_PROCESS_AND_TWO_WORKERS, copy_prompts, without_run_dependent

pytest.importorskip("xdist")

FLAKY_CONFTEST = '''
from pytest_geo.llm.mock import MockClient

class Flaky(MockClient):
    async def complete(self, request):
        if request.role == "ranker" and "travel" in request.context.get("query", ""):
            raise RuntimeError("ranker down")
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Flaky()
'''

SUITE = '''
import pytest_geo

answer_eval = pytest_geo.suite(
    "answer",
    data={"questions": [(str(i), {"answer": str(i % 3)}) for i in range(9)]},
    threshold=0.9,
)

@answer_eval.metric
def exact(questions, expected):
    if questions == "4":
        raise ValueError("no answer for 4")
    return questions[-1] in "0369", f"q{questions}"
'''


def junit_properties(path: Path) -> dict[str, dict[str, str]]:
    root = ET.parse(path).getroot()
    return {f"{case.get('classname')}::{case.get('name')}": {p.get("name"): p.get("value") for p in case.iter("property")}
            for case in root.iter("testcase")}


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """The report apart from ordering, timings, the concurrency (the workers' limits
    add up, by design) and the transcripts file's name (each report names its own)."""
    report = dict(report)
    report.pop("concurrency")
    report["transcripts"] = {k: v for k, v in report["transcripts"].items() if k != "path"}
    report["metadata"] = {k: v for k, v in report["metadata"].items() if k not in ("started_at", "duration_s")}
    report["rows"] = without_run_dependent(sorted(report["rows"], key=lambda r: r["nodeid"]))
    report["suites"] = sorted(report["suites"], key=lambda s: (s["suite"], s["split"]))
    return report


def geo_summary(result: pytest.RunResult) -> list[str]:
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "pytest-geo evaluation" in line)
    # The concurrency line adds up the workers' limits, so it differs by design.
    return [line for line in lines[start + 1:] if not line.startswith(("report written", "transcripts written", "=", "concurrency:"))]


@pytest.fixture
def project(geo_project: pytest.Pytester) -> pytest.Pytester:
    geo_project.makeconftest(FLAKY_CONFTEST)
    geo_project.makepyfile(test_answer=SUITE)
    return geo_project


def run(project: pytest.Pytester, workers: str, name: str) -> pytest.RunResult:
    return project.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", workers, "data/smoke.jsonl", "test_answer.py", "--geo-mock",
        "--geo-report", f"{name}.json", "--junitxml", f"{name}.xml",
    )


@pytest.mark.xdist
def test_workers_report_what_one_process_reports(project: pytest.Pytester) -> None:
    single = run(project, "0", "single")
    spread = run(project, "2", "spread")
    single.assert_outcomes(passed=15, failed=3)  # two rows and the threshold gate
    spread.assert_outcomes(passed=15, failed=3)
    spread.stdout.fnmatch_lines(["*2 workers*"])
    assert single.ret == spread.ret == pytest.ExitCode.TESTS_FAILED
    assert geo_summary(single) == geo_summary(spread)
    for result in (single, spread):
        result.stdout.fnmatch_lines(["FAILED answer::threshold - score 0.3333 < 0.9000 (answer::exact, n=9)"])

    reports = [json.loads((project.path / f"{name}.json").read_text()) for name in ("single", "spread")]
    assert comparable(reports[0]) == comparable(reports[1])
    assert reports[1]["concurrency"]["maximum"] == 2 * reports[0]["concurrency"]["maximum"]  # two workers' worth
    assert reports[1]["geo"]["datasets"]["data/smoke.jsonl"]["n"] == 8
    assert len(reports[1]["rows"]) == 17
    transcripts = [{line["nodeid"]: without_run_dependent(line) for line in transcript_lines(project.path / f"{name}.json")}
                   for name in ("single", "spread")]
    assert transcripts[0] == transcripts[1] and len(transcripts[0]) == 8  # every GEO row's calls, from either

    properties = [junit_properties(project.path / f"{name}.xml") for name in ("single", "spread")]
    assert properties[0] == properties[1]
    assert properties[1]["data.smoke.jsonl::q2"] == {
        "score": "2.0", "rank_before": "3", "rank_after": "1", "rank_improvement": "2", "feedback": "rank 3 -> 1"}
    assert properties[1]["data.smoke.jsonl::q1"]["feedback"] == "error: ranker down"
    assert properties[1]["data.smoke.jsonl::q1"]["rank_before"] == ""
    assert properties[1]["test_answer.answer::train[3]"] == {"score": "1.0", "feedback": "q3"}
    assert properties[1]["test_answer.answer::train[4]"] == {"score": "0.0", "feedback": "error: ValueError: no answer for 4"}


@pytest.mark.plugin
def test_plugin_works_without_xdist(geo_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    code = (
        "import sys\n"
        "class NoXdist:  # importing xdist fails, as if it were not installed\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'xdist':\n"
        "            raise ImportError('no xdist here')\n"
        "sys.meta_path.insert(0, NoXdist())\n"
        "import pytest\n"
        "sys.exit(pytest.main(['-p', 'geo', '-p', 'no:cacheprovider', 'data/smoke.jsonl', '--geo-mock',\n"
        "                      '--junitxml', 'j.xml']))\n"
    )
    result = geo_project.run(sys.executable, "-c", code)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["- data/smoke.jsonl::rank_improvement: 2.0000*", "*8 passed*"])
    assert junit_properties(geo_project.path / "j.xml")["data.smoke.jsonl::q3"]["rank_improvement"] == "2"


PROPERTIES_CONFTEST = '''
import json

SEEN = {}

def pytest_runtest_logreport(report):
    if report.when == "teardown":
        SEEN[report.nodeid] = [list(p) for p in report.user_properties]

def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):  # the controller, or a single process
        (session.config.rootpath / "properties.json").write_text(json.dumps(SEEN))
'''


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_rows_carry_junit_properties_only_when_a_junit_file_is_written(geo_project: pytest.Pytester,
                                                                       workers: str) -> None:
    geo_project.makeconftest(PROPERTIES_CONFTEST)
    seen = {}
    for junit in ([], ["--junitxml", "j.xml"]):
        result = geo_project.runpytest("-p", "no:cacheprovider", "-n", workers, "data/smoke.jsonl", "--geo-mock",
                                       *junit)
        result.assert_outcomes(passed=8)
        seen[bool(junit)] = json.loads((geo_project.path / "properties.json").read_text())
    assert seen[False]["data/smoke.jsonl::q2"] == []
    assert seen[True]["data/smoke.jsonl::q2"] == [
        ["score", 2.0], ["rank_before", 3], ["rank_after", 1], ["rank_improvement", 2], ["feedback", "rank 3 -> 1"]]
    assert junit_properties(geo_project.path / "j.xml")["data.smoke.jsonl::q2"]["rank_after"] == "1"


# --- colliding names -----------------------------------------------------------------------


def without_timings(report: dict[str, Any]) -> dict[str, Any]:
    report = dict(report)
    report["metadata"] = {k: v for k, v in report["metadata"].items() if k not in ("started_at", "duration_s")}
    report["rows"] = without_run_dependent(sorted(report["rows"], key=lambda r: r["nodeid"]))
    report.pop("concurrency")  # the workers' limits add up: it differs by design (test_xdist.py)
    report["transcripts"] = {k: v for k, v in report["transcripts"].items() if k != "path"}  # each names its own
    return report


CORPUS = Path(__file__).resolve().parent / "corpus"


@pytest.mark.xdist
def test_colliding_names_keep_each_row_its_own_data_with_and_without_workers(pytester: pytest.Pytester) -> None:
    """Query ids `q1`, `q1`, `q1@line2`, a row without an id on line 4 and `line4`: each
    row keeps its own target and ranks, and -n 2 reports what one process reports."""
    pytest.importorskip("xdist")
    copy_prompts(pytester.path / "prompts")
    shutil.copy(CORPUS / "datasets" / "colliding_names.jsonl", pytester.path / "rows.jsonl")
    source = [json.loads(line) for line in (pytester.path / "rows.jsonl").read_text().splitlines()]
    reports = []
    for workers in ("0", "2"):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", workers, "rows.jsonl", "--geo-mock",
                                               "--geo-report", f"r{workers}.json")
        result.assert_outcomes(passed=len(source))
        reports.append(json.loads((pytester.path / f"r{workers}.json").read_text()))
    assert without_timings(reports[0]) == without_timings(reports[1])
    rows = reports[0]["rows"]
    assert len({r["nodeid"] for r in rows}) == len(source)
    for workers in ("0", "2"):  # one transcript per row, under its own node id
        lines = transcript_lines(pytester.path / f"r{workers}.json")
        assert sorted(t["nodeid"] for t in lines) == sorted(r["nodeid"] for r in rows)
    for row in rows:
        line = source[row["line"] - 1]
        assert row["target_id"] == line["target_id"]
        # The descriptions are alike and the target is listed last: the mock (the E-GEO
        # harness's) counts the ranker prompt's closing line into the last description.
        assert (row["rank_before"], row["rank_after"]) == (1, 1)
