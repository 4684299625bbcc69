"""Start-up and exit: the SDK's import under a paused and then frozen GC, with nothing a
finalizer says lost; the run's metadata without importing pytest into `egeo`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import openai
import pytest
from fake_openai import FakeOpenAI

from conftest import GeoProject

pytestmark = pytest.mark.e2e

SDK_IMPORT = """
import gc, json, sys
from pytest_geo.llm.factory import sdk_client_class
assert "openai" not in sys.modules
{before}
collections = []
gc.callbacks.append(lambda phase, info: collections.append(info["generation"]) if phase == "start" else None)
cls = sdk_client_class()
del gc.callbacks[:]
print(json.dumps({{"class": cls.__name__, "collections": collections, "frozen": gc.get_freeze_count(),
                  "unfrozen": len(gc.get_objects()), "enabled": gc.isenabled()}}))
"""


def sdk_import(before: str = "") -> dict[str, object]:
    """What a fresh interpreter saw while the client class (and so the SDK) was imported."""
    done = subprocess.run([sys.executable, "-c", SDK_IMPORT.format(before=before)], capture_output=True, text=True,
                          check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_sdk_is_imported_with_one_collection_before_it_and_what_it_built_frozen() -> None:
    seen = sdk_import()
    assert seen["class"] == "OpenAIChatClient"
    assert seen["collections"] == [2]  # the one full collection before the import, none during it
    assert seen["enabled"] is True
    frozen, unfrozen = seen["frozen"], seen["unfrozen"]
    assert isinstance(frozen, int) and isinstance(unfrozen, int)
    assert frozen > 10 * unfrozen  # the later collections walk a tenth of the heap or less


def test_a_gc_the_program_disabled_stays_disabled() -> None:
    seen = sdk_import(before="gc.disable()")
    assert seen["enabled"] is False
    assert seen["class"] == "OpenAIChatClient"


CYCLES = """
import gc


class Cycle:
    def __init__(self, said):
        self.me = self
        self.said = said

    def __del__(self):
        raise RuntimeError(self.said)


Cycle("finalizer of a cycle dropped at import")


def test_drops_a_cycle():
    Cycle("finalizer of a cycle dropped by a test")
    gc.collect()
"""


def test_pytest_still_reports_what_finalizers_raise_around_the_sdk_import(served_project: GeoProject) -> None:
    """The client (and so the SDK) is built when collection finishes: garbage from before
    (the module's) and from after (the test's) is still finalized and reported."""
    served_project.dataset(2)
    served_project.pytester.makepyfile(test_cycles=CYCLES)
    result = served_project.pytester.runpytest_subprocess(*served_project.args("rows.jsonl", "test_cycles.py"))
    result.assert_outcomes(passed=3)
    output = result.stdout.str() + result.stderr.str()
    assert "RuntimeError: finalizer of a cycle dropped at import" in output
    assert "RuntimeError: finalizer of a cycle dropped by a test" in output
    assert served_project.server.requests  # the rows ran against the server: the SDK was imported


def test_the_run_metadata_names_pytest_without_importing_it() -> None:
    """`egeo` has no other use for pytest: its version comes from the installed package."""
    done = subprocess.run([sys.executable, "-c", "import json, sys; from pytest_geo.report.metadata import versions; "
                           "print(json.dumps([versions()['pytest'], 'pytest' in sys.modules]))"],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [pytest.__version__, False]


def test_the_fake_server_tells_a_bench_when_the_first_request_came_and_the_last_answer_went(
        fake_openai: FakeOpenAI) -> None:
    """bench_startup times a client in another process against these wall-clock stamps."""
    def stats() -> dict[str, object]:
        with urllib.request.urlopen(f"{fake_openai.url}/stats", timeout=10) as response:
            result: dict[str, object] = json.load(response)
        return result

    assert (stats()["first_request_at"], stats()["last_answer_at"]) == (None, None)
    client = openai.OpenAI(base_url=fake_openai.url, api_key="sk-test-dummy-0000", max_retries=0)
    before = time.time()
    for _ in range(2):
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Query: kettle"}])
    after = time.time()
    client.close()
    first, last = stats()["first_request_at"], stats()["last_answer_at"]
    assert isinstance(first, float) and isinstance(last, float)
    assert before <= first < last <= after
    fake_openai.reset()
    assert (stats()["first_request_at"], stats()["last_answer_at"]) == (None, None)
