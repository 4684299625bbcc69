"""The HTML report's parts for `--geo-variant` and `--geo-repeats`: each suite's variants
best first, every pair's paired comparison, the judge's noise floor, and one row's
rewrites side by side across variants.

The tables are written here, escaped. The side-by-side is built by a small script
(report/variants.js) from the rows' JSON already in the page (`geo-rows`, whose entries
hold each rewrite's word diff): the page only adds, per row, which entry is which
variant's, so a large run adds little to the file. Text goes in with textContent only."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from importlib import resources
from typing import Any

from pytest_geo.report.html_flags import panel_last
from pytest_geo.report.html_tables import html_table, td
from pytest_geo.report.numbers import format_ci, format_fixed, format_p
from pytest_geo.report.stopping import not_spent
from pytest_geo.report.viewer_data import script_json


def _num(value: Any, decimals: int = 4, sign: bool = False) -> str:
    if value is None:
        return td("", "num")
    return td(f"{float(value):+.{decimals}f}" if sign else format_fixed(float(value), decimals), "num")


def variants_section(report: Mapping[str, Any]) -> list[str]:
    """Per compared suite: its variants best first, then each pair (better - worse)."""
    comparisons = report.get("variants") or []
    if not comparisons:
        return []
    suites = {(s["suite"], s["split"]): s for s in report.get("suites", [])}
    parts = ["<h2>Variants</h2>",
             '<p class="meta">Each pair is compared row by row over the rows both ran without error: the mean '
             "difference (first minus second), its standard error and 95% t interval, and the exact two-sided "
             "sign test (ties dropped). Variants with the same score share a place.</p>"]
    for c in comparisons:
        ranked = []
        scores = [v["score"] for v in c["variants"]]
        for v in c["variants"]:
            place = 1 + sum(1 for other in scores if other > v["score"])
            s = suites.get((v["suite"], c["split"]), {})
            ranked.append("<tr>" + td(str(place), "num") + td(v["variant"]) + td(str(v["n"]), "num")
                          + _num(v["score"]) + td(format_ci(s.get("ci95")) if s.get("ci95") else "", "num")
                          + _num(s.get("win_rate")) + _num(s.get("judge_noise")) + "</tr>")
        pairs = []
        for p in c["pairs"]:
            significant = p["sign_test_p"] < 0.05
            tied = " (tied)" if p.get("tied") else ""
            pairs.append("<tr>" + td(p["better"] + tied) + td(p["worse"] + tied) + td(str(p["n"]), "num")
                         + _num(p["mean_diff"], sign=True) + _num(p["stderr"])
                         + td(format_ci(p["ci95"]) if p.get("ci95") else "n/a", "num")
                         + td(f"{p['improved']}/{p['unchanged']}/{p['worsened']}", "num")
                         + td(format_p(p["sign_test_p"]), "num" + (" good" if significant else ""))
                         + td(str(p["excluded"]), "num") + "</tr>")
        parts += [
            f"<h3>{escape(c['suite'])} [{escape(c['split'])}]</h3>",
            html_table("variants", ("place", "variant", "n", "score", "95% CI", "win rate", "judge noise"), ranked),
            html_table("variant-pairs", ("first", "second", "paired n", "mean diff", "stderr", "95% CI",
                                         "rows first better/tied/worse", "sign test p", "rows left out"), pairs),
        ]
    return parts


def noise_section(report: Mapping[str, Any]) -> list[str]:
    """With --geo-repeats K >= 2: each suite's judge noise beside its gain."""
    noisy = [s for s in report.get("suites", []) if s.get("judge_noise") is not None]
    if not noisy:
        return []
    rows = ["<tr>" + td(s["suite"]) + td(s["split"]) + _num(s["score"]) + _num(s["judge_noise"])
            + td(f"{s.get('rows_within_noise', 0)} of {s.get('rows_moved', 0)}", "num") + "</tr>" for s in noisy]
    return ["<h2>Judge noise</h2>",
            '<p class="meta">How far the ranker moves a target when only the candidates\' order changes: the mean '
            "absolute deviation of rank_before over the repeats' orders, averaged over rows. A gain no larger "
            "than it could be the judge reshuffling.</p>",
            html_table("noise", ("suite", "split", "avg rank improvement", "judge noise", "moved rows within noise"),
                       rows)]


def side_by_side_section(report: Mapping[str, Any]) -> list[str]:
    """One row's rewrites across variants; the script fills it for the chosen row."""
    comparisons = report.get("variants") or []
    if not comparisons:
        return []
    order = {(c["suite"], c["split"]): [v["variant"] for v in c["variants"]] for c in comparisons}
    groups: dict[tuple[str, str, str], dict[str, int]] = {}
    for index, row in enumerate(report.get("rows", [])):
        key = (row.get("variant_of"), row.get("split"))
        if row.get("kind") == "geo" and "variant" in row and key in order:
            base = str(row["nodeid"]).removesuffix(f"[{row['variant']}]")
            groups.setdefault((key[0], key[1], base), {})[row["variant"]] = index
    entries = [{"id": base, "variants": [[name, found[name]] for name in order[(suite, split)] if name in found]}
               for (suite, split, base), found in groups.items()]
    script = resources.files("pytest_geo.report").joinpath("variants.js").read_text(encoding="utf-8")
    return [
        "<h2>Rewrites side by side</h2>",
        '<div class="controls"><label>row <select id="variant-row"></select></label>'
        '<span id="variant-query" class="meta"></span></div>',
        '<table class="side-by-side" id="variant-side"><thead><tr><th>variant</th><th>rank before</th>'
        "<th>rank after</th><th>improvement</th><th>rewritten description (changes against the original)</th>"
        "</tr></thead><tbody></tbody></table>",
        f'<script type="application/json" id="geo-variant-rows">{script_json(entries)}</script>',
        f"<script>{script}</script>",
    ]


def sequential_section(report: Mapping[str, Any]) -> list[str]:
    """--geo-sequential: per comparison the decision, the rows it used and the money left
    unspent, and the guarantee in words."""
    entries = report.get("sequential") or []
    if not entries:
        return []
    parts = ["<h2>Sequential comparisons</h2>"]
    for e in entries:
        parts.append(f'<p class="meta">{escape(e["suite"])} [{escape(e["split"])}] '
                     f'{"against the baseline" if e["kind"] == "baseline" else "variants"}: '
                     f'{"decided" if e["decided"] else "undecided"} after {e["rows_used"]} of '
                     f'{e["rows_available"]} rows ({e["rows_run"]} ran); '
                     f'{escape(not_spent(e))}. '
                     f'Guarantee: {escape(e["guarantee"])}.</p>')
        rows = ["<tr>" + td(p["verdict"]) + td(str(p["decided_after"] or ""), "num") + td(str(p["n"]), "num")
                + _num(p["mean_diff"], sign=True) + td(format_ci(p["interval"]), "num") + "</tr>"
                for p in e["pairs"]]
        parts.append(html_table("sequential", ("decision", "decided after rows", "rows in the test", "mean diff",
                                               "anytime-valid interval"), rows))
    return parts


def judges_section(report: Mapping[str, Any]) -> list[str]:
    """With --geo-judge: per suite each judge's figures and the panel's, the agreement, and
    for compared variants the variants x judges matrix (mean ± stderr, n)."""
    judged = [s for s in report.get("suites", []) if s.get("panel") is not None]
    if not judged:
        return []
    parts = ["<h2>Judges</h2>",
             '<p class="meta">Each judge ranks every row before and after its rewrite; the panel is each row\'s '
             "improvement averaged over the judges that scored it. Agreement: Krippendorff's alpha (interval) "
             "over the rows' improvements, the mean Kendall tau of every two judges' rankings of the same "
             "original candidates, and the share of rows whose judges all saw the same direction.</p>"]
    for s in judged:
        figures = [*s["judges"].items(), ("panel", s["panel"])]
        rows = ["<tr>" + td(name) + td(str(m["n"]), "num") + _num(m["avg_rank_improvement"], sign=True)
                + _num(m["win_rate"]) + _num(m["stderr_rank_improvement"]) + "</tr>" for name, m in figures]
        a = s["agreement"]
        parts += [f"<h3>{escape(s['suite'])} [{escape(s['split'])}]</h3>",
                  html_table("judges", ("judge", "n", "avg rank improvement", "win rate", "stderr"), rows),
                  html_table("agreement", ("Krippendorff's alpha", "mean Kendall tau", "direction agreement",
                                           "rows two or more judges scored"),
                             ["<tr>" + _num(a["krippendorff_alpha"]) + _num(a["mean_kendall_tau"])
                              + _num(a["direction_agreement"]) + td(str(a["direction_rows"]), "num") + "</tr>"])]
    for c in report.get("variants") or []:
        table = c.get("matrix")
        if not table:
            continue
        columns = panel_last(next(iter(table.values())))
        rows = ["<tr>" + td(variant) + "".join(
            td(f"{row[name]['mean']:+.4f} ± {row[name]['stderr']:.4f} (n={row[name]['n']})", "num")
            if name in row else td("") for name in columns) + "</tr>" for variant, row in table.items()]
        pairs = ["<tr>" + td(p["better"]) + td(p["worse"]) + td(p["judge"]) + td(str(p["n"]), "num")
                 + _num(p["mean_diff"], sign=True) + _num(p["stderr"]) + td(format_p(p["sign_test_p"]), "num")
                 + "</tr>" for p in c.get("judge_pairs", [])]
        parts += [f"<h3>variants x judges: {escape(c['suite'])} [{escape(c['split'])}]</h3>",
                  html_table("judge-matrix", ("variant", *columns), rows),
                  html_table("judge-pairs", ("better", "worse", "judge", "paired n", "mean diff", "stderr",
                                             "sign test p"), pairs)]
    return parts
