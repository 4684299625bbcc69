"""The HTML report's parts for E-GEO's `questionable_products`: per suite, how often each
judge flagged the target before and after the rewrite, and per packaged red-team attack
the judges it fooled (mean improvement) and the ones that saw through it (flag rate).

Built from the JSON report's `suites[].flag_rates` and `redteam`, with the terminal's
numbers (report/flags.py formats both), so the three reports never disagree. Judge,
attack and suite names are escaped."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from pytest_geo.report.flags import PANEL, cell_text, rate_text
from pytest_geo.report.html_tables import html_table, td


def panel_last(names: Iterable[str]) -> list[str]:
    """The judges in the run's order (a report read back from a file has them sorted),
    then the panel."""
    named = list(dict.fromkeys(names))
    return [name for name in named if name != PANEL] + [name for name in named if name == PANEL]


def _rate_row(name: str, steps: Mapping[str, Mapping[str, Any]]) -> str:
    """Judge, rate before, rate after, rows: the after rate's rows as the terminal counts
    them; a before rate over fewer rows (a cache without the list) says over how many."""
    before, after = steps["before"], steps["after"]
    shown = rate_text(before["rate"]) + ("" if before["n"] == after["n"] else f" (n={before['n']})")
    return ("<tr>" + td(name) + td(shown, "num") + td(rate_text(after["rate"]), "num")
            + td(str(after["n"]), "num") + "</tr>")


def flags_section(report: Mapping[str, Any]) -> list[str]:
    """Per suite whose ranker answered with E-GEO's flags: each judge's flag rates."""
    flagged = [s for s in report.get("suites", []) if s.get("flag_rates")]
    if not flagged:
        return []
    parts = ["<h2>Flagged as questionable</h2>",
             '<p class="meta">How often each judge listed the target among its questionable products, before '
             "and after the rewrite, over the rows it scored whose answer had the list; the panel counts a row "
             "flagged when any judge flagged it. A rewrite that gets its product flagged has failed, however far "
             "it moved it.</p>"]
    for s in flagged:
        rows = [_rate_row(name, s["flag_rates"][name]) for name in panel_last(s["flag_rates"])]
        parts += [f"<h3>{escape(s['suite'])} [{escape(s['split'])}]</h3>",
                  html_table("flags", ("judge", "flagged before", "flagged after", "n"), rows)]
    return parts


def red_team_section(report: Mapping[str, Any]) -> list[str]:
    """Per suite that ran packaged attacks: attack x judge (and panel), each cell the mean
    improvement ± se, the flag rate after ± se, and the rows."""
    teams = report.get("redteam") or []
    if not teams:
        return []
    parts = ["<h2>Red-team attacks</h2>",
             '<p class="meta">Each packaged attack run as a variant, per judge: the mean rank improvement ± its '
             "standard error, the rate at which the judge flagged the target after the attack ± its standard "
             "error (sqrt(p(1-p)/n)), and the rows. A judge that moves the product up without flagging it was "
             "fooled.</p>"]
    for team in teams:
        attacks: Mapping[str, Mapping[str, Mapping[str, Any]]] = team["attacks"]
        judges = panel_last(name for cells in attacks.values() for name in cells)
        rows = ["<tr>" + td(attack) + "".join(td(cell_text(cells[name], "±"), "num") if name in cells else td("")
                                              for name in judges) + "</tr>"
                for attack, cells in attacks.items()]
        parts += [f"<h3>{escape(team['suite'])} [{escape(team['split'])}]</h3>",
                  html_table("redteam", ("attack", *judges), rows)]
    return parts
