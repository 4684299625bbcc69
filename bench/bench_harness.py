"""pytest-geo against the E-GEO harness's way of running, side by side in one run.

The harness's code may not be committed here. It is sequential: one row after another,
each row's three calls (rank the candidates, rewrite the target, rank again) one at a
time through the `openai` SDK's synchronous client. So the stand-in timed here is such a
loop, written here (`sequential_reference`): the same rows, the same packaged prompts
(rendered with the plugin's own renderer), the same three calls per row, the real SDK,
the same server. It is a floor for the harness (it does no more per row than the calls),
so the ratios below are, if anything, understated.

Against it, in fresh processes: `egeo evaluate` and `pytest` on the same JSONL file,
each at its default concurrency (auto) and at a fixed one (`--concurrency`, 64 by
default), with no answer cache. Wall time is the process's
whole life: start-up, the calls and the reports. Rows have 10 candidates; the fake
server answers in `--latency` seconds, in its own process.

Targets (issue #24): 120 rows: pytest >= 12x the harness, egeo >= 15x; 400 rows: 30x / 40x.
Run it in a fresh virtual environment with only the package installed (`pip install .`,
no test extras) where you can: pytest loads every installed plugin at start.

The reference loop is sequential (about 125 s at 400 rows): `--reference-seconds S`
reuses the time an earlier run printed instead of timing it again, and says so (for
iterating on pytest-geo's side; a figure to publish times both in one run). `--repeat N`
runs each process N times, alternated, so a busy spell of a shared machine hits each,
and takes the medians.

    python bench/bench_harness.py [--rows 120] [--latency 0.1] [--concurrency 64]
                                  [--reference-seconds S] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openai
from common import PROMPTS, fake_server, write_decoy_dataset

from pytest_geo.data.dataset import GeoRow, iter_dataset
from pytest_geo.engine.experiment import candidate_values
from pytest_geo.engine.prompts import load_prompts
from pytest_geo.templates import render

CANDIDATES = 10
MODEL = "gpt-4o-mini"
JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def _answer(client: openai.OpenAI, system: str, user: str) -> dict[str, object]:
    completion = client.chat.completions.create(
        model=MODEL, temperature=0, messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
    match = JSON_OBJECT.search(completion.choices[0].message.content or "")
    return json.loads(match.group(0)) if match else {}


def sequential_reference(url: str, rows: list[GeoRow]) -> float:
    """Wall seconds for the harness's loop: per row rank, rewrite, rank, one call at a time."""
    prompts = load_prompts(PROMPTS)
    start = time.perf_counter()
    client = openai.OpenAI(base_url=url, api_key=os.environ["OPENAI_API_KEY"], max_retries=4)
    for row in rows:
        values = candidate_values(row.query, row.query_id, row.candidates)
        _answer(client, render(prompts.ranker_system, values), render(prompts.ranker_user, values))
        target = next(c for c in row.candidates if c.id == row.target_id)
        rewrite_values = {"query": row.query, "query_id": row.query_id or "", "id": target.id,
                          "target_id": target.id, "title": target.title, "description": target.description}
        rewritten = _answer(client, render(prompts.rewriter_system, rewrite_values),
                            render(prompts.rewriter_user, rewrite_values))
        new = [c if c.id != target.id else c._replace(description=str(rewritten.get("rewritten_description", "")))
               for c in row.candidates]
        values = candidate_values(row.query, row.query_id, tuple(new))
        _answer(client, render(prompts.ranker_system, values), render(prompts.ranker_user, values))
    client.close()
    return time.perf_counter() - start


def timed_process(command: list[str], cwd: Path) -> float:
    """Wall seconds of a fresh process, from launch to exit; exits loudly if it failed."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=120)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, default=64,
                        help="the fixed concurrency timed beside auto (0: auto only)")
    parser.add_argument("--reference-seconds", type=float, default=None,
                        help="the reference loop's time from an earlier run, instead of timing it again")
    parser.add_argument("--repeat", type=int, default=1, help="alternated runs of each process; medians count")
    args = parser.parse_args()
    concurrencies = ["auto"] + ([str(args.concurrency)] if args.concurrency else [])
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        dataset = directory / "rows.jsonl"
        write_decoy_dataset(args.rows, dataset, CANDIDATES)
        rows = [r for r in iter_dataset(dataset, 0) if isinstance(r, GeoRow)]
        (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        commands = {("egeo evaluate", c): [sys.executable, "-m", "pytest_geo", "evaluate", "--dataset", str(dataset),
                                           "--base-url", "{url}", "--no-cache", "--concurrency", c]
                    for c in concurrencies}
        commands.update({("pytest", c): [sys.executable, "-m", "pytest", "rows.jsonl", "--geo-base-url", "{url}",
                                         "--geo-no-cache", "--geo-concurrency", c, "-q", "-p", "no:cacheprovider"]
                         for c in concurrencies})
        walls: dict[tuple[str, str], list[float]] = {key: [] for key in commands}
        loads = []
        with fake_server(args.latency) as url:
            reused = args.reference_seconds is not None
            harness = args.reference_seconds if reused else sequential_reference(url, rows)
            for _ in range(args.repeat):
                for key, command in commands.items():
                    walls[key].append(timed_process([part.format(url=url) for part in command], directory))
                    loads.append(os.getloadavg()[0])
    print(f"{args.rows} rows of {CANDIDATES} candidates, {args.latency:g} s a call, 3 calls a row; "
          f"load average {min(loads):.2f} to {max(loads):.2f}"
          f"{f', medians of {args.repeat} alternated runs' if args.repeat > 1 else ''}:")
    print(f"  sequential reference (the harness's loop, real SDK): {harness:.2f} s"
          f"{' (given, from an earlier run)' if reused else ''}")
    for name, target in (("egeo evaluate", 15 if args.rows <= 120 else 40), ("pytest", 12 if args.rows <= 120 else 30)):
        times = {c: statistics.median(walls[name, c]) for c in concurrencies}
        figures = ", ".join(f"{c}: {t:.2f} s = {harness / t:.1f}x" for c, t in times.items())
        print(f"  {name + ':':15}{figures} (target >= {target}x)")

if __name__ == "__main__":
    main()
