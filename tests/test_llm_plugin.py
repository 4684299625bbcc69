"""Real-model runs end to end: the plugin, the openai SDK and the fake server."""

from __future__ import annotations

import json

import pytest
from test_reporting import with_calls

from conftest import GeoProject, cache_entries, without_run_dependent

SENTINEL = "sk-sentinel-7f3a9c1e5b"


def report(project: GeoProject, name: str = "rep.json") -> dict:
    return json.loads((project.pytester.path / name).read_text(encoding="utf-8"))


@pytest.mark.plugin
def test_concurrency_bound_holds(served_project: GeoProject) -> None:
    # 4 rows in flight, each with rank_before and the rewrite in flight together: more
    # than 4 requests at once proves rows overlap and calls overlap, at most 8 the bound.
    served_project.server.latency = 0.05
    result = served_project.run(str(served_project.dataset(24)), "--geo-concurrency", "4")
    result.assert_outcomes(passed=24)
    assert 4 < served_project.server.max_in_flight <= 8
    assert len(served_project.server.requests) == 24 * 3


@pytest.mark.plugin
def test_one_row_at_a_time_still_overlaps_rank_before_and_rewrite(served_project: GeoProject) -> None:
    served_project.server.latency = 0.05
    served_project.run(str(served_project.dataset(6)), "--geo-concurrency", "1").assert_outcomes(passed=6)
    assert served_project.server.max_in_flight == 2


@pytest.mark.plugin
def test_repeats_share_the_request_bound(served_project: GeoProject) -> None:
    # Three repeats of one row would put 6 calls in flight; one row's bound is 2 requests.
    served_project.server.latency = 0.05
    result = served_project.run(str(served_project.dataset(3)), "--geo-concurrency", "1", "--geo-repeats", "3")
    result.assert_outcomes(passed=3)
    assert served_project.server.max_in_flight == 2
    assert len(served_project.server.requests) == 3 * 3 * 3


@pytest.mark.plugin
def test_rerun_hits_the_cache_with_identical_results(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(5))
    served_project.run(dataset, "--geo-report", "first.json").assert_outcomes(passed=5)
    assert len(served_project.server.requests) == 15
    served_project.server.reset()
    result = served_project.run(dataset, "--geo-report", "second.json")
    result.assert_outcomes(passed=5)
    assert served_project.server.requests == []
    first, second = (with_calls(served_project.pytester.path / name) for name in ("first.json", "second.json"))
    assert all(c["cached"] for r in second["rows"] for c in r["calls"])
    for row in [*first["rows"], *second["rows"]]:  # the same answers, only now from the cache
        row["calls"] = [{**c, "cached": None} for c in row["calls"]]
    assert without_run_dependent(first["rows"]) == without_run_dependent(second["rows"]) and first["geo"] == second["geo"]
    assert second["usage"]["ranker"]["cache_hits"] == 10 == second["usage"]["ranker"]["calls"]
    assert second["usage"]["ranker"]["prompt_tokens"] == 0 < first["usage"]["ranker"]["prompt_tokens"]
    result.stdout.fnmatch_lines(["model usage:", "  ranker: calls=10 cache_hits=10 retries=0 *"])
    assert cache_entries(served_project.pytester.path / ".pytest_cache" / "d" / "geo")


@pytest.mark.plugin
def test_no_cache_and_cache_dir_flags(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(2))
    served_project.run(dataset, "--geo-cache-dir", "answers").assert_outcomes(passed=2)
    assert len(cache_entries(served_project.pytester.path / "answers")) == 6
    served_project.server.reset()
    served_project.run(dataset, "--geo-cache-dir", "answers", "--geo-no-cache").assert_outcomes(passed=2)
    assert len(served_project.server.requests) == 6
    assert not (served_project.pytester.path / ".pytest_cache" / "d" / "geo").exists()


@pytest.mark.plugin
def test_cache_works_without_the_cacheprovider(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(1))
    for _ in range(2):
        served_project.run(dataset, "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert len(served_project.server.requests) == 3
    assert cache_entries(served_project.pytester.path / ".pytest_cache" / "d" / "geo")
    # pytest would have git-ignored the directory had it made it; so do we
    assert (served_project.pytester.path / ".pytest_cache" / ".gitignore").read_text().endswith("*\n")


@pytest.mark.plugin
def test_transient_faults_are_retried_and_counted(served_project: GeoProject) -> None:
    served_project.server.slow_seconds = 1.5
    served_project.server.fail_next("429", "ok", "500", "ok", "drop", "ok", "slow")  # each is a call's 1st retry
    result = served_project.run(str(served_project.dataset(3)), "--geo-report", "rep.json", "--geo-timeout", "0.5",
                             "--geo-concurrency", "1")
    result.assert_outcomes(passed=3)
    usage = report(served_project)["usage"]
    assert sum(u["retries"] for u in usage.values()) == 4 and len(served_project.server.requests) == 9 + 4


@pytest.mark.plugin
def test_exhausted_retries_score_zero_and_the_run_finishes(served_project: GeoProject) -> None:
    served_project.server.always = "500"
    result = served_project.run(str(served_project.dataset(2)), "--geo-report", "rep.json", "--geo-max-retries", "1")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*error: * model call failed: HTTP 500 (upstream exploded) after 1 retry*",
                                 "*pytest-geo evaluation*", "rows.jsonl: n=2 avg_rank_improvement=0.0000 *"])
    rows = report(served_project)["rows"]
    assert [r["score"] for r in rows] == [0.0, 0.0]
    assert all("HTTP 500" in r["feedback"] and r["feedback"].startswith("error: ") for r in rows)


@pytest.mark.plugin
def test_non_permutation_is_reasked_then_names_missing_and_extra_ids(served_project: GeoProject) -> None:
    served_project.server.always = "bad_ranking"
    result = served_project.run(str(served_project.dataset(1)), "--geo-concurrency", "1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ranking is not a permutation of the candidates (missing ids: *; extra ids: zz-unknown)*"])
    ranker = [r for r in served_project.server.requests if "ordered_ids" in r["body"]["messages"][0]["content"]]
    assert len(ranker) == 3  # asked, then asked again twice with the problem stated
    assert "That answer could not be used: ranking is not a permutation" in ranker[-1]["body"]["messages"][-1]["content"]


@pytest.mark.plugin
def test_malformed_content_then_a_good_answer_passes(served_project: GeoProject) -> None:
    served_project.server.fail_next("malformed")
    served_project.run(str(served_project.dataset(1)), "--geo-concurrency", "1").assert_outcomes(passed=1)
    assert len(served_project.server.requests) == 4
    served_project.server.reset()
    served_project.server.always = "malformed"
    result = served_project.run(str(served_project.dataset(1)), "--geo-no-cache")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no JSON object in the answer*after 3 attempts*"])


@pytest.mark.plugin
def test_exitfirst_cancels_outstanding_work(served_project: GeoProject) -> None:
    # Row r0 fails at once (3 bad rankings); every other row's requests are held by the
    # server, so whatever timing the machine gives, those rows are still waiting when -x
    # stops the run. Cancelled, they send nothing more; left running, they would be
    # released after 10 s and send their re-asks (40 rows would make 40 * 4).
    served_project.server.always = "bad_ranking"
    served_project.server.holds = lambda body: "red kettle number 0" not in json.dumps(body)
    served_project.server.hold_seconds = 10
    result = served_project.run(str(served_project.dataset(40)), "-x", "--geo-concurrency", "2")
    result.assert_outcomes(failed=1)
    # r0's 3 rankings and its rewrite; then at most 2 more rows started, each holding its
    # first ranking and rewrite.
    assert len(served_project.server.requests) <= 4 + 2 * 2, len(served_project.server.requests)
    served_project.server.released.set()


@pytest.mark.plugin
def test_deselected_rows_make_no_calls(served_project: GeoProject) -> None:
    result = served_project.run(str(served_project.dataset(10)), "-k", "r3")
    result.assert_outcomes(passed=1)
    assert len(served_project.server.requests) == 3
    assert all("number 3" in json.dumps(r["body"]) for r in served_project.server.requests)


@pytest.mark.plugin
def test_the_key_never_appears_in_output_report_cache_or_errors(
    served_project: GeoProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    # A first run that works leaves answers in the cache, to be searched for the key too.
    served_project.run(str(served_project.dataset(1, "first.jsonl"))).assert_outcomes(passed=1)
    dataset = str(served_project.dataset(3))
    served_project.server.always = "401"  # the server's error message echoes the key
    result = served_project.run(dataset, "--geo-no-cache", "--geo-report", "rep.json", "--geo-concurrency", "1", "-rA",
                                "--junitxml", "junit.xml", "--log-file", "run.log", "--log-file-level", "DEBUG")
    result.assert_outcomes(failed=1, skipped=3)  # a refused key on the first call stops the run
    result.stdout.fnmatch_lines(["*HTTP 401 (Incorrect API key provided: ?key?.)*"])
    files = [p for p in served_project.pytester.path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".jsonl" and "d/geo" in p.as_posix() for p in files)
    assert {"junit.xml", "run.log", "rep.json"} <= {p.name for p in files}
    assert "HTTP Request: POST" in (served_project.pytester.path / "run.log").read_text()  # debug logs were on
    texts = [result.stdout.str(), result.stderr.str()] + [p.read_text("utf-8", errors="replace") for p in files]
    assert not [t for t in texts if SENTINEL in t or "sentinel" in t]
    assert all(r["headers"]["authorization"] == f"Bearer {SENTINEL}" for r in served_project.server.requests)


@pytest.mark.plugin
def test_a_key_echoed_in_answers_reaches_no_file_and_no_output(
    served_project: GeoProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server answering 200 with every request header quoted (Authorization too): the
    key reaches neither the terminal nor any file the run writes (reports, JUnit, HTML,
    cache entries), nor does another key-shaped token in an answer."""
    monkeypatch.setenv("OPENAI_API_KEY", SENTINEL)
    served_project.server.always = "echo_headers"
    dataset = str(served_project.dataset(3))
    before = {p for p in served_project.pytester.path.rglob("*") if p.is_file()}
    result = served_project.run(dataset, "--geo-report", "rep.json", "--geo-html", "rep.html", "-rA", "-v",
                                "--junitxml", "junit.xml")
    result.assert_outcomes(passed=3)
    assert served_project.server.requests[0]["headers"]["authorization"] == f"Bearer {SENTINEL}"
    written = [p for p in served_project.pytester.path.rglob("*") if p.is_file() and p not in before]
    assert {"rep.json", "rep.html", "junit.xml"} <= {p.name for p in written}
    assert len(cache_entries(served_project.pytester.path / ".pytest_cache" / "d" / "geo")) == 9  # one per call
    texts = [result.stdout.str(), result.stderr.str()] + [p.read_text("utf-8", errors="replace") for p in written]
    assert not [t for t in texts if SENTINEL in t or "sentinel" in t]
    assert "Bearer [key]" in (served_project.pytester.path / "rep.json").read_text()  # the echo, scrubbed

    # the rerun answers from the cache: still no key in what it prints
    rerun = served_project.run(dataset, "-rA", "-v")
    rerun.assert_outcomes(passed=3)
    assert SENTINEL not in rerun.stdout.str()


@pytest.mark.plugin
def test_a_base_url_with_credentials_is_refused_at_start(served_project: GeoProject) -> None:
    url = served_project.server.url.replace("http://", "http://user:s3cret-pw@")
    result = served_project.pytester.runpytest(str(served_project.dataset(2)), "--geo-base-url", url, "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: the base URL (--geo-base-url, geo_base_url or OPENAI_BASE_URL) holds a user "
                                 "name or password (user:password@host): remove them and give the key in "
                                 "OPENAI_API_KEY"])
    assert "s3cret" not in result.stdout.str() + result.stderr.str()
    assert served_project.server.requests == []


@pytest.mark.xdist
def test_usage_from_xdist_workers_reaches_the_report(served_project: GeoProject) -> None:
    dataset = str(served_project.dataset(4))
    result = served_project.pytester.runpytest(dataset, "--geo-base-url", served_project.server.url, "-n", "2",
                                            "--geo-report", "rep.json")
    result.assert_outcomes(passed=4)
    usage = report(served_project)["usage"]
    assert (usage["ranker"]["calls"], usage["rewriter"]["calls"]) == (8, 4)
    result.stdout.fnmatch_lines(["  ranker: calls=8 *"])
