"""One self-contained HTML file from a JSON report: inline CSS, JS and SVG, no network.

A viewer for judging rewrites: each row shows the query, the original and rewritten
description side by side with the changed words marked, the ranks and the feedback, and
on demand every model call of the row. Rows and transcripts travel as JSON in the page
and are rendered by a small script (report/viewer.js) with `textContent`, one page of
rows at a time and a transcript on expand, so a 10,000-row report opens quickly.
Everything from a dataset or a model is untrusted: escaped in the markup written here,
never parsed as HTML by the script."""

from __future__ import annotations

import io
import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from pytest_geo.data.files import write_text_atomic
from pytest_geo.llm.prices import format_dollars
from pytest_geo.llm.usage import is_priced
from pytest_geo.report.html_flags import flags_section, red_team_section
from pytest_geo.report.html_variants import (
    judges_section,
    noise_section,
    sequential_section,
    side_by_side_section,
    variants_section,
)
from pytest_geo.report.numbers import format_ci, format_fixed, format_p
from pytest_geo.report.viewer_data import PAGE_ROWS, decimals_of, row_view, script_json, transcript_views

# The page may load nothing: no script, style, image or font from anywhere else.
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}h4{margin:10px 0 4px}
table{border-collapse:collapse;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}
th.sortable{cursor:pointer;user-select:none}
th.sortable:after{content:" \\2195";color:#999}
th[aria-sort=ascending]:after{content:" \\2191";color:#222}
th[aria-sort=descending]:after{content:" \\2193";color:#222}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.text{max-width:420px;white-space:pre-wrap;word-break:break-word}
td.desc{max-width:360px}
td.id{font-size:12px;word-break:break-all;max-width:200px}
ins{background:#c9f0d1;text-decoration:none}
del{background:#f8d0d0;text-decoration:line-through}
tr.error>td{background:#fff1f1}
tr.error>td:first-child{border-left:4px solid #b00020}
tr.detail>td{background:#fafafa}
.transcript details.call{border:1px solid #ddd;margin:6px 0;padding:4px 8px;background:#fff}
.transcript summary{cursor:pointer;font-weight:600}
.transcript .msg{margin:4px 0}
.transcript .role{font-size:12px;color:#555;font-weight:600}
.transcript pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font:12px/1.35 ui-monospace,monospace}
.controls{display:flex;gap:16px;align-items:center;margin:8px 0}
.bad{color:#b00020}.meta{color:#555}.good{color:#1b7f3b;font-weight:600}
ul.problems code{white-space:pre-wrap;word-break:break-word}
.banner{background:#fde7e9;border:1px solid #b00020;padding:.5em}
h3{font-size:14px;margin:16px 0 4px}
.figures{display:flex;flex-wrap:wrap;gap:24px}
svg text{font:11px system-ui,sans-serif;fill:#333}
"""

# The rows table's columns: header, the row entry's key to sort by (None: not sortable).
ROW_COLUMNS: tuple[tuple[str, str | None], ...] = (
    ("#", "i"), ("suite", "suite"), ("row", "id"), ("query / input", "query"),
    ("original description", None), ("rewritten description", None), ("rank before", "before"),
    ("rank after", "after"), ("improvement", "delta"), ("score", "score"), ("feedback", "feedback"),
    ("model calls", "calls"),
)
BEFORE, AFTER = "#9aa5b1", "#2b7bb9"


def viewer_script() -> str:
    return resources.files("pytest_geo.report").joinpath("viewer.js").read_text(encoding="utf-8")


def _cell(value: Any, cls: str = "", show: Callable[[Any], str] = lambda v: "" if v is None else str(v)) -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{escape(show(value))}</td>"


def _fixed(decimals: int = 4, sign: bool = False) -> Callable[[Any], str]:
    def show(value: Any) -> str:
        if value is None:
            return ""
        return f"{float(value):+.{decimals}f}" if sign else format_fixed(float(value), decimals)
    return show


USAGE_COLUMNS = ("calls", "cache_hits", "retries", "errors", "prompt_tokens", "completion_tokens")


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "\n".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>"


def _bars(title: str, labels: Sequence[str], series: Sequence[tuple[str, str, Sequence[int]]], figure: str) -> str:
    """A small grouped bar chart as inline SVG."""
    width, height, left, bottom, top = 560, 240, 40, 36, 24
    groups = max(len(labels), 1)
    peak = max([max(values, default=0) for _, _, values in series] + [1])
    slot = (width - left - 10) / groups
    bar = max(slot * 0.8 / len(series), 1.0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'data-figure="{figure}" aria-label="{escape(title)}">',
             f'<text x="{left}" y="14">{escape(title)}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - 10}" y2="{height - bottom}" stroke="#888"/>',
             f'<text x="4" y="{top + 8}">{peak}</text><text x="4" y="{height - bottom}">0</text>']
    plot = height - bottom - top
    for g, label in enumerate(labels):
        x0 = left + g * slot + slot * 0.1
        for s, (name, colour, values) in enumerate(series):
            value = values[g]
            h = plot * value / peak
            parts.append(
                f'<rect x="{x0 + s * bar:.1f}" y="{height - bottom - h:.1f}" width="{bar:.1f}" '
                f'height="{h:.1f}" fill="{colour}"><title>{escape(name)} {escape(label)}: {value}</title></rect>'
            )
        parts.append(
            f'<text x="{x0 + slot * 0.4:.1f}" y="{height - bottom + 14}" text-anchor="middle">{escape(label)}</text>'
        )
    for s, (name, colour, _) in enumerate(series if len(series) > 1 else ()):
        x = width - 150 + s * 70
        parts.append(
            f'<rect x="{x}" y="{height - 14}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{x + 14}" y="{height - 5}">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _integer_bins(values: Sequence[float]) -> tuple[list[str], list[int]]:
    """Rounded to whole ranks; wide ranges are grouped into at most 30 bins."""
    rounded = [round(v) for v in values]
    if not rounded:
        return [], []
    low, high = min(rounded), max(rounded)
    step = max(1, math.ceil((high - low + 1) / 30))
    counts = Counter((v - low) // step for v in rounded)
    labels, heights = [], []
    for b in range((high - low) // step + 1):
        start = low + b * step
        labels.append(f"{start:+d}" if step == 1 else f"{start:+d}..{start + step - 1:+d}")
        heights.append(counts.get(b, 0))
    return labels, heights


def histogram_svg(rows: Sequence[Mapping[str, Any]]) -> str:
    labels, counts = _integer_bins([float(r["score"]) for r in rows])
    return _bars("Rank improvement (rows per value)", labels, [("rows", AFTER, counts)], "histogram")


def before_after_svg(rows: Sequence[Mapping[str, Any]]) -> str:
    ranked = [r for r in rows if r.get("rank_before") is not None and r.get("rank_after") is not None]
    before = Counter(round(r["rank_before"]) for r in ranked)
    after = Counter(round(r["rank_after"]) for r in ranked)
    positions = range(1, max([*before, *after, 1]) + 1)
    return _bars(
        "Target rank before and after the rewrite (rows per rank)",
        [str(p) for p in positions],
        [
            ("before", BEFORE, [before.get(p, 0) for p in positions]),
            ("after", AFTER, [after.get(p, 0) for p in positions]),
        ],
        "before-after",
    )


def _suite_rows(report: Mapping[str, Any]) -> Iterable[list[str]]:
    for s in report.get("suites", []):
        flag = "bad" if s.get("below_threshold") else ""
        method = "Wilson score interval (0/1 scores)" if s.get("ci95_method") == "wilson" else "t interval"
        ci = "" if s.get("ci95") is None else format_ci(s["ci95"])
        yield [
            _cell(s["suite"]),
            _cell(s["metric"]),
            _cell(s["split"]),
            _cell(s["n"], "num"),
            _cell(s["score"], "num " + flag, _fixed()),
            f'<td class="num" title="{escape(method)}">{escape(ci)}</td>',
            _cell(s.get("win_rate"), "num", _fixed()),
            _cell(f"{s.get('errors', 0)} ({float(s.get('error_rate', 0.0)):.4f})", "num"),
            _cell(s.get("moved_up"), "num", _fixed()),
            _cell(s.get("unchanged"), "num", _fixed()),
            _cell(s.get("moved_down"), "num", _fixed()),
            _cell(s.get("sign_test_p"), "num", format_p),
            _cell(s.get("threshold"), "num", _fixed()),
            _cell(s.get("feedback"), "text"),
        ]


def _baseline_rows(baseline: Mapping[str, Any]) -> Iterable[list[str]]:
    for c in baseline.get("suites", []):
        p = c.get("paired") or {}
        yield [
            _cell(c["suite"]),
            _cell(c["split"]),
            _cell(c["score"], "num", _fixed()),
            _cell(c.get("baseline_score"), "num", _fixed()),
            _cell(c.get("diff"), "num", _fixed(sign=True)),
            _cell(p.get("n"), "num"),
            _cell(p.get("mean_diff"), "num", _fixed(sign=True)),
            _cell(p.get("stderr"), "num", _fixed()),
            _cell(p.get("sign_test_p"), "num", format_p),
            _cell("yes" if c.get("regression") else "no", "bad" if c.get("regression") else ""),
        ]


SAMPLE_FIRST, SAMPLE_ERRORS = 200, 200  # a page embeds the transcripts of at most these rows


@dataclass(frozen=True)
class TranscriptSample:
    """The transcripts a page embeds when the rows' calls are in the transcripts file:
    `lines` (their JSON text) by node id, and that file's name (beside the page) and
    number of rows."""

    lines: Mapping[str, str]
    file: str | None
    rows: int


def sample_nodeids(rows: Sequence[Mapping[str, Any]]) -> set[str]:
    """The rows whose transcripts a page embeds: the first SAMPLE_FIRST rows in report
    order (the first page shown) and the first SAMPLE_ERRORS rows with an error."""
    chosen = {str(r.get("nodeid")) for r in rows[:SAMPLE_FIRST]}
    errors = (str(r.get("nodeid")) for r in rows if r.get("error"))
    chosen.update(itertools.islice(errors, SAMPLE_ERRORS))
    return chosen


def _sample_note(sample: TranscriptSample | None) -> dict[str, Any] | None:
    """What the page says about transcripts it does not embed (None: it embeds them all)."""
    if sample is None:
        return None
    return {"file": sample.file, "embedded": len(sample.lines), "rows": sample.rows,
            "first": SAMPLE_FIRST, "errors": SAMPLE_ERRORS}


def rows_section(rows: Sequence[Mapping[str, Any]], sample: TranscriptSample | None = None) -> Iterator[str]:
    """The rows table, empty in the markup: the script fills it from the JSON below,
    written one row at a time. Transcripts: those the rows hold, or `sample`'s."""
    errors = sum(1 for r in rows if r.get("error"))
    head = "".join(
        f'<th data-key="{key}">{escape(label)}</th>' if key else f"<th>{escape(label)}</th>"
        for label, key in ROW_COLUMNS
    )
    note = _sample_note(sample)
    about = ""
    if note is not None:
        where = f"in {note['file']}" if note["file"] else "not kept (no transcripts file was written)"
        about = (f" This page holds the model calls of {note['embedded']} of {len(rows)} rows (the first "
                 f"{SAMPLE_FIRST} rows and up to {SAMPLE_ERRORS} rows with an error); every row's calls are "
                 f"{where}, which a row's calls button can open here.")
    yield ('<h2>Rows</h2><p class="meta" id="rows-help">Click a column header to sort, a row\'s calls button to read '
           f"its model calls (prompts sent, answers received).{escape(about)}</p>\n")
    yield ('<div class="controls">'
           f'<label><input type="checkbox" id="errors-only"/> errors only ({errors})</label>'
           '<input type="search" id="row-filter" placeholder="filter rows" aria-label="filter rows"/>'
           '<span id="rows-shown" class="meta"></span></div>\n')
    yield f'<table class="rows" id="rows-table"><thead><tr>{head}</tr></thead><tbody></tbody></table>\n'
    yield '<button type="button" id="show-more" hidden>show more</button>\n'
    yield "<noscript>The rows table needs JavaScript; the JSON report (--geo-report) has every row.</noscript>\n"
    yield ('<script type="application/json" id="geo-rows">'
           f'{{"page":{PAGE_ROWS},"decimals":{script_json(decimals_of(rows))},"transcripts":{script_json(note)},'
           '"rows":[')
    for i, record in enumerate(rows):  # one row's entry at a time: the page is never whole in memory
        yield ("," if i else "") + script_json(row_view(i, record))
    yield "]}</script>\n"
    transcripts = transcript_views(rows, None if sample is None else sample.lines)
    yield f'<script type="application/json" id="geo-transcripts">{script_json(transcripts)}</script>\n'
    yield f"<script>{viewer_script()}</script>\n"


def problems_section(report: Mapping[str, Any]) -> list[str]:
    """Every malformed line as `file:line: problem`, the way the terminal shows it."""
    problems = report.get("problems") or []
    if not problems:
        return []
    items = "\n".join(
        f"<li><code>{escape(str(p.get('dataset', '')))}:{escape(str(p.get('line', '')))}: "
        f"{escape(str(p.get('problem', '')))}</code></li>"
        for p in problems
    )
    return [f'<h2>Problems</h2><p class="meta">{len(problems)} malformed line{"s" if len(problems) != 1 else ""}; '
            "each is a failed test of its own and scores nothing.</p>",
            f'<ul class="problems" id="problems">\n{items}\n</ul>']


def gates_section(report: Mapping[str, Any]) -> list[str]:
    """The gates that failed the run: which, the figure judged, what it was held to, why."""
    gates = report.get("gates") or []
    if not gates:
        return []
    rows = ([_cell(g.get("nodeid")), _cell(g.get("score"), "num bad", _fixed()), _cell(g.get("limit")),
             _cell(g.get("message"), "text")] for g in gates)
    return ['<h2>Failed gates</h2><p class="meta">Each is a failed test with this node id, and fails the run.</p>',
            _table(("gate", "score", "threshold or baseline", "why it failed"), rows, "gates")]


def _usage_table(report: Mapping[str, Any]) -> str:
    """Calls, tokens and dollars per role (a role whose model has no price shows tokens
    only), then the total."""
    cost = report.get("cost") or {}
    roles = cost.get("roles") or {}

    def money(value: Any) -> str:
        return "" if value is None else f"${value:.6f}".rstrip("0").rstrip(".")

    rows = []
    for role, counts in sorted((report.get("usage") or {}).items()):
        priced = roles.get(role) or {}
        rows.append([_cell(role)] + [_cell(counts.get(name, 0), "num") for name in USAGE_COLUMNS]
                    + [_cell(priced.get("cost"), "num", money), _cell(priced.get("saved_by_cache"), "num", money)])
    total = cost.get("total")
    unreported = cost.get("unreported_usage_roles") or []
    if (report.get("metadata") or {}).get("mock"):
        note = "total $0: the mock model costs nothing"
    elif total is not None:
        note = f"total {money(total)} at list prices ({cost.get('prices_date', '')})"
    elif unreported and not cost.get("unpriced_roles"):
        note = "total unknown: the server reported no usage for some calls of " + ", ".join(unreported)
    else:
        note = "total unknown: no price for " + ", ".join(cost.get("unpriced_roles") or ["the mock"])
    headers = ("role", *(name.replace("_", " ") for name in USAGE_COLUMNS), "cost", "saved by cache")
    return _table(headers, rows, "usage") + f'<p class="meta">{escape(note)}</p>'


def _endpoint_usage_table(report: Mapping[str, Any]) -> list[str]:
    """With models on named endpoints: calls and tokens per endpoint over its roles, and
    its cost where every answer it gave had a price (as the terminal prints it)."""
    by_endpoint = report.get("endpoint_usage") or {}
    if not by_endpoint:
        return []
    rows = [[_cell(name)] + [_cell(counts.get(column, 0), "num") for column in USAGE_COLUMNS]
            + [_cell(format_dollars(counts.get("cost_nanousd", 0)) if is_priced(counts) else "", "num")]
            for name, counts in sorted(by_endpoint.items())]
    headers = ("endpoint", *(name.replace("_", " ") for name in USAGE_COLUMNS), "cost")
    return ["<h3>By endpoint</h3>", _table(headers, rows, "endpoint-usage")]


def _models_used(report: Mapping[str, Any]) -> dict[str, str]:
    """The models of the roles that made calls (an optimizer that did not run is not
    named); before any call, the roles every run has."""
    models = (report.get("metadata") or {}).get("models") or {}
    used = {"rewriter" if role == "procedure" else role for role in report.get("usage") or {}}
    return {role: model for role, model in models.items() if role in (used or {"ranker", "rewriter"})}


def partial_run_banner(report: Mapping[str, Any]) -> str:
    """An interrupted run's scores cover only the rows that ran: say so first."""
    if report.get("complete", True):
        return ""
    reached = (report.get("budget") or {}).get("reached")
    why = f" The budget was reached: {escape(str(reached))}." if reached else ""
    return (f'<p class="banner partial" role="alert">Partial run: {escape(str(report.get("not_run", "?")))} '
            f"selected rows did not run; the scores cover only the rows that ran.{why}</p>")


def render_html(report: Mapping[str, Any], sample: TranscriptSample | None = None) -> str:
    out = io.StringIO()
    write_html(out, report, sample)
    return out.getvalue()


def write_html(out: TextIO, report: Mapping[str, Any], sample: TranscriptSample | None = None) -> None:
    """The page, written piece by piece to `out` (the rows one at a time)."""
    meta = report.get("metadata") or {}
    rows = report.get("rows", [])
    geo_rows = [r for r in rows if r.get("kind") == "geo"]
    models = ", ".join(f"{role}={model}" for role, model in _models_used(report).items())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"/>',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}"/>',
        "<title>pytest-geo report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>pytest-geo report</h1>",
        partial_run_banner(report),
        f'<p class="meta">{escape("mock model" if meta.get("mock") else models)}; '
        f"seed {escape(str(meta.get('seed', '')))}; "
        f"started {escape(str(meta.get('started_at', '')))}; {escape(str(meta.get('duration_s', '')))} s; "
        f"{len(rows)} rows, {len(report.get('problems', []))} malformed lines</p>",
        "<h2>Suites</h2>",
        _table(
            (
                "suite",
                "metric",
                "split",
                "n",
                "score",
                "95% CI",
                "win rate",
                "errors (rate)",
                "up",
                "unchanged",
                "down",
                "sign test p",
                "threshold",
                "feedback",
            ),
            _suite_rows(report),
            "suites",
        ),
        *gates_section(report),
        *problems_section(report),
    ]
    if report.get("usage"):
        parts += ["<h2>Model usage and cost</h2>", _usage_table(report), *_endpoint_usage_table(report)]
    if report.get("baseline"):
        parts += [
            f"<h2>Against the baseline {escape(str(report['baseline'].get('path', '')))}</h2>",
            _table(
                (
                    "suite",
                    "split",
                    "score",
                    "baseline",
                    "diff",
                    "paired n",
                    "mean diff",
                    "stderr",
                    "sign test p",
                    "regression",
                ),
                _baseline_rows(report["baseline"]),
                "baseline",
            ),
        ]
    parts += [*variants_section(report), *judges_section(report), *flags_section(report),
              *red_team_section(report), *sequential_section(report), *noise_section(report)]
    if geo_rows:
        parts += [
            "<h2>GEO rank improvements</h2>",
            '<div class="figures">',
            histogram_svg([r for r in geo_rows if r.get("error") is None]),  # an error is no "+0" move
            before_after_svg(geo_rows),
            "</div>",
        ]
    parts += side_by_side_section(report)
    for part in parts:
        out.write(part + "\n")
    for chunk in rows_section(rows, sample):  # each chunk ends its own lines
        out.write(chunk)
    out.write("</body></html>\n")


def write_html_report(path: Path, report: Mapping[str, Any]) -> None:
    write_text_atomic(path, render_html(report))
