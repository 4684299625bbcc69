"""Parsers for option values, shared by the pytest flags, their ini twins and `egeo`:
each raises `argparse.ArgumentTypeError` with a message that names the bad value."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from pytest_geo.settings import AUTO, SPLITS

N = TypeVar("N", int, float)


def _convert(text: str, convert: Callable[[str], Any], what: str) -> Any:
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def _at_least(value: N, text: str, minimum: float, strict: bool = False) -> N:
    if value < minimum or (strict and value == minimum):
        bound = f"more than {minimum:g}" if strict else f"at least {minimum:g}"
        raise argparse.ArgumentTypeError(f"{text!r} must be {bound}")
    return value


def any_int(text: str) -> int:
    value: int = _convert(text, int, "a whole number")
    return value


def positive_int(text: str) -> int:
    return _at_least(any_int(text), text, 1)


def concurrency(text: str) -> int | str:
    """A number of rows in flight, or "auto" (adaptive, see engine/adaptive.py)."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number nor 'auto'") from None
    return positive_int(text)


def non_negative_int(text: str) -> int:
    return _at_least(any_int(text), text, 0)


def positive_float(text: str) -> float:
    value: float = _convert(text, float, "a number")
    return _at_least(value, text, 0, strict=True)


def temperature(text: str) -> float:
    value: float = _convert(text, float, "a number")
    if not 0 <= value <= 2:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 2")
    return value


def split_mode(text: str) -> str:
    if text not in SPLITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(SPLITS)}")
    return text


def min_score(text: str) -> tuple[str, float]:
    suite, sep, value = text.rpartition("=")
    if not sep or not suite:
        raise argparse.ArgumentTypeError(f"{text!r} is not SUITE=VALUE")
    try:
        return suite, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number") from None
