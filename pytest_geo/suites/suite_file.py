"""YAML suite files: a bounded `yaml.safe_load` (safe_yaml.py), a shipped JSON Schema, and nothing executed except
a `module:function` the file names explicitly."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_geo.data.files import open_regular
from pytest_geo.data.record import GEO_METRIC
from pytest_geo.data.schemas import error_path, validator
from pytest_geo.suites.suite import OUTPUT_METRICS, Suite, SuiteError
from pytest_geo.text import shorten

if TYPE_CHECKING:
    import jsonschema


MAX_SUITE_BYTES = 16 << 20  # inline rows included; larger data belongs in a JSONL file


class SuiteFileError(Exception):
    """A suite file that cannot be used; the message names the file and the field."""


def _field(error: jsonschema.ValidationError) -> str:
    return error_path(error, "(top level)")


def _problem(error: jsonschema.ValidationError) -> str:
    """jsonschema's message, said in the suite file's own terms where it is obscure."""
    field = error.absolute_path[-1] if error.absolute_path else None
    if error.validator == "type" and not error.absolute_path:
        return f"expected a mapping of suite fields, got {type(error.instance).__name__}"
    if error.validator == "pattern" and field == "suite":
        return f"{error.instance!r} is not a Python identifier (a suite is named after its procedure)"
    if error.validator == "pattern" and field in ("function", "procedure"):
        return f"{error.instance!r} is not a module:function path"
    if error.validator == "oneOf" and field == "metric":
        return "give exactly one of builtin or function"
    return shorten(error.message, 160)


def _unknown_key(error: jsonschema.ValidationError) -> str:
    """`metrics: unknown key (did you mean 'metric'?)`, or the keys allowed there."""
    schema: Any = error.schema
    known = list(schema.get("properties", {}))
    instance: Any = error.instance
    key = next(str(k) for k in instance if k not in known)
    where = _field(error)
    field = key if where == "(top level)" else f"{where}.{key}"
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
    return f"{shorten(field, 80)}: unknown key ({hint})"


def import_object(spec: str, path: Path | str, field: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:
        raise SuiteFileError(f"{path}: {field}: cannot import {spec!r}: {type(exc).__name__}: {exc}") from None
    if not callable(obj):
        raise SuiteFileError(f"{path}: {field}: {spec!r} is not callable")
    found: Callable[..., Any] = obj
    return found


def load_suite_file(path: Path, label: str | None = None) -> Suite:
    """`label` names the file in messages (pytest passes its node id, relative to the rootdir)."""
    shown = label or str(path)
    try:
        with open_regular(path) as handle:
            raw = handle.read(MAX_SUITE_BYTES + 1)
        if len(raw) > MAX_SUITE_BYTES:
            raise SuiteFileError(f"{shown}: suite file larger than {MAX_SUITE_BYTES >> 20} MiB")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteFileError(f"{shown}: cannot read suite file: {exc}") from None
    import jsonschema

    from pytest_geo.suites import safe_yaml  # on first use: most runs have no suite files

    try:
        doc = safe_yaml.load(text)
    except safe_yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SuiteFileError(f"{shown}{where}: invalid YAML: {problem}") from None
    errors = sorted(
        validator("suite.schema.json").iter_errors(doc), key=lambda e: (len(list(e.absolute_path)), e.message)
    )
    if errors:
        unknown = [e for e in errors if e.validator == "additionalProperties" and isinstance(e.instance, dict)]
        if unknown:  # a misspelt key also leaves a required one missing: name the cause
            raise SuiteFileError(f"{shown}: {_unknown_key(unknown[0])}")
        error = jsonschema.exceptions.best_match(errors)
        raise SuiteFileError(f"{shown}: {_field(error)}: {_problem(error)}")
    builtin = doc["metric"].get("builtin")
    if builtin in OUTPUT_METRICS and "procedure" not in doc:
        raise SuiteFileError(
            f"{shown}: procedure: missing: metric {builtin!r} compares the procedure's output with each "
            "row's expected value; add `procedure: module:function`"
        )
    procedure = import_object(doc["procedure"], shown, "procedure") if "procedure" in doc else None
    declared = Suite(
        name=doc["suite"],
        data=dict(doc["data"]),
        test_data=dict(doc.get("test_data") or {}),
        threshold=doc.get("threshold"),
        row_threshold=doc.get("row_threshold"),
        markers=tuple(doc.get("markers", ())),
        procedure=procedure,
        base_dir=path.parent,
    )
    metric = doc["metric"]
    try:
        if "builtin" in metric:
            declared.metric(metric["builtin"], dataset=metric["dataset"])
            if metric["builtin"] == GEO_METRIC:
                return declared
        else:
            fn = import_object(metric["function"], shown, "metric.function")
            declared.metric(fn, dataset=metric["dataset"], name=metric.get("name"))
    except SuiteError as exc:
        raise SuiteFileError(f"{shown}: {exc}") from None
    return declared
