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

Part 1 uses only the hook's documented `args` (and the namespace the initial conftests are
read from). Part 2 cannot be done with pytest's public API: pytest decides the rootdir
before any plugin is loaded and offers no way to decide it again (its documentation says
a plugin's path option can move the rootdir, and names `--rootdir` or `=` as the user's
way out). So it is kept small: pytest's own `determine_setup`, and the three fields it
fills (rootpath, inipath, the ini values) with the cache of ini values. The ini's
`addopts`, `-p` plugins and `pythonpath` are then applied through public calls.
Tested on the oldest pytest pyproject admits and the newest (`.ci/run`).
"""

from __future__ import annotations

import copy
import inspect
import sys
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


Setup = tuple[Path, Path | None, Any]  # rootpath, inipath, ini values


def _setup(config: pytest.Config, positional: Sequence[str], override_ini: Sequence[str] | None) -> Setup | None:
    """pytest's own rootdir/ini decision for these positional arguments (None if this
    pytest's `determine_setup` is not one we know how to call)."""
    determine_setup = _determine_setup()
    ns = config.known_args_namespace
    given: dict[str, Any] = {
        "inifile": ns.inifilename,
        "override_ini": override_ini,  # pytest >= 9.2 merges the -o values into the ini values
        "args": list(positional),
        "rootdir_cmd_arg": ns.rootdir or None,
        "invocation_dir": config.invocation_params.dir,
    }
    parameters = inspect.signature(determine_setup).parameters
    if not {"inifile", "args", "rootdir_cmd_arg"} <= set(parameters):
        return None
    rootpath, inipath, inicfg, *_ = determine_setup(**{k: v for k, v in given.items() if k in parameters})
    return rootpath, inipath, inicfg


def _use(config: pytest.Config, setup: Setup) -> None:
    """The private part: the setup pytest would have chosen without the misread values."""
    rootpath, inipath, inicfg = setup
    config._rootpath = rootpath
    config._inipath = inipath
    if hasattr(config, "_inicfg"):  # pytest >= 8.1; before, a plain attribute
        config._inicfg = inicfg
    else:
        setattr(config, "inicfg", inicfg)  # noqa: B010 (read-only in the newer pytest mypy checks against)
    config._inicache.clear()


def restore_project_setup(config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Undo a rootdir that `--geo-dataset PATH` values moved (see the module docstring)."""
    misread = separate_values(args)
    if not misread:
        return
    ns = config.known_args_namespace
    positional = list(ns.file_or_dir)
    wrong = _setup(config, positional + misread, ns.override_ini)
    if wrong is None or (wrong[0], wrong[1]) != (config.rootpath, config.inipath):
        return  # the values did not decide this setup: leave pytest's choice alone
    right = _setup(config, positional, ns.override_ini)
    assert right is not None
    if (right[0], right[1]) == (config.rootpath, config.inipath):
        return
    if config.inipath is not None:
        # The ini file found beside the dataset already added its addopts; they cannot be
        # taken back here. Rare (a dataset inside another pytest project): say what to do.
        raise pytest.UsageError(
            f"{OPTION} {misread[0]}: pytest took this path for a test path and used {config.inipath}; "
            f"write {OPTION}={misread[0]} (one word) to keep this project's configuration"
        )
    _use(config, right)
    parser.extra_info.update(rootdir=str(config.rootpath), inifile=str(config.inipath))
    if config.inipath is not None:
        _apply_ini(config, parser, args, positional)
    if config.known_args_namespace.confcutdir in (None, str(wrong[0])):
        config.known_args_namespace.confcutdir = str(config.inipath.parent if config.inipath else config.rootpath)


def _apply_ini(config: pytest.Config, parser: pytest.Parser, args: list[str], positional: list[str]) -> None:
    """What pytest does with the ini file it finds before plugins load: its `pythonpath`
    onto sys.path, its `addopts` first in the arguments (with the `-p` plugins and `-o`
    values they name)."""
    if not config.pluginmanager.hasplugin("python_path"):  # pytest < 8 adds them in its own hook, after this one
        for path in reversed(config.getini("pythonpath")):
            sys.path.insert(0, str(path))  # before the -p plugins import; removed at the end of the run
    addopts = [str(arg) for arg in config.getini("addopts")]
    before = config.known_args_namespace.override_ini
    args[:0] = addopts
    config.pluginmanager.consider_preparse(addopts, exclude_only=False)
    ns = config.known_args_namespace = parser.parse_known_args(args, namespace=copy.copy(config.option))
    if ns.override_ini != before and "override_ini" in inspect.signature(_determine_setup()).parameters:
        right = _setup(config, positional, ns.override_ini)  # pytest >= 9.2 applies addopts' -o values
        assert right is not None
        _use(config, right)


def _determine_setup() -> Any:
    from _pytest.config.findpaths import determine_setup

    return determine_setup


def datasets_as_args(config: pytest.Config, args: list[str]) -> None:
    """`--geo-dataset` and no positional arguments: the datasets become the arguments, for
    the initial conftests (read from the namespace) and for the final parse (from args)."""
    ns = config.known_args_namespace
    named = list(getattr(ns, "geo_dataset", None) or [])
    if named and not ns.file_or_dir:
        ns.file_or_dir = list(named)
        args[:0] = named  # first: no option before them can take them as its value
