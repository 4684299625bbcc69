"""What `--geo-dataset PATH` does to pytest's own reading of the command line.

1. With `--geo-dataset` and no positional arguments, the run is the named datasets, as if
   they had been given as arguments (pytest would otherwise run `testpaths`).
2. pytest finds its rootdir and ini file before it loads plugins, so it does not know yet
   that `--geo-dataset` takes a value: in `--geo-dataset /elsewhere/x.jsonl` it takes the
   path for a positional argument and roots the run at `/elsewhere` (or at a common
   ancestor), without the project's ini file, and so with another prompts directory and
   cache. Once our options are known (`pytest_load_initial_conftests`, before conftests
   load and before the final parse) the setup is computed again without those values and,
   when that is what moved it, put back: the rootdir, the ini file, and the ini's
   `addopts`, `-p` plugins, `pythonpath` and confcutdir.

Both touch pytest's config before it is finished, through a few of its private fields;
that is why they live here, apart from the rest of the plugin.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

OPTION = "--geo-dataset"


def separate_values(args: Sequence[str], option: str = OPTION) -> list[str]:
    """Values given as `--geo-dataset PATH` (two tokens), which pytest's early parse read
    as positional arguments; `--geo-dataset=PATH` is one token and was never misread."""
    values = []
    for index, arg in enumerate(args[:-1]):
        if arg == "--":
            break
        if arg == option:
            values.append(args[index + 1])
    return values


def _setup(config: pytest.Config, positional: Sequence[str]) -> tuple[Path, Path | None, Any, Any] | None:
    """pytest's own rootdir/ini decision for these positional arguments (None if this
    pytest's `determine_setup` is not one we know how to call)."""
    from _pytest.config.findpaths import determine_setup

    ns = config.known_args_namespace
    given: dict[str, Any] = {
        "inifile": ns.inifilename,
        "override_ini": ns.override_ini,
        "args": list(positional),
        "rootdir_cmd_arg": ns.rootdir or None,
        "invocation_dir": config.invocation_params.dir,
    }
    parameters = inspect.signature(determine_setup).parameters
    if not {"inifile", "args", "rootdir_cmd_arg", "invocation_dir"} <= set(parameters):
        return None
    result = determine_setup(**{k: v for k, v in given.items() if k in parameters})
    rootpath, inipath, inicfg, *rest = result
    return rootpath, inipath, inicfg, (rest[0] if rest else [])


def restore_project_setup(config: pytest.Config, args: list[str]) -> None:
    """Undo a rootdir that `--geo-dataset PATH` values moved (see the module docstring)."""
    misread = separate_values(args)
    if not misread:
        return
    positional = list(config.known_args_namespace.file_or_dir)
    wrong = _setup(config, positional + misread)
    if wrong is None or (wrong[0], wrong[1]) != (config.rootpath, config.inipath):
        return  # the values did not decide this setup: leave pytest's choice alone
    right = _setup(config, positional)
    assert right is not None
    rootpath, inipath, inicfg, ignored = right
    if (rootpath, inipath) == (config.rootpath, config.inipath):
        return
    if config.inipath is not None:
        # The ini file found beside the dataset already added its addopts; they cannot be
        # taken back here. Rare (a dataset inside another pytest project): say what to do.
        raise pytest.UsageError(
            f"{OPTION} {misread[0]}: pytest took this path for a test path and used {config.inipath}; "
            f"write {OPTION}={misread[0]} (one word) to keep this project's configuration"
        )
    old_confcutdir = str(config.rootpath)
    config._rootpath = rootpath
    config._inipath = inipath
    config._inicfg = inicfg
    config._ignored_config_files = ignored
    config._inicache.clear()
    parser = config._parser
    parser.extra_info["rootdir"] = str(rootpath)
    parser.extra_info["inifile"] = str(inipath)
    if inipath is not None:
        addopts = config._validate_args(config.getini("addopts"), "via addopts config")
        args[:0] = addopts
        config.pluginmanager.consider_preparse(addopts, exclude_only=False)
        config._configure_python_path()
    ns = config.known_args_namespace = parser.parse_known_args(args, namespace=copy.copy(config.option))
    if ns.confcutdir is None or ns.confcutdir == old_confcutdir:
        ns.confcutdir = str(inipath.parent if inipath is not None else rootpath)


def datasets_as_args(config: pytest.Config, args: list[str]) -> None:
    """`--geo-dataset` and no positional arguments: the datasets become the arguments, for
    the initial conftests (read from the namespace) and for the final parse (from args)."""
    ns = config.known_args_namespace
    named = list(getattr(ns, "geo_dataset", None) or [])
    if named and not ns.file_or_dir:
        ns.file_or_dir = list(named)
        args[:0] = named  # first: no option before them can take them as its value
