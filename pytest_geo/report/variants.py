"""Rewriting strategies compared within one run (`--geo-variant`): per suite, its
variants best first with their usual aggregates, and for every pair the paired
comparison over the rows both ran without error.

The same rows, the same rank_before and (with repeats) the same candidate orders went
into every variant, so row by row the difference of two variants' scores is the
strategies' difference alone: the paired mean difference, its standard error, a 95% t
interval and the exact two-sided sign test (ties dropped) say whether it is real."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_geo.data.record import RowRecord, is_scored
from pytest_geo.report.judges import matrix, paired_cells
from pytest_geo.report.numbers import format_ci, format_p
from pytest_geo.report.results import SuiteResult
from pytest_geo.report.stats import Paired, confidence_interval, paired


@dataclass(frozen=True)
class VariantPair:
    """`better` minus `worse` (by their scores), row by row."""

    better: str
    worse: str
    paired: Paired
    excluded: int  # rows of either variant left out: an error in one of them, or run in one only

    @property
    def ci95(self) -> tuple[float, float] | None:
        return confidence_interval(self.paired.mean_diff, self.paired.stderr, self.paired.n)

    @property
    def tied(self) -> bool:
        """Neither is better on these rows: `better` and `worse` are then only an order."""
        return self.paired.mean_diff == 0

    def as_json(self) -> dict[str, Any]:
        ci = self.ci95
        return {"better": self.better, "worse": self.worse, "tied": self.tied, **self.paired.as_json(),
                "ci95": list(ci) if ci is not None else None, "excluded": self.excluded}

    def summary(self) -> str:
        p = self.paired
        between = f"{self.better} = {self.worse} (tied)" if self.tied else f"{self.better} - {self.worse}"
        text = (f"  {between}: n={p.n} mean_diff={p.mean_diff:+.4f} stderr={p.stderr:.4f} "
                f"ci95={format_ci(self.ci95)} sign_test_p={format_p(p.sign_test_p)} "
                f"({p.up} better, {p.down} worse, {p.n - p.up - p.down} tied)")
        return text + (f"; {self.excluded} row(s) with an error left out" if self.excluded else "")


@dataclass(frozen=True)
class VariantComparison:
    """One suite (and split) run with several variants."""

    suite: str
    split: str
    variants: tuple[tuple[str, SuiteResult], ...]  # best first
    pairs: tuple[VariantPair, ...]
    # With --geo-judge: variants x judges (and the panel), each cell's n, mean and stderr,
    # and each pair's paired comparison per judge and on the panel (report/judges.py).
    matrix: dict[str, dict[str, dict[str, float | int]]] | None = None
    judge_pairs: tuple[tuple[str, str, str, Paired], ...] = ()  # (better, worse, judge or "panel", paired)

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "suite": self.suite, "split": self.split,
            "variants": [{"variant": name, "suite": result.suite, "n": result.summary.n, "score": result.summary.mean,
                          **result.summary.as_geo()} for name, result in self.variants],
            "pairs": [p.as_json() for p in self.pairs],
        }
        if self.matrix is not None:
            data["matrix"] = self.matrix
            data["judge_pairs"] = [{"better": b, "worse": w, "judge": j, **p.as_json()}
                                   for b, w, j, p in self.judge_pairs]
        return data

    def lines(self, show_split: bool = False) -> list[str]:
        split = f" [{self.split}]" if show_split else ""
        places = self.places()
        ranked = f"{self.variants[0][0]} {self.variants[0][1].summary.mean:.4f}"
        for i, (name, result) in enumerate(self.variants[1:], 1):
            ranked += (" = " if places[i] == places[i - 1] else " > ") + f"{name} {result.summary.mean:.4f}"
        return [f"variants of {self.suite}{split}, best first: {ranked}", *(p.summary() for p in self.pairs),
                *self.matrix_lines()]

    def matrix_lines(self) -> list[str]:
        """The variants x judges matrix (mean ± stderr, n), then each judge's paired comparisons."""
        if self.matrix is None:
            return []
        columns = list(next(iter(self.matrix.values())))
        lines = [f"  variants x judges (mean +/- stderr, n): {' | '.join(columns)}"]
        for variant, row in self.matrix.items():
            cells = " | ".join(f"{c['mean']:+.4f} +/- {c['stderr']:.4f} (n={c['n']})" for c in row.values())
            lines.append(f"    {variant}: {cells}")
        for better, worse, judge, p in self.judge_pairs:
            lines.append(f"  {better} - {worse} by {judge}: n={p.n} mean_diff={p.mean_diff:+.4f} "
                         f"stderr={p.stderr:.4f} sign_test_p={format_p(p.sign_test_p)}")
        return lines

    def places(self) -> list[int]:
        """Each variant's place, best first: variants with the same score share it."""
        means = [result.summary.mean for _, result in self.variants]
        return [1 + sum(1 for other in means if other > mean) for mean in means]


def _row_id(record: RowRecord) -> str:
    """The row a variant's record stands for: its node id without `[<variant>]`."""
    return record["nodeid"].removesuffix(f"[{record.get('variant', '')}]")


def compare_variants(records: Iterable[RowRecord], suites: Iterable[SuiteResult]) -> list[VariantComparison]:
    """Every suite run with two or more variants (one variant: its aggregates only)."""
    scored: dict[tuple[str, str], dict[str, dict[str, RowRecord]]] = {}
    for record in records:
        if is_scored(record) and "variant" in record:
            group = scored.setdefault((record["variant_of"], record["split"]), {})
            group.setdefault(record["variant"], {})[_row_id(record)] = record
    by_suite = {(s.suite, s.split): s for s in suites}
    comparisons = []
    for (suite, split), by_variant in scored.items():
        results = [(name, by_suite[(f"{suite}[{name}]", split)]) for name in by_variant
                   if (f"{suite}[{name}]", split) in by_suite]
        if len(results) < 2:
            continue
        ranked = tuple(sorted(results, key=lambda vr: -vr[1].summary.mean))  # stable: ties keep the given order
        pairs = []
        for i, (better, _) in enumerate(ranked):
            for worse, _ in ranked[i + 1:]:
                pairs.append(_pair(better, worse, by_variant[better], by_variant[worse]))
        comparisons.append(VariantComparison(suite, split, ranked, tuple(pairs), *_judged(ranked, by_variant)))
    return sorted(comparisons, key=lambda c: (c.suite, c.split != "train"))


def _pair(better: str, worse: str, a: dict[str, RowRecord], b: dict[str, RowRecord]) -> VariantPair:
    both = [row for row in a if row in b and a[row].get("error") is None and b[row].get("error") is None]
    diffs = paired([float(a[r]["score"]) for r in both], [float(b[r]["score"]) for r in both])
    return VariantPair(better, worse, diffs, len(set(a) | set(b)) - len(both))


def _judged(ranked: tuple[tuple[str, SuiteResult], ...], by_variant: dict[str, dict[str, RowRecord]]) -> tuple[
        dict[str, dict[str, dict[str, float | int]]] | None, tuple[tuple[str, str, str, Paired], ...]]:
    """With judges: the variants x judges matrix and every pair's comparison per judge and
    on the panel; (None, ()) without."""
    records = {name: list(by_variant[name].values()) for name, _ in ranked}
    if not any(r.get("judges") for rows in records.values() for r in rows):
        return None, ()
    table = matrix(records)
    columns = list(next(iter(table.values())))
    pairs = [(better, worse, judge, paired_cells(records[better], records[worse], judge))
             for i, (better, _) in enumerate(ranked) for worse, _ in ranked[i + 1:] for judge in columns]
    return table, tuple(pairs)
