"""The status line on pytest's terminal (report/progress.py draws it): shown while the
main thread waits for a row before pytest reports it, erased before pytest writes.

It waits in `pytest_runtest_protocol`, before the item's own hooks run: capture is not
active there, so the line reaches the terminal, and pytest has not yet started the item's
output. The line is written with `write_raw`, which leaves pytest's record of its current
line alone, so pytest's progress dots and `[ 50%]` keep their places."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_geo.report.progress import ProgressDisplay, status_text

if TYPE_CHECKING:
    from pytest_geo.data.dataset import GeoRow
    from pytest_geo.engine.session import GeoSession


class TerminalOutput:
    def __init__(self, reporter: Any) -> None:
        self.reporter = reporter

    def write_raw(self, text: str) -> None:
        self.reporter.write_raw(text, flush=True)

    def line(self, text: str) -> None:
        self.reporter.write_line(text)

    def column(self) -> int:
        return int(self.reporter.config.get_terminal_writer().width_of_current_line)

    def width(self) -> int:
        return int(self.reporter.config.get_terminal_writer().fullwidth)


def wanted(config: pytest.Config, mode: str) -> Any:
    """The terminal reporter to draw on, or None: `off`; `auto` under -q -q; no reporter."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if mode == "off" or reporter is None:
        return None
    if mode == "auto" and config.getoption("verbose") <= -2:
        return None
    return reporter


class PluginProgress:
    def __init__(self, geo: GeoSession, selected: int, reporter: Any) -> None:
        self.geo = geo
        self.selected = selected
        # Redrawing in place needs `write_raw` (pytest >= 9); before, plain lines as in a CI log.
        tty = bool(getattr(reporter, "isatty", False)) and hasattr(reporter, "write_raw")
        self.display = ProgressDisplay(TerminalOutput(reporter), tty=tty)

    @classmethod
    def start(cls, config: pytest.Config, geo: GeoSession, selected: int) -> PluginProgress | None:
        reporter = wanted(config, geo.settings.progress)
        return cls(geo, selected, reporter) if reporter is not None and selected else None

    def wait_for(self, row: GeoRow) -> None:
        future = self.geo.scheduled(row)
        # A row scheduled later (a --geo-sequential round) is waited for by the item; a
        # finished one (the common case: rows run ahead) is not waited for at all.
        if future is not None and not future.done():
            self.display.wait(self.geo.needed(row), lambda: status_text(self.geo.progress(self.selected)))
