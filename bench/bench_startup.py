"""Start-up and exit of both entry points, against what Python, `import openai` and pytest
cost on their own, side by side in one run.

For each entry point (`egeo evaluate` and `pytest data.jsonl`) a fresh process runs the
rows against the fake server (tests/fake_openai.py, its own process, answering in
`--latency` seconds), writing the JSON and HTML reports, with no answer cache. The bench
notes the wall clock at launch and at exit; the server notes when the first request
arrived and when the last answer went out (`/stats`). So:

- first request after launch: the process's start-up, up to its first model call;
- exit after the last answer: everything after the model work (reports, summary, close);
- CPU: the process's user + system seconds (`wait4`), which the machine's load barely moves.

Beside them, in the same rounds: `python -c pass`, `python -c "import openai"`,
`pytest --version` and an empty `pytest` run (`-p no:geo`: pytest's own start without this
plugin). Targets (issue #24): the first request within 0.3 s of `import openai` (egeo) or
of `import openai` plus pytest's own start (the empty run less the interpreter's start)
for pytest; exit within 0.2 s of the last answer at 400 rows, reports included. Rounds
alternate the commands, and medians are printed with the range, so load hits all alike.
Run it in a fresh virtual environment with only the package installed (`pip install .`):
pytest loads every installed plugin at start.

    python bench/bench_startup.py [--rows 400] [--latency 0.1] [--repeat 3] [--concurrency auto]
        [--python VENV/bin/python --python OTHER/bin/python]   # two installs, alternating
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench_harness import CANDIDATES
from common import fake_server, write_decoy_dataset

FIRST_MARGIN = 0.3  # seconds over import openai (+ pytest's own start)
EXIT_MARGIN = 0.2  # seconds after the last answer


@dataclass
class Timed:
    launched: float  # wall clock at launch
    wall: float  # launch to exit
    cpu: float  # user + system seconds of the process
    cpu_at: list[tuple[float, float]] = field(default_factory=list)  # (wall clock, CPU seconds so far)
    first: float | None = None  # launch to the server's first request
    exit: float | None = None  # the server's last answer to exit
    first_cpu: float | None = None  # CPU seconds spent before the first request
    exit_cpu: float | None = None  # CPU seconds spent after the last answer

    def cpu_until(self, moment: float) -> float:
        """CPU seconds the process had used at wall-clock `moment` (the last sample before it)."""
        return max((cpu for at, cpu in self.cpu_at if at <= moment), default=0.0)


TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float | None:
    """user + system seconds of a running process, from /proc (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def run_with_rusage(command: list[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> Timed:
    """A fresh process's wall and CPU seconds (reaped with `wait4`, which gives its own
    CPU time), its CPU sampled every few milliseconds meanwhile (so the CPU spent before
    and after a moment can be told apart whatever the machine's load); exits loudly if its
    exit status is not in `ok`."""
    launched = time.time()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples: list[tuple[float, float]] = []

    def sample() -> None:
        while (cpu := _cpu_of(process.pid)) is not None and process.returncode is None:
            samples.append((time.time(), cpu))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert process.stderr is not None
    err = process.stderr.read()  # the child's stderr closes when it exits
    _, status, usage = os.wait4(process.pid, 0)
    ended = time.time()
    process.returncode = os.waitstatus_to_exitcode(status)
    sampler.join()
    process.stderr.close()
    if process.returncode not in ok:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{err[-3000:].decode(errors='replace')}")
    return Timed(launched=launched, wall=ended - launched, cpu=usage.ru_utime + usage.ru_stime, cpu_at=samples)


def against_server(command: list[str], cwd: Path, latency: float, calls: int) -> Timed:
    """Run `command` (with `{url}` in it) against a fresh fake server; time its first
    request and its exit against the server's clock."""
    with fake_server(latency) as url:
        timed = run_with_rusage([part.replace("{url}", url) for part in command], cwd)
        with urllib.request.urlopen(f"{url}/stats", timeout=10) as response:
            stats = json.load(response)
    if stats["requests"] != calls:
        raise SystemExit(f"{' '.join(command)}: the server saw {stats['requests']} requests, expected {calls}")
    timed.first = stats["first_request_at"] - timed.launched
    timed.exit = timed.launched + timed.wall - stats["last_answer_at"]
    timed.first_cpu = timed.cpu_until(stats["first_request_at"])
    timed.exit_cpu = timed.cpu - timed.cpu_until(stats["last_answer_at"])
    return timed


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", default="auto", help="rows in flight for both entry points (auto or N)")
    parser.add_argument("--python", action="append", default=None, metavar="PATH",
                        help="the interpreter (of a venv) running the entry points; repeat it to time two installs "
                             "side by side, alternating (default: this one)")
    args = parser.parse_args()
    python = sys.executable
    pythons = args.python or [python]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write_decoy_dataset(args.rows, directory / "rows.jsonl", CANDIDATES)
        (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        (directory / "empty").mkdir()
        baselines = {
            "python -c pass": ([python, "-c", "pass"], (0,)),
            'python -c "import openai"': ([python, "-c", "import openai"], (0,)),
            "pytest --version": ([python, "-m", "pytest", "--version"], (0,)),
            "empty pytest run (-p no:geo)": ([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:geo",
                                              "empty"], (5,)),
        }
        entry_points: dict[str, list[str]] = {}
        for interpreter in pythons:
            # Each install's entry points, named by its venv when there are several.
            of = f" ({Path(interpreter).parent.parent.name})" if len(pythons) > 1 else ""
            entry_points[f"egeo evaluate{of}"] = [
                interpreter, "-m", "pytest_geo", "evaluate", "--dataset", "rows.jsonl", "--base-url", "{url}",
                "--no-cache", "--concurrency", args.concurrency, "--report", "egeo.json", "--html", "egeo.html"]
            entry_points[f"pytest rows.jsonl{of}"] = [
                interpreter, "-m", "pytest", "rows.jsonl", "--geo-base-url", "{url}", "--geo-no-cache",
                "--geo-concurrency", args.concurrency, "-q", "-p", "no:cacheprovider", "--geo-report", "pytest.json",
                "--geo-html", "pytest.html"]
        times: dict[str, list[Timed]] = {name: [] for name in [*baselines, *entry_points]}
        for _ in range(args.repeat):
            for name, (command, ok) in baselines.items():
                times[name].append(run_with_rusage(command, directory, ok))
            for name, command in entry_points.items():
                times[name].append(against_server(command, directory, args.latency, 3 * args.rows))
    load = os.getloadavg()[0]
    print(f"{args.rows} rows of {CANDIDATES} candidates, {args.latency:g} s a call, concurrency {args.concurrency}, "
          f"median of {args.repeat} (range); load average {load:.2f} at the end; byte code "
          f"{'not written (PYTHONDONTWRITEBYTECODE)' if os.environ.get('PYTHONDONTWRITEBYTECODE') else 'cached'}")
    for name in baselines:
        runs = times[name]
        print(f"  {name:34} wall {spread([t.wall for t in runs])}, CPU {spread([t.cpu for t in runs])}")

    def median(name: str, measure: str) -> float:
        return statistics.median(getattr(t, measure) for t in times[name])

    for measure in ("wall", "cpu"):
        # The budget: `import openai` (its process includes the interpreter's start), plus for
        # pytest the empty run less the interpreter's start.
        pytest_own = median("empty pytest run (-p no:geo)", measure) - median("python -c pass", measure)
        import_openai = median('python -c "import openai"', measure)
        budgets = {name: import_openai + (pytest_own if name.startswith("pytest") else 0.0) for name in entry_points}
        print(f"  {'wall clock' if measure == 'wall' else 'CPU (user + system, sampled from /proc)'}:")
        for name in entry_points:
            runs = times[name]
            first = [v for t in runs if (v := getattr(t, "first" if measure == "wall" else "first_cpu")) is not None]
            exits = [v for t in runs if (v := getattr(t, "exit" if measure == "wall" else "exit_cpu")) is not None]
            print(f"    {name}: whole run {spread([getattr(t, measure) for t in runs])}")
            print(f"      first request after launch: {spread(first)}; over its budget ({budgets[name]:.3f} s): "
                  f"{statistics.median(first) - budgets[name]:+.3f} s (target <= +{FIRST_MARGIN:g} s)")
            print(f"      exit after the last answer: {spread(exits)} (target <= {EXIT_MARGIN:g} s)")


if __name__ == "__main__":
    main()
