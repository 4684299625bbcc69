"""Users of the E-GEO harness (geo_eval.py and its prompts/): a prompts directory in its
layout works unchanged, and the same rows and seed give the same targets."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from test_optimize import Recording

from conftest import SMOKE, GeoProject
from pytest_geo import cli
from pytest_geo.data.dataset import Candidate, GeoRow, read_dataset
from pytest_geo.engine.experiment import candidate_values
from pytest_geo.llm import factory

# A prompts directory as the harness's users write it: {{candidates}} in its block
# format, and the meta prompt with {{batch_summary}} and {{history}}.
HARNESS_PROMPTS = {
    "ranker_system.txt": 'Rank the products for the query. Answer {"ordered_ids": [...]} only.',
    "ranker_user.txt": "Query: {{query}}\n\nCandidates:\n{{candidates}}\n",
    "rewriter_system.txt": 'Rewrite the description; add no facts. Answer {"rewritten_description": "..."}.',
    "rewriter_user.txt": "Shopper query: {{query}}\nTitle: {{title}}\nOriginal description: {{description}}\n",
    "meta_optimizer_system.txt": 'Improve the rewriter prompt. Answer {"new_prompt": "..."}.',
    "meta_optimizer_user.txt": "Prompt:\n{{current_prompt}}\nMetrics: {{batch_summary}}\nHistory:\n{{history}}\n",
}


def harness_prompts(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in HARNESS_PROMPTS.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def harness_targets(path: Path, seed: int) -> list[str]:
    """The harness's rule, written out: one Random(seed), consumed in file order by
    rng.choice(candidates) for each valid row without a target_id."""
    rng = random.Random(seed)
    targets = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a malformed line consumes nothing
        if not isinstance(row, dict) or "candidates" not in row:
            continue
        targets.append(row["target_id"] if "target_id" in row else rng.choice(row["candidates"])["id"])
    return targets


def mixed_dataset(path: Path, n: int = 12) -> Path:
    """Rows with and without target_id, a malformed line and a schema violation between them."""
    lines = []
    for i in range(n):
        candidates = [{"id": f"c{i}-{k}", "title": f"Item {k}", "description": f"item {k} of row {i}"}
                      for k in range(3 + i % 3)]
        row: dict[str, Any] = {"query_id": f"r{i}", "query": f"query {i}", "candidates": candidates}
        if i % 3 == 0:
            row["target_id"] = candidates[-1]["id"]
        lines.append(json.dumps(row))
        if i == 4:
            lines.append("{not json")
        if i == 7:
            lines.append(json.dumps({"query": "no candidates"}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- targets ---------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("seed", [7, 1234])
def test_target_choice_is_the_harness_rule(tmp_path: Path, seed: int) -> None:
    path = mixed_dataset(tmp_path / "d.jsonl")
    rows = [line for line in read_dataset(path, seed) if isinstance(line, GeoRow)]
    assert [row.target_id for row in rows] == harness_targets(path, seed)
    assert len(rows) == 12


@pytest.mark.xdist
def test_selection_and_xdist_do_not_change_targets(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    pytester.makeini("[pytest]\n")
    path = mixed_dataset(pytester.path / "d.jsonl")
    expected = dict(zip([f"r{i}" for i in range(12)], harness_targets(path, 7), strict=True))

    def targets(*args: str) -> dict[str, str]:
        pytester.runpytest("d.jsonl", "--geo-mock", "--geo-report", "r.json", *args)
        rows = json.loads((pytester.path / "r.json").read_text())["rows"]
        return {row["query_id"]: row["target_id"] for row in rows}

    assert targets() == expected
    assert targets("-k", "r5 or r10") == {k: expected[k] for k in ("r5", "r10")}
    assert targets("--deselect", "d.jsonl::r0", "-n", "2") == {k: v for k, v in expected.items() if k != "r0"}


@pytest.mark.e2e
def test_egeo_default_seed_is_the_harness_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = mixed_dataset(tmp_path / "d.jsonl")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["evaluate", "--dataset", str(path), "--mock", "--verbose"]) == 1  # malformed lines
    lines = capsys.readouterr().out.splitlines()[:12]
    assert [json.loads(line)["target_id"] for line in lines] == harness_targets(path, 7)


# --- rendering ---------------------------------------------------------------------


@pytest.mark.unit
def test_candidates_render_in_the_harness_block_format() -> None:
    candidates = (Candidate("p1", "Aero One", "13-inch ultrabook.\nWeighs 980g."), Candidate("p2", "WorkPro", "15-inch."))
    values = candidate_values("q", None, candidates)
    assert values["candidates"] == (
        "- id: p1\n  title: Aero One\n  description:\n  13-inch ultrabook.\n  Weighs 980g.\n"
        "\n"
        "- id: p2\n  title: WorkPro\n  description:\n  15-inch."
    )
    assert [json.loads(line)["id"] for line in values["candidates_jsonl"].splitlines()] == ["p1", "p2"]
    assert [c["id"] for c in json.loads(values["candidates_json"])] == ["p1", "p2"]


@pytest.mark.e2e
def test_verbose_lines_are_the_harness_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = json.loads(SMOKE.read_text().splitlines()[0])
    del row["query_id"]
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert cli.main(["evaluate", "--dataset", str(path), "--mock", "--verbose"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ('{"query_id": "", "target_id": "p1", "rank_before": 3, "rank_after": 1, '
                     '"rank_improvement": 2.0}')


# --- a prompts directory in the harness's layout ------------------------------------


@pytest.mark.plugin
def test_harness_prompts_work_for_evaluate_over_http(
    served_project: GeoProject, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = harness_prompts(served_project.pytester.path / "harness_prompts")
    data = served_project.dataset(3)
    monkeypatch.chdir(served_project.pytester.path)
    code = cli.main(["evaluate", "--dataset", str(data), "--prompts", str(prompts), "--no-cache",
                     "--base-url", served_project.server.url, "--temperature", "0.4"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["avg_rank_improvement"] == 2.0
    ranker = [r["body"] for r in served_project.server.requests if "ordered_ids" in r["body"]["messages"][0]["content"]]
    assert any("- id: t0\n  title: Thing\n  description:\n  steel, 1.7 litres" in r["messages"][1]["content"]
               for r in ranker)
    assert {r["body"]["temperature"] for r in served_project.server.requests} == {0.4}


@pytest.mark.plugin
def test_harness_prompts_work_in_the_plugin(served_project: GeoProject) -> None:
    harness_prompts(served_project.pytester.path / "prompts")
    served_project.dataset(3)
    result = served_project.run("rows.jsonl")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["rows.jsonl: n=3 avg_rank_improvement=2.0000 *"])


@pytest.mark.e2e
def test_meta_prompts_are_checked_only_by_optimize_prompts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = harness_prompts(tmp_path / "prompts")
    (prompts / "meta_optimizer_user.txt").write_text("{{current_prompt}} {{not_a_placeholder}}")
    assert cli.main(["evaluate", "--dataset", str(SMOKE), "--prompts", str(prompts), "--mock", "--limit", "1"]) == 0
    code = cli.main(["optimize-prompts", "--train", str(SMOKE), "--val", str(SMOKE), "--prompts", str(prompts),
                     "--mock", "--iters", "1"])
    assert code == 2
    assert f"{prompts / 'meta_optimizer_user.txt'}: unknown placeholder {{{{not_a_placeholder}}}}" in (
        capsys.readouterr().err)


@pytest.mark.e2e
def test_harness_meta_prompt_gets_batch_summary_and_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = harness_prompts(tmp_path / "prompts")
    client = Recording()
    monkeypatch.setattr(factory, "build_client", lambda settings: client)
    code = cli.main(["optimize-prompts", "--train", str(SMOKE), "--val", str(SMOKE), "--prompts", str(prompts),
                     "--mock", "--iters", "7", "--meta-model", "meta-1", "--temperature", "0.2"])
    assert code == 0
    asked = [r for r in client.requests if r.role == "optimizer"]
    assert len(asked) == 7 and {r.model for r in asked} == {"meta-1"}
    assert {r.temperature for r in client.requests} == {0.2}
    last = asked[-1].messages[1]["content"]
    summary_text = last.split("Metrics: ", 1)[1].split("\n", 1)[0]
    summary = json.loads(summary_text)
    assert summary_text == json.dumps(summary, sort_keys=True)
    assert set(summary) == {"n", "avg_rank_improvement", "win_rate", "stderr_rank_improvement"}
    history_text = last.split("History:\n", 1)[1].rstrip("\n")
    history = json.loads(history_text)
    assert history_text == json.dumps(history, indent=2, sort_keys=True)
    assert [step["iter"] for step in history] == [1, 2, 3, 4, 5, 6]  # the last 6 of 7
    assert all(set(step) == {"iter", "prompt_len", "train"} for step in history)
    assert history[-1]["train"] == summary
    current = last.split("Prompt:\n", 1)[1].split("\nMetrics: ", 1)[0]
    assert history[-1]["prompt_len"] == len(current)


@pytest.mark.e2e
def test_optimizer_model_is_an_alias_of_meta_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = harness_prompts(tmp_path / "prompts")
    client = Recording()
    monkeypatch.setattr(factory, "build_client", lambda settings: client)
    assert cli.main(["optimize-prompts", "--train", str(SMOKE), "--val", str(SMOKE), "--prompts", str(prompts),
                     "--mock", "--iters", "1", "--optimizer-model", "meta-2"]) == 0
    assert {r.model for r in client.requests if r.role == "optimizer"} == {"meta-2"}
