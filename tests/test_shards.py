"""--geo-shard K/N splits a run's rows; egeo merge makes the shards' reports one run's."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import without_run_dependent
from pytest_geo.data.sampling import chosen_indices, in_shard
from pytest_geo.options import shard

SMOKE = Path(__file__).resolve().parent.parent / "eval" / "datasets" / "geo_smoke.jsonl"


@pytest.mark.unit
def test_shards_partition_the_rows_and_a_new_row_moves_none() -> None:
    names = [f"q{i}" for i in range(200)]
    shards = [{n for n in names if in_shard((k, 3), n)} for k in (1, 2, 3)]
    assert sum(map(len, shards)) == 200 and set().union(*shards) == set(names)
    assert all(40 < len(s) < 95 for s in shards)  # a hash spreads them
    more = names + ["new1", "new2"]
    assert [{n for n in more if in_shard((k, 3), n)} - {"new1", "new2"} for k in (1, 2, 3)] == shards
    assert chosen_indices(names[:10], None, None, 7, (1, 1)) == list(range(10))


@pytest.mark.unit
@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2"])
def test_a_shard_that_is_not_k_of_n_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not K/N with 1 <= K <= N"):
        shard(text)


@pytest.mark.plugin
def test_shards_run_every_row_once(pytester: pytest.Pytester) -> None:
    shutil.copy(SMOKE, pytester.path / "d.jsonl")
    ran = []
    for k in (1, 2, 3):
        result = pytester.runpytest("d.jsonl", "--geo-mock", "-p", "no:cacheprovider", "--geo-shard", f"{k}/3",
                                    "--geo-report", f"s{k}.json")
        assert result.ret == 0
        ran += [r["nodeid"] for r in json.loads((pytester.path / f"s{k}.json").read_text())["rows"]]
    assert sorted(ran) == [f"d.jsonl::q{i}" for i in range(1, 9)]


@pytest.mark.plugin
def test_a_sample_keeps_a_rows_variants_together(pytester: pytest.Pytester) -> None:
    shutil.copy(SMOKE, pytester.path / "d.jsonl")
    (pytester.path / "a.txt").write_text("Title: {{title}}\nDescription: {{description}}\nRewrite it.\n")
    result = pytester.runpytest("d.jsonl", "--geo-mock", "-p", "no:cacheprovider", "--geo-sample", "3",
                                "--geo-variant", "a=a.txt", "--geo-variant", "faq", "-v")
    result.assert_outcomes(passed=6, deselected=10)
    passed = [line.split(" ")[0] for line in result.outlines if " PASSED" in line]
    rows = {name.split("[")[0] for name in passed}
    assert len(rows) == 3 and sorted(passed) == sorted(f"{r}[{v}]" for r in rows for v in ("a", "faq"))


@pytest.mark.e2e
def test_merged_shards_equal_the_whole_run_and_overlaps_are_refused(tmp_path: Path) -> None:
    shutil.copy(SMOKE, tmp_path / "d.jsonl")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)

    pytest_run = ["-m", "pytest", "-p", "no:cacheprovider", "d.jsonl", "--geo-mock"]
    assert run(*pytest_run, "--geo-report", "all.json").returncode == 0
    for k in (1, 2):
        assert run(*pytest_run, "--geo-shard", f"{k}/2", "--geo-report", f"s{k}.json").returncode == 0
    merged = run("-m", "pytest_geo", "merge", "s1.json", "s2.json", "--report", "m.json", "--html", "m.html")
    assert merged.returncode == 0, merged.stderr
    assert json.loads(merged.stdout) == {"avg_rank_improvement": 2.0, "n": 8, "stderr_rank_improvement": 0.0,
                                         "win_rate": 1.0}
    whole, parts = (json.loads((tmp_path / name).read_text()) for name in ("all.json", "m.json"))
    for key in ("geo", "suites", "problems", "usage", "cost"):
        assert parts[key] == whole[key], key
    assert without_run_dependent(parts["rows"]) == without_run_dependent(whole["rows"])
    assert parts["transcripts"]["rows"] == 8 and (tmp_path / "m.html").stat().st_size > 0
    overlap = run("-m", "pytest_geo", "merge", "s1.json", "all.json", "--report", "x.json")
    assert overlap.returncode == 2
    assert "the reports overlap" in overlap.stderr and not (tmp_path / "x.json").exists()
    other = json.loads((tmp_path / "s2.json").read_text())
    other["metadata"]["seed"] = 8
    (tmp_path / "s2.json").write_text(json.dumps(other))
    refused = run("-m", "pytest_geo", "merge", "s1.json", "s2.json", "--report", "x.json")
    assert refused.returncode == 2 and "were made with different settings (seed)" in refused.stderr
