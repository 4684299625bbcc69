"""Numbers formatted for reading, shared by the terminal summary and the HTML report so
both print a value the same way: fixed decimals per column, small p-values in
scientific notation (0.0000 would hide 3.7e-09 and 0.04 alike)."""

from __future__ import annotations

from collections.abc import Sequence

P_DECIMALS = 4
SMALL_P = 1e-3  # below this, fixed decimals lose the order of magnitude


def format_p(p: float | None) -> str:
    """0.0312, 0.2500; below 0.001 two significant digits: 3.7e-09."""
    if p is None:
        return ""
    if 0 < p < SMALL_P:
        return f"{p:.1e}"
    return f"{p:.{P_DECIMALS}f}"


def format_fixed(value: float | None, decimals: int = 4) -> str:
    return "" if value is None else f"{value:.{decimals}f}"


def format_ci(ci: Sequence[float] | None, decimals: int = 4) -> str:
    return "n/a" if ci is None else f"[{ci[0]:.{decimals}f}, {ci[1]:.{decimals}f}]"


def column_decimals(values: Sequence[float | None], decimals: int = 2) -> int:
    """0 when every value in a column is whole (ranks of single runs), else `decimals`
    (means of repeats): one column, one number of decimals."""
    known = [v for v in values if v is not None]
    return 0 if all(float(v).is_integer() for v in known) else decimals
