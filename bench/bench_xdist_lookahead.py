"""Wall time of a real `pytest -n 2` run over N GEO rows against the fake OpenAI server
(latency L per call), with the worker lookahead reading xdist's queue (a, stock) and
looking ahead to pytest's `nextitem` only (b), side by side in one run.

(b) loads a small plugin that the bench writes to a temp dir (put on PYTHONPATH, loaded
with `-p`): it replaces `worker_queue_lock` (wherever the restructure put it: the first of
a few candidate modules that has it, and every pytest_geo module or class that holds the
same function) with one that returns None, as on an xdist whose queue cannot be read. It
exits loudly if it finds nothing to patch, and records each call; the bench checks that
every worker of every (b) run called it, and that the server never saw more requests in
flight in (b) than `nextitem` alone allows.

Each run is a fresh project (a copy of prompts/, the dataset, a bare pytest.ini) running
`python -m pytest -n 2 -p no:cacheprovider -q <dataset> --geo-base-url <url>
--geo-concurrency C --geo-no-cache`; wall time includes pytest's start-up, the same in
both. Each configuration has its own server process (started once, off the workers'
GIL), so its /stats max in flight is that configuration's alone. Runs alternate a, b,
a, b, ...; the medians count. Ideal: ceil(N / (2 workers x rows at once)) * 2L, where a
row makes two rounds of calls (rank_before with the rewrite, then rank_after) and runs C
rows at once per worker in (a), 2 (the running item and `nextitem`) in (b).

    python bench/bench_xdist_lookahead.py [--rows 200] [--latency 0.2] [--concurrency 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import PROMPTS, fake_server, write_kettle_dataset

WORKERS = 2
PLUGIN = "geo_bench_nextitem_only"
RECORD_ENV = "GEO_BENCH_RECORD_DIR"

PLUGIN_SOURCE = f'''"""Written by bench/bench_xdist_lookahead.py: the xdist worker lookahead cannot read the
worker's queue, so it looks ahead to `nextitem` only."""

import importlib
import os
import sys

CANDIDATES = ("pytest_geo.xdist_lookahead", "pytest_geo.pytest_layer.xdist", "pytest_geo.pytest_layer.lookahead")


def _record(event):
    directory = os.environ.get("{RECORD_ENV}")
    if directory:
        who = os.environ.get("PYTEST_XDIST_WORKER", "controller")
        with open(os.path.join(directory, f"{{who}}-{{os.getpid()}}.log"), "a", encoding="utf-8") as handle:
            handle.write(event + "\\n")


def no_queue(config):
    _record("called")
    return None


def _patch():
    tried = []
    for name in CANDIDATES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            tried.append(f"{{name}}: {{exc}}")
            continue
        original = getattr(module, "worker_queue_lock", None)
        if not callable(original):
            tried.append(f"{{name}}: no worker_queue_lock")
            continue
        # The module itself, its defining module, and any pytest_geo module (or class in
        # one) that imported the function by name under any alias.
        patched = []
        for mod_name, mod in list(sys.modules.items()):
            if mod is None or not (mod_name == "pytest_geo" or mod_name.startswith("pytest_geo.")):
                continue
            for attr, value in list(vars(mod).items()):
                if value is original:
                    setattr(mod, attr, no_queue)
                    patched.append(f"{{mod_name}}.{{attr}}")
                elif isinstance(value, type) and value.__module__ == mod_name:
                    for cls_attr, cls_value in list(vars(value).items()):
                        if cls_value is original or getattr(cls_value, "__func__", None) is original:
                            setattr(value, cls_attr, staticmethod(no_queue))
                            patched.append(f"{{mod_name}}.{{value.__name__}}.{{cls_attr}}")
        if getattr(module, "worker_queue_lock", None) is not no_queue:
            raise SystemExit(f"{PLUGIN}: could not patch {{name}}.worker_queue_lock")
        _record("patched " + " ".join(patched))
        return
    message = f"{PLUGIN}: no worker_queue_lock to patch; tried " + "; ".join(tried)
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(message)


_patch()
'''


def stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as response:
        return json.load(response)


def run(url: str, rows: int, concurrency: int, nextitem_only: bool, plugin_dir: Path, tmp: Path) -> float:
    """One fresh project, one `pytest -n 2` run; its wall time. In (b), checks that every
    worker had its queue reader replaced and called."""
    project = Path(tempfile.mkdtemp(prefix="run-", dir=tmp))
    shutil.copytree(PROMPTS, project / "prompts")
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    write_kettle_dataset(rows, project / "bench.jsonl")
    records = project / "records"
    records.mkdir()
    env = dict(os.environ, OPENAI_API_KEY="sk-bench-dummy", PYTHONPATH=os.pathsep.join(
        p for p in (str(plugin_dir), os.environ.get("PYTHONPATH", "")) if p))
    env[RECORD_ENV] = str(records)
    command = [sys.executable, "-m", "pytest", "-n", str(WORKERS), "-p", "no:cacheprovider", "-q", "bench.jsonl",
               "--geo-base-url", url, "--geo-concurrency", str(concurrency), "--geo-no-cache"]
    if nextitem_only:
        command[3:3] = ["-p", PLUGIN]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - start
    output = result.stdout + result.stderr
    passed = re.search(r"(\d+) passed", output)
    if result.returncode != 0 or passed is None or int(passed.group(1)) != rows:
        raise SystemExit(f"pytest run failed (exit {result.returncode}, {'nextitem only' if nextitem_only else 'stock'}):"
                         f"\n{output[-4000:]}")
    if nextitem_only:
        logs = {path.name.split("-")[0]: path.read_text(encoding="utf-8").split("\n") for path in records.glob("gw*.log")}
        workers = {f"gw{i}" for i in range(WORKERS)}
        patched = {w for w, lines in logs.items() if any(line.startswith("patched ") for line in lines)}
        called = {w for w, lines in logs.items() if "called" in lines}
        if not workers <= patched or not workers <= called:
            raise SystemExit(f"{PLUGIN} did not take effect on every worker (patched on {sorted(patched)}, "
                             f"called on {sorted(called)}): (b) would measure stock behaviour")
    shutil.rmtree(project, ignore_errors=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16, help="--geo-concurrency (rows at once per worker)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration, alternating; the median counts")
    args = parser.parse_args()
    n, c, latency = args.rows, args.concurrency, args.latency
    # One server per configuration, so its /stats max in flight is that configuration's alone.
    with fake_server(latency) as url_a, fake_server(latency) as url_b:
        with tempfile.TemporaryDirectory(prefix="geo-bench-xdist-") as tmp_name:
            tmp = Path(tmp_name)
            plugin_dir = tmp / "plugin"
            plugin_dir.mkdir()
            (plugin_dir / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
            # Warm up (imports, .pyc) and check the plugin takes effect before timing;
            # few rows, so neither server's max in flight comes from here.
            run(url_a, min(4, n), c, False, plugin_dir, tmp)
            overhead = run(url_b, min(4, n), c, True, plugin_dir, tmp)
            walls: dict[bool, list[float]] = {False: [], True: []}
            for i in range(args.repeat):
                for nextitem_only, url in ((False, url_a), (True, url_b)):
                    wall = run(url, n, c, nextitem_only, plugin_dir, tmp)
                    walls[nextitem_only].append(wall)
                    print(f"  run {i + 1} {'(b) nextitem only' if nextitem_only else '(a) queue peeking'}: {wall:.2f}s",
                          flush=True)
        a, b = statistics.median(walls[False]), statistics.median(walls[True])
        stats_a, stats_b = stats(url_a), stats(url_b)
        rounds = 2 * latency
        ideal_a = math.ceil(n / (WORKERS * c)) * rounds
        ideal_b = math.ceil(n / (WORKERS * 2)) * rounds
        bound_a, bound_b = WORKERS * c * 2, WORKERS * 2 * 2
        print(f"N={n} L={latency:g}s C={c} -n {WORKERS}, wall time of the whole pytest run, median of {args.repeat}:")
        print(f"  (a) queue peeking: {a:.2f}s ({', '.join(f'{w:.2f}' for w in sorted(walls[False]))}), "
              f"ideal {ideal_a:.2f}s; server at most {stats_a['max_in_flight']} in flight (bound {bound_a})")
        print(f"  (b) nextitem only: {b:.2f}s ({', '.join(f'{w:.2f}' for w in sorted(walls[True]))}), "
              f"ideal {ideal_b:.2f}s; server at most {stats_b['max_in_flight']} in flight (bound {bound_b})")
        print(f"queue peeking is {b / a:.2f}x faster than nextitem only (b/a)")
        print(f"for scale: a {min(4, n)}-row run took {overhead:.2f}s (mostly pytest and xdist start-up, "
              f"in both walls, not in the ideals)")
        if stats_b["max_in_flight"] > bound_b:
            raise SystemExit(f"(b) had {stats_b['max_in_flight']} requests in flight, more than nextitem alone allows "
                             f"({bound_b}): queue peeking was not disabled")
        if stats_a["max_in_flight"] <= bound_b:
            print(f"WARNING: (a) never had more than {bound_b} requests in flight: the stock run did not read the "
                  f"queue either (another xdist version?), so a and b measured the same thing")


if __name__ == "__main__":
    main()
