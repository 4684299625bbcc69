"""`pytest --markers` lists the suites' markers too. Suites register their markers as they
are collected, and `--markers` collects nothing, so for it the suites that can be found
without importing test modules are read: those in conftest files (already imported) and
YAML suite files under the rootdir. Suites declared in test modules show once collected."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_geo.pytest_layer.state import register_marker
from pytest_geo.suites.suite import Suite, suites_in


def register_suite_markers(config: pytest.Config) -> None:
    for suite in (*_conftest_suites(config), *_yaml_suites(config)):
        for name in (suite.name, *suite.markers):
            register_marker(config, name)


def _conftest_suites(config: pytest.Config) -> Iterator[Suite]:
    for plugin in config.pluginmanager.get_plugins():
        if getattr(plugin, "__file__", "").endswith("conftest.py"):
            yield from suites_in(plugin)


def _yaml_suites(config: pytest.Config) -> Iterator[Suite]:
    from pytest_geo.pytest_layer.collect import project_roots
    from pytest_geo.suites.suite_file import SuiteFileError, load_suite_file

    patterns = config.getini("geo_suite_files")
    skipped = config.getini("norecursedirs")
    for directory, dirs, files in os.walk(config.rootpath):
        dirs[:] = sorted(d for d in dirs if not any(fnmatch.fnmatch(d, p) for p in skipped))
        for name in sorted(files):
            path = Path(directory) / name
            if any(path.match(pattern) for pattern in patterns):
                try:
                    yield load_suite_file(path, roots=project_roots(config))
                except SuiteFileError:  # collection reports it, naming the file
                    continue
