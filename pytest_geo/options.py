"""Parsers for option values, shared by the pytest flags, their ini twins and `egeo`:
each raises `argparse.ArgumentTypeError` with a message that names the bad value."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from pytest_geo.engine.judges import JUDGE_SETTINGS, Judge
from pytest_geo.settings import AUTO, SPLITS, STRUCTURED_MODES

# OpenAI's levels (minimal: gpt-5; none and xhigh: the gpt-5.x line); llm/profiles.py
# sends the level to the models that take it.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")

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


def submission_meta(text: str) -> tuple[str, str]:
    """`KEY = VALUE` of the E-GEO submission's metadata (report/egeo_submission.py)."""
    from pytest_geo.report.egeo_submission import META_KEYS, SUBMISSION_TYPES

    key, sep, value = (part.strip() for part in text.partition("="))
    if not sep or key not in META_KEYS:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE with KEY one of {', '.join(META_KEYS)}")
    if key == "type" and value not in SUBMISSION_TYPES:
        raise argparse.ArgumentTypeError(f"{text!r}: type is one of {', '.join(SUBMISSION_TYPES)}")
    return key, value


def shard(text: str) -> tuple[int, int]:
    """`K/N`: the K-th of N shards (1 <= K <= N)."""
    k, sep, n = text.partition("/")
    try:
        index, count = int(k), int(n)
    except ValueError:
        index = count = 0
    if not sep or not 1 <= index <= count:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N with 1 <= K <= N (the K-th of N shards)")
    return index, count


def concurrency(text: str) -> int | str:
    """A number of rows in flight, or "auto" (adaptive, see llm/adaptive.py)."""
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
    """A number above 0 that is finite: a NaN or infinite timeout would fail every call."""
    value: float = _convert(text, float, "a number")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return _at_least(value, text, 0, strict=True)


def finite_float(text: str) -> float:
    """A number that can gate a run: NaN compares false with everything, so a NaN
    threshold would never fail, and an infinite one always or never."""
    value: float = _convert(text, float, "a number")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def dollars(text: str) -> float:
    """An amount of money to spend: finite and more than 0 (`$` allowed: `$0.50`)."""
    value = finite_float(text.strip().removeprefix("$"))
    return _at_least(value, text, 0, strict=True)


def share(text: str) -> float:
    value = finite_float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return value


def alpha(text: str) -> float:
    """An error rate: strictly between 0 and 1 (0 would never decide, 1 always)."""
    value = finite_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1, both excluded")
    return value


def temperature(text: str) -> float:
    value: float = _convert(text, float, "a number")
    if not 0 <= value <= 2:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 2")
    return value


def one_of(choices: tuple[str, ...], name: str) -> Callable[[str], str]:
    """A validator accepting exactly `choices`, named `name` (argparse shows the name
    of a type that raises anything but ArgumentTypeError)."""

    def check(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(choices)}")
        return text

    check.__name__ = check.__qualname__ = name
    return check


split_mode = one_of(SPLITS, "split_mode")
progress_mode = one_of(("auto", "on", "off"), "progress_mode")
reasoning_effort = one_of(REASONING_EFFORTS, "reasoning_effort")
structured_mode = one_of(STRUCTURED_MODES, "structured_mode")


def min_score(text: str) -> tuple[str, float]:
    suite, sep, value = text.rpartition("=")
    if not sep or not suite:
        raise argparse.ArgumentTypeError(f"{text!r} is not SUITE=VALUE")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a finite number")
    return suite, number


# Safe in node ids (`q1[NAME]`), in `-k` expressions and in `--geo-min-score SUITE[NAME]=X`.
VARIANT_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def variant(text: str) -> tuple[str, str]:
    """`NAME=PATH` (spaces around `=` allowed, as in the ini's `NAME = PATH` lines), or the
    bare name of a packaged E-GEO style (`competitive`, engine/styles.py)."""
    from pytest_geo.engine.styles import ATTACKS, STYLES, style_path

    name, sep, path = text.partition("=")
    name, path = name.strip(), path.strip()
    packaged = style_path(name)
    if not sep and packaged is not None:
        return name, str(packaged)
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=PATH, nor the name of a packaged style "
                                         f"({', '.join(STYLES)}) or attack ({', '.join(ATTACKS)})")
    if not VARIANT_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"{text!r}: variant name {name!r} may use only letters, digits, '_', '.' and '-'")
    return name, path


def judge(text: str) -> Judge:
    """`NAME=MODEL [key=value ...]`, as a flag value or an ini line; raises
    argparse.ArgumentTypeError naming the problem."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    words = rest.split()
    if not sep or not name or not words:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=MODEL")
    if not VARIANT_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"{text!r}: judge name {name!r} may use only letters, digits, '_', '.' and '-'")
    found = Judge(name, words[0])
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep or key not in JUDGE_SETTINGS or not value:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {word!r} is not one of {', '.join(k + '=...' for k in JUDGE_SETTINGS)}")
        if key == "system":
            found = replace(found, system=Path(value))
        elif key == "temperature":
            found = replace(found, temperature=temperature(value))
        else:
            found = replace(found, max_output_tokens=positive_int(value))
    return found


def variant_model(path: str) -> tuple[str, str | None]:
    """A variant's `PATH@MODEL`: (PATH, MODEL), or (PATH, None) without a model."""
    where, sep, model = path.rpartition("@")
    if not sep or not where.strip() or not model.strip():
        return path, None
    return where.strip(), model.strip()
