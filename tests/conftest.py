"""Shared fixtures: a fake OpenAI-compatible server on 127.0.0.1 and a pytester project
wired to it (prompts copied in, a dummy key, the server's URL)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

from fake_openai import FakeOpenAI

REPO = Path(__file__).resolve().parent.parent
DUMMY_KEY = "sk-test-dummy-0000"


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


def geo_rows(n: int) -> list[dict[str, Any]]:
    """Rows whose target starts last of three and, with the mock logic, ends first."""
    return [
        {"query_id": f"r{i}", "query": f"red kettle number {i}", "target_id": f"t{i}",
         "candidates": [{"id": f"a{i}", "title": "Red kettle", "description": f"red kettle number {i}"},
                        {"id": f"b{i}", "title": "Kettle", "description": "a kettle"},
                        {"id": f"t{i}", "title": "Thing", "description": "steel, 1.7 litres"}]}
        for i in range(n)
    ]


class GeoProject:
    def __init__(self, pytester: pytest.Pytester, server: FakeOpenAI) -> None:
        self.pytester = pytester
        self.server = server
        shutil.copytree(REPO / "prompts", pytester.path / "prompts")

    def dataset(self, n: int, name: str = "rows.jsonl") -> Path:
        path = self.pytester.path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in geo_rows(n)), encoding="utf-8")
        return path

    def args(self, *extra: str) -> list[str]:
        return ["--geo-base-url", self.server.url, "-p", "no:xdist", *extra]

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest(*self.args(*args))


@pytest.fixture
def geo_project(pytester: pytest.Pytester, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> GeoProject:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    for name in ("OPENAI_BASE_URL", "GEO_EVAL_MOCK", "RANKER_MODEL", "REWRITER_MODEL", "META_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return GeoProject(pytester, fake_openai)
