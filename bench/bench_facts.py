"""Fact-checker bench: time per character on adversarial text, at a small and a large
size side by side, so a quadratic pattern shows as a ratio far above 1.

Each family repeats one unit (separators, digit runs, long words, numbers with units,
model-number-like tokens) up to the size, or draws distinct numbers or model numbers.
The check is `new_facts(text, rewrite)`, both of that size and family: for the
repeating families the rewrite is the text itself; for the distinct ones it is drawn
anew, so no written form of the rewrite is the original's (a form the original holds
is not parsed twice) and both sides are read, parsed and checked in full. Prints seconds
at each size, the per-character ratio (large / small; linear is about 1.0, the old
checker was above 10 on `a-a-a-...` at 60 KB), then a large description against a small
rewrite (what a model's bounded answer is), and the slowest check of each kind.

    python bench/bench_facts.py [--small 65536] [--large 1048576]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from pytest_geo.engine.facts import new_facts

FAMILIES = {
    "a-a-a-": "a-", "1-1-1-": "1-", "1.1.1.": "1.", "a.a.a.": "a.", "1,1,1,": "1,", "1,111,111": "1,111",
    "digit run": "1", "long word": "a", "1 x 1 x": "1 x ", "a1-a1-": "a1-", "$1 $1": "$1 ", "ISO 1-1": "ISO 1-",
    "1 kg 1 kg": "1 kg ", "spaces": " ",
}


def distinct_numbers(size: int, seed: int = 0) -> str:
    rng = random.Random(size + seed)
    return " ".join(str(rng.randint(1, 10**6)) for _ in range(size // 4))[:size]


def distinct_models(size: int, seed: int = 0) -> str:
    rng = random.Random(size + seed)
    return " ".join(f"{rng.choice('ABXYZ')}{rng.randint(1, 10**5)}{rng.choice('ABXYZ')}{rng.randint(1, 99)}"
                    for _ in range(size // 8))[:size]


def timed(original: str, rewrite: str) -> float:
    """The fastest of three checks (noise on a shared machine only ever adds)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        new_facts(original, rewrite)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=64 * 1024)
    parser.add_argument("--large", type=int, default=1024 * 1024)
    args = parser.parse_args()
    makers: dict[str, Callable[[int, int], str]] = {
        name: (lambda size, seed, unit=unit: (unit * (size // len(unit) + 1))[:size]) for name, unit in FAMILIES.items()}
    makers |= {"distinct numbers": distinct_numbers, "distinct models": distinct_models}
    print(f"{'family':18} {'small s':>8} {'large s':>8} {'per-char ratio':>15} {'large/small rewrite s':>22}")
    worst = worst_short = 0.0
    for name, make in makers.items():
        small = timed(make(args.small, 0), make(args.small, 1))
        large = timed(make(args.large, 0), make(args.large, 1))
        short = timed(make(args.large, 0), make(args.small, 1))
        ratio = (large / args.large) / (small / args.small) if small else float("nan")
        worst, worst_short = max(worst, large), max(worst_short, short)
        print(f"{name:18} {small:8.3f} {large:8.3f} {ratio:15.2f} {short:22.3f}")
    kb = args.large // 1024, args.small // 1024
    print(f"slowest check of {kb[0]} KB against {kb[0]} KB: {worst:.2f} s; of {kb[0]} KB against {kb[1]} KB: "
          f"{worst_short:.2f} s")


if __name__ == "__main__":
    main()
