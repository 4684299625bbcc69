"""The E-GEO leaderboard's submission files (`--geo-egeo-submission DIR`): `rewrites.jsonl`,
`results.json` and `metadata.json`, in the shapes the leaderboard reads (see
../shared/egeo-benchmark.md in the project's notes, from the benchmark's own code). With
variants, one folder per variant under DIR (a submission is one rewriter)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_geo.data.files import write_text_atomic
from pytest_geo.data.record import RowRecord, is_scored
from pytest_geo.report.results import Results

SUBMISSION_TYPES = ("model+prompt", "fine-tuned", "agent")
META_KEYS = ("name", "contact", "type", "description", "code_url", "paper_url")


def judge_key(model: str) -> str:
    """The leaderboard's key for a judge: its model id without the provider path,
    lower-cased, non-alphanumerics as `_` (`openrouter/openai/gpt-5` -> `gpt_5`)."""
    return re.sub(r"[^a-z0-9]", "_", model.rsplit("/", 1)[-1].lower())


class SubmissionError(ValueError):
    """The run cannot write a submission; the message says why."""


def check_judge_keys(judges: Mapping[str, str], flag: str) -> None:
    """Two judges whose models give one leaderboard key would share one entry of
    results.json (one of them lost): refused before any call. `judges`: name -> model."""
    named: dict[str, str] = {}
    for name, model in judges.items():
        key = judge_key(model)
        if key in named:
            raise SubmissionError(f"{flag}: judges {named[key]} and {name} would both be {key!r} in the "
                                  "leaderboard's files (its keys are the judges' model ids): give each judge "
                                  "its own model, or leave one out of the submission run")
        named[key] = name


def _mean_se(values: Sequence[float]) -> dict[str, float | None]:
    """Mean and standard error (sample standard deviation, n - 1, over sqrt(n)), to 4 decimals."""
    n = len(values)
    if n == 0:
        return {"mean": None, "se": None}
    mean = sum(values) / n
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) / math.sqrt(n) if n > 1 else 0.0
    return {"mean": round(mean, 4), "se": round(se, 4)}


def _questionable(cell: Mapping[str, Any]) -> str | None:
    """Whether the judge flagged the rewritten target, as the leaderboard writes it
    ("True"/"False"); None without E-GEO's answers."""
    flagged = cell.get("flagged_after")
    return str(flagged) if isinstance(flagged, bool) else None


def _judged(record: RowRecord, judges: Mapping[str, str], ranker: str) -> dict[str, dict[str, Any]]:
    """Per judge key: the row's improvement (None where that judge did not score it) and flag."""
    cells = record.get("judges")
    if not cells:  # no panel: the ranker is the one judge
        return {judge_key(ranker): {"improvement": None if record.get("error") else record.get("rank_improvement"),
                                    "questionable": _questionable(record)}}
    return {judge_key(judges[name]): {"improvement": cell.get("rank_improvement"), "questionable": _questionable(cell)}
            for name, cell in cells.items() if name in judges}


def _rewrite_line(record: RowRecord, judges: Mapping[str, str], ranker: str) -> dict[str, Any]:
    target = str(record.get("target_id", ""))
    return {"query_id": record.get("query_id"), "rand_idx": int(target) - 1 if target.isdigit() else None,
            "initial_product": record.get("original_description"),
            "optimized_product": record.get("rewritten_description"),
            "judges": _judged(record, judges, ranker)}


def _results(lines: Sequence[dict[str, Any]], usage: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    keys = list(dict.fromkeys(key for line in lines for key in line["judges"]))
    ranker = usage.get("ranker", {})
    priced = ranker.get("unpriced_calls", 0) == 0
    return {
        "per_ranker": {key: _mean_se([float(line["judges"][key]["improvement"]) for line in lines
                                      if line["judges"].get(key, {}).get("improvement") is not None])
                       for key in keys},
        "total_queries_scored": sum(1 for line in lines
                                    if any(c["improvement"] is not None for c in line["judges"].values())),
        "total_input_tokens": ranker.get("prompt_tokens", 0),
        "total_output_tokens": ranker.get("completion_tokens", 0),
        "estimated_usd_cost": round(ranker.get("cost_nanousd", 0) / 1e9, 4) if priced else None,
    }


def _metadata(meta: Mapping[str, str], judges: Sequence[str], rewriter: str, n_rows: int,
              usage: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    rewriter_usage = usage.get("rewriter", {})
    cost = rewriter_usage.get("cost_nanousd", 0) / 1e9 / n_rows if n_rows and rewriter_usage.get(
        "unpriced_calls", 0) == 0 else None
    return {
        "name": meta.get("name", ""), "type": meta.get("type", "model+prompt"), "mode": "rewrites",
        "judges": list(judges), "description": meta.get("description", ""),
        "cost_per_rewrite_usd": round(cost, 6) if cost is not None else None, "query_blind": True,
        "contact": meta.get("contact", ""), "code_url": meta.get("code_url", ""),
        "paper_url": meta.get("paper_url", ""), "run_config": {"rewriter_model": rewriter},
        "is_paper_baseline": False,
    }


def write_submission(results: Results, directory: Path, judges: Mapping[str, str], models: Mapping[str, str],
                     variant_models: Mapping[str, str], meta: Mapping[str, str]) -> list[Path]:
    """Write the three files (per variant, in its own folder) and return the folders.
    `judges`: judge name -> model (empty: the ranker alone)."""
    rows = [r for r in results.records if is_scored(r) and r.get("kind") == "geo"]
    variants = list(dict.fromkeys(r.get("variant") for r in rows))
    ranker = models.get("ranker", "")
    judge_models = list(judges.values()) or [ranker]
    written = []
    for variant in variants:
        folder = directory / variant if variant is not None else directory
        folder.mkdir(parents=True, exist_ok=True)
        mine = sorted((r for r in rows if r.get("variant") == variant), key=lambda r: str(r.get("query_id")))
        lines = [_rewrite_line(r, judges, ranker) for r in mine]
        rewriter = variant_models.get(variant or "", models.get("rewriter", ""))
        write_text_atomic(folder / "rewrites.jsonl", "".join(json.dumps(line, ensure_ascii=False) + "\n"
                                                             for line in lines))
        write_text_atomic(folder / "results.json", json.dumps(_results(lines, results.usage), indent=2) + "\n")
        write_text_atomic(folder / "metadata.json",
                          json.dumps(_metadata(meta, judge_models, rewriter, len(lines), results.usage), indent=2)
                          + "\n")
        written.append(folder)
    return written
