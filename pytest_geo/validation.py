"""The JSON Schemas shipped in `pytest_geo/schemas/`, and naming where a document broke one."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import jsonschema


@lru_cache(maxsize=None)
def validator(name: str) -> jsonschema.protocols.Validator:
    """`name` is a file in `pytest_geo/schemas/`, e.g. `geo_row.schema.json`."""
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
