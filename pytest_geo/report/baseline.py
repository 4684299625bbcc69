"""Comparing a run with an earlier JSON report: per suite the score difference, and a
paired comparison over the rows both runs scored (matched by suite and node id)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_geo.data.files import read_regular
from pytest_geo.report.numbers import format_p
from pytest_geo.report.stats import Paired, paired

ALPHA = 0.05
MAX_BASELINE_BYTES = 1 << 30  # a report of a million rows; a FIFO or /dev/zero is refused outright


class BaselineError(Exception):
    """The baseline report cannot be read or is not a pytest-geo report; names the file."""


def load_baseline(path: Path | str, display: str | None = None) -> dict[str, Any]:
    """Read and check a baseline report; every problem names the file as the user gave it."""
    path = Path(path)
    name = display or str(path)
    try:
        data: dict[str, Any] = json.loads(read_regular(path, MAX_BASELINE_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"--geo-baseline: baseline report not found: {name}") from None
    except (OSError, UnicodeDecodeError) as exc:
        problem = getattr(exc, "strerror", None) or exc
        raise BaselineError(f"--geo-baseline: cannot read baseline report {name}: {problem}") from None
    except json.JSONDecodeError as exc:
        raise BaselineError(f"--geo-baseline: {name} is not JSON: {exc.msg} at line {exc.lineno}") from None
    except ValueError as exc:  # a number of more digits than Python converts
        raise BaselineError(f"--geo-baseline: {name} is not JSON: {str(exc).split(';')[0]}") from None
    problem = _shape_problem(data)
    if problem:
        raise BaselineError(f"--geo-baseline: {name} is not a pytest-geo report: {problem}")
    if data.get("complete") is False:
        raise BaselineError(f"--geo-baseline: {name} is a partial run ({data.get('not_run', '?')} selected rows "
                            "did not run); compare with the report of a complete run")
    return data


# Scores this large or larger are no metric's: their squares, summed for a standard
# error, would overflow to inf.
MAX_SCORE = 1e15
TEXT_FIELDS = {"suites": ("suite", "metric", "split"), "rows": ("suite", "nodeid")}


def _shape_problem(data: Any) -> str | None:
    """Only what the comparison reads, so reports from older versions still compare; but
    all of that, with its type: a score of "9" or NaN, or a suite name that is a list, is
    refused here rather than read wrongly or failing once every row has run and paid."""
    if not isinstance(data, dict):
        return "expected a JSON object"
    for key, texts in TEXT_FIELDS.items():
        entries = data.get(key)
        if not isinstance(entries, list):
            return f"{key!r} is missing or not a list"
        for index, entry in enumerate(entries):
            missing = [f for f in (*texts, "score") if not isinstance(entry, dict) or f not in entry]
            if missing:
                return f"{key}[{index}] has no {missing[0]!r}"
            problem = _entry_problem(entry, texts, f"{key}[{index}]")
            if problem:
                return problem
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        return f"metadata is {_shown(metadata)}, not an object"
    for where, value in (("complete", data.get("complete", True)), ("metadata.mock", metadata.get("mock", False))):
        if not isinstance(value, bool):
            return f"{where} is {_shown(value)}, not true or false"
    return None


def _entry_problem(entry: dict[str, Any], texts: tuple[str, ...], where: str) -> str | None:
    for field in texts:
        if not isinstance(entry[field], str):
            return f"{where}.{field} is {_shown(entry[field])}, not a string"
    score = entry["score"]
    if isinstance(score, bool) or not isinstance(score, int | float) or not abs(score) < MAX_SCORE:
        return f"{where}.score is {_shown(score)}, not a finite number (at most 1e15 in size)"
    if entry.get("error") is not None and not isinstance(entry["error"], str):
        return f"{where}.error is {_shown(entry['error'])}, not a string or null"
    return None


def _shown(value: Any) -> str:
    """`value` as the file spells it, cut short."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


# Roles whose model decides an eval run's numbers (the optimizer's takes no part in it).
EVAL_ROLES = ("ranker", "rewriter")


def differences(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """What differs between the baseline's run and this one, from their metadata: (every
    difference, in words; the ones that make the comparison meaningless: the mock
    against a real model, or other models)."""
    before = baseline.get("metadata")
    if not isinstance(before, Mapping):
        return ["the baseline records no run metadata (models, prompts, seed)"], []
    refusing, listed = _model_differences(before, current)
    listed += _prompt_differences(_mapping(before.get("prompts_sha256")), current["prompts_sha256"])
    listed += [f"{key}: {before[key]} in the baseline, {current[key]} now" for key in ("seed", "repeats")
               if key in before and before[key] != current[key]]
    return refusing + listed, refusing


def _model_differences(before: Mapping[str, Any], current: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(the model differences that refuse the comparison, the server's that do not)."""
    if bool(before.get("mock")) != bool(current["mock"]):
        words = {True: "the mock", False: "a real model"}
        return [f"model: {words[bool(before.get('mock'))]} in the baseline, {words[bool(current['mock'])]} now"], []
    if current["mock"]:
        return [], []
    models = _mapping(before.get("models"))
    refusing = [f"{role} model: {models.get(role)} in the baseline, {current['models'].get(role)} now"
                for role in EVAL_ROLES if models.get(role) != current["models"].get(role)]
    judges, now = _mapping(before.get("judges")), current.get("judges") or {}
    if dict(judges) != now:
        refusing.append(f"judges: {_named(judges)} in the baseline, {_named(now)} now")
    listed = []
    if before.get("base_url_host") != current["base_url_host"]:
        listed.append(f"server: {before.get('base_url_host')} in the baseline, {current['base_url_host']} now")
    return refusing, listed


def _prompt_differences(hashes: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    listed = []
    for name in sorted(set(hashes) | set(now)):
        if hashes.get(name) != now.get(name):
            state = "added" if name not in hashes else "removed" if name not in now else "changed"
            listed.append(f"prompt {name}: {state}")
    return listed


def _named(judges: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={model}" for name, model in judges.items()) or "none"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Comparison:
    suite: str
    metric: str
    split: str
    score: float
    baseline_score: float | None
    paired: Paired | None
    # Rows in both runs left out of the pairing because they errored in either run.
    errored_pairs: int = 0
    # --geo-sequential: the anytime-valid test's word ("this run worse": True), which
    # replaces the sign test's (read after optional stopping, a p-value means nothing).
    sequential_drop: bool | None = None

    @property
    def label(self) -> str:
        return f"{self.suite}::{self.metric}"

    @property
    def diff(self) -> float | None:
        return None if self.baseline_score is None else self.score - self.baseline_score

    @property
    def regression(self) -> bool:
        """A statistically significant drop: paired mean difference < 0 and p < 0.05, or
        under --geo-sequential the sequential test decided the baseline better."""
        if self.sequential_drop is not None:
            return self.sequential_drop
        return self.paired is not None and self.paired.significant_drop(ALPHA)

    def summary(self) -> str:
        if self.baseline_score is None:
            return f"{self.label} [{self.split}]: {self.score:.4f}, not in the baseline"
        text = f"{self.label} [{self.split}]: {self.score:.4f} vs {self.baseline_score:.4f} (diff {self.diff:+.4f})"
        if self.paired is not None:
            p = self.paired
            text += (f"; paired n={p.n} mean_diff={p.mean_diff:+.4f} stderr={p.stderr:.4f} "
                     f"sign_test_p={format_p(p.sign_test_p)}")
        if self.errored_pairs:
            text += f"; {self.errored_pairs} row(s) with an error in either run left out of the pairing"
        return text

    def as_json(self) -> dict[str, Any]:
        return {"suite": self.suite, "metric": self.metric, "split": self.split, "score": self.score,
                "baseline_score": self.baseline_score, "diff": self.diff,
                "paired": self.paired.as_json() if self.paired is not None else None,
                "errored_pairs": self.errored_pairs, "regression": self.regression}


def compare(
    suites: Iterable[Mapping[str, Any]], rows: Iterable[Mapping[str, Any]], baseline: Mapping[str, Any]
) -> list[Comparison]:
    before_suites = {(s["suite"], s["metric"], s["split"]): float(s["score"]) for s in baseline["suites"]}
    # Rows pair across runs by node id, unique within a run; a baseline from a version that
    # could repeat one (a query id clashing with a generated name) pairs none of those rows.
    before_rows: dict[tuple[str, str], Mapping[str, Any]] = {}
    repeated: set[tuple[str, str]] = set()
    for r in baseline["rows"]:
        key = (r["suite"], r["nodeid"])
        if key in before_rows:
            repeated.add(key)
        before_rows[key] = r
    for key in repeated:
        del before_rows[key]
    by_suite: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        by_suite.setdefault((row["suite"], row["split"]), []).append(row)
    comparisons = []
    for s in suites:
        both = [(r, before_rows[(r["suite"], r["nodeid"])])
                for r in by_suite.get((s["suite"], s["split"]), ()) if (r["suite"], r["nodeid"]) in before_rows]
        # An errored row scores 0.0: paired with a clean one it would read as a drop (or a
        # gain) that says nothing about the prompt. Only rows clean in both runs pair.
        matched = [(float(now["score"]), float(before["score"])) for now, before in both
                   if now.get("error") is None and before.get("error") is None]
        pairs = paired([a for a, _ in matched], [b for _, b in matched]) if matched else None
        comparisons.append(Comparison(s["suite"], s["metric"], s["split"], float(s["score"]),
                                      before_suites.get((s["suite"], s["metric"], s["split"])), pairs,
                                      errored_pairs=len(both) - len(matched)))
    return comparisons
