"""The run's budget in pytest: checked at start, one ledger file for the controller and its
xdist workers (passed to them in `workerinput`), read at the end (llm/budget.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_geo.llm.budget import BudgetError, budget_status, check_budget
from pytest_geo.llm.ledger import BudgetLimits, BudgetStatus, Ledger
from pytest_geo.pytest_layer.state import is_xdist_worker, running_session, settings_of

LEDGER_INPUT = "geo_budget_ledger"  # workerinput key: the controller's ledger file


def start_budget(config: pytest.Config) -> None:
    """A dollar budget over a model without a price is a usage error before any call. The
    process that aggregates creates the ledger (removed when pytest unconfigures); an xdist
    worker uses the one its controller passed, never a budget of its own."""
    settings = settings_of(config)
    try:
        check_budget(settings)
    except BudgetError as exc:
        raise pytest.UsageError(str(exc)) from None
    if not BudgetLimits.of(settings).active:
        return
    if is_xdist_worker(config):
        shared = config.workerinput.get(LEDGER_INPUT)  # type: ignore[attr-defined]
        if not shared or not Path(shared).is_file():
            raise pytest.UsageError(f"--geo-budget: this xdist worker cannot find its controller's budget ledger "
                                    f"({shared or 'none given'}): the workers must share the controller's file "
                                    "system (local -n N)")
        settings.budget_ledger = Path(shared)
        return
    ledger = settings.budget_ledger = Ledger.create()
    config.add_cleanup(lambda: ledger.unlink(missing_ok=True))


def pass_ledger(config: pytest.Config, workerinput: dict[str, object]) -> None:
    """On the controller, for each worker it starts (pytest_configure_node)."""
    ledger = settings_of(config).budget_ledger
    if ledger is not None:
        workerinput[LEDGER_INPUT] = str(ledger)


def final_budget(config: pytest.Config) -> BudgetStatus | None:
    """What the run's processes spent together; None without a budget."""
    return budget_status(settings_of(config))


def budget_reached(config: pytest.Config) -> str | None:
    """Why the budget stopped calls, once it has (only read while the run has a budget)."""
    if running_session(config) is None or not BudgetLimits.of(settings_of(config)).active:
        return None
    status = final_budget(config)
    return status.reached if status is not None else None
