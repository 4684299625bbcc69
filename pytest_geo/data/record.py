"""A row's record: the one typed structure every report reads, built here only.

Records are plain data (a TypedDict is a dict at run time): they ride on pytest's test
reports to an xdist controller and go into the JSON report as they are."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from pytest_geo.data.dataset import GeoRow, RowProblem

RecordKind = Literal["geo", "suite", "problem", "empty"]
SCORED: tuple[RecordKind, ...] = ("geo", "suite")
GEO_METRIC = "rank_improvement"  # the built-in metric of GEO rows: the rank experiment


class _Where(TypedDict):
    kind: RecordKind
    suite: str
    metric: str
    split: str
    nodeid: str
    line: int
    threshold: NotRequired[float]  # only where the suite has one: a report writes no null


class ModelCall(TypedDict, total=False):
    """One model call of a row, for reading it back in the HTML report: the messages as
    sent (prompts rendered) and the answer's raw text, also when it came from the cache.
    No key, no headers: only what the prompt templates and the model produced. `error`
    is set instead of `answer` when the call failed for good."""

    step: str  # rank_before, rewrite or rank_after
    role: str
    model: str
    attempt: int  # 0, then 1.. for re-asks after an unusable answer
    messages: list[dict[str, str]]
    answer: str | None
    cached: bool
    error: str
    seconds: float  # from sending the call to its answer (or failure), to the millisecond
    prompt_tokens: int  # as the server reported them (a cached answer: as it reported them then)
    completion_tokens: int
    judge: str  # with --geo-judge: the judge a ranker call asked


class OutcomeFields(TypedDict, total=False):
    """What a GEO row's experiment adds (engine/experiment.py fills it)."""

    query_id: str | None
    target_id: str
    rank_before: float | None
    rank_after: float | None
    rank_improvement: float | None
    rewritten_description: str | None
    score: float
    feedback: str
    error: str | None
    fact_violations: list[str]
    repeats: list[dict[str, Any]]
    # With --geo-judge: NAME -> {rank_before, rank_after, rank_improvement, error, order_before}
    # (and flagged_before, flagged_after with E-GEO's answers)
    judges: dict[str, dict[str, Any]]
    # With E-GEO's answers and the ranker alone: whether it listed the target as questionable
    flagged_before: bool
    flagged_after: bool
    judge_noise: float | None  # with repeats: mean absolute deviation of rank_before over the orders
    calls: list[ModelCall]  # taken out as the record arrives, into the transcripts file (report/transcripts.py)
    n_calls: int  # and how many there were, left in their place,
    model_seconds: float  # with the calls' seconds and tokens added up
    prompt_tokens: int
    completion_tokens: int
    seconds: float  # the row's wall time (ms): its experiment (GEO rows) or its metric (suite rows)


class RowRecord(_Where, OutcomeFields, total=False):
    """`kind` says which fields are set: geo rows have the OutcomeFields plus `dataset`,
    `target_was_chosen`, `query` and the target's `original_description`; suite rows
    `index`, `input`, `score`, `feedback`, `error`; problems `dataset` and `problem`; an
    empty split only the location."""

    dataset: str
    target_was_chosen: bool
    query: str
    original_description: str
    index: int
    input: str
    problem: str
    variant: str  # geo rows under --geo-variant: the rewriting strategy; `suite` is then `<suite>[<variant>]`
    variant_of: str  # and the suite the variants are compared within


def where(kind: RecordKind, *, suite: str, metric: str, split: str, nodeid: str, line: int,
          threshold: float | None) -> RowRecord:
    # a literal rather than a keyword call of RowRecord (dict): made for every row, and cheaper
    record: RowRecord = {"kind": kind, "suite": suite, "metric": metric, "split": split, "nodeid": nodeid,
                         "line": line}
    if threshold is not None:
        record["threshold"] = threshold
    return record


def geo_record(row: GeoRow, outcome: OutcomeFields, *, suite: str, split: str, nodeid: str,
               threshold: float | None = None) -> RowRecord:
    """A GEO row's record, for the plugin's items and `egeo evaluate` alike."""
    record = where("geo", suite=suite, metric=GEO_METRIC, split=split, nodeid=nodeid, line=row.line,
                   threshold=threshold)
    # One dict, filled in place (built once a row, on pytest's main thread). mypy refuses any
    # TypedDict that might carry more keys here; OutcomeFields' keys are all RowRecord's.
    record.update(outcome)  # type: ignore[typeddict-item]
    record["dataset"] = row.path
    record["target_was_chosen"] = row.target_was_chosen
    record["query"] = row.query
    record["original_description"] = row.target.description
    if row.variant is not None:
        record["variant"] = row.variant
        record["variant_of"] = suite.removesuffix(f"[{row.variant}]")
    return record


def suite_record(base: RowRecord, index: int, input: str, score: float, feedback: str,
                 error: str | None) -> RowRecord:
    return RowRecord(**base, index=index, input=input, score=score, feedback=feedback, error=error)


def problem_record(problem: RowProblem, *, suite: str, split: str, nodeid: str,
                   threshold: float | None = None) -> RowRecord:
    base = where("problem", suite=suite, metric=GEO_METRIC, split=split, nodeid=nodeid, line=problem.line,
                 threshold=threshold)
    return RowRecord(**base, dataset=problem.path, problem=problem.problem)


def is_scored(record: RowRecord) -> bool:
    return record["kind"] in SCORED
