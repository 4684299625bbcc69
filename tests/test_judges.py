"""--geo-judge: a panel of judges, each ranking every row before and after its rewrite
(one rewrite per variant, shared by the judges), per-judge, panel and agreement figures."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from conftest import GeoProject


def models_called(project: GeoProject) -> Counter[tuple[str, str]]:
    """(model, step) of every chat request the fake server received; the step is told
    from the prompt (a ranker's system prompt asks for ordered_ids)."""
    seen: Counter[tuple[str, str]] = Counter()
    for request in project.server.requests:
        body = request["body"]
        system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
        seen[(body["model"], "rank" if "ordered_ids" in system else "rewrite")] += 1
    return seen


def report(project: GeoProject, name: str = "r.json") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project.pytester.path / name).read_text(encoding="utf-8"))
    return data


def test_three_judges_make_j_plus_1_plus_j_calls_a_row(served_project: GeoProject) -> None:
    served_project.dataset(3)
    result = served_project.run("rows.jsonl", "--geo-judge", "a=m-a", "--geo-judge", "b=m-b",
                                "--geo-judge", "c=m-c", "--geo-report", "r.json", "--geo-no-cache")
    result.assert_outcomes(passed=3)
    assert models_called(served_project) == {("m-a", "rank"): 6, ("m-b", "rank"): 6, ("m-c", "rank"): 6,
                                               ("gpt-4o-mini", "rewrite"): 3}
