"""`--geo-sequential`: which rows a paired comparison still needs.

A comparison is the variants of one suite (every pair of them), or one suite against
the baseline report. Its rows run in an order drawn with the seed (a hash of the seed
and the row's id, so every process computes the same order without talking), in rounds.
Records arrive in any order (xdist workers finish out of order); the test reads a
round only once every row of it reported, so what it sees is the seeded order whatever
the timing. A row whose variants or baseline errored stays out of the test, as it stays
out of the sign tests. Once every pair of a comparison is decided, the rows after the
round that decided it are not needed."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pytest_geo.data.record import RowRecord
from pytest_geo.llm.prices import dollars
from pytest_geo.llm.usage import total_cost
from pytest_geo.report.sequential import BETTER, EQUIVALENT, WORSE, ConfidenceSequence, guarantee
from pytest_geo.settings import DEFAULT_CONCURRENCY, Settings

MIN_ROUND = 10
ROUNDS_AT_MOST = 100  # a round is at least 1% of the rows: the interval is recomputed once per round
BASELINE = "baseline"
THIS_RUN = "this run"


class PlannedRow(TypedDict):
    """One GEO row item, as collection knows it before it runs (plain data: it crosses
    from an xdist worker to the controller in a file)."""

    nodeid: str
    suite: str
    split: str
    unit: str  # the row a variant's item stands for: its node id without `[<variant>]`
    variant: str | None
    candidates: int


def run_order(seed: int, unit: str) -> str:
    """The seeded position of a row: the same on every process, for any subset of rows."""
    return hashlib.sha256(f"{seed}\x1f{unit}".encode()).hexdigest()


def round_size(rows: int, concurrency: int) -> int:
    """Rows read per round: enough to keep `concurrency` rows in flight, at least 10, and
    at most 100 rounds."""
    return max(concurrency, MIN_ROUND, math.ceil(rows / ROUNDS_AT_MOST))


@dataclass
class Pair:
    """`first - second`, row by row."""

    first: str
    second: str
    sequence: ConfidenceSequence
    decided_after: int | None = None  # rows read when it was decided

    @property
    def verdict(self) -> str:
        decision = self.sequence.decision
        margin = self.sequence.margin
        if decision == BETTER:
            return f"{self.first} better than {self.second}"
        if decision == WORSE:
            return f"{self.second} better than {self.first}"
        if decision == EQUIVALENT:
            return f"{self.first} and {self.second} equivalent within {margin:g}"
        return "undecided"


@dataclass
class Comparison:
    """One sequential comparison: its rows in the seeded order, each with its members
    (arm -> node id), and its pairs of arms."""

    kind: str  # "variants" or "baseline"
    suite: str
    split: str
    units: list[tuple[str, dict[str, str]]]
    pairs: list[Pair]
    round_size: int
    read: int = 0  # rows the test has read (whole rounds)
    excluded: int = 0  # rows read with an error in an arm: out of the test
    not_needed: list[str] = field(default_factory=list)  # node ids left out once decided

    @property
    def decided(self) -> bool:
        return all(p.sequence.decision is not None for p in self.pairs)

    @property
    def nodeids(self) -> list[str]:
        return [nodeid for _, members in self.units for nodeid in members.values()]


@dataclass
class Monitor:
    """Fed every record as it arrives; says which rows are no longer needed."""

    comparisons: list[Comparison]
    alpha: float
    scores: dict[str, float | None] = field(default_factory=dict)  # node id -> score (None: errored)
    baseline: Mapping[str, float] = field(default_factory=dict)  # node id -> the baseline's clean score
    _where: dict[str, Comparison] = field(default_factory=dict, init=False)
    stopped: dict[str, str] = field(default_factory=dict, init=False)  # node id -> why it is not needed

    def __post_init__(self) -> None:
        for comparison in self.comparisons:
            for nodeid in comparison.nodeids:
                self._where[nodeid] = comparison

    def add(self, record: RowRecord) -> Comparison | None:
        """Take a record; returns its comparison if that got decided now."""
        nodeid = record["nodeid"]
        comparison = self._where.get(nodeid)
        if comparison is None:
            return None
        self.scores[nodeid] = None if record.get("error") is not None else float(record["score"])
        if comparison.decided:
            return None
        return comparison if self._advance(comparison) else None

    def _advance(self, c: Comparison) -> bool:
        while c.read < len(c.units) and not c.decided:
            end = min(c.read + c.round_size, len(c.units))
            if any(n not in self.scores for _, m in c.units[c.read:end] for n in m.values()):
                return False
            for _, members in c.units[c.read:end]:
                self._feed(c, members)
            c.read = end
            for pair in c.pairs:
                if pair.sequence.decision is None and pair.sequence.read() is not None:
                    pair.decided_after = c.read
        if not c.decided:
            return False
        reason = f"not needed: the comparison was decided after {c.read} rows"
        c.not_needed = [n for _, m in c.units[c.read:] for n in m.values() if n not in self.scores]
        self.stopped.update(dict.fromkeys(c.not_needed, reason))
        return True

    def _feed(self, c: Comparison, members: Mapping[str, str]) -> None:
        score = {arm: self.scores[n] for arm, n in members.items()}
        if c.kind == BASELINE:
            score[BASELINE] = self.baseline.get(members[THIS_RUN])
        clean = {arm: value for arm, value in score.items() if value is not None}
        if len(clean) < len(score):
            c.excluded += 1
            return
        for pair in c.pairs:
            if pair.sequence.decision is None:
                pair.sequence.add(clean[pair.first] - clean[pair.second])

    def needed(self, nodeid: str) -> bool:
        return nodeid not in self.stopped

    def units_of_round(self, nodeid: str) -> list[str]:
        """The node ids of the round `nodeid` belongs to (what to schedule together)."""
        c = self._where.get(nodeid)
        if c is None:
            return [nodeid]
        index = next(i for i, (_, m) in enumerate(c.units) if nodeid in m.values())
        start = index - index % c.round_size
        return [n for _, m in c.units[start:start + c.round_size] for n in m.values()]

    def in_comparison(self, nodeid: str) -> bool:
        return nodeid in self._where

    def baseline_drops(self) -> dict[tuple[str, str], bool]:
        """(suite, split) -> whether the test decided this run worse than the baseline."""
        return {(c.suite, c.split): c.pairs[0].sequence.decision == WORSE
                for c in self.comparisons if c.kind == BASELINE}


def planned_row(nodeid: str, suite: str, split: str, variant: str | None, candidates: int) -> PlannedRow:
    """A row as both front ends plan it: its unit is its node id without `[<variant>]`."""
    unit = nodeid.removesuffix(f"[{variant}]") if variant is not None else nodeid
    return PlannedRow(nodeid=nodeid, suite=suite, split=split, unit=unit, variant=variant, candidates=candidates)


def monitor_for(rows: Iterable[PlannedRow], settings: Settings,
                baseline: Mapping[tuple[str, str], float] | None = None) -> Monitor:
    """The run's monitor from its settings, for the plugin and egeo alike."""
    return build_monitor(rows, seed=settings.seed, alpha=settings.alpha, margin=settings.margin,
                         concurrency=settings.concurrency or DEFAULT_CONCURRENCY, variants=list(settings.variants),
                         baseline=baseline)


def rounds(monitor: Monitor) -> Iterator[list[str]]:
    """The node ids of each round in the seeded order, comparison by comparison, until
    each is decided (the caller feeds each round's records to the monitor between them)."""
    for comparison in monitor.comparisons:
        for start in range(0, len(comparison.units), comparison.round_size):
            if comparison.decided:
                break
            yield [n for _, members in comparison.units[start:start + comparison.round_size] for n in members.values()]


def build_monitor(rows: Iterable[PlannedRow], *, seed: int, alpha: float, margin: float | None,
                  concurrency: int, variants: Sequence[str] = (),
                  baseline: Mapping[tuple[str, str], float] | None = None) -> Monitor:
    """The comparisons of a run: with two or more variants, each suite's variants; else,
    with a baseline ((suite, node id) -> its clean score), each GEO suite's rows that the
    baseline scored without error. Pairs share alpha equally (Bonferroni), so the chance
    of any false decision in a comparison stays at or below alpha."""
    groups: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
    candidates: dict[tuple[str, str], int] = {}
    scores: dict[str, float] = {}
    for row in rows:
        if variants and row["variant"] is not None:
            key, arm = (row["suite"].removesuffix(f"[{row['variant']}]"), row["split"]), row["variant"]
        elif not variants and baseline is not None and (row["suite"], row["nodeid"]) in baseline:
            key, arm = (row["suite"], row["split"]), THIS_RUN
            scores[row["nodeid"]] = baseline[(row["suite"], row["nodeid"])]
        else:
            continue
        groups.setdefault(key, {}).setdefault(row["unit"], {})[arm] = row["nodeid"]
        candidates[key] = max(candidates.get(key, 2), row["candidates"])
    comparisons = []
    for (suite, split), units in sorted(groups.items()):
        ordered = sorted(units.items(), key=lambda u: run_order(seed, u[0]))
        if variants:
            kind, arms = "variants", [v for v in variants if any(v in m for _, m in ordered)]
            bound = candidates[(suite, split)] - 1  # rank_before is shared: only rank_after differs
            pairs = [(a, b) for i, a in enumerate(arms) for b in arms[i + 1:]]
        else:
            kind, bound, pairs = BASELINE, 2 * (candidates[(suite, split)] - 1), [(THIS_RUN, BASELINE)]
        if not pairs:
            continue
        comparisons.append(Comparison(kind, suite, split, ordered, [
            Pair(a, b, ConfidenceSequence(bound=bound, alpha=alpha / len(pairs), margin=margin,
                                          horizon=max(len(ordered) // 4, 1))) for a, b in pairs
        ], round_size(len(ordered), concurrency)))
    return Monitor(comparisons, alpha, baseline=scores)


def simulate(differences: Sequence[float], *, bound: float, alpha: float = 0.05, margin: float | None = None,
             round_size: int = MIN_ROUND) -> tuple[str | None, int]:
    """The test as a run applies it, on given differences: (decision, rows read).
    For the validity simulation and the benchmark; the interval is not computed."""
    sequence = ConfidenceSequence(bound=bound, alpha=alpha, margin=margin, horizon=max(len(differences) // 4, 1))
    for start in range(0, len(differences), round_size):
        for d in differences[start:start + round_size]:
            sequence.add(d)
        decision = sequence.read(interval=False)
        if decision is not None:
            return decision, sequence.n
    return None, sequence.n


def simulated_differences(rng: random.Random, rows: int, *, mean: float, spread: float, ties: float = 0.4,
                          bound: int = 9) -> list[float]:
    """Paired rank differences of `rows` rows, no model involved: a share `ties` of rows
    where both strategies land on the same rank (0), the others `mean` plus a rounded
    normal with the standard deviation that gives the whole sample `spread`, clipped to
    +-bound (10 candidates: 9). With mean 0 both strategies are exchangeable: no true
    difference."""
    sigma = spread / math.sqrt(1 - ties)
    out = []
    for _ in range(rows):
        noise = 0 if rng.random() < ties else round(rng.gauss(0.0, sigma))
        out.append(max(-bound, min(bound, mean + noise)))
    return out


def comparison_json(c: Comparison, scores: Mapping[str, object], alpha: float,
                    cost_per_item: float | None) -> dict[str, Any]:
    """What the JSON report says per comparison (the summary and HTML read this):
    `cost_per_item` is the run's spend per GEO item so far (None: unpriced); the money
    not spent is that times the items the decision left out."""
    ran = sum(1 for _, m in c.units if any(n in scores for n in m.values()))
    # Only the items the decision left out count: rows a budget, -x or an interrupt
    # stopped were not saved by the comparison (and an undecided one saved nothing).
    items_not_run = sum(1 for n in c.not_needed if n not in scores)
    return {
        "kind": c.kind, "suite": c.suite, "split": c.split, "decided": c.decided,
        "rows_used": c.read, "rows_run": ran, "rows_available": len(c.units), "rows_excluded": c.excluded,
        "dollars_not_spent": None if cost_per_item is None else items_not_run * cost_per_item,
        "alpha": alpha, "guarantee": guarantee(alpha),
        "pairs": [{"first": p.first, "second": p.second, "decision": p.sequence.decision, "verdict": p.verdict,
                   "decided_after": p.decided_after, **p.sequence.as_json()} for p in c.pairs],
    }


def sequential_json(monitor: Monitor, usage: Mapping[str, Mapping[str, int]], items_run: int) -> list[dict[str, Any]]:
    """The report's `sequential` entries; dollars not spent are estimated at the run's
    spend per GEO item so far (None when a model has no price)."""
    total = total_cost(usage)
    per_item = dollars(total[0]) / items_run if total is not None and items_run else None
    return [comparison_json(c, monitor.scores, monitor.alpha, per_item) for c in monitor.comparisons]


def not_spent(entry: Mapping[str, Any]) -> str:
    """The money a comparison saved by stopping early, in words."""
    saved = entry["dollars_not_spent"]
    if not entry["decided"]:
        return "nothing saved (undecided)"
    return f"${saved:.4f} not spent" if saved is not None else "dollars not spent unknown (no price)"


def sequential_lines(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The summary's lines per sequential comparison."""
    lines = []
    for e in entries:
        what = "variants of" if e["kind"] == "variants" else "against the baseline:"
        state = "decided" if e["decided"] else "undecided"
        money = not_spent(e)
        lines.append(f"sequential: {what} {e['suite']} [{e['split']}]: {state} after {e['rows_used']} of "
                     f"{e['rows_available']} rows ({e['rows_run']} ran, {e['rows_excluded']} with an error left "
                     f"out); {money}")
        for p in e["pairs"]:
            low, high = p["interval"]
            when = f" after {p['decided_after']} rows" if p["decided_after"] is not None else ""
            lines.append(f"  {p['verdict']}{when}: mean_diff={p['mean_diff']:+.4f} over {p['n']} rows, "
                         f"anytime-valid interval [{low:+.4f}, {high:+.4f}]")
        lines.append(f"  guarantee: {e['guarantee']}")
    return lines
