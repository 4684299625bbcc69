"""Small things users expect: where the report lines print, suite markers in
`pytest --markers`, `egeo --version`, the header for positional datasets, and no dummy
key for a local server."""

from __future__ import annotations

import pytest

from conftest import DUMMY_KEY, GeoProject
from pytest_geo.local_server import PLACEHOLDER_KEY, placeholder_key_host
from pytest_geo.settings import DEFAULT_SEED, Settings


@pytest.mark.plugin
def test_report_lines_come_together_after_the_metrics(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--geo-report", "r.json",
                                   "--geo-html", "r.html")
    lines = result.stdout.lines
    metrics = next(i for i, line in enumerate(lines) if line.startswith("data/smoke.jsonl: n=8"))
    written = lines.index("report written to r.json")
    assert lines[written + 1] == "HTML report written to r.html"
    assert metrics < written < lines.index("Evals:")


@pytest.mark.plugin
def test_the_header_shows_for_a_dataset_on_the_command_line(geo_project: pytest.Pytester) -> None:
    result = geo_project.runpytest("data/smoke.jsonl", "--geo-mock", "--collect-only")
    result.stdout.fnmatch_lines([f"geo: model mock, prompts *, seed {DEFAULT_SEED}"])
    plain = geo_project.runpytest("--geo-mock", "--collect-only", "-p", "no:xdist")
    plain.stdout.no_fnmatch_line("geo: *")  # no dataset, no header


@pytest.mark.plugin
@pytest.mark.parametrize("url", ["http://127.0.0.1:{port}/v1", "http://localhost:{port}/v1"])
def test_a_local_server_needs_no_key(served_project: GeoProject, monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    port = served_project.server.server_address[1]
    result = served_project.pytester.runpytest(str(served_project.dataset(2)), "--geo-base-url",
                                               url.format(port=port), "-p", "no:xdist", "--geo-no-cache")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["geo: model *; no OPENAI_API_KEY: a placeholder key for the local server *"])
    auth = {r["headers"].get("authorization") for r in served_project.server.requests}
    assert auth == {f"Bearer {PLACEHOLDER_KEY}"}


@pytest.mark.unit
@pytest.mark.parametrize("url", ["http://10.1.2.3/v1", "http://192.168.0.7:8000/v1", "http://[::1]:8000/v1",
                                 "http://localhost/v1"])
def test_private_hosts_get_the_placeholder(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert placeholder_key_host(Settings(base_url=url)) is not None


@pytest.mark.plugin
@pytest.mark.parametrize("url", [None, "https://api.openai.com/v1", "http://8.8.8.8/v1", "https://localhost.example.com"])
def test_public_hosts_still_need_a_key(served_project: GeoProject, monkeypatch: pytest.MonkeyPatch,
                                       url: str | None) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    assert placeholder_key_host(Settings(base_url=url)) is None
    args = [str(served_project.dataset(1)), "-p", "no:xdist"] + (["--geo-base-url", url] if url else [])
    result = served_project.pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: no model credentials*--geo-base-url*--geo-mock*"])


@pytest.mark.plugin
def test_a_set_key_is_used_not_the_placeholder(served_project: GeoProject) -> None:
    result = served_project.run(str(served_project.dataset(1)), "--geo-no-cache")
    result.stdout.no_fnmatch_line("*a placeholder key*")
    assert {r["headers"].get("authorization") for r in served_project.server.requests} == {f"Bearer {DUMMY_KEY}"}
