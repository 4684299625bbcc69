"""Scale bench: pytest-geo in mock mode over 2,500 / 5,000 / 10,000 GEO rows against a
bare pytest collector that yields the same number of no-op items from the same file.

Prints wall time, per-row time, the ratio (target <= 1.2x) and peak RSS per run. Every
run is a fresh `python -m pytest -p no:cacheprovider -q` subprocess, measured from its
own wrapper process so `RUSAGE_CHILDREN` holds that run's peak alone.

    python bench/bench_scale.py [--sizes 2500 5000 10000] [--repeat 3] [-- extra pytest args]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

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

MEASURE = textwrap.dedent('''
    import json, resource, subprocess, sys, time
    start = time.perf_counter()
    done = subprocess.run(sys.argv[2:], cwd=sys.argv[1], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"wall": wall, "peak_kb": peak_kb, "rc": done.returncode, "tail": done.stdout[-400:]}))
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


def measure(cwd: Path, args: list[str]) -> dict[str, float]:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    done = subprocess.run([sys.executable, "-c", MEASURE, str(cwd), *command], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"pytest failed in {cwd} (exit {result['rc']}):\n{result['tail']}")
    return result


def best(cwd: Path, args: list[str], repeat: int) -> dict[str, float]:
    runs = [measure(cwd, args) for _ in range(repeat)]
    return min(runs, key=lambda r: r["wall"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2500, 5000, 10000])
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the fastest counts")
    parser.add_argument("extra", nargs="*", help="extra arguments for the pytest-geo runs")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="geo-bench-") as tmp:
        root = Path(tmp)
        geo_dir, bare_dir = root / "geo", root / "bare"
        for d in (geo_dir, bare_dir):
            d.mkdir()
            (d / "pytest.ini").write_text("[pytest]\n")
        shutil.copytree(REPO / "pytest_geo" / "prompts", geo_dir / "prompts")
        (bare_dir / "conftest.py").write_text(BARE_CONFTEST)
        print(f"{'rows':>6} {'geo s':>7} {'bare s':>7} {'geo us/row':>11} {'bare us/row':>12} {'ratio':>6} "
              f"{'geo MB':>7} {'bare MB':>8}")
        results = []
        for n in args.sizes:
            rows = root / f"rows{n}.jsonl"
            write_rows(rows, n)
            (geo_dir / "rows.jsonl").unlink(missing_ok=True)
            (bare_dir / "rows.jsonl").unlink(missing_ok=True)
            shutil.copy(rows, geo_dir / "rows.jsonl")
            shutil.copy(rows, bare_dir / "rows.jsonl")
            geo = best(geo_dir, ["rows.jsonl", "--geo-mock", *args.extra], args.repeat)
            bare = best(bare_dir, ["-p", "no:geo", "rows.jsonl"], args.repeat)
            results.append((n, geo, bare))
            print(f"{n:>6} {geo['wall']:>7.2f} {bare['wall']:>7.2f} {geo['wall'] / n * 1e6:>11.1f} "
                  f"{bare['wall'] / n * 1e6:>12.1f} {geo['wall'] / bare['wall']:>5.2f}x "
                  f"{geo['peak_kb'] / 1024:>7.1f} {bare['peak_kb'] / 1024:>8.1f}")
        if len(results) >= 2:
            (n0, g0, b0), (n1, g1, b1) = results[0], results[-1]
            rows_added = n1 - n0
            marginal_geo = (g1["wall"] - g0["wall"]) / rows_added
            marginal_bare = (b1["wall"] - b0["wall"]) / rows_added
            print(f"marginal per-row time {n0}->{n1}: geo {marginal_geo * 1e6:.1f} us, bare {marginal_bare * 1e6:.1f} us, "
                  f"ratio {marginal_geo / marginal_bare:.2f}x")
            print(f"marginal memory per row: geo {(g1['peak_kb'] - g0['peak_kb']) / rows_added:.2f} KB, "
                  f"bare {(b1['peak_kb'] - b0['peak_kb']) / rows_added:.2f} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
