"""Writing the report files a run asked for, for the plugin and `egeo` alike: the report is
built once, and a write that fails (disk full, permissions changed since the start) is one
line in `Results.write_errors` while the other file is still written."""

from __future__ import annotations

from pathlib import Path

from pytest_geo.report.html import write_html_report
from pytest_geo.report.json_report import build_report, write_json_atomic
from pytest_geo.report.results import Results


def write_report_files(results: Results, json_path: str | None, html_path: str | None, *,
                       who: str, flags: tuple[str, str]) -> list[str]:
    """Write the JSON report to `json_path` and the HTML report to `html_path` (either may
    be None); `flags` name the two options in error lines. Returns the paths written."""
    if not json_path and not html_path:
        return []
    report = build_report(results)
    written = []
    for flag, path, write in ((flags[0], json_path, write_json_atomic), (flags[1], html_path, write_html_report)):
        if not path:
            continue
        try:
            write(Path(path), report)
        except OSError as exc:
            results.write_errors.append(f"{who}: {flag}: cannot write {path}: {exc.strerror or exc}")
        else:
            written.append(path)
    return written
