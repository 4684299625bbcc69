"""Scale bench: pytest-geo over one GEO dataset (3,000 rows by default), three ways, side
by side in one run:

- bare: a custom pytest collector that reads the same file and yields no-op items;
- noop: pytest-geo with the experiment replaced by a no-op outcome (its own overhead);
- mock: pytest-geo with the offline mock, in-process (the whole mock run).

Prints wall and CPU time per configuration and the ratios the targets name. Every run
is a fresh `python -m pytest -p no:cacheprovider -q` subprocess, measured from its own
wrapper process so `RUSAGE_CHILDREN` holds that run alone.

    python bench/bench_scale.py [--rows 3000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from common import PROMPTS

BARE_CONFTEST = textwrap.dedent('''
    import json
    import pytest

    class NoopItem(pytest.Item):
        def runtest(self):
            pass

    class RowsFile(pytest.File):
        def collect(self):
            with self.path.open("rb") as handle:
                for line_no, raw in enumerate(handle, start=1):
                    if raw.strip():
                        row = json.loads(raw)
                        yield NoopItem.from_parent(self, name=row.get("query_id") or f"line{line_no}")

    def pytest_collect_file(file_path, parent):
        if file_path.suffix == ".jsonl":
            return RowsFile.from_parent(parent, path=file_path)
''')

NOOP_CONFTEST = textwrap.dedent('''
    # The GEO experiment replaced by a no-op outcome: what is left is pytest-geo itself
    # (collection, validation, items, scheduling, records, hooks, the summary).
    from pytest_geo.engine.experiment import GeoEngine, GeoOutcome

    async def run(self, row, prompts=None, rank_before=None):
        return GeoOutcome(row.query_id, row.target_id, 3, 1, row.target.description)

    GeoEngine.run = run
''')

MEASURE = textwrap.dedent('''
    import json, resource, subprocess, sys, time
    start = time.perf_counter()
    done = subprocess.run(sys.argv[2:], cwd=sys.argv[1], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_kb": usage.ru_maxrss,
                      "rc": done.returncode, "tail": done.stdout[-400:]}))
''')


def write_rows(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            row = {
                "query_id": f"q{i}",
                "query": f"lightweight travel laptop model {i}",
                "candidates": [
                    {"id": "a", "title": f"Laptop A{i}", "description": "A light laptop for travel, 1.1 kg."},
                    {"id": "b", "title": f"Laptop B{i}", "description": "Gaming laptop with a big screen."},
                    {"id": "c", "title": f"Laptop C{i}", "description": "Office machine, 2 kg, long battery."},
                ],
                "target_id": "c",
            }
            out.write(json.dumps(row) + "\n")


# Byte-code caching on, as on a developer's machine: with PYTHONDONTWRITEBYTECODE set,
# pytest rewrites the assertions of every module of a plugin it loads on each run, which
# charges the side that imports more modules for a cost no cached run pays.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def measure(cwd: Path, args: list[str]) -> dict[str, float]:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    done = subprocess.run([sys.executable, "-c", MEASURE, str(cwd), *command], capture_output=True, text=True,
                          check=True, env=ENV)
    result = json.loads(done.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"pytest failed in {cwd} (exit {result['rc']}):\n{result['tail']}")
    return result


def best(cwd: Path, args: list[str], repeat: int) -> dict[str, float]:
    """The fastest of `repeat` runs by wall time, and the least CPU time of them (noise on
    a shared machine only ever adds)."""
    runs = [measure(cwd, args) for _ in range(repeat)]
    fastest = min(runs, key=lambda r: r["wall"])
    return {**fastest, "cpu": min(r["cpu"] for r in runs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5, help="runs per configuration; the fastest counts")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="geo-bench-") as tmp:
        root = Path(tmp)
        dirs = {name: root / name for name in ("bare", "noop", "mock")}
        for d in dirs.values():
            d.mkdir()
            (d / "pytest.ini").write_text("[pytest]\n")
            write_rows(d / "rows.jsonl", args.rows)
        for name in ("noop", "mock"):
            shutil.copytree(PROMPTS, dirs[name] / "prompts")
        (dirs["bare"] / "conftest.py").write_text(BARE_CONFTEST)
        (dirs["noop"] / "conftest.py").write_text(NOOP_CONFTEST)
        command = {
            "bare": ["-p", "no:geo", "-p", "no:xdist", "rows.jsonl"],
            "noop": ["-p", "no:xdist", "rows.jsonl", "--geo-mock"],
            "mock": ["-p", "no:xdist", "rows.jsonl", "--geo-mock"],
        }
        for name, d in dirs.items():  # warm-up: byte-code caches written, files in the page cache
            measure(d, command[name])
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in dirs}
        for _ in range(args.repeat):  # interleaved, so drift on a shared machine hits all three alike
            for name, d in dirs.items():
                runs[name].append(measure(d, command[name]))
        result = {name: {"wall": min(r["wall"] for r in rs), "cpu": min(r["cpu"] for r in rs),
                         "peak_kb": min(r["peak_kb"] for r in rs)} for name, rs in runs.items()}
        n = args.rows
        print(f"{n} rows, best of {args.repeat} interleaved runs each, in-process (-p no:xdist):")
        print(f"{'run':>6} {'wall s':>7} {'cpu s':>7} {'cpu us/row':>11} {'peak MB':>8}")
        for name, r in result.items():
            print(f"{name:>6} {r['wall']:>7.2f} {r['cpu']:>7.2f} {r['cpu'] / n * 1e6:>11.1f} {r['peak_kb'] / 1024:>8.1f}")
        bare, noop, mock = result["bare"], result["noop"], result["mock"]
        print(f"plugin overhead (experiment a no-op) / bare collector: wall {noop['wall'] / bare['wall']:.2f}x, "
              f"cpu {noop['cpu'] / bare['cpu']:.2f}x (target <= 1.2x)")
        print(f"mock experiment: {(mock['cpu'] - noop['cpu']) / n * 1e3:.3f} ms of CPU per row on top (target <= 0.3 ms)")
        print(f"whole mock run / bare collector: cpu {mock['cpu'] / bare['cpu']:.2f}x (target <= 1.6x), "
              f"wall {mock['wall'] / bare['wall']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
