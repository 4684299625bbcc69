"""--geo-sequential's savings, by simulation (no model calls): the rows a comparison of
two rewriting strategies reads before it is decided, out of a pool of rows.

Paired rank differences come from `simulated_differences` (report/stopping.py): 10
candidates (|d| <= 9), 40% of rows tied, the rest a rounded normal around the true
difference with the spread given (2 ranks by default: an assumption for a real model's
rows, see README "Reading a sequential result"). Rounds of 16 rows, as a run at the
default concurrency reads them. Prints the mean share of the pool used at each true
difference, down to 0 (where the test must not decide, and reads the whole pool), and
how often the decision was wrong or missing.

    python bench/bench_sequential.py [--pool 1000] [--runs 40] [--spread 2] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics

from pytest_geo.report.sequential import BETTER
from pytest_geo.report.stopping import round_size, simulate, simulated_differences
from pytest_geo.settings import DEFAULT_CONCURRENCY

DIFFERENCES = (1.0, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--spread", type=float, default=2.0)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rounds = round_size(args.pool, DEFAULT_CONCURRENCY)
    print(f"pool {args.pool} rows, spread {args.spread:g} ranks, 40% ties, rounds of {rounds}, alpha {args.alpha:g}, "
          f"{args.runs} runs each")
    print(f"{'true diff':>9}  {'rows used (mean)':>16}  {'share of pool':>13}  {'decided better':>14}  {'other':>5}")
    for mean in DIFFERENCES:
        used, better, other = [], 0, 0
        for _ in range(args.runs):
            differences = simulated_differences(rng, args.pool, mean=mean, spread=args.spread)
            decision, rows = simulate(differences, bound=9, alpha=args.alpha, round_size=rounds)
            used.append(rows)
            better += decision == BETTER
            other += decision not in (BETTER, None)
        share = statistics.fmean(used) / args.pool
        print(f"{mean:>9.2f}  {statistics.fmean(used):>16.1f}  {share:>13.1%}  {better:>14}  {other:>5}")


if __name__ == "__main__":
    main()
