"""Scale bench: mock mode (CI's mode) per row, both entry points, side by side in one run.

Rows of 10 candidates (the rows bench_harness.py writes). Configurations, each a fresh process
measured from its own wrapper process so `RUSAGE_CHILDREN` holds that run alone:

- bare: a custom pytest collector that reads the same file and yields no-op items;
- noop: pytest-geo with the experiment replaced by a no-op outcome (its own overhead);
- mock: `pytest rows.jsonl --geo-mock`, the whole mock run, in-process (-p no:xdist);
- read: a bare Python loop that `json.loads` every line (what any entry point must do);
- egeo: `egeo evaluate --mock --dataset rows.jsonl`.

Per-row figures are slopes, so start-up (imports, the first collection) is not spread
over the rows: CPU a row is (cpu(N) - cpu(N/10)) / (N - N/10) at N = --rows, from the
median CPU of --repeat interleaved runs at each size (one run moves by a third on a shared
machine; the range of the runs' own figures is printed beside it); memory a row is (peak RSS at --memory-rows - peak RSS
at N) / (--memory-rows - N). Targets (issue #36, mock): at most 1 ms of CPU a row over
the bare collector (pytest: over `bare`; egeo, which has no collector: over `read`) and
at most 8 KiB of memory a row at 30,000 rows, for both entry points.

    python bench/bench_scale.py [--rows 3000] [--memory-rows 30000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from common import PROMPTS, write_decoy_dataset

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


# Byte-code caching on, as on a developer's machine: with PYTHONDONTWRITEBYTECODE set,
# pytest rewrites the assertions of every module of a plugin it loads on each run, which
# charges the side that imports more modules for a cost no cached run pays.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


READ = "import json, sys\nfor raw in open(sys.argv[1], 'rb'):\n    if raw.strip():\n        json.loads(raw)\n"

KIB = 1024


def measure(cwd: Path, command: list[str]) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", MEASURE, str(cwd), *command], capture_output=True, text=True,
                          check=True, env=ENV)
    result: dict[str, float] = json.loads(done.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"{command[2:]} failed in {cwd} (exit {result['rc']}):\n{result['tail']}")
    return result


def commands(rows: str) -> dict[str, list[str]]:
    """What each configuration runs on the dataset file `rows`, from its directory."""
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-p", "no:xdist"]
    return {
        "bare": [*pytest, "-p", "no:geo", rows],
        "noop": [*pytest, rows, "--geo-mock"],
        "mock": [*pytest, rows, "--geo-mock"],
        "read": [sys.executable, "-c", READ, rows],
        "egeo": [sys.executable, "-m", "pytest_geo", "evaluate", "--mock", "--dataset", rows],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=3000, help="N: CPU a row is measured between N/10 and N rows")
    parser.add_argument("--memory-rows", type=int, default=30000,
                        help="memory a row is measured between N and this many rows (0: skip)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs per configuration and size")
    args = parser.parse_args()
    small, large, huge = args.rows // 10, args.rows, args.memory_rows

    with tempfile.TemporaryDirectory(prefix="geo-bench-") as tmp:
        root = Path(tmp)
        # egeo and read run in the mock's directory: the same prompts, the same files
        dirs = {name: root / name for name in ("bare", "noop", "mock")}
        dirs["read"] = dirs["egeo"] = dirs["mock"]
        for d in {*dirs.values()}:
            d.mkdir()
            (d / "pytest.ini").write_text("[pytest]\n")
            for n in (small, large, *([huge] if huge else [])):
                write_decoy_dataset(n, d / f"rows{n}.jsonl")
        for name in ("noop", "mock"):
            shutil.copytree(PROMPTS, dirs[name] / "prompts")
        (dirs["bare"] / "conftest.py").write_text(BARE_CONFTEST)
        (dirs["noop"] / "conftest.py").write_text(NOOP_CONFTEST)

        def run(name: str, n: int) -> dict[str, float]:
            return measure(dirs[name], commands(f"rows{n}.jsonl")[name])

        for name in dirs:  # warm-up: byte-code caches written, files in the page cache
            run(name, small)
        runs: dict[tuple[str, int], list[dict[str, float]]] = {}
        for _ in range(args.repeat):  # interleaved, so drift on a shared machine hits all alike
            for n in (small, large):
                for name in dirs:
                    runs.setdefault((name, n), []).append(run(name, n))
        if huge:
            for name in dirs:
                runs[(name, huge)] = [run(name, huge)]
        cpu = {key: statistics.median(r["cpu"] for r in rs) for key, rs in runs.items()}
        wall = {key: min(r["wall"] for r in rs) for key, rs in runs.items()}
        peak = {key: min(r["peak_kb"] for r in rs) for key, rs in runs.items()}

        print(f"rows of 10 candidates; CPU: median of {args.repeat} interleaved runs; load {os.getloadavg()[0]:.2f}")
        sizes = (small, large, *([huge] if huge else []))
        print(f"{'run':>5} " + " ".join(f"{f'cpu s @{n}':>12} {f'peak MB @{n}':>13}" for n in sizes)
              + f" {'cpu ms/row':>11}" + (f" {'KiB/row':>8}" if huge else ""))
        cpu_row = {name: (cpu[(name, large)] - cpu[(name, small)]) / (large - small) * 1e3 for name in dirs}
        mem_row = {name: (peak[(name, huge)] - peak[(name, large)]) / (huge - large) for name in dirs} if huge else {}
        for name in dirs:
            print(f"{name:>5} " + " ".join(f"{cpu[(name, n)]:>12.2f} {peak[(name, n)] / KIB:>13.1f}" for n in sizes)
                  + f" {cpu_row[name]:>11.3f}" + (f" {mem_row[name]:>8.2f}" if huge else ""))
        print(f"wall s @{large}: " + ", ".join(f"{name} {wall[(name, large)]:.2f}" for name in dirs))
        def run_slope(name: str, i: int) -> float:
            return (runs[(name, large)][i]["cpu"] - runs[(name, small)][i]["cpu"]) / (large - small) * 1e3

        for entry, mine, reference in (("pytest --geo-mock", "mock", "bare"), ("egeo evaluate --mock", "egeo", "read")):
            over = cpu_row[mine] - cpu_row[reference]
            each = sorted(run_slope(mine, i) - run_slope(reference, i) for i in range(args.repeat))
            print(f"{entry}: {over:.3f} ms of CPU a row over {reference} (target <= 1 ms; runs "
                  f"{each[0]:.3f}-{each[-1]:.3f})"
                  + (f"; {mem_row[mine]:.2f} KiB a row at {huge} rows (target <= 8 KiB; over {reference}: "
                     f"{mem_row[mine] - mem_row[reference]:.2f})" if huge else ""))
        print(f"pytest-geo's own share (experiment a no-op): {cpu_row['noop'] - cpu_row['bare']:.3f} ms a row over "
              f"bare; the mock experiment on top: {cpu_row['mock'] - cpu_row['noop']:.3f} ms"
              + (f"; memory {mem_row['noop'] - mem_row['bare']:.2f} + {mem_row['mock'] - mem_row['noop']:.2f} "
                 "KiB a row" if huge else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
