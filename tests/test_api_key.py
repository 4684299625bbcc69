"""The API key: a local server (a private host) needs none and gets a placeholder, a
public host still needs one, and a key that is set is used."""

from __future__ import annotations

import pytest

from conftest import DUMMY_KEY, GeoProject
from pytest_geo.local_server import PLACEHOLDER_KEY, placeholder_key_host
from pytest_geo.settings import Settings


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
