"""A base URL holding a control character is refused at start, naming the flag of the
front end that was used, before any call."""

from __future__ import annotations

import pytest

from conftest import GeoProject, no_traceback
from pytest_geo import cli

pytestmark = pytest.mark.plugin


@pytest.mark.parametrize("character", ["\n", "\r", "\x00", "\t", "\x7f"])
def test_a_base_url_with_a_control_character_is_a_usage_error_naming_the_flag(
        served_project: GeoProject, character: str) -> None:
    url = served_project.server.url + character
    result = served_project.pytester.runpytest(str(served_project.dataset(2)), "--geo-base-url", url,
                                               "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: the base URL (--geo-base-url, geo_base_url or OPENAI_BASE_URL) holds "
                                 f"a control character ({character!r} at position {len(url) - 1}); remove it"])
    no_traceback(result)
    assert served_project.server.requests == []


def test_egeo_names_its_own_flag_for_a_base_url_with_a_newline(
        served_project: GeoProject, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(served_project.pytester.path)
    dataset = served_project.dataset(2)
    code = cli.main(["evaluate", "--dataset", str(dataset), "--base-url", "http://127.0.0.1:9/v1\nHost: evil"])
    assert code == 2
    assert capsys.readouterr().err == ("egeo: error: the base URL (--base-url or OPENAI_BASE_URL) holds a control "
                                       "character ('\\n' at position 21); remove it\n")
