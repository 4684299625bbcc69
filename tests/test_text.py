"""Text from datasets and answers shown on the terminal has its control characters
escaped (pytest_geo/text.py)."""

from __future__ import annotations

import json

import pytest

from conftest import copy_prompts

pytestmark = pytest.mark.plugin

ROW = ('{"query_id": "%s", "query": "kettle", "target_id": "t", "candidates": [{"id": "a", "title": "Steel kettle", '
       '"description": "1.7 l steel kettle."}, {"id": "t", "title": "Travel kettle", "description": "Folding."}]}\n')


def test_control_characters_from_data_and_answers_are_escaped_on_the_terminal(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    evil = "\x1b[2J\x1b[31mred\x00nul\nnext"
    pytester.makeconftest(f'''
from pytest_geo.llm.mock import MockClient
from pytest_geo.llm.base import ModelError

class Evil(MockClient):
    async def complete(self, request):
        if "second" in request.context.get("query", ""):
            raise ModelError({evil!r})
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Evil()
''')
    rows = [json.loads(ROW % "x"), json.loads(ROW % "plain")]
    rows[0]["query_id"] = evil
    rows[1]["query"] = "second kettle"
    (pytester.path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = pytester.runpytest("rows.jsonl", "-v", "-rA")
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert "\x1b" not in text and "\x00" not in text
    result.stdout.fnmatch_lines(["*rows.jsonl::\\x1b[[]2J\\x1b[[]31mred\\x00nul\\x0anext@line1 PASSED*",
                                 "rows.jsonl:2: error: \\x1b[[]2J\\x1b[[]31mred\\x00nul*",
                                 "- rows.jsonl::rank_improvement: * error: \\x1b[[]2J*"])
