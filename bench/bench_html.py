"""HTML report bench: a 10,000-row mock run's report, its size and how fast it opens.

Runs the plugin in mock mode over N GEO rows (a fresh subprocess) writing the JSON and
HTML reports, then prints, side by side:
  - sizes: JSON report, HTML page, transcripts file, and the page's rows data against
    what embedding every row's transcript would add;
  - render_html() time against json.dumps of the same report (the JSON report's cost);
  - in headless Chromium (when installed): load to first rows shown, first expand
    (which parses the transcripts), a sort and the errors filter, for the N-row page
    and a 200-row page (one page of rows, the least any report shows).

    python bench/bench_html.py [--rows 10000] [--candidates 5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import PROMPTS

from pytest_geo.report.html import render_html
from pytest_geo.report.transcripts import with_transcript
from pytest_geo.report.viewer_data import script_json, viewer_data

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
FILLER = ("Lightweight aluminium body with a matte finish, a backlit keyboard, two USB-C ports, "
          "Wi-Fi 6 and a 1080p webcam; ships with a 65 W charger and a one-year warranty.")


def write_rows(path: Path, n: int, candidates: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            listed = [{"id": f"c{k}", "title": f"Laptop {k}-{i}", "description": f"Model {k}, {1 + k / 10:.1f} kg. {FILLER}"}
                      for k in range(candidates)]
            out.write(json.dumps({"query_id": f"q{i}", "query": f"light travel laptop {i}", "target_id": "c0",
                                  "candidates": listed}) + "\n")


def run_plugin(directory: Path, n: int, candidates: int) -> dict[str, Any]:
    shutil.copytree(PROMPTS, directory / "prompts", ignore=shutil.ignore_patterns("*.candidate.txt", "*.json"))
    (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    write_rows(directory / "rows.jsonl", n, candidates)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "rows.jsonl", "--geo-mock", "--geo-report", "r.json", "--geo-html", "r.html"],
                          cwd=directory, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    print(f"plugin run, {n} rows, reports written: {time.perf_counter() - start:.1f} s")
    report: dict[str, Any] = json.loads((directory / "r.json").read_text(encoding="utf-8"))
    return report


def best_of(repeat: int, work: Any) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def browser_figures(path: Path) -> dict[str, float] | None:
    chromium = os.environ.get("GEO_CHROMIUM") or shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not chromium:
        return None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS)
        page = browser.new_page()
        start = time.perf_counter()
        page.goto(path.as_uri())
        page.wait_for_selector("#rows-table tbody tr.row")
        loaded = time.perf_counter() - start
        start = time.perf_counter()
        page.locator("button.toggle").first.click()
        page.wait_for_selector(".transcript details.call")
        expanded = time.perf_counter() - start
        start = time.perf_counter()
        page.locator("#rows-table th", has_text="query / input").click()
        page.wait_for_function("document.querySelector('#rows-table th[aria-sort]') !== null")
        sorted_ = time.perf_counter() - start
        start = time.perf_counter()
        page.locator("#errors-only").check()
        filtered = time.perf_counter() - start
        browser.close()
    return {"load": loaded, "expand": expanded, "sort": sorted_, "filter": filtered}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--candidates", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        report = run_plugin(directory, args.rows, args.candidates)
        json_size = (directory / "r.json").stat().st_size
        html_size = (directory / "r.html").stat().st_size
        file = directory / report["transcripts"]["path"]
        with gzip.open(file, "rt", encoding="utf-8") as handle:
            lines = {line["nodeid"]: line for line in map(json.loads, handle)}
        rows = [with_transcript(r, lines.get(r["nodeid"])) for r in report["rows"]]
        table, transcripts = viewer_data(rows)
        rows_part, transcripts_part = len(script_json(table).encode()), len(script_json(transcripts).encode())
        raw_calls = sum(len(json.dumps(line, ensure_ascii=False).encode()) for line in lines.values())
        print(f"JSON report {json_size / 1e6:.1f} MB; HTML {html_size / 1e6:.1f} MB "
              f"({html_size / json_size:.2f}x the JSON report); transcripts file {file.stat().st_size / 1e6:.1f} MB "
              f"({raw_calls / 1e6:.1f} MB uncompressed)")
        print(f"  HTML parts: rows data {rows_part / 1e6:.1f} MB; every row's transcript, if the page embedded them "
              f"all: {transcripts_part / 1e6:.1f} MB (shared strings stored once)")
        rendering = best_of(3, lambda: render_html(report))
        dumping = best_of(3, lambda: json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False))
        print(f"render_html {rendering:.2f} s vs json.dumps of the report {dumping:.2f} s "
              f"({rendering / dumping:.2f}x)")
        small = dict(report, rows=rows[:200])  # the rows with their calls: all embedded
        (directory / "small.html").write_text(render_html(small), encoding="utf-8")
        big_figures = browser_figures(directory / "r.html")
        small_figures = browser_figures(directory / "small.html")
        if big_figures is None or small_figures is None:
            print("Chromium or Playwright missing: no browser figures")
            return
        for name in big_figures:
            print(f"browser {name}: {len(report['rows'])} rows {big_figures[name] * 1000:.0f} ms, "
                  f"200 rows {small_figures[name] * 1000:.0f} ms ({big_figures[name] / small_figures[name]:.1f}x)")


if __name__ == "__main__":
    main()
