"""Prompt procedures: scored by suites in pytest runs, optimized by `egeo optimize-prompts --suites`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import copy_prompts
from pytest_geo import cli
from pytest_geo.llm import factory
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.mock import MockClient

SUITES = '''
from pathlib import Path
import pytest_geo

headline = pytest_geo.prompt("headline", Path("headline.txt"), optimize=True)

headline_eval = pytest_geo.suite(
    "headline",
    data={"items": [("red kettle", "red kettle"), ("blue mug", "blue mug")]},
    test_data={"items": [("green pan", "green pan"), ("grey pot", "GREY POT")]},
)

@headline_eval.metric
def same(items, expected):
    out = headline(items)
    return out == expected, f"said {out!r}"
'''


@pytest.mark.plugin
def test_a_prompt_procedure_needs_no_egeo_prompts_directory(pytester: pytest.Pytester) -> None:
    """The E-GEO prompts are for GEO rows; a suite of prompt procedures runs without them."""
    pytester.makeini("[pytest]\n")
    pytester.makefile(".txt", headline="Write a headline for: {{input}}\n")
    pytester.makepyfile(test_headline=SUITES)
    assert not (pytester.path / "prompts").exists()
    result = pytester.runpytest("--geo-mock")
    result.assert_outcomes(passed=2)
    assert result.stdout.lines[-2] == "- headline::same: 0.5000 | said 'green pan'; said 'grey pot'"


@pytest.mark.plugin
def test_a_suite_scores_a_prompt_procedure_through_the_runs_client(geo_project: pytest.Pytester) -> None:
    geo_project.makefile(".txt", headline="Write a headline for: {{input}}\n")
    geo_project.makepyfile(test_headline=SUITES)
    geo_project.makeconftest('''
from pytest_geo.llm.mock import MockClient
SEEN = []

class Recording(MockClient):
    async def complete(self, request):
        SEEN.append(request)
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Recording()

def pytest_sessionfinish(session):
    (session.config.rootpath / "seen.txt").write_text(
        "\\n".join(f"{r.role} {r.model} {r.messages[-1]['content']!r}" for r in SEEN))
''')
    result = geo_project.runpytest("--geo-mock", "--geo-rewriter-model", "writer-1")
    result.assert_outcomes(passed=2)
    assert result.stdout.lines[-2] == "- headline::same: 0.5000 | said 'green pan'; said 'grey pot'"
    seen = (geo_project.path / "seen.txt").read_text().splitlines()
    assert sorted(seen) == [
        "procedure writer-1 'Write a headline for: green pan'",
        "procedure writer-1 'Write a headline for: grey pot'",
    ]


@pytest.mark.unit
def test_prompt_procedure_outside_a_run_says_so() -> None:
    import pytest_geo

    with pytest.raises(RuntimeError, match="prompt procedure 'p' called outside a pytest-geo run"):
        pytest_geo.prompt("p", "{{input}}")("x")


@pytest.fixture
def suites_project(tmp_path: Path) -> Path:
    copy_prompts(tmp_path / "prompts")
    (tmp_path / "headline.txt").write_text("Write a headline for: {{input}}\n")
    (tmp_path / "evals.py").write_text(SUITES)
    return tmp_path


class Proposing(MockClient):
    """The mock, except that the optimizer proposes `proposal` and requests are kept."""

    def __init__(self, proposal: str | None = None) -> None:
        self.proposal = proposal
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        if request.role == "optimizer" and self.proposal is not None:
            return ChatResponse(json.dumps({"new_prompt": self.proposal, "rationale": "test"}))
        return await super().complete(request)


def optimize_suites(monkeypatch: pytest.MonkeyPatch, root: Path, *extra: str, client: Proposing | None = None) -> int:
    client = client or Proposing()
    monkeypatch.setattr(factory, "build_client", lambda settings: client)
    monkeypatch.chdir(root)
    return cli.main(["optimize-prompts", "--suites", "evals.py", "--mock", "--iters", "2", *extra])


class Echoing(Proposing):
    """The procedure answers its input only when the template asks to echo it: the
    current template scores 0 and the proposal is strictly better."""

    async def complete(self, request: ChatRequest) -> ChatResponse:
        if request.role == "procedure" and "Echo" not in request.messages[-1]["content"]:
            self.requests.append(request)
            return ChatResponse("no idea")
        return await super().complete(request)


@pytest.mark.e2e
def test_optimizing_a_suite_prompt_is_non_destructive(suites_project: Path, monkeypatch, capsys) -> None:
    before = (suites_project / "headline.txt").read_bytes()
    client = Echoing(proposal="Echo: {{input}}")
    assert optimize_suites(monkeypatch, suites_project, client=client) == 0
    assert (suites_project / "headline.txt").read_bytes() == before
    candidate = (suites_project / "headline.candidate.txt").read_text()
    assert "{{input}}" in candidate and candidate != before.decode()
    scores = json.loads((suites_project / "headline.optimized_scores.json").read_text())
    assert scores["component"] == "headline"
    assert scores["baseline_validation"] == {"score": 0.0, "win_rate": 0.0, "stderr": 0.0, "n": 2}
    assert scores["best_validation"] == {"score": 0.5, "win_rate": 0.5, "stderr": 0.5, "n": 2}
    assert scores["post_optimization_train"]["n"] == 2
    assert scores["val"] == "evals.py::headline test_data"
    captured = capsys.readouterr()
    assert "candidate 0 (current prompt): validation score=0.0000" in captured.err
    result = json.loads(captured.out)["headline"]  # the harness's result JSON, per procedure
    assert (result["applied"], result["best"]["prompt"], result["best"]["val"]) == (
        False, candidate, {"score": 0.5, "win_rate": 0.5, "stderr": 0.5, "n": 2})
    assert result["saved_to"] == str(suites_project / "headline.candidate.txt")


@pytest.mark.e2e
def test_apply_replaces_the_procedures_template_file(suites_project: Path, monkeypatch) -> None:
    assert optimize_suites(monkeypatch, suites_project, "--apply", client=Echoing(proposal="Echo: {{input}}")) == 0
    assert (suites_project / "headline.txt").read_text() == "Echo: {{input}}"
    assert (suites_project / "headline.candidate.txt").read_text() == "Echo: {{input}}"


@pytest.mark.e2e
def test_a_proposal_that_drops_a_placeholder_is_never_written(suites_project: Path, monkeypatch, capsys) -> None:
    client = Proposing(proposal="Write a catchy headline.")
    assert optimize_suites(monkeypatch, suites_project, "--apply", client=client) == 0
    assert (suites_project / "headline.txt").read_text() == "Write a headline for: {{input}}\n"
    assert (suites_project / "headline.candidate.txt").read_text() == "Write a headline for: {{input}}\n"
    assert "rejected: headline: missing placeholder {{input}} that this procedure needs" in capsys.readouterr().err


@pytest.mark.e2e
def test_optimizable_procedure_needs_a_same_named_suite(suites_project: Path, monkeypatch, capsys) -> None:
    text = (suites_project / "evals.py").read_text().replace('"headline",\n    data', '"title",\n    data')
    (suites_project / "evals.py").write_text(text.replace("headline_eval.metric", "headline_eval.metric"))
    assert optimize_suites(monkeypatch, suites_project) == 2
    assert capsys.readouterr().err == (
        "egeo: error: evals.py: prompt procedure 'headline' is marked optimize=True "
        "but no eval suite is named 'headline'\n"
    )


@pytest.mark.e2e
def test_optimize_needs_train_and_val_or_suites(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["optimize-prompts", "--mock"])
    assert exit_info.value.code == 2
    assert "optimize-prompts needs --train and --val, or --suites FILE" in capsys.readouterr().err
