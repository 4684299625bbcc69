"""Writing the report files a run asked for, for the plugin and `egeo` alike: the report is
built once, and a write that fails (disk full, permissions changed since the start) is one
line in `Results.write_errors` while the other file is still written. The caller fails the
run for it; and the file a previous run left at that path is removed, so that CI never
reads it as this run's report."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_geo.data.files import write_text_atomic
from pytest_geo.report.html import render_html
from pytest_geo.report.json_report import build_report, json_text
from pytest_geo.report.results import Results


def write_report_files(results: Results, json_path: str | None, html_path: str | None, *,
                       who: str, flags: tuple[str, str]) -> list[str]:
    """Write the JSON report to `json_path` and the HTML report to `html_path` (either may
    be None); `flags` name the two options in error lines. Returns the paths written."""
    if not json_path and not html_path:
        return []
    report = build_report(results)
    written = []
    renderers: tuple[tuple[str, str | None, Callable[[Any], str]], ...] = (
        (flags[0], json_path, json_text), (flags[1], html_path, render_html))
    for flag, path, render in renderers:
        if not path:
            continue
        try:
            write_report(Path(path), render(report))
        except OSError as exc:
            error = f"{who}: {flag}: cannot write {path}: {exc.strerror or exc}"
            results.write_errors.append(error + _remove_previous(Path(path)))
        else:
            written.append(path)
    return written


def write_report(path: Path, text: str) -> None:
    """Atomically (a temp file renamed over the path), except over a device or a pipe
    (`/dev/stdout`, `>(jq .)`): renaming would replace the device node itself, which as
    root means a regular file where /dev/null was."""
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        with path.open("w", encoding="utf-8") as handle:
            handle.write(text)
        return
    write_text_atomic(path, text)


def _remove_previous(path: Path) -> str:
    """Remove the report a previous run left at `path`; the words saying so, for the
    error line ("" when there was none)."""
    try:
        if not path.is_file():
            return ""
        path.unlink()
    except OSError as exc:
        return f"; the previous report there could not be removed: {exc.strerror or exc}"
    return " (the previous report there was removed)"
