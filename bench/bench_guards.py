"""Guards bench: issue 36's user-facing figures for two installs side by side, in one run.

Each install is a venv (`--before PY --after PY`: their interpreters; install each with
`pip install PATH`, not editable, so the entry points run as a user's do). The figures:

- 400 rows against the fake harness server (0.1 s a call), `egeo` and `pytest`, auto
  concurrency: the whole run, the first request after launch, the exit after the last
  answer (bench_startup.py, both installs alternating);
- client CPU per real call, all in (fresh `pytest` and `egeo` processes, N rows less 1
  row over the calls the extra rows made; bench_client_cpu.all_in, alternating);
- mock CPU a row over a bare collector (egeo: over a plain JSON read) and memory a row at
  30,000 rows (bench_scale.py, under each install);
- the JSON, HTML and transcripts sizes at 10,000 rows (bench_reports.py, under each).

It prints each bench's own lines, then one table of before, after and after / before.
Targets: no figure more than 10% worse (ratio <= 1.10, sizes and times alike); mock
at most 1 ms of CPU a row over bare; at most 8 KiB a row at 30,000 rows.

    python bench/bench_guards.py --before /tmp/before/bin/python --after /tmp/after/bin/python
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench_client_cpu import all_in
from common import fake_server, write_decoy_dataset

HERE = Path(__file__).resolve().parent
Figures = dict[str, float]


def run_bench(python: str, script: str, *args: str) -> str:
    """Run one bench script (this checkout's) under `python`; its output, echoed."""
    done = subprocess.run([python, str(HERE / script), *args], capture_output=True, text=True)
    print(done.stdout, end="")
    if done.returncode != 0:
        raise SystemExit(f"{script} under {python} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def found(pattern: str, text: str, names: tuple[str, ...]) -> Figures:
    """The first match's groups as floats, named `names` (None where it did not match)."""
    match = re.search(pattern, text, re.MULTILINE)
    return {} if match is None else {name: float(value) for name, value in zip(names, match.groups(), strict=True)}


def startup(before: str, after: str, rows: int, repeat: int) -> dict[str, Figures]:
    """Whole run, first request and exit (wall medians) of both entry points; the venvs'
    folders name the installs in bench_startup.py's lines."""
    out = run_bench(after, "bench_startup.py", "--rows", str(rows), "--repeat", str(repeat),
                    "--python", before, "--python", after)
    wall, cpu = out.split("wall clock:", 1)[-1].split("CPU (user", 1)
    figures: dict[str, Figures] = {"before": {}, "after": {}}
    for side, python in (("before", before), ("after", after)):
        venv = re.escape(Path(python).parent.parent.name)
        for entry, label in (("egeo evaluate", "egeo"), ("pytest rows.jsonl", "pytest")):
            block = rf"{re.escape(entry)} \({venv}\): whole run ([\d.]+) s.*\n.*first request after launch: " \
                    rf"([\d.]+) s.*\n.*exit after the last answer: ([\d.]+) s"
            for text, unit in ((wall, "s"), (cpu, "CPU s")):
                names = (f"{rows} rows, {label}: whole run ({unit})", f"{label}: first request after launch ({unit})",
                         f"{label}: exit after the last answer ({unit})")
                figures[side].update(found(block, text, names))
    return figures


def client_cpu(before: str, after: str, rows: int, concurrency: int, repeat: int) -> dict[str, Figures]:
    """Client CPU a real call, all in, medians of `repeat` alternated runs."""
    seen: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory(prefix="geo-guards-") as tmp, fake_server(0.02) as url:
        directory = Path(tmp)
        for n in (rows, 1):
            write_decoy_dataset(n, directory / f"rows{n}.jsonl")
        (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        for run in range(repeat):
            for side, python in (("before", before), ("after", after)):
                for name, per_call in all_in(url, directory, rows, concurrency, 2 * run + (side == "after"), True,
                                             python).items():
                    seen[side].setdefault(f"{name}: client CPU a real call (us)", []).append(per_call * 1e6)
    for side in seen:
        for name, values in seen[side].items():
            print(f"{side} {name}: {', '.join(f'{v:.0f}' for v in values)}")
    return {side: {name: statistics.median(values) for name, values in by.items()} for side, by in seen.items()}


def scale(python: str, rows: int, memory_rows: int, repeat: int) -> Figures:
    out = run_bench(python, "bench_scale.py", "--rows", str(rows), "--memory-rows", str(memory_rows),
                    "--repeat", str(repeat))
    figures = {}
    for entry, label in (("pytest --geo-mock", "pytest"), ("egeo evaluate --mock", "egeo")):
        figures.update(found(rf"^{re.escape(entry)}: ([\d.-]+) ms of CPU a row over \w+ .*?; ([\d.-]+) KiB a row",
                             out, (f"{label} mock: CPU a row over bare (ms)",
                                   f"{label} mock: memory a row at {memory_rows} rows (KiB)")))
    return figures


def reports(python: str, rows: int) -> Figures:
    out = run_bench(python, "bench_reports.py", "--rows", str(rows))
    figures = {}
    for entry in ("pytest", "egeo"):
        figures.update(found(rf"^{entry}: JSON ([\d.]+) MB, HTML ([\d.]+) MB, transcripts ([\d.]+) MB", out,
                             tuple(f"{entry}: {kind} at {rows} rows (MB)" for kind in ("JSON", "HTML", "transcripts"))))
    return figures


def each(before: str, after: str, measure: Callable[[str], Figures]) -> dict[str, Figures]:
    return {"before": measure(before), "after": measure(after)}


def table(parts: list[dict[str, Figures]]) -> None:
    print(f"\nload average {os.getloadavg()[0]:.2f}; after / before (target <= 1.10):")
    print(f"{'figure':58} {'before':>10} {'after':>10} {'ratio':>7}")
    for part in parts:
        for name, value in part["before"].items():
            now = part["after"].get(name)
            ratio = f"{now / value:7.2f}" if now is not None and value > 0 else "      -"
            shown = "-" if now is None else f"{now:.3f}"
            print(f"{name:58} {value:10.3f} {shown:>10} {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the interpreter of the main before's venv")
    parser.add_argument("--after", default=sys.executable, help="the interpreter of this version's venv")
    parser.add_argument("--rows", type=int, default=400, help="rows of the harness and start-up runs")
    parser.add_argument("--cpu-rows", type=int, default=600, help="rows of the client CPU runs")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scale-rows", type=int, default=3000, help="mock CPU a row between N/10 and N rows")
    parser.add_argument("--memory-rows", type=int, default=30000)
    parser.add_argument("--report-rows", type=int, default=10000)
    parser.add_argument("--skip", action="append", default=[], choices=["startup", "cpu", "scale", "reports"])
    args = parser.parse_args()
    before, after = args.before, args.after
    parts = []
    if "startup" not in args.skip:
        parts.append(startup(before, after, args.rows, args.repeat))
    if "cpu" not in args.skip:
        parts.append(client_cpu(before, after, args.cpu_rows, 32, args.repeat))
    if "scale" not in args.skip:
        parts.append(each(before, after, lambda py: scale(py, args.scale_rows, args.memory_rows, args.repeat)))
    if "reports" not in args.skip:
        parts.append(each(before, after, lambda py: reports(py, args.report_rows)))
    table(parts)


if __name__ == "__main__":
    main()
