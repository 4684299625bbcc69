"""The E-GEO leaderboard's full run, planned: 2,000 test queries of 10 products, its five
judges (before-rankings from their caches, as the benchmark runs), one rewriter, each on
the provider the submission script calls, with E-GEO's output caps and the repository's
list prices. Prints `pytest --geo-plan` twice, side by side: paying as E-GEO's own script pays
(every judge's full input on every call) and as pytest-geo runs it (the judges' long
system prompts served by the providers' prompt caches, GPT-5 and the rewriter through
OpenAI's Batch API), against the benchmark's stated $230 a run. Nothing is called.

The data is made up here in the benchmark's shapes; the sizes are assumptions, printed:
products of about 1,000 characters (title, features, description) and judge system
prompts of about 3,000 tokens ("several thousand" in the benchmark's description).

    python bench/bench_egeo_plan.py [--queries 2000] [--system-tokens 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

EGEO_DOLLARS = 230  # the benchmark's stated cost of a full run (../shared/egeo-benchmark.md)
# judge name (its cache's) -> model on the provider the submission script calls, output cap
JUDGES = {
    "gpt5": ("openai/gpt-5", 5000),
    "claude": ("openrouter/anthropic/claude-sonnet-4.5", 100),
    "gemini": ("openrouter/google/gemini-3-flash-preview", 100),
    "deepseek": ("openrouter/deepseek/deepseek-v3.2", 100),
    "llama": ("openrouter/meta-llama/llama-4-maverick", 900),
}
REWRITER = ("openai/gpt-4.1", 500)
# The repository's prices (input / output per million); cached input where the provider
# caches a repeated prefix: OpenAI's cached-input prices, and Anthropic's cache reads (0.1x
# its input) and 5-minute cache writes (1.25x), since pytest-geo marks Claude's long system
# prompt with `cache_control` through OpenRouter. Each under the name its endpoint is sent
# (OpenRouter's `anthropic/...`), as a run charges it.
LIST_PRICES = {
    "gpt-4.1": "2.00, 8.00",
    "gpt-5": "1.25, 10.00",
    "google/gemini-3-flash-preview": "1.50, 6.00",
    "anthropic/claude-sonnet-4.5": "3.00, 15.00",
    "deepseek/deepseek-v3.2": "0.50, 2.00",
    "meta-llama/llama-4-maverick": "0.20, 1.00",
}
CACHED_INPUT = {"gpt-4.1": "0.50", "gpt-5": "0.125", "anthropic/claude-sonnet-4.5": "0.30, 3.75"}


def write_data(directory: Path, queries: int, product_chars: int) -> None:
    """E-GEO's files: test_data.json, test_selected_products.json, five judges' caches."""
    rng = random.Random(2511)
    filler = "sturdy steel built to last for decades of daily use "
    data, selected = {}, {}
    caches: dict[str, dict[str, object]] = {name: {} for name in JUDGES}
    for q in range(queries):
        query_id = str(10000 + q)
        products = [{"title": f"Kettle {q}-{n}", "features": repr([f"feature {n}", "5 year warranty"]),
                     "description": (filler * (product_chars // len(filler) + 1))[:product_chars]}
                    for n in range(1, 11)]
        data[query_id] = {"query": f"what kettle will last a lifetime, {q}?", "products": products}
        ind = rng.randrange(10)
        selected[query_id] = {"ind": ind, "product": products[ind]}
        for cache in caches.values():
            order = list(range(1, 11))
            rng.shuffle(order)
            cache[query_id] = {"results": {"ranking": order, "questionable_products": []}}
    (directory / "initial_ranking").mkdir(parents=True)
    (directory / "test_data.json").write_text(json.dumps(data), encoding="utf-8")
    (directory / "test_selected_products.json").write_text(json.dumps(selected), encoding="utf-8")
    for name, cache in caches.items():
        (directory / "initial_ranking" / f"test_initial_ranking_{name}.json").write_text(
            json.dumps(cache), encoding="utf-8")


def write_project(directory: Path, system_tokens: int, cached: dict[str, str],
                  models: dict[str, str] | None = None, extra: str = "") -> None:
    """pytest.ini with the five judges (each its own long system prompt) and the prices;
    `models`: each judge's model where it is not E-GEO's (bench_leaderboard.py's
    loopback endpoints); `extra`: more ini lines."""
    base = (Path(__file__).resolve().parent.parent / "pytest_geo/prompts/egeo/ranker_system.txt").read_text(
        encoding="utf-8")
    judges = []
    for name, (model, cap) in JUDGES.items():
        style = f"You are the {name} shopping assistant. " * (system_tokens * 4 // 40)
        (directory / f"{name}_system.txt").write_text(base + "\n" + style[:system_tokens * 4] + "\n",
                                                      encoding="utf-8")
        temperature = "" if name == "gpt5" else " temperature=0.3"  # E-GEO sends none to GPT-5
        model = (models or {}).get(name, model)
        judges.append(f"    {name} = {model} system={name}_system.txt max_output_tokens={cap}{temperature}")
    prices = [f"    {model} = {price}" + (f", {cached[model]}" if model in cached else "")
              for model, price in LIST_PRICES.items()]
    (directory / "pytest.ini").write_text(
        "[pytest]\ngeo_judges =\n" + "\n".join(judges) + "\ngeo_prices =\n" + "\n".join(prices) + "\n" + extra,
        encoding="utf-8")


def plan(directory: Path, batch: bool) -> list[str]:
    """`pytest --geo-plan` in the project (its pytest.ini holds the judges and prices)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--geo-dataset",
               "data/test_data.json", "--geo-plan", "--geo-rewriter-model", REWRITER[0],
               "--geo-max-output-tokens", str(REWRITER[1])]  # the judges have their own caps
    env = {**os.environ, "OPENAI_API_KEY": "sk-plan-only", "OPENROUTER_API_KEY": "sk-plan-only"}
    env.pop("OPENAI_BASE_URL", None)
    done = subprocess.run([*command, *(["--geo-batch"] if batch else [])], cwd=directory, env=env,
                          capture_output=True, text=True, check=False)
    lines = done.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("geo plan:")), None)
    if start is None:
        sys.exit(f"pytest --geo-plan failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return [line for line in lines[start:] if line.startswith(("geo plan:", "  "))]


def dollars(lines: list[str]) -> float:
    total = next(line for line in lines if line.strip().startswith("at most"))
    return float(total.split("$", 1)[1].split()[0].replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--system-tokens", type=int, default=3000, help="each judge's system prompt, about")
    parser.add_argument("--product-chars", type=int, default=1000, help="each product's text, about")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for label, prices, batch in (("as E-GEO's script pays", {}, False),
                                     ("as pytest-geo runs it", CACHED_INPUT, True)):
            directory = Path(tmp) / label.replace(" ", "_").replace("'", "")
            write_data(directory / "data", args.queries, args.product_chars)
            write_project(directory, args.system_tokens, prices)
            runs[label] = plan(directory, batch)
        print(f"E-GEO leaderboard run planned: {args.queries} queries, 5 judges (before-rankings cached), "
              f"1 rewriter; products ~{args.product_chars} chars, judge system prompts ~{args.system_tokens} "
              "tokens; output at E-GEO's caps (the worst case)")
        for label, lines in runs.items():
            print(f"\n{label}:")
            print("\n".join(lines))
        paid, ours = (dollars(lines) for lines in runs.values())
        print(f"\nE-GEO's stated cost: ${EGEO_DOLLARS}; planned as E-GEO pays: ${paid:.2f}; "
              f"as pytest-geo runs it: ${ours:.2f} = {ours / EGEO_DOLLARS:.2f} of ${EGEO_DOLLARS} "
              f"(target at most 0.50), {ours / paid:.2f} of E-GEO's way on the same plan")


if __name__ == "__main__":
    main()
