"""`egeo evaluate` keeps model answers in the pytest plugin's cache: the fake OpenAI
server (in this process) counts the requests that reach it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

from conftest import PROMPTS, GeoProject, cache_entries, egeo_workdir
from pytest_geo.cli import main


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return egeo_workdir(tmp_path, monkeypatch, rows=3)


def evaluate(server: FakeOpenAI, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", server.url,
                 "--verbose", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def entries(directory: Path) -> list[dict[str, object]]:
    return cache_entries(directory)


@pytest.mark.e2e
def test_a_rerun_is_answered_from_the_cache(
    workdir: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    first = evaluate(fake_openai, capsys)
    assert len(fake_openai.requests) == 3 * 3
    assert json.loads("\n".join(first.splitlines()[3:])) == {  # after one verbose line per row
        "avg_rank_improvement": 2.0, "n": 3, "stderr_rank_improvement": 0.0, "win_rate": 1.0}
    fake_openai.reset()
    assert evaluate(fake_openai, capsys) == first
    assert fake_openai.requests == []
    assert len(entries(workdir / ".pytest_cache" / "d" / "geo")) == 9
    assert (workdir / ".pytest_cache" / ".gitignore").read_text().endswith("\n*\n")  # not committed by accident


@pytest.mark.e2e
def test_no_cache_asks_again_and_writes_nothing(
    workdir: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    evaluate(fake_openai, capsys, "--no-cache")
    assert not (workdir / ".pytest_cache").exists()
    first = evaluate(fake_openai, capsys)
    fake_openai.reset()
    assert evaluate(fake_openai, capsys, "--no-cache") == first
    assert len(fake_openai.requests) == 9


@pytest.mark.e2e
def test_cache_dir_puts_the_answers_there(
    workdir: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    evaluate(fake_openai, capsys, "--cache-dir", "answers")
    assert len(entries(workdir / "answers")) == 9
    assert not (workdir / ".pytest_cache").exists()
    fake_openai.reset()
    evaluate(fake_openai, capsys, "--cache-dir", str(workdir / "answers"))
    assert fake_openai.requests == []
    evaluate(fake_openai, capsys)  # another directory: asked again
    assert len(fake_openai.requests) == 9


@pytest.mark.e2e
def test_an_existing_pytest_cache_is_left_alone(
    workdir: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / ".pytest_cache").mkdir()
    evaluate(fake_openai, capsys)
    assert [p.name for p in (workdir / ".pytest_cache").iterdir()] == ["d"]


@pytest.mark.e2e
def test_the_mock_is_never_cached(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--mock"]) == 0
    assert not (workdir / ".pytest_cache").exists()


@pytest.mark.plugin
def test_egeo_and_the_plugin_share_answers(served_project: GeoProject, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = served_project.dataset(2)
    assert main(["evaluate", "--dataset", str(dataset), "--prompts", "prompts",
                 "--base-url", served_project.server.url]) == 0  # the cwd is the pytester rootdir
    assert len(served_project.server.requests) == 6
    served_project.server.reset()
    served_project.run(str(dataset)).assert_outcomes(passed=2)
    assert served_project.server.requests == []


@pytest.mark.e2e
def test_help_names_the_cache_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--cache-dir DIR model-answer cache (default: .pytest_cache/d/geo," in text
    assert "--no-cache neither read nor write the model-answer cache" in text


@pytest.mark.e2e
def test_a_broken_prompt_creates_no_cache(workdir: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "prompts").mkdir()
    assert main(["evaluate", "--dataset", "rows.jsonl", "--prompts", "prompts", "--base-url", fake_openai.url]) == 2
    assert "egeo: error:" in capsys.readouterr().err
    assert not (workdir / ".pytest_cache").exists()


@pytest.mark.e2e
def test_an_errored_row_scores_zero_and_fails_the_command(
    workdir: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    # Row r0's calls fail for good (a 500 with no retries), the other rows run; E-GEO's
    # rule: the errored row counts 0.0 in the mean.
    fake_openai.fault_for = lambda body: "500" if "red kettle number 0" in json.dumps(body) else None
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
                 "--concurrency", "1", "--no-cache", "--verbose", "--max-retries", "0"])
    captured = capsys.readouterr()
    assert code == 1
    *rows, = (json.loads(line) for line in captured.out.splitlines() if line.startswith("{\"query_id\""))
    assert [(r["query_id"], r["rank_improvement"]) for r in rows] == [("r0", None), ("r1", 2), ("r2", 2)]
    metrics = json.loads(captured.out[captured.out.index("{\n"):])
    assert metrics == {"n": 3, "avg_rank_improvement": 4 / 3, "win_rate": 2 / 3,
                       "stderr_rank_improvement": pytest.approx(2 / 3)}
    assert "rows.jsonl: r0: error: ranker model call failed: HTTP 500" in captured.err \
        or "rows.jsonl: r0: error: rewriter model call failed: HTTP 500" in captured.err
