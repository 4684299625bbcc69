"""The JSON Schemas shipped in `pytest_geo/schemas/`, and naming where a document broke one.

jsonschema is imported on first use: the plugin loads in every pytest run, GEO or not,
and the import is slow."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jsonschema


@cache
def validator(name: str) -> jsonschema.protocols.Validator:
    """`name` is a file in `pytest_geo/schemas/`, e.g. `geo_row.schema.json`."""
    import jsonschema

    schema = json.loads(resources.files("pytest_geo").joinpath("schemas", name).read_text("utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def error_path(error: jsonschema.ValidationError, top: str) -> str:
    """`candidates[1].description`; `top` when the document itself is at fault."""
    text = ""
    for part in error.absolute_path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or top


def first_error(name: str, document: Any) -> jsonschema.ValidationError | None:
    """The most relevant violation of schema `name`, or None when the document is valid."""
    import jsonschema

    error: jsonschema.ValidationError | None = jsonschema.exceptions.best_match(validator(name).iter_errors(document))
    return error
