"""An unusable model server stops the run at once with one message; a server that goes
down mid-run trips the circuit breaker. Rows not run are skipped with the reason."""

from __future__ import annotations

import json
import socket

import pytest

from conftest import ONE_PROCESS_AND_TWO_WORKERS, GeoProject


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def model_server_failure(result: pytest.RunResult) -> list[str]:
    lines = result.stdout.lines
    start = lines.index(next(line for line in lines if "_ pytest-geo::model_server _" in line))
    return [lines[start + 1]]


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_TWO_WORKERS)
def test_closed_port_stops_the_run_with_one_message(served_project: GeoProject, workers: str) -> None:
    pytest.importorskip("xdist")
    dataset = str(served_project.dataset(60))
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = served_project.pytester.runpytest(dataset, "--geo-base-url", url, "-n", workers, "-p", "no:cacheprovider",
                                               "--geo-report", "r.json", "--geo-ranker-model", "rk-1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, skipped=60)
    [message] = model_server_failure(result)
    assert message.startswith("cannot use 127.0.0.1 for model ")
    assert "cannot connect" in message and message.endswith("; 60 row(s) not run")
    assert result.stdout.str().count("cannot use 127.0.0.1") == 2  # its section and the -rf line
    report = json.loads((served_project.pytester.path / "r.json").read_text())
    assert report["complete"] is False and report["not_run"] == 60
    assert report["gates"][0]["nodeid"] == "pytest-geo::model_server"


@pytest.mark.plugin
@pytest.mark.parametrize(("fault", "cause"), [("401", "the key was refused"), ("404", "model or endpoint not found")])
def test_refused_key_or_unknown_model_stops_at_once(served_project: GeoProject, fault: str, cause: str) -> None:
    served_project.server.always = fault
    result = served_project.run(str(served_project.dataset(100)), "--geo-rewriter-model", "no-such-model",
                                "--geo-concurrency", "4")
    result.assert_outcomes(failed=1, skipped=100)
    [message] = model_server_failure(result)
    assert message.startswith("cannot use 127.0.0.1 for model ") and cause in message
    assert len(served_project.server.requests) <= 8  # the first calls in flight, never retried
    assert "sk-test-dummy" not in result.stdout.str()


@pytest.mark.plugin
def test_circuit_breaker_after_consecutive_failures(served_project: GeoProject) -> None:
    server = served_project.server
    dataset = str(served_project.dataset(50))
    server.always = "500"
    result = served_project.run(dataset, "--geo-no-cache", "--geo-max-retries", "0", "--geo-concurrency", "1",
                                "--geo-report", "r.json")
    outcomes = result.parseoutcomes()
    # The breaker trips after 8 consecutive failed calls; a failed row counts one or two
    # (its rewrite is cancelled when its ranking fails first).
    assert outcomes["failed"] - 1 <= 8 and outcomes["skipped"] >= 42
    assert outcomes["failed"] - 1 + outcomes["skipped"] == 50
    [message] = model_server_failure(result)
    assert message.startswith("stopped calling 127.0.0.1 (model ") and "after 8 consecutive failed calls" in message
    assert len(server.requests) <= 2 * 8  # at most two calls a row reached the server, 8 of them counted
    report = json.loads((served_project.pytester.path / "r.json").read_text())
    assert report["not_run"] == outcomes["skipped"] and report["complete"] is False


@pytest.mark.plugin
def test_calls_never_sent_are_not_counted_as_calls_nor_errors(served_project: GeoProject) -> None:
    """Usage counts what reached the server: the calls stopped by the breaker were never sent."""
    served_project.server.always = "401"
    result = served_project.run(str(served_project.dataset(40)), "--geo-concurrency", "4", "--geo-no-cache",
                                "--geo-report", "r.json")
    result.assert_outcomes(failed=1, skipped=40)
    sent = len(served_project.server.requests)
    assert 1 <= sent <= 8
    usage = json.loads((served_project.pytester.path / "r.json").read_text())["usage"]
    assert sum(c["calls"] for c in usage.values()) == sent
    # each refused; a call cancelled in flight (its row's ranking failed first) is no error
    assert 1 <= sum(c["errors"] for c in usage.values()) <= sent
    for role, counts in usage.items():  # the summary's usage lines say the same
        result.stdout.fnmatch_lines([f"*{role}: calls={counts['calls']} cache_hits=0 retries=0 errors={counts['errors']} *"])
