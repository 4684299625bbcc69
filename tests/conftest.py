"""Shared fixtures: a pytester directory laid out like a project using pytest-geo."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROMPTS = REPO / "prompts"
SMOKE = REPO / "eval" / "datasets" / "geo_smoke.jsonl"

pytest_plugins = ["pytester"]


@pytest.fixture
def geo_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester dir with the repo's prompts and smoke dataset, and no key in the env."""
    shutil.copytree(PROMPTS, pytester.path / "prompts")
    (pytester.path / "data").mkdir()
    shutil.copy(SMOKE, pytester.path / "data" / "smoke.jsonl")
    pytester.makeini("[pytest]\n")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("GEO_EVAL_MOCK", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return pytester


COUNTING_CONFTEST = '''
import json
from pytest_geo.llm.mock import MockClient

CALLS = []

class Counting(MockClient):
    async def complete(self, request):
        CALLS.append((request.role, request.context.get("query")))
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Counting()

def pytest_sessionfinish(session):
    (session.config.rootpath / "calls.json").write_text(json.dumps(CALLS))
'''


@pytest.fixture
def counting_client(geo_project: pytest.Pytester) -> pytest.Pytester:
    """Every model call is recorded in calls.json at the end of the run."""
    geo_project.makeconftest(COUNTING_CONFTEST)
    return geo_project
