"""Input read only from regular files and within bounds (issue 14): FIFOs, /dev/zero
links, over-long lines and YAML alias bombs are clean errors in bounded time and memory,
made here at test time (the static hostile inputs live in tests/corpus/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import cache_entries, copy_prompts, no_traceback

CORPUS = Path(__file__).resolve().parent / "corpus"


ROW = ('{"query_id": "%s", "query": "kettle", "target_id": "t", "candidates": [{"id": "a", "title": "Steel kettle", '
       '"description": "1.7 l steel kettle."}, {"id": "t", "title": "Travel kettle", "description": "Folding."}]}\n')


HANG_GUARD = 120  # seconds; these runs take a few, a blocked read would take forever


def limited(code: str, memory: int = 1 << 30) -> str:
    """`code` run after capping the address space (RLIMIT_AS), so reading without end
    fails fast with MemoryError instead of taking the machine's memory."""
    return f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))\n{code}"


def run_limited(pytester: pytest.Pytester, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", limited(code)], cwd=pytester.path, capture_output=True, text=True,
                          timeout=HANG_GUARD)


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")


@pytest.mark.e2e
@needs_fifo
def test_a_fifo_named_as_dataset_is_a_usage_error(pytester: pytest.Pytester) -> None:
    os.mkfifo(pytester.path / "rows.jsonl")
    result = pytester.runpytest_subprocess("--geo-dataset", "rows.jsonl", "--geo-mock", timeout=HANG_GUARD)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --geo-dataset: dataset not a regular file: rows.jsonl"])


@pytest.mark.e2e
def test_egeo_on_dev_zero_stops_with_one_line_in_bounded_memory(pytester: pytest.Pytester) -> None:
    copy_prompts(pytester.path / "prompts")
    (pytester.path / "zero.jsonl").symlink_to("/dev/zero")
    done = run_limited(pytester, "import sys\nfrom pytest_geo.cli import main\n"
                                 "sys.exit(main(['evaluate', '--dataset', 'zero.jsonl', '--mock']))")
    assert done.returncode == 2, done.stderr
    assert done.stderr == "egeo: error: zero.jsonl: cannot read dataset: not a regular file (a character device)\n"


@pytest.mark.e2e
@needs_fifo
@pytest.mark.parametrize("special", ["fifo", "zero"])
def test_suite_data_that_is_not_a_regular_file_is_a_collection_error(pytester: pytest.Pytester,
                                                                     special: str) -> None:
    if special == "fifo":
        os.mkfifo(pytester.path / "rows.jsonl")
    else:
        (pytester.path / "rows.jsonl").symlink_to("/dev/zero")
    pytester.makefile(".geo.yaml", square="suite: square\nprocedure: builtins:str\ndata:\n  rows: rows.jsonl\n"
                                           "metric: {builtin: exact_match, dataset: rows}\n")
    result = pytester.runpytest_subprocess("square.geo.yaml", timeout=HANG_GUARD)
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error
    kind = "a FIFO" if special == "fifo" else "a character device"
    result.stdout.fnmatch_lines([f"*square.geo.yaml: suite 'square': dataset 'rows' failed to load: "
                                 f"*rows.jsonl: cannot read dataset: not a regular file ({kind})"])
    no_traceback(result)


@pytest.mark.plugin
def test_a_line_over_the_cap_is_a_line_problem_and_the_other_rows_run(pytester: pytest.Pytester) -> None:
    from pytest_geo.data.dataset import MAX_LINE_BYTES

    copy_prompts(pytester.path / "prompts")
    with (pytester.path / "rows.jsonl").open("w") as handle:
        handle.write(ROW % "ok1")
        handle.write('{"query": "' + "x" * (MAX_LINE_BYTES + 10) + '"}\n')
        handle.write(ROW % "ok3")
    result = pytester.runpytest("rows.jsonl", "--geo-mock", "-rA")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["rows.jsonl:2: line longer than 16 MiB"])
    assert max(map(len, result.outlines)) < 300


@pytest.mark.e2e
def test_cache_entries_that_are_fifos_links_to_dev_zero_or_huge_are_misses(pytester: pytest.Pytester) -> None:
    from pytest_geo.llm.cache import MAX_ENTRY_BYTES, ResponseCache

    cache = ResponseCache(pytester.path / "cache")
    keys = {"fifo": "aa" + "0" * 62, "zero": "bb" + "0" * 62, "huge": "cc" + "0" * 62}
    for key in keys.values():
        cache.path(key).parent.mkdir(parents=True)
    if hasattr(os, "mkfifo"):
        os.mkfifo(cache.path(keys["fifo"]))
    cache.path(keys["zero"]).symlink_to("/dev/zero")
    entry = {"key": keys["huge"], "model": "m", "text": "x" * MAX_ENTRY_BYTES, "prompt_tokens": 1,
             "completion_tokens": 1}
    cache.path(keys["huge"]).write_text(json.dumps(entry))
    done = run_limited(pytester, "from pathlib import Path\nfrom pytest_geo.llm.cache import ResponseCache\n"
                                 f"cache = ResponseCache(Path('cache'))\n"
                                 f"print([cache.get(k) for k in {list(keys.values())!r}])")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[None, None, None]"


@pytest.mark.e2e
@needs_fifo
def test_a_run_over_a_cache_with_planted_fifos_and_dev_zero_links_completes(served_project: Any) -> None:
    dataset = str(served_project.dataset(2))
    served_project.run(dataset).assert_outcomes(passed=2)
    cache = served_project.pytester.path / ".pytest_cache" / "d" / "geo"
    assert len(cache_entries(cache)) == 6
    entries = sorted((cache / "answers").glob("*.jsonl"))  # the files holding them
    assert entries
    for index, entry in enumerate(entries):
        entry.unlink()
        if index % 2:
            os.mkfifo(entry)
        else:
            entry.symlink_to("/dev/zero")
    served_project.server.reset()
    result = served_project.pytester.runpytest_subprocess(*served_project.args(dataset), timeout=HANG_GUARD)
    result.assert_outcomes(passed=2)
    assert len(served_project.server.requests) == 6  # every entry was a miss


ALIAS_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10))


@pytest.mark.e2e
@pytest.mark.parametrize(("name", "text", "message"), [
    ("bomb", "suite: square\n" + ALIAS_BOMB,
     "bomb.geo.yaml:7: invalid YAML: aliases expand the document beyond 100,000 nodes"),
    ("deep", "suite: square\ndata: " + "[" * 20_000 + "]" * 20_000 + "\n",
     "deep.geo.yaml:2: invalid YAML: nested more than 100 levels deep"),
])
def test_yaml_bombs_are_invalid_yaml_in_bounded_memory(pytester: pytest.Pytester, name: str, text: str,
                                                       message: str) -> None:
    (pytester.path / f"{name}.geo.yaml").write_text(text)
    done = run_limited(pytester, "from pathlib import Path\n"
                                 "from pytest_geo.suites.suite_file import SuiteFileError, load_suite_file\n"
                                 "try:\n"
                                 f"    load_suite_file(Path('{name}.geo.yaml'), '{name}.geo.yaml')\n"
                                 "except SuiteFileError as exc:\n"
                                 "    print(exc)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == message + "\n"
    result = pytester.runpytest(f"{name}.geo.yaml")
    result.stdout.fnmatch_lines([message])
    no_traceback(result)
