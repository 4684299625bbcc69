"""The live status line, shared by the plugin (on pytest's terminal) and `egeo` (on
stderr); the engine counts what it shows (engine/progress.py):

    geo: 31/80 rows done, eta 42s, 16 in flight, 1 error, 2 retries, 41.2k tokens, $0.01230

(`N not run` after the errors once rows were skipped without running: engine/progress.py.)

It shows while the main thread waits for a row (a row holding back pytest's output) once
the run has lasted `SHOW_AFTER` seconds, or sooner when one row holds the output back
for `TICK`; so a long run of short calls shows it too. On a terminal it is one line,
its figures refreshed at most twice a second, gone before anything else is written, the
way pytest redraws `collecting ...`: when the cursor is mid-line (pytest's progress dots)
it goes on the line below and, once the row is in, is erased and the cursor put back
where pytest left it. Elsewhere (CI logs) it is a plain line, the first after
`SHOW_AFTER` seconds, then at most one every `PLAIN_EVERY` seconds.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pytest_geo.llm.prices import format_dollars

if TYPE_CHECKING:
    from pytest_geo.data.dataset import GeoRow
    from pytest_geo.engine.progress import Snapshot
    from pytest_geo.engine.session import GeoSession

TICK = 0.5  # at most two refreshes a second
SHOW_AFTER = 2.0  # seconds into the run before the line shows at every wait
PLAIN_EVERY = 10.0  # seconds between plain lines

CLEAR_TO_END = "\x1b[K"
UP = "\x1b[1A"


class Output(Protocol):
    """Where the line goes. `write_raw` must bypass any line tracking of its owner (the
    line is erased before the owner writes again); `column` is where the owner's cursor
    sits on its current line."""

    def write_raw(self, text: str) -> None: ...

    def line(self, text: str) -> None: ...

    def column(self) -> int: ...

    def width(self) -> int: ...


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _count(n: int) -> str:
    return f"{n / 1_000_000:.1f}M" if n >= 1_000_000 else f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def status_text(s: Snapshot) -> str:
    """Most telling first: a narrow terminal cuts the end of the line."""
    eta = s.eta
    parts = [f"geo: {s.done}/{s.selected} rows done", f"eta {_duration(eta)}" if eta is not None else "eta ?",
             f"{s.in_flight} in flight", _plural(s.errors, "error"),
             *([f"{s.not_run} not run"] if s.not_run else []),
             f"{s.retries} {'retry' if s.retries == 1 else 'retries'}", f"{_count(s.tokens)} tokens"]
    if s.cost_nanousd is not None:
        parts.append(format_dollars(s.cost_nanousd))
    return ", ".join(parts)


class ProgressDisplay:
    def __init__(self, output: Output, tty: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.output = output
        self.tty = tty
        self.clock = clock
        self.started = clock()
        self.last_plain: float | None = None  # when the last plain line was printed
        self._text: tuple[float, str] | None = None  # the terminal line's text and when it was made
        self._below: int | None = None  # on a terminal, while drawn: the column to return to

    def wait(self, future: concurrent.futures.Future[Any], text: Callable[[], str]) -> None:
        """Wait for `future`, showing `text()` while it holds the caller back; the line
        is erased before this returns (also on Ctrl-C)."""
        if future.done():  # the common case once rows run ahead: nothing to show, no waiter to build
            return
        try:
            if self.clock() - self.started >= SHOW_AFTER:
                self._show(text)
            while not _finished_within(future, TICK):
                self._show(text)
        finally:
            self.clear()

    def _show(self, text: Callable[[], str]) -> None:
        now = self.clock()
        if not self.tty:
            due = self.started + SHOW_AFTER if self.last_plain is None else self.last_plain + PLAIN_EVERY
            if now >= due:
                self.last_plain = now
                self.output.line(text())
            return
        if self._text is None or now - self._text[0] >= TICK:
            self._text = (now, text()[: max(self.output.width() - 1, 10)])  # never wraps: one erase clears it
        line = self._text[1]
        if self._below is None:
            self._below = self.output.column()
            self.output.write_raw(("\n\r" if self._below else "\r") + line + CLEAR_TO_END)
        else:
            self.output.write_raw("\r" + line + CLEAR_TO_END)

    def clear(self) -> None:
        if self._below is None:
            return
        column, self._below = self._below, None
        back = f"{UP}\x1b[{column}C" if column else ""
        self.output.write_raw("\r" + CLEAR_TO_END + back)


def _finished_within(future: concurrent.futures.Future[Any], timeout: float) -> bool:
    """Whether `future` is done after waiting up to `timeout` seconds."""
    try:
        future.exception(timeout)
    except concurrent.futures.TimeoutError:
        return False
    except concurrent.futures.CancelledError:
        pass
    return True


class RunProgress:
    """The status line while a front end's main thread waits for a row's outcome."""

    def __init__(self, geo: GeoSession, selected: int, display: ProgressDisplay) -> None:
        self.geo = geo
        self.selected = selected  # the run's rows, as the line counts them
        self.display = display

    def wait_for(self, row: GeoRow) -> None:
        future = self.geo.scheduled(row)
        # A row scheduled later (a --geo-sequential round) is waited for by the item; a
        # finished one (the common case: rows run ahead) is not waited for at all.
        if future is not None and not future.done():
            self.display.wait(self.geo.needed(row), lambda: status_text(self.geo.progress(self.selected)))


class TerminalOutput:
    """pytest's terminal, through its terminal reporter. The line is written with
    `write_raw`, which leaves pytest's record of its current line alone, so pytest's
    progress dots and `[ 50%]` keep their places."""

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


def terminal_progress(config: Any, geo: GeoSession, selected: int) -> RunProgress | None:
    """The plugin's line (`config` is pytest's): none when off, under -q -q in auto mode,
    without a terminal reporter, or with no row selected."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    mode = geo.settings.progress
    if mode == "off" or reporter is None or not selected or (mode == "auto" and config.getoption("verbose") <= -2):
        return None
    # Redrawing in place needs `write_raw` (pytest >= 9); before, plain lines as in a CI log.
    tty = bool(getattr(reporter, "isatty", False)) and hasattr(reporter, "write_raw")
    return RunProgress(geo, selected, ProgressDisplay(TerminalOutput(reporter), tty=tty))


class StderrOutput:
    """egeo's place for the line: stderr, whose cursor egeo always leaves at a line start
    (stdout stays the metrics JSON)."""

    def write_raw(self, text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()

    def line(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def column(self) -> int:
        return 0

    def width(self) -> int:
        return shutil.get_terminal_size().columns


def stderr_progress(geo: GeoSession, selected: int) -> RunProgress | None:
    if geo.settings.progress == "off":
        return None
    return RunProgress(geo, selected, ProgressDisplay(StderrOutput(), tty=sys.stderr.isatty()))
