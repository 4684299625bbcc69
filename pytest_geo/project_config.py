"""What `egeo evaluate` reads from the project's pytest configuration when its flags do
not say: the prompts directory (`geo_prompts`), the GEO dataset (`geo_datasets`, else
the one dataset the project's YAML suites score by rank improvement) and the model prices
(`geo_prices`), so the command runs in a project made by `egeo init` as pytest does.

The configuration file is found as pytest finds it: the first of pytest.ini,
pyproject.toml ([tool.pytest.ini_options]), tox.ini ([pytest]) and setup.cfg
([tool:pytest]) with a pytest section, in the current directory and then its parents."""

from __future__ import annotations

import configparser
import functools
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_geo.data.record import GEO_METRIC

SUITE_PATTERN = "*.geo.yaml"  # the default of the ini option geo_suite_files


class ProjectConfigError(ValueError):
    """The project's configuration names no dataset, or several; the message says which."""


@dataclass(frozen=True)
class ProjectConfig:
    path: Path | None  # the configuration file, None when there is none
    values: Mapping[str, str | list[str]] = field(default_factory=dict)

    @property
    def rootdir(self) -> Path:
        return self.path.parent if self.path is not None else Path.cwd()

    def get(self, name: str) -> list[str]:
        """An ini value as its words (an ini's `args` and `paths` are whitespace-separated)."""
        value = self.values.get(name, [])
        return value.split() if isinstance(value, str) else [str(v) for v in value]

    def lines(self, name: str) -> list[str]:
        """A `linelist` ini value as its non-blank lines (as pytest reads one)."""
        value = self.values.get(name, [])
        found = value.splitlines() if isinstance(value, str) else [str(v) for v in value]
        return [line.strip() for line in found if line.strip()]


def find_config(start: Path | None = None) -> ProjectConfig:
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        for name, read in READERS.items():
            path = directory / name
            if path.is_file():
                values = read(path)
                if values is not None:
                    return ProjectConfig(path, values)
    return ProjectConfig(None)


def _ini(path: Path, section: str, always: bool = False) -> dict[str, str] | None:
    """The section's values; None without it (pytest.ini is the configuration even
    without a [pytest] section: `always`)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return None
    if parser.has_section(section):
        return dict(parser[section])
    return {} if always else None


def _toml(path: Path) -> dict[str, str | list[str]] | None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    section = data.get("tool", {}).get("pytest", {}).get("ini_options")
    return dict(section) if isinstance(section, dict) else None


READERS: dict[str, Callable[[Path], Mapping[str, str | list[str]] | None]] = {
    "pytest.ini": functools.partial(_ini, section="pytest", always=True),
    "pyproject.toml": _toml,
    "tox.ini": functools.partial(_ini, section="pytest"),
    "setup.cfg": functools.partial(_ini, section="tool:pytest"),
}


def project_dataset(config: ProjectConfig) -> tuple[Path, str]:
    """The dataset `egeo evaluate` runs without --dataset, and where it was found."""
    named = config.get("geo_datasets")
    if len(named) == 1:
        return config.rootdir / named[0], f"geo_datasets in {config.path}"
    if named:
        raise ProjectConfigError(f"{config.path}: geo_datasets names {len(named)} datasets; choose one with --dataset")
    found = sorted(set(_suite_datasets(config)))
    if len(found) == 1:
        dataset, suite = found[0]
        return dataset, f"the {GEO_METRIC} suite {suite}"
    if not found:
        where = f"{config.path} has no geo_datasets" if config.path is not None else "no pytest configuration here"
        raise ProjectConfigError(f"--dataset is needed: {where}, and no YAML suite scores a GEO dataset by "
                                 f"{GEO_METRIC}")
    choices = ", ".join(str(d) for d, _ in found)
    raise ProjectConfigError(f"--dataset is needed: the project's suites score several GEO datasets ({choices})")


def _suite_datasets(config: ProjectConfig) -> Iterator[tuple[Path, str]]:
    """The GEO datasets of the YAML suites under testpaths, as pytest collects them."""
    from pytest_geo.suites.suite_file import SuiteFileError, load_suite_file

    patterns = config.get("geo_suite_files") or [SUITE_PATTERN]
    roots = [config.rootdir / p for p in config.get("testpaths")] or [config.rootdir]
    for root in roots:
        for pattern in patterns:
            for path in sorted(root.rglob(pattern)):
                try:
                    suite = load_suite_file(path, roots=[config.rootdir, *(config.rootdir / p for p in
                                                                          config.get("pythonpath"))])
                except SuiteFileError:
                    continue  # pytest reports it; here it only names no dataset
                for metric in suite.metrics:
                    spec = suite.data.get(metric.dataset)
                    if metric.is_geo and isinstance(spec, (str, Path)):
                        yield (path.parent / spec).resolve(), str(path.relative_to(config.rootdir))
