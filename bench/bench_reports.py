"""Reports bench: the size of a large run's reports, and what writing them costs.

Runs N GEO rows of C candidates in mock mode, for both entry points (`pytest --geo-report
--geo-html` and `egeo evaluate --report --html`), each once with the reports and once
without, in fresh subprocesses side by side, and prints per entry point:
  - the JSON report, the HTML page and the transcripts file (`<report>.transcripts.jsonl.gz`);
  - peak RSS of the run with reports against the same run without (the difference is what
    the reports and the transcripts held in memory cost), and CPU time of both;
  - the time `write_report_files` took (wall and CPU), measured by wrapping it in the
    child process: the package is run as it is, nothing in it changes.

    python bench/bench_reports.py [--rows 10000] [--candidates 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_html import write_rows
from common import PROMPTS

# Run in the child: wrap the report writer (before the plugin or the command import it),
# run the entry point, and write peak RSS, CPU and the writer's time to GEO_BENCH_OUT.
CHILD = r"""
import atexit, json, os, resource, sys, time
import pytest_geo.report.output as output

written = {"write_s": 0.0, "write_cpu_s": 0.0}
inner = output.write_report_files

def timed(*args, **kwargs):
    start, cpu = time.perf_counter(), time.process_time()
    try:
        return inner(*args, **kwargs)
    finally:
        written["write_s"] += time.perf_counter() - start
        written["write_cpu_s"] += time.process_time() - cpu

output.write_report_files = timed

def figures():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["GEO_BENCH_OUT"], "w") as out:
        json.dump({**written, "peak_mib": usage.ru_maxrss / 1024, "cpu_s": usage.ru_utime + usage.ru_stime}, out)

atexit.register(figures)
entry, args = sys.argv[1], sys.argv[2:]
if entry == "pytest":
    import pytest
    code = pytest.main(args)
else:
    from pytest_geo.cli import main
    code = main(args)
sys.exit(int(code or 0))
"""


def run(directory: Path, entry: str, reports: bool) -> dict[str, Any]:
    out = directory / f"{entry}-{reports}.figures.json"
    if entry == "pytest":
        args = ["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "rows.jsonl", "--geo-mock"]
        if reports:
            args += ["--geo-report", "pytest.json", "--geo-html", "pytest.html"]
    else:
        args = ["evaluate", "--dataset", "rows.jsonl", "--mock", "--no-cache", "--progress", "off"]
        if reports:
            args += ["--report", "egeo.json", "--html", "egeo.html"]
    env = {**os.environ, "GEO_BENCH_OUT": str(out)}
    done = subprocess.run([sys.executable, "-c", CHILD, entry, *args], cwd=directory, env=env,
                          capture_output=True, text=True)
    if done.returncode not in (0,):
        raise SystemExit(f"{entry} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return figures


def size(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB" if path.exists() else "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--candidates", type=int, default=10)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rows} rows of {args.candidates} candidates, mock")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "prompts").symlink_to(PROMPTS)
        (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        write_rows(directory / "rows.jsonl", args.rows, args.candidates)
        for entry in ("pytest", "egeo"):
            bare = run(directory, entry, reports=False)
            full = run(directory, entry, reports=True)
            grown = full["peak_mib"] - bare["peak_mib"]
            print(f"{entry}: JSON {size(directory / f'{entry}.json')}, HTML {size(directory / f'{entry}.html')}, "
                  f"transcripts {size(directory / f'{entry}.transcripts.jsonl.gz')}")
            print(f"  peak RSS {full['peak_mib']:.0f} MiB with reports vs {bare['peak_mib']:.0f} MiB without "
                  f"({grown:+.0f} MiB, {grown * 1024 * 1024 / args.rows:+.0f} B a row); "
                  f"CPU {full['cpu_s']:.1f} s vs {bare['cpu_s']:.1f} s")
            print(f"  write_report_files: {full['write_s']:.2f} s wall, {full['write_cpu_s']:.2f} s CPU")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
