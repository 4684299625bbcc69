"""Ctrl-C in a real process: the run ends promptly and the report keeps finished rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import GeoProject

pytestmark = pytest.mark.e2e


def test_interrupt_writes_the_partial_report(served_project: GeoProject) -> None:
    served_project.server.latency = 0.1
    dataset = served_project.dataset(60)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "pytest", str(dataset), *served_project.args("--geo-concurrency", "2",
                                                                              "--geo-report", "rep.json")]
    # The child gets Ctrl-C's default handling even if this process was started with
    # SIGINT ignored (as background jobs and some CI runners are): Python then raises
    # KeyboardInterrupt, as it would in a terminal.
    process = subprocess.Popen(command, cwd=served_project.pytester.path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 30
        while len(served_project.server.requests) < 15 and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting for progress, not measuring it
        process.send_signal(signal.SIGINT)
        # A hang guard, not a measurement: closing waits for in-flight requests to be
        # cancelled, which a loaded machine can slow down.
        output, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 2, output  # pytest's "interrupted"
    assert "KeyboardInterrupt" in output and "pytest-geo evaluation" in output
    rows = json.loads((served_project.pytester.path / "rep.json").read_text("utf-8"))["rows"]
    assert 0 < len(rows) < 60
    assert all(r["error"] is None and r["rank_improvement"] == 2 for r in rows)
