"""--geo-batch: the rows' calls go through the fake server's Batch API endpoints with the
real `openai` SDK: two rounds per GEO row, answers in the cache under the ordinary keys,
resume after an interruption, per-line failures and a cancelled batch."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

from conftest import DUMMY_KEY, PROMPTS, GeoProject, egeo_workdir, geo_rows
from pytest_geo.cli import main
from pytest_geo.data.dataset import GeoRow, iter_dataset
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.cache import ResponseCache, cache_key
from pytest_geo.settings import Settings


def uploaded_lines(server: FakeOpenAI, batch_id: str) -> list[dict[str, object]]:
    batch = server.batches.batches[batch_id]
    return [json.loads(line) for line in server.batches.files[batch.input_file_id].splitlines()]


@pytest.mark.plugin
def test_a_geo_row_takes_two_rounds_and_lands_in_the_cache(served_project: GeoProject) -> None:
    server = served_project.server
    dataset = served_project.dataset(4)
    result = served_project.run(str(dataset), "--geo-batch", "--geo-cache-dir", "cache", "--geo-report", "r.json")
    result.assert_outcomes(passed=4)
    assert server.requests == []  # no ordinary chat-completions call
    first, second = (uploaded_lines(server, b) for b in server.batches.created)
    # Round one: rank_before and the rewrite of every row; round two: rank_after.
    assert len(first) == 8 and len(second) == 4
    assert all(line["url"] == "/v1/chat/completions" and line["method"] == "POST" for line in first + second)
    report = json.loads((served_project.pytester.path / "r.json").read_text())
    assert sum(role["batch_calls"] for role in report["usage"].values()) == 12
    assert report["concurrency"]["mode"] == "batch"
    result.stdout.fnmatch_lines(["*batch_calls=*"])
    # The answers sit in the cache under the keys an ordinary call would use.
    cache = ResponseCache(served_project.pytester.path / "cache")
    keys = {line["custom_id"] for line in first + second}
    assert all(cache.get(str(key)) is not None for key in keys)
    # A rerun, batch or not, replays them without a request.
    served_project.run(str(dataset), "--geo-cache-dir", "cache").assert_outcomes(passed=4)
    served_project.run(str(dataset), "--geo-batch", "--geo-cache-dir", "cache").assert_outcomes(passed=4)
    assert server.requests == [] and len(server.batches.created) == 2
    assert not list((served_project.pytester.path / "cache" / "batches").glob("*.json"))  # nothing pending


@pytest.mark.plugin
def test_custom_ids_are_the_ordinary_cache_keys(served_project: GeoProject) -> None:
    """Also: the ini twin turns batch mode on."""
    from pytest_geo.llm.base import ChatRequest

    served_project.pytester.makeini("[pytest]\ngeo_batch = true\n")
    served_project.run(str(served_project.dataset(1)), "--geo-cache-dir", "c").assert_outcomes(passed=1)
    assert served_project.server.requests == []
    line = uploaded_lines(served_project.server, served_project.server.batches.created[0])[0]
    body = line["body"]
    assert isinstance(body, dict)
    # Lines are shaped as direct calls are: the output cap and the strict schema included.
    assert body["max_tokens"] == 286  # gpt-4o-mini's ranking cap, sized to the ids' bytes
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    request = ChatRequest(role="ranker", model=body["model"], messages=body["messages"],
                          temperature=body["temperature"], max_output_tokens=body["max_tokens"],
                          response_schema=body["response_format"]["json_schema"]["schema"])
    assert line["custom_id"] == cache_key(served_project.server.url, request)


def _rows(directory: Path, n: int) -> list[GeoRow]:
    path = directory / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in geo_rows(n)), encoding="utf-8")
    return [r for r in iter_dataset(path, 0) if isinstance(r, GeoRow)]


@pytest.mark.e2e
def test_an_interrupted_run_resumes_its_pending_batch_instead_of_paying_twice(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    rows = _rows(tmp_path, 3)
    settings = Settings(prompts_dir=PROMPTS, base_url=fake_openai.url, batch=True, cache_dir=tmp_path / "cache")
    fake_openai.batches.delay = 3600.0  # the first run's batch will not finish while it runs
    first = GeoSession(settings)
    futures = first.schedule_many(rows)
    deadline = time.monotonic() + 30
    kept = tmp_path / "cache" / "batches"
    while not list(kept.glob("*.json")) and time.monotonic() < deadline:  # submitted, and its id kept
        time.sleep(0.02)
    first.close()  # interrupted with the batch pending (as after Ctrl-C)
    assert all(f.cancelled() for f in futures)
    assert len(fake_openai.batches.created) == 1
    pending = list((tmp_path / "cache" / "batches").glob("*.json"))
    assert [p.stem for p in pending] == fake_openai.batches.created

    fake_openai.batches.delay = 0.0  # meanwhile the provider finished it
    second = GeoSession(settings)
    try:
        outcomes = second.evaluate(rows)
    finally:
        second.close()
    assert [o.error for o in outcomes] == [None, None, None]
    first_batch, next_batch = fake_openai.batches.created  # one new batch: round two only
    assert len(uploaded_lines(fake_openai, first_batch)) == 6
    assert len(uploaded_lines(fake_openai, next_batch)) == 3
    assert not list((tmp_path / "cache" / "batches").glob("*.json"))


@pytest.mark.plugin
def test_failed_lines_become_their_rows_errors_and_the_rest_score(served_project: GeoProject) -> None:
    server = served_project.server
    server.batches.line_faults = {0: "error", 2: "500", 4: "missing"}  # round one's lines
    result = served_project.run(str(served_project.dataset(6)), "--geo-batch", "--geo-no-cache")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 3 and outcomes["passed"] == 3
    result.stdout.fnmatch_lines_random([
        "*model call failed: batch batch_*: line failed (line failed upstream)*",
        "*model call failed: batch batch_*: HTTP 500 (upstream exploded)*",
        "*model call failed: no result in batch batch_*",
    ])


@pytest.mark.e2e
def test_a_cancelled_batch_fails_its_rows_with_a_clear_error(
    workdir_env: Path, fake_openai: FakeOpenAI, capfd: pytest.CaptureFixture[str]
) -> None:
    fake_openai.batches.end_as = "cancelled"
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
                 "--batch", "--cache-dir", "cache"])
    err = capfd.readouterr().err  # status lines go to the process's stderr, past any capture
    assert code == 1
    batch_id = fake_openai.batches.created[0]
    assert f"r0: error: ranker model call failed: batch {batch_id} cancelled before answering" in err \
        or f"r0: error: rewriter model call failed: batch {batch_id} cancelled before answering" in err
    assert f"batch {batch_id}: cancelled" in err  # the status line was shown
    assert len(fake_openai.batches.created) == 1  # no second round for rows that failed
    assert not list((workdir_env / "cache" / "batches").glob("*.json"))  # a rerun submits afresh


@pytest.mark.e2e
def test_an_expired_batch_keeps_what_it_answered(
    workdir_env: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_openai.batches.end_as = "expired"  # answers the first half of its lines
    code = main(["evaluate", "--dataset", "rows.jsonl", "--prompts", str(PROMPTS), "--base-url", fake_openai.url,
                 "--batch", "--no-cache", "--verbose"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "expired before answering" in err
    ranks = [json.loads(line)["rank_before"] for line in out.splitlines() if line.startswith('{"query_id"')]
    assert 3 in ranks and None in ranks  # some rows got their answers, others an error


@pytest.fixture
def workdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return egeo_workdir(tmp_path, monkeypatch, rows=4)


@pytest.mark.plugin
def test_batch_needs_the_openai_client(counting_client: pytest.Pytester) -> None:
    result = counting_client.runpytest("data/smoke.jsonl", "--geo-batch", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--geo-batch needs the OpenAI client*"])


PROCEDURE_SUITE = """
import pytest_geo

shout = pytest_geo.prompt("shout", "Original description: {{input}}")

shout_eval = pytest_geo.suite("shout", data={"items": [("kettle", None)]})

@shout_eval.metric
def answered(items, expected):
    return bool(shout(items)), "answered"
"""


@pytest.mark.plugin
def test_suite_procedures_go_as_ordinary_calls_beside_batched_rows(served_project: GeoProject) -> None:
    """A procedure is called one suite item at a time: a batch of one per item would make
    each item wait for a whole batch, so under --geo-batch it is an ordinary call."""
    served_project.pytester.makepyfile(test_batch_shout_suite=PROCEDURE_SUITE)  # unique: modules are cached by name
    dataset = served_project.dataset(2)
    result = served_project.run(str(dataset), "test_batch_shout_suite.py", "--geo-batch", "--geo-no-cache")
    result.assert_outcomes(passed=3)
    assert len(served_project.server.requests) == 1  # the procedure's call
    assert sum(len(uploaded_lines(served_project.server, b)) for b in served_project.server.batches.created) == 6


@pytest.mark.plugin
def test_batched_answers_cost_half_the_list_price(served_project: GeoProject) -> None:
    served_project.priced().run(str(served_project.dataset(3)), "--geo-batch", "--geo-cache-dir", "cache",
                                "--geo-report", "r.json").assert_outcomes(passed=3)
    report = json.loads((served_project.pytester.path / "r.json").read_text())
    for role in ("ranker", "rewriter"):  # gpt-4o-mini, every role's default: $0.15 and $0.60 per million
        usage = report["usage"][role]
        listed = (usage["prompt_tokens"] * 0.15 + usage["completion_tokens"] * 0.60) / 1e6
        assert usage["batch_calls"] == usage["calls"] > 0
        assert report["cost"]["roles"][role]["cost"] == pytest.approx(listed / 2, rel=1e-6)


@pytest.mark.plugin
def test_lines_refusing_a_parameter_are_healed_sent_again_and_the_lesson_kept(served_project: GeoProject) -> None:
    """A model the table does not know refuses `temperature` in every line of the first
    batch: the change is learned from the lines' 400s, only the refused lines go again,
    healed, in the next batch, and a later run sends its lines healed from the start."""
    server = served_project.server
    server.refuses_temperature = {"acme-thinker-2"}
    flags = ("--geo-batch", "--geo-cache-dir", "cache", "--geo-ranker-model", "acme-thinker-2",
             "--geo-rewriter-model", "acme-thinker-2")
    result = served_project.run(str(served_project.dataset(4)), *flags, "--geo-report", "r.json")
    result.assert_outcomes(passed=4)
    assert server.requests == []  # no ordinary call: the healed lines went as a batch too
    refused, healed, second = (uploaded_lines(server, b) for b in server.batches.created)
    assert len(refused) == 8 and all(line["body"]["temperature"] == 0 for line in refused)  # type: ignore[index]
    assert len(healed) == 8 and not any("temperature" in line["body"] for line in healed)  # type: ignore[operator]
    assert sorted(str(line["body"]["messages"]) for line in healed) == sorted(  # type: ignore[index]
        str(line["body"]["messages"]) for line in refused)  # type: ignore[index]
    assert len(second) == 4 and not any("temperature" in line["body"] for line in second)  # type: ignore[operator]
    assert server.refused == [("acme-thinker-2", "temperature")] * 8
    change = "acme-thinker-2: sent without temperature (the server refused 0)"
    result.stdout.fnmatch_lines(["requests changed to what the server accepts:", f"  {change}"])
    report = json.loads((served_project.pytester.path / "r.json").read_text())
    assert [c["text"] for c in report["request_changes"]] == [change]
    assert report["usage"]["ranker"]["errors"] == 0 and report["usage"]["ranker"]["batch_calls"] == 8

    server.reset()
    again = served_project.run(str(served_project.dataset(6)), *flags)  # 2 rows not in the cache
    again.assert_outcomes(passed=6)
    assert server.refused == []
    first = uploaded_lines(server, server.batches.created[3])
    assert len(first) == 4 and not any("temperature" in line["body"] for line in first)  # type: ignore[operator]
