"""Frozen dataclasses made on hot paths, filled in directly.

A frozen dataclass's `__init__` sets each field through `object.__setattr__`: about two
thirds of making one. The objects made on every model call or row (a request, what is
sent, the mock's answer, a row's outcome) are filled in here instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def filled(cls: type[T], values: Mapping[str, Any]) -> T:
    """`cls(**values)` without its `__init__`: `values` must give every field, in the
    fields' order (tests compare each use with its dataclass-made twin), and `cls` must
    have no `__post_init__`, which this would skip."""
    made = object.__new__(cls)
    made.__dict__.update(values)
    return made
