"""`egeo optimize-prompts`: the GEPA search over the rewriter prompt, run offline."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import copy_prompts
from pytest_geo import cli
from pytest_geo.llm import factory
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.mock import INSTRUCTIONS, MockClient

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "eval" / "datasets" / "geo_smoke.jsonl"


@dataclass
class Project:
    root: Path
    prompts: Path
    train: Path
    val: Path

    @property
    def working(self) -> Path:
        return self.prompts / "rewriter_user.txt"

    @property
    def candidate(self) -> Path:
        return self.prompts / "rewriter_user.candidate.txt"

    @property
    def scores(self) -> Path:
        return self.prompts / "rewriter_user.optimized_scores.json"

    def args(self, *extra: str) -> list[str]:
        return ["optimize-prompts", "--train", str(self.train), "--val", str(self.val),
                "--prompts", str(self.prompts), "--mock", *extra]


def make_project(root: Path, train_rows: int | None = None) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    prompts = copy_prompts(root / "prompts")
    val = Path(shutil.copy(SMOKE, root / "val.jsonl"))
    train = root / "train.jsonl"
    lines = SMOKE.read_text(encoding="utf-8").splitlines(keepends=True)
    train.write_text("".join(lines[:train_rows] if train_rows else lines), encoding="utf-8")
    return Project(root, prompts, train, val)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path / "p")


class Recording(MockClient):
    """The mock, keeping every request it answered."""

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return await super().complete(request)

    def count(self, role: str) -> int:
        return sum(1 for r in self.requests if r.role == role)


class Improving(Recording):
    """The mock, except that its rewriter adds the ranking signal only when the template
    holds one of the mock optimizer's instructions: the current prompt scores 0 and the
    first proposal is strictly better."""

    async def complete(self, request: ChatRequest) -> ChatResponse:
        template = str(request.context.get("template", ""))
        if request.role == "rewriter" and not any(i in template for i in INSTRUCTIONS):
            self.requests.append(request)
            return ChatResponse(json.dumps({"rewritten_description": request.context["description"]}))
        return await super().complete(request)


def run(monkeypatch: pytest.MonkeyPatch, project: Project, *extra: str, client: Recording | None = None) -> tuple[int, Recording]:
    client = client or Recording()
    monkeypatch.setattr(factory, "build_client", lambda settings: client)
    return cli.main(project.args(*extra)), client


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_default_writes_a_candidate_and_leaves_the_working_prompt(project, monkeypatch, capsys):
    before = project.working.read_bytes()
    code, _ = run(monkeypatch, project, "--iters", "2", client=Improving())
    captured = capsys.readouterr()
    out = captured.err  # the prose; stdout is the E-GEO harness's result JSON
    assert code == 0
    result = json.loads(captured.out)
    assert {k: result[k] for k in ("applied", "history_len", "saved_to", "hint")} == {
        "applied": False, "history_len": 3, "saved_to": str(project.candidate),
        "hint": "Optimized prompt written to candidate file; re-run with --apply to overwrite the working prompt.",
    }
    assert result["best"] == {"iter": 1, "prompt": project.candidate.read_text(encoding="utf-8"),
                              "val": {"avg_rank_improvement": 2.0, "n": 8, "stderr_rank_improvement": 0.0,
                                      "win_rate": 1.0}}
    assert project.working.read_bytes() == before
    candidate = project.candidate.read_text(encoding="utf-8")
    assert candidate != before.decode()
    assert "{{title}}" in candidate and "{{description}}" in candidate
    assert "candidate 0 (current prompt): validation avg_rank_improvement=0.0000" in out
    assert "candidate 1 (proposal 1): validation avg_rank_improvement=2.0000" in out
    # the second proposal ties the first: strictly better or it does not replace it
    assert "candidate 2 (proposal 2)" in out and "best so far: candidate 1" in out
    assert "model calls: " in out and "unchanged" in out


def test_apply_replaces_the_working_prompt_by_renaming_a_temporary_file(project, monkeypatch):
    renames: list[tuple[Path, Path]] = []
    real_replace = os.replace

    def spy(src, dst):
        renames.append((Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    before = project.working.read_bytes()
    code, _ = run(monkeypatch, project, "--iters", "2", "--apply", client=Improving())
    assert code == 0
    assert project.working.read_bytes() == project.candidate.read_bytes() != before
    into_working = [src for src, dst in renames if dst == project.working]
    assert len(into_working) == 1 and into_working[0].parent == project.prompts
    assert not [p for p in project.prompts.iterdir() if p.name.endswith(".tmp")]
    assert json.loads(project.scores.read_text())["applied"] is True


@pytest.mark.parametrize(
    "bad, problem",
    [
        ("Query: {{query}}\nTitle: {{title}}\nRewrite it, no new facts.", "{{description}}"),
        ("{{title}}: {{description}} costs {{price}}. Rewrite it.", "{{price}}"),
    ],
)
def test_a_proposal_that_breaks_the_placeholders_is_rejected_and_never_written(project, monkeypatch, capsys, bad, problem):
    class BadOptimizer(Recording):
        async def complete(self, request: ChatRequest) -> ChatResponse:
            if request.role == "optimizer":
                self.requests.append(request)
                return ChatResponse(json.dumps({"new_prompt": bad, "rationale": "shorter"}))
            return await super().complete(request)

    before = project.working.read_bytes()
    code, client = run(monkeypatch, project, "--iters", "2", "--apply", client=BadOptimizer())
    out = capsys.readouterr().err
    assert code == 0
    assert project.working.read_bytes() == before
    assert project.candidate.read_bytes() == before
    assert not any(bad.encode() in content for content in files(project.prompts).values())
    scores = json.loads(project.scores.read_text())
    assert scores["proposals_rejected"] == client.count("optimizer") == 6  # 2 proposals, each asked 3 times
    assert "rejected: rewriter_user.txt: " in out and problem in out


def test_the_same_seed_proposes_the_same_candidate(tmp_path, monkeypatch):
    candidates = []
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        project = make_project(tmp_path / name)
        code, _ = run(monkeypatch, project, "--iters", "3", "--seed", seed, client=Improving())
        assert code == 0
        candidates.append(project.candidate.read_bytes())
    assert candidates[0] == candidates[1]
    assert candidates[2] != candidates[0]  # the seed reaches the search and the mock


def test_the_budget_stops_the_search_and_keeps_the_best_so_far(project, monkeypatch, capsys):
    # 8 (current prompt on validation) + 3 + 3 (a minibatch, before and after) = 14;
    # validating the proposal would need 8 more, past 20.
    code, client = run(monkeypatch, project, "--iters", "10", "--max-metric-calls", "20")
    out = capsys.readouterr().err
    assert code == 0
    scores = json.loads(project.scores.read_text())
    assert scores["stopped"] == "max_metric_calls"
    assert scores["metric_calls"] == 14
    assert client.count("optimizer") == 1
    assert project.candidate.read_text(encoding="utf-8") == project.working.read_text(encoding="utf-8")
    assert "stopped: at the metric-call budget of 20" in out


def test_a_budget_below_the_validation_rows_is_a_clear_error(project, monkeypatch, capsys):
    code, client = run(monkeypatch, project, "--max-metric-calls", "7")
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == ("egeo: error: --max-metric-calls 7 is below the 8 validation rows "
                           "that scoring the current prompt needs")
    assert client.requests == [] and not project.candidate.exists()


def test_rank_before_is_asked_once_per_row_and_reused_by_every_candidate(tmp_path, monkeypatch):
    project = make_project(tmp_path / "p", train_rows=4)  # train rows are also validation rows
    code, client = run(monkeypatch, project, "--iters", "3")
    assert code == 0
    rankings = [r for r in client.requests if r.role == "ranker"]
    before = [r for r in rankings if not any(c["description"].startswith("Best for buyers")  # the mock's rewrite
                                             for c in r.context["candidates"])]
    queries = [json.loads(line)["query"] for line in project.val.read_text().splitlines()]
    assert sorted(r.context["query"] for r in before) == sorted(queries)  # once per row, not per candidate
    assert client.count("rewriter") > 2 * len(queries)  # several candidates were scored
    scores = json.loads(project.scores.read_text())
    k, m = scores["candidates_validated"], 8
    assert k == 4
    assert scores["model_calls_by_phase"]["validation"] <= m + 2 * k * m == scores["validation_call_bound"]
    assert scores["model_calls"] == len(client.requests)


def test_the_scores_file(project, monkeypatch):
    code, client = run(monkeypatch, project, "--iters", "2", "--seed", "5")
    assert code == 0
    scores = json.loads(project.scores.read_text())
    baseline = {"n": 8, "avg_rank_improvement": 2.0, "win_rate": 1.0, "stderr_rank_improvement": 0.0}
    assert scores["baseline_validation"] == baseline
    assert scores["best_validation"] == baseline  # the mock's proposals tie the current prompt...
    assert scores["post_optimization_train"] == baseline
    assert scores["seed"] == 5
    assert scores["candidates_tried"] == scores["candidates_validated"] == 3
    assert scores["proposals"] == 2 and scores["proposals_rejected"] == 0
    assert scores["metric_calls"] == 8 + 2 * (3 + 3 + 8)
    assert scores["model_calls"] == len(client.requests)
    assert scores["model_calls_by_role"] == {r: client.count(r) for r in ("optimizer", "ranker", "rewriter")}
    assert scores["stopped"] == "iterations" and scores["applied"] is False
    assert scores["best_is_current_prompt"] is True  # ...and a tie keeps it (the harness's rule)
    assert scores["best_candidate"] == 0


def test_validation_keeps_the_current_prompt_when_a_proposal_scores_worse(tmp_path, monkeypatch):
    """The proposal ties on the training rows but loses on the held-out ones."""
    project = make_project(tmp_path / "p", train_rows=4)
    held_out = {json.loads(line)["query"] for line in project.val.read_text().splitlines()[4:]}

    class Overfits(Recording):
        async def complete(self, request: ChatRequest) -> ChatResponse:
            context = request.context
            if request.role == "optimizer":
                self.requests.append(request)
                new = context["current_prompt"] + "Overfit.\n"
                return ChatResponse(json.dumps({"new_prompt": new, "rationale": "x"}))
            if request.role == "rewriter" and "Overfit." in context["template"] and context["query"] in held_out:
                self.requests.append(request)
                return ChatResponse(json.dumps({"rewritten_description": context["description"]}))
            return await super().complete(request)

    before = project.working.read_bytes()
    code, _ = run(monkeypatch, project, "--iters", "1", "--apply", client=Overfits())
    assert code == 0
    scores = json.loads(project.scores.read_text())
    assert scores["candidates_validated"] == 2
    assert scores["best_is_current_prompt"] is True and scores["best_candidate"] == 0
    assert scores["best_validation"] == scores["baseline_validation"]
    assert project.candidate.read_bytes() == before == project.working.read_bytes()


def test_malformed_rows_are_a_one_line_error_naming_the_file(project, monkeypatch, capsys):
    project.train.write_text(project.train.read_text() + "{not json\n")
    code, client = run(monkeypatch, project)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"egeo: error: {project.train}:9: invalid JSON") and err.count("\n") == 1
    assert client.requests == []


DRIVER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from pytest_geo import cli
    from pytest_geo.llm import factory
    from pytest_geo.llm.mock import MockClient

    class Slow(MockClient):
        async def complete(self, request):
            if request.role == "optimizer":
                Path(sys.argv[1]).write_text("reflecting")
                await asyncio.sleep(60)
            return await super().complete(request)

    factory.build_client = lambda settings: Slow()
    sys.exit(cli.main(sys.argv[2:]))
    """
)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_an_interrupted_run_leaves_the_working_prompt_byte_identical(project, signum):
    driver = project.root / "driver.py"
    driver.write_text(DRIVER)
    marker = project.root / "reflecting"
    before = files(project.prompts)
    proc = subprocess.Popen(
        [sys.executable, str(driver), str(marker), *project.args("--iters", "3", "--apply")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even if ours is ignored
    )
    try:
        deadline = time.monotonic() + 20
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert files(project.prompts) == before  # nothing written, nothing left behind
    if signum == signal.SIGINT:
        assert proc.returncode == 130
        assert err.splitlines()[-1] == "egeo: interrupted" and out == ""  # no result JSON
    else:
        assert proc.returncode == -signal.SIGKILL
