"""The live status line: under a pseudo-terminal (redrawn in place, gone before pytest
writes, so the final screen is pytest's own) and without one (plain lines, spaced)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import DUMMY_KEY, PROMPTS, SMOKE, GeoProject
from pytest_geo.data.dataset import GeoRow, iter_dataset
from pytest_geo.engine.progress import Snapshot
from pytest_geo.engine.session import GeoSession
from pytest_geo.llm.base import ChatRequest, ChatResponse
from pytest_geo.llm.mock import MockClient
from pytest_geo.llm.stack import build_stack
from pytest_geo.report import progress
from pytest_geo.report.progress import ProgressDisplay, status_text
from pytest_geo.settings import Settings

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")

STATUS = re.compile(r"geo: \d+/\d+ rows done, eta [^,]+, \d+ in flight, \d+ errors?, \d+ retr(y|ies), [\d.k]+ tokens")
ESCAPE = re.compile(r"\x1b\[(\d*)([A-Za-z])")


def render(raw: str, width: int = 80) -> list[str]:
    """What a VT100 screen shows after `raw`: the few controls pytest and the status
    line use (CR, LF, erase line, cursor up and right; colours ignored)."""
    lines: list[list[str]] = [[]]
    row = col = 0
    i = 0
    while i < len(raw):
        match = ESCAPE.match(raw, i)
        if match:
            n, code = int(match.group(1) or 0), match.group(2)
            if code == "K":
                del lines[row][col if n == 0 else 0:]
                if n == 2:
                    lines[row] = []
            elif code == "A":
                row = max(row - max(n, 1), 0)
            elif code == "C":
                col = min(col + max(n, 1), width - 1)
            i = match.end()
            continue
        char = raw[i]
        if char == "\r":
            col = 0
        elif char == "\n":
            row += 1
            if row == len(lines):
                lines.append([])
        else:
            line = lines[row]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = char
            else:
                line.append(char)
            col += 1
        i += 1
    return ["".join(line).rstrip() for line in lines]


def run_in_pty(args: list[str], cwd: Path) -> str:
    """pytest in a subprocess whose stdout is a pseudo-terminal; everything it printed."""
    env = dict(os.environ, OPENAI_API_KEY=DUMMY_KEY, COLUMNS="80", LINES="24", TERM="xterm")
    env.pop("PYTEST_ADDOPTS", None)
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=cwd, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    proc.wait(timeout=60)
    return b"".join(chunks).decode("utf-8", "replace")


def screen_without_timing(raw: str) -> list[str]:
    """The screen with run times out, and pytest's `===` padding around them, which is
    one `=` shorter when a run takes 10 s or more."""
    return [re.sub(r"=+ (.*) in [\d.]+s(.*?) =+$", r"= \1 in Ts\2 =", line) for line in render(raw) if line]


@pytest.fixture
def slow_server(served_project: GeoProject) -> GeoProject:
    served_project.server.latency = 0.35  # a row takes ~0.7 s: it holds pytest's output back
    return served_project


@pytest.mark.e2e
@pytest.mark.parametrize("verbosity", [[], ["-v"]])
def test_on_a_terminal_the_line_is_redrawn_and_leaves_pytests_screen_intact(
        slow_server: GeoProject, verbosity: list[str]) -> None:
    dataset = slow_server.priced().dataset(4)  # priced: the line shows the cost so far
    args = [str(dataset), "--geo-base-url", slow_server.server.url, "--geo-no-cache", "--geo-concurrency", "2",
            "-p", "no:cacheprovider", "-p", "no:xdist", *verbosity]
    shown = run_in_pty(args, slow_server.pytester.path)
    slow_server.server.latency = 0.0  # the screen to compare with: pytest's own, however fast
    hidden = run_in_pty([*args, "--geo-progress", "off"], slow_server.pytester.path)
    assert STATUS.search(shown) and not STATUS.search(hidden)
    assert "$0.0" in shown  # the cost so far (gpt-4o-mini has a price: geo_prices)
    assert screen_without_timing(shown) == screen_without_timing(hidden)
    assert "4 passed" in screen_without_timing(shown)[-1]


@pytest.mark.plugin
def test_without_a_terminal_plain_lines_come_spaced_out(
        slow_server: GeoProject, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.6)
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    result = slow_server.run(str(slow_server.dataset(4)), "--geo-concurrency", "1", "--geo-no-cache")
    result.assert_outcomes(passed=4)
    status = [line for line in result.stdout.lines if STATUS.search(line)]
    assert status and all(line.startswith("geo: ") for line in status)  # whole lines of their own
    assert len(status) <= result.duration / 0.6 + 1
    assert "\x1b" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*4 passed*"])


@pytest.mark.plugin
@pytest.mark.parametrize("args, shown", [
    (["-q", "-q"], False),
    (["-q", "-q", "--geo-progress", "on"], True),
    (["--geo-progress", "off"], False),
    (["-q"], True),
])
def test_progress_modes(slow_server: GeoProject, monkeypatch: pytest.MonkeyPatch, args: list[str],
                        shown: bool) -> None:
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    result = slow_server.run(str(slow_server.dataset(2)), "--geo-no-cache", *args)
    assert result.ret == 0
    assert any(STATUS.search(line) for line in result.stdout.lines) is shown


@pytest.mark.plugin
def test_progress_off_from_the_ini_file(slow_server: GeoProject, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    slow_server.pytester.makeini("[pytest]\ngeo_progress = off\n")
    result = slow_server.run(str(slow_server.dataset(2)), "--geo-no-cache")
    assert result.ret == 0 and not any(STATUS.search(line) for line in result.stdout.lines)


@pytest.mark.plugin
def test_a_bad_mode_is_a_usage_error(served_project: GeoProject) -> None:
    result = served_project.run(str(served_project.dataset(1)), "--geo-progress", "loud")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--geo-progress*'loud' is not one of auto, on, off*"])


def snap(**fields: object) -> Snapshot:
    base: dict[str, object] = {"selected": 80, "done": 20, "in_flight": 16, "errors": 1, "retries": 1,
                               "tokens": 41_234, "cost_nanousd": 12_300_000, "elapsed": 10.0}
    base.update(fields)
    return Snapshot(**base)  # type: ignore[arg-type]


@pytest.mark.unit
def test_status_text_reads_like_the_readme() -> None:
    assert status_text(snap()) == (
        "geo: 20/80 rows done, eta 30s, 16 in flight, 1 error, 1 retry, 41.2k tokens, $0.01230")
    assert status_text(snap(done=0, errors=2, retries=3, cost_nanousd=None)) == (
        "geo: 0/80 rows done, eta ?, 16 in flight, 2 errors, 3 retries, 41.2k tokens")
    assert "eta 1m30s" in status_text(snap(done=10, elapsed=12.9))


class FakeOutput:
    def __init__(self, column: int) -> None:
        self.raw = ""
        self.lines: list[str] = []
        self._column = column

    def write_raw(self, text: str) -> None:
        self.raw += text

    def line(self, text: str) -> None:
        self.lines.append(text)

    def column(self) -> int:
        return self._column

    def width(self) -> int:
        return 40


@pytest.mark.unit
@pytest.mark.parametrize("column", [0, 13])
def test_the_erased_line_puts_the_cursor_back(column: int) -> None:
    output = FakeOutput(column)
    display = ProgressDisplay(output, tty=True)
    display._show(lambda: "geo: a status line far longer than the forty columns")
    display._show(lambda: "geo: redrawn")
    display.clear()
    before = "rows.jsonl ..".ljust(column)[:column]
    screen = render(before + output.raw + "X", width=40)
    assert screen[0] == before + "X"
    assert all(not line for line in screen[1:])
    assert all(len(line) < 40 for line in render(before + output.raw, width=40))


@pytest.mark.unit
def test_plain_lines_are_spaced_by_the_interval() -> None:
    now = [0.0]
    output = FakeOutput(0)
    display = ProgressDisplay(output, tty=False, clock=lambda: now[0])
    for step in range(30):
        now[0] = step * 1.0
        display._show(lambda: f"at {now[0]:g}")
    # the first once the run has lasted 2 s, then one every 10 s
    assert output.lines == ["at 2", "at 12", "at 22"] and output.raw == ""


def finishing_soon(seconds: float = 0.05) -> concurrent.futures.Future[None]:
    """A row that holds the output back for far less than the 0.5 s tick."""
    future: concurrent.futures.Future[None] = concurrent.futures.Future()
    threading.Timer(seconds, future.set_result, (None,)).start()
    return future


@pytest.mark.unit
@pytest.mark.parametrize("tty", [True, False])
def test_short_waits_show_the_line_once_the_run_has_lasted_two_seconds(tty: bool) -> None:
    now = [0.0]
    output = FakeOutput(0)
    display = ProgressDisplay(output, tty=tty, clock=lambda: now[0])
    now[0] = 1.5
    display.wait(finishing_soon(), lambda: "geo: early")
    assert output.raw == "" and output.lines == []  # a short wait early in the run: nothing
    now[0] = 2.5
    display.wait(finishing_soon(), lambda: "geo: later")
    if tty:
        assert render(output.raw) == [""] and "geo: later" in output.raw  # drawn, then erased
    else:
        assert output.lines == ["geo: later"]
    display.wait(finishing_soon(), lambda: "geo: again")  # a plain line waits 10 s for the next
    assert output.lines == ([] if tty else ["geo: later"])


@pytest.mark.plugin
def test_a_run_of_short_calls_shows_the_line_in_a_log(served_project: GeoProject,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Short waits show the line once the run has lasted SHOW_AFTER (the unit test above
    moves a fake clock past two seconds); here the run starts past it."""
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    served_project.server.latency = 0.08  # a row takes ~0.2 s: never one tick's wait
    result = served_project.run(str(served_project.dataset(4)), "--geo-concurrency", "1", "--geo-no-cache")
    result.assert_outcomes(passed=4)
    status = [line for line in result.stdout.lines if STATUS.search(line)]
    assert status and all(line.startswith("geo: ") for line in status)


@pytest.mark.e2e
def test_a_run_of_short_calls_shows_the_line_on_a_terminal(served_project: GeoProject) -> None:
    """As in a log (above): the run starts past SHOW_AFTER, set in the project's conftest."""
    served_project.pytester.makeconftest("from pytest_geo.report import progress\n\nprogress.SHOW_AFTER = 0.0\n")
    served_project.server.latency = 0.08  # a row takes ~0.2 s: never one tick's wait
    dataset = served_project.dataset(4)
    shown = run_in_pty([str(dataset), "--geo-base-url", served_project.server.url, "--geo-no-cache",
                        "--geo-concurrency", "1", "-p", "no:cacheprovider", "-p", "no:xdist"],
                       served_project.pytester.path)
    assert STATUS.search(shown)
    assert "4 passed" in screen_without_timing(shown)[-1]  # and gone from the final screen


STOPPING_CONFTEST = '''
import asyncio
from pytest_geo.llm.base import ServerUnusable
from pytest_geo.llm.mock import MockClient

class Stopping(MockClient):
    """Row r0 answers slowly; every other row's calls are refused as a stopped server's are."""
    async def complete(self, request):
        if "number 0" not in request.context.get("query", ""):
            raise ServerUnusable("the model server stopped answering")
        await asyncio.sleep(1.2)
        return await super().complete(request)

def pytest_geo_make_client(config, settings):
    return Stopping()
'''


@pytest.mark.plugin
def test_rows_not_run_are_counted_as_not_run_never_as_errors(
        served_project: GeoProject, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    served_project.pytester.makeconftest(STOPPING_CONFTEST)
    result = served_project.run(str(served_project.dataset(4)), "--geo-no-cache", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(["geo: 0/4 rows done, eta ?, 1 in flight, 0 errors, 3 not run, 0 retries, * tokens*"])
    result.stdout.no_fnmatch_line("geo: */4 rows done, * [1-9] error*")


@pytest.mark.unit
def test_status_text_counts_rows_not_run_apart() -> None:
    assert status_text(snap(done=20, errors=1, not_run=30, cost_nanousd=None)) == (
        "geo: 20/80 rows done, eta 15s, 16 in flight, 1 error, 30 not run, 1 retry, 41.2k tokens")


class Hanging(MockClient):
    """Every call waits until the row is cancelled."""

    async def complete(self, request: ChatRequest) -> ChatResponse:
        await asyncio.sleep(60)
        return await super().complete(request)


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.unit
def test_cancelled_rows_count_as_not_run_whether_they_had_started_or_not() -> None:
    settings = Settings(prompts_dir=PROMPTS, concurrency=1)
    geo = GeoSession(settings, build_stack(settings, Hanging()))
    rows = [r for r in iter_dataset(SMOKE, 7) if isinstance(r, GeoRow)][:4]
    try:
        geo.schedule_many(rows)
        wait_until(lambda: geo.progress(4).in_flight == 1)
        geo.cancel(rows[3])  # not needed any more (a decided --geo-sequential comparison)
        assert geo.cancel_pending() == 3  # -x: the row in flight and the two queued behind it
        wait_until(lambda: geo.progress(4).in_flight == 0)
        snapshot = geo.progress(4)
        assert (snapshot.done, snapshot.errors, snapshot.not_run) == (0, 0, 4)
    finally:
        geo.close()
