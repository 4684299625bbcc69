"""One self-contained HTML file from a JSON report: inline CSS, JS and SVG, no network.

Every value from a dataset or a model (descriptions, feedback, ids) is untrusted and is
escaped; the script holds no data, it only sorts the table already in the page."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from pytest_geo.data.files import write_text_atomic

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}
table.rows th{cursor:pointer;user-select:none}
table.rows th:after{content:" \\2195";color:#999}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.text{max-width:420px;white-space:pre-wrap;word-break:break-word}
.bad{color:#b00020}.meta{color:#555}.banner{background:#fde7e9;border:1px solid #b00020;padding:.5em}
.figures{display:flex;flex-wrap:wrap;gap:24px}
svg text{font:11px system-ui,sans-serif;fill:#333}
"""

SCRIPT = """
document.querySelectorAll("table.rows").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var asc = th.getAttribute("data-dir") !== "asc";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("data-dir"); });
      th.setAttribute("data-dir", asc ? "asc" : "desc");
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute("data-v"), y = b.cells[col].getAttribute("data-v");
        var nx = parseFloat(x), ny = parseFloat(y);
        var cmp = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
        return asc ? cmp : -cmp;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""

ROW_COLUMNS = (
    ("suite", "suite"), ("row", "nodeid"), ("target", "target_id"), ("before", "rank_before"),
    ("after", "rank_after"), ("improvement", "rank_improvement"), ("score", "score"), ("feedback", "feedback"),
    ("rewritten description / input", None),
)
BEFORE, AFTER = "#9aa5b1", "#2b7bb9"


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if not value.is_integer() else f"{value:.1f}"
    return str(value)


def _cell(value: Any, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f'<td{attr} data-v="{escape(_fmt(value))}">{escape(_fmt(value))}</td>'


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
        ci = s.get("ci95")
        flag = "bad" if s.get("below_threshold") else ""
        yield [
            _cell(s["suite"]),
            _cell(s["metric"]),
            _cell(s["split"]),
            _cell(s["n"], "num"),
            _cell(float(s["score"]), "num " + flag),
            _cell("" if ci is None else f"[{ci[0]:.4f}, {ci[1]:.4f}]"),
            _cell(s.get("win_rate"), "num"),
            _cell(f"{s.get('errors', 0)} ({float(s.get('error_rate', 0.0)):.4f})", "num"),
            _cell(s.get("moved_up"), "num"),
            _cell(s.get("unchanged"), "num"),
            _cell(s.get("moved_down"), "num"),
            _cell(s.get("sign_test_p"), "num"),
            _cell(s.get("threshold"), "num"),
            _cell(s.get("feedback"), "text"),
        ]


def _baseline_rows(baseline: Mapping[str, Any]) -> Iterable[list[str]]:
    for c in baseline.get("suites", []):
        p = c.get("paired") or {}
        yield [
            _cell(c["suite"]),
            _cell(c["split"]),
            _cell(c["score"], "num"),
            _cell(c.get("baseline_score"), "num"),
            _cell(c.get("diff"), "num"),
            _cell(p.get("n"), "num"),
            _cell(p.get("mean_diff"), "num"),
            _cell(p.get("stderr"), "num"),
            _cell(p.get("sign_test_p"), "num"),
            _cell("yes" if c.get("regression") else "no", "bad" if c.get("regression") else ""),
        ]


def _row_cells(row: Mapping[str, Any]) -> list[str]:
    cells = []
    for _, key in ROW_COLUMNS:
        if key is None:
            text = row.get("rewritten_description") if row.get("kind") == "geo" else row.get("input")
            cells.append(_cell(text, "text"))
        elif key in ("rank_before", "rank_after", "rank_improvement", "score"):
            cells.append(_cell(row.get(key), "num"))
        else:
            cells.append(_cell(row.get(key), "text" if key == "feedback" else ""))
    return cells


def partial_run_banner(report: Mapping[str, Any]) -> str:
    """An interrupted run's scores cover only the rows that ran: say so first."""
    if report.get("complete", True):
        return ""
    return (f'<p class="banner partial" role="alert">Partial run: {escape(str(report.get("not_run", "?")))} '
            "selected rows did not run; the scores cover only the rows that ran.</p>")


def render_html(report: Mapping[str, Any]) -> str:
    meta = report.get("metadata") or {}
    rows = report.get("rows", [])
    geo_rows = [r for r in rows if r.get("kind") == "geo"]
    models = ", ".join(f"{role}={model}" for role, model in (meta.get("models") or {}).items())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"/><title>pytest-geo report</title>',
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
    ]
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
    if geo_rows:
        parts += [
            "<h2>GEO rank improvements</h2>",
            '<div class="figures">',
            histogram_svg([r for r in geo_rows if r.get("error") is None]),  # an error is no "+0" move
            before_after_svg(geo_rows),
            "</div>",
        ]
    parts += [
        '<h2>Rows</h2><p class="meta">Click a column header to sort.</p>',
        _table([h for h, _ in ROW_COLUMNS], (_row_cells(r) for r in rows), "rows"),
        f"<script>{SCRIPT}</script>",
        "</body></html>",
        "",
    ]
    return "\n".join(parts)


def write_html_report(path: Path, report: Mapping[str, Any]) -> None:
    write_text_atomic(path, render_html(report))
