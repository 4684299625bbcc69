"""Faults end to end against the loopback server: a soak run, and kill -9 mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from conftest import GeoProject, cache_entries


@pytest.mark.plugin
def test_soak_every_row_is_reported_through_random_faults(served_project: GeoProject) -> None:
    """300 rows, 30% of responses faulty across every kind (429, 500, 401, dropped
    connections, slower than the timeout, malformed content, non-permutation rankings)."""
    server = served_project.server
    server.fault_rate = 0.3
    server.slow_seconds = 1.0
    # The first calls succeed: a 401 before any success stops the run at once (fail
    # fast, tested in test_fail_fast.py); this soak is about faults in a working run.
    server.fail_next(*["ok"] * 64)
    dataset = str(served_project.dataset(300))
    result = served_project.run(
        dataset, "--geo-report", "rep.json", "--geo-timeout", "0.3", "--geo-max-retries", "3",
        "--geo-concurrency", "32", "--geo-no-cache",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 300
    assert outcomes.get("failed", 0) > 0  # 401 is not transient: some rows must end as errors
    assert outcomes["passed"] > 200  # transient faults were retried (or re-asked) to success
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    report = json.loads((served_project.pytester.path / "rep.json").read_text())
    assert report["geo"]["overall"]["n"] == 300
    failed = [r for r in report["rows"] if r["error"]]
    assert len(failed) == outcomes["failed"]
    assert all(r["score"] == 0.0 and r["feedback"].startswith("error: ") for r in failed)
    causes = Counter(r["error"].split(": ", 1)[1].split(" (")[0].split(" after")[0] for r in failed)
    assert "HTTP 401" in causes
    usage = report["usage"]
    assert sum(role["retries"] for role in usage.values()) > 0
    assert len(server.requests) >= 900  # every row made its calls, plus retries and re-asks
    result.stdout.fnmatch_lines(["*pytest-geo evaluation*", "*: n=300 avg_rank_improvement=*", "Evals:"])


@pytest.mark.e2e
def test_kill_9_mid_run_leaves_the_cache_usable(served_project: GeoProject) -> None:
    served_project.server.latency = 0.05
    dataset = str(served_project.dataset(60))
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *served_project.args(dataset),
            "--geo-concurrency", "8", "--geo-cache-dir", "cache"]
    process = subprocess.Popen(args, cwd=served_project.pytester.path, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env={**os.environ})
    try:
        deadline = time.monotonic() + 30
        while len(served_project.server.requests) < 60 and time.monotonic() < deadline:
            time.sleep(0.02)  # waiting for progress, not measuring it
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGKILL
    cache = served_project.pytester.path / "cache"
    entries = cache_entries(cache)
    assert entries, "the killed run had cached some answers"
    before = len(served_project.server.requests)
    result = served_project.run(dataset, "--geo-cache-dir", "cache", "--geo-report", "rep.json")
    result.assert_outcomes(passed=60)
    made = len(served_project.server.requests) - before
    assert made < 180  # cached answers were reused, the rest were asked
    report = json.loads((served_project.pytester.path / "rep.json").read_text())
    assert sum(role["cache_hits"] for role in report["usage"].values()) == 180 - made
