"""Eval suites (Kedi semantics): named after the procedure they score, training `data`,
optional held-out `test_data` under the same dataset name, and exactly one metric."""

from __future__ import annotations

import inspect
import json
import keyword
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_geo.data.dataset import (
    MAX_LINE_BYTES,
    DatasetError,
    DatasetLine,
    iter_dataset,
    open_dataset,
    read_lines,
)
from pytest_geo.data.record import GEO_METRIC
from pytest_geo.scoring import MetricReturnError, Score, normalize
from pytest_geo.suites.procedures import PromptProcedure
from pytest_geo.suites.row_names import by_content, by_position

Row = tuple[Any, Any]
MAX_PYTHON_ROWS = 100_000  # one pytest item each
MAX_PYTHON_BYTES = 256 << 20
DatasetSpec = Sequence[Row] | Callable[[], Iterable[Row]] | str | Path
MetricFn = Callable[..., Any]


class SuiteError(Exception):
    """A suite that cannot be run as declared; the message names the suite."""


@dataclass(frozen=True)
class Metric:
    name: str
    dataset: str  # "" for a dataset-free metric
    fn: MetricFn | None  # None for the built-in GEO rank experiment

    @property
    def is_geo(self) -> bool:
        return self.fn is None

    @property
    def dataset_free(self) -> bool:
        """Kedi's legacy form: a metric without a dataset parameter, run once; its
        result is the suite's score."""
        return self.fn is not None and not self.dataset


def exact_match(output: Any, expected: Any) -> bool:
    return str(output).strip() == str(_expected_value(expected)).strip()


def contains(output: Any, expected: Any) -> bool:
    return str(_expected_value(expected)).strip().lower() in str(output).lower()


def _expected_value(expected: Any) -> Any:
    if isinstance(expected, Mapping) and len(expected) == 1:
        return next(iter(expected.values()))
    return expected


# Built-ins that compare the procedure's output with `expected`; they need a procedure.
OUTPUT_METRICS: dict[str, Callable[[Any, Any], Any]] = {"exact_match": exact_match, "contains": contains}
BUILTIN_METRICS = (*OUTPUT_METRICS, GEO_METRIC)


@dataclass
class Suite:
    """Declare with :func:`suite`, then attach the one metric::

        answer_eval = pytest_geo.suite("answer", data={"questions": [("2 + 2?", {"answer": "4"})]})

        @answer_eval.metric
        def exact(questions, expected):       # the first parameter names the dataset
            return answer(questions).strip() == expected["answer"]
    """

    name: str
    data: dict[str, DatasetSpec]
    test_data: dict[str, DatasetSpec] = field(default_factory=dict)
    threshold: float | None = None
    markers: tuple[str, ...] = ()
    procedure: Callable[..., Any] | None = None
    base_dir: Path | None = None
    metrics: list[Metric] = field(default_factory=list)
    row_threshold: float | None = None  # a row scoring below it fails its item (scores alone never do)

    def metric(
        self, fn: MetricFn | str | None = None, *, dataset: str | None = None, name: str | None = None
    ) -> Any:
        """Attach the metric: a function (also as a decorator) or a built-in name."""
        if fn is None:
            return lambda f: self.metric(f, dataset=dataset, name=name)
        if isinstance(fn, str):
            self.metrics.append(self._builtin(fn, dataset))
            return fn
        self.metrics.append(Metric(name or fn.__name__, dataset or _first_parameter(fn), fn))
        return fn

    def _builtin(self, metric_name: str, dataset: str | None) -> Metric:
        dataset = dataset or (next(iter(self.data)) if len(self.data) == 1 else "")
        if metric_name == GEO_METRIC:
            return Metric(GEO_METRIC, dataset, None)
        if metric_name not in OUTPUT_METRICS:
            raise SuiteError(
                f"suite {self.name!r}: unknown built-in metric {metric_name!r} "
                f"(built-ins: {', '.join(BUILTIN_METRICS)})"
            )
        compare = OUTPUT_METRICS[metric_name]
        procedure, suite_name = self.procedure, self.name

        def builtin(value: Any, expected: Any) -> Any:
            if procedure is None:
                raise SuiteError(f"suite {suite_name!r}: metric {metric_name!r} needs a procedure to call")
            return compare(procedure(value), expected)

        return Metric(metric_name, dataset, builtin)

    def check(self) -> Metric:
        """Kedi's parse-time rules: exactly one metric, over a dataset the suite defines."""
        if not self.metrics:
            raise SuiteError(f"suite {self.name!r} has no metric")
        if len(self.metrics) > 1:
            names = ", ".join(m.name for m in self.metrics)
            raise SuiteError(
                f"suite {self.name!r} defines {len(self.metrics)} metrics ({names}); a suite has exactly one"
            )
        metric = self.metrics[0]
        for key, value in (("threshold", self.threshold), ("row_threshold", self.row_threshold)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            ):
                # NaN compares false with every score: a NaN threshold would never fail.
                raise SuiteError(f"suite {self.name!r}: {key} must be a finite number, got {value!r}")
        if metric.dataset_free:
            return metric
        if metric.dataset not in self.data and metric.dataset not in self.test_data:
            defined = ", ".join(sorted({*self.data, *self.test_data})) or "none"
            raise SuiteError(
                f"suite {self.name!r}: metric {metric.name!r} names dataset {metric.dataset!r}, "
                f"which the suite does not define (defined: {defined})"
            )
        return metric

    def splits(self, mode: str) -> list[tuple[str, DatasetSpec]]:
        """Which rows are scored: `test` uses test_data if defined, else data (Kedi's
        fallback); `train` uses data; `all` both, reported separately."""
        dataset = self.check().dataset
        train = [("train", self.data[dataset])] if dataset in self.data else []
        test = [("test", self.test_data[dataset])] if dataset in self.test_data else []
        if mode == "train":
            return train
        if mode == "all":
            return train + test
        return test or train


def _first_parameter(fn: MetricFn) -> str:
    """The dataset a metric names; "" for one without parameters (the legacy form)."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    return params[0] if params else ""


def suite(
    name: str | Callable[..., Any],
    *,
    data: Mapping[str, DatasetSpec],
    test_data: Mapping[str, DatasetSpec] | None = None,
    metric: MetricFn | str | None = None,
    dataset: str | None = None,
    threshold: float | None = None,
    markers: Sequence[str] = (),
    row_threshold: float | None = None,
) -> Suite:
    """Declare an eval suite named after the procedure it scores (a name or the callable).
    `threshold` fails the suite when its mean is below it; `row_threshold` fails each row
    scoring below it (without either, scores alone never fail the run)."""
    procedure = None if isinstance(name, str) else name
    if isinstance(name, str):
        suite_name = name
    elif isinstance(name, PromptProcedure):  # named by `prompt(name, ...)`, not by a def
        suite_name = name.name
    else:
        suite_name = getattr(name, "__name__", "")
    if not suite_name.isidentifier() or keyword.iskeyword(suite_name):
        raise SuiteError(f"suite name {suite_name!r} must be a Python identifier (it is the procedure's name)")
    caller = inspect.stack(0)[1].filename
    declared = Suite(
        suite_name,
        dict(data),
        dict(test_data or {}),
        threshold,
        tuple(markers),
        procedure,
        Path(caller).parent if caller and not caller.startswith("<") else None,
        row_threshold=row_threshold,
    )
    if metric is not None:
        declared.metric(metric, dataset=dataset)
    return declared


def score_row(metric: Metric, value: Any, expected: Any) -> Any:
    """Call the metric with fresh bindings for one row: (input, expected), input alone
    for a one-parameter metric, nothing for a dataset-free one."""
    assert metric.fn is not None
    if metric.dataset_free:
        return metric.fn()
    try:
        arity = len(inspect.signature(metric.fn).parameters)
    except (TypeError, ValueError):
        arity = 2
    return metric.fn(value) if arity == 1 else metric.fn(value, expected)


def score_metric(metric: Metric, value: Any, expected: Any) -> Score:
    """One row's Score by Kedi's rules: the metric's return normalised (an awaitable is
    awaited first); a metric that raises, or returns something else, scores 0.0 with
    `error: ...` feedback, so the other rows still run. So does one that calls
    `sys.exit()`: a metric cannot end the run (KeyboardInterrupt still does, as in pytest)."""
    try:
        returned = score_row(metric, value, expected)
        if inspect.isawaitable(returned):
            import asyncio  # only for async metrics: the plugin loads in every pytest run

            returned = asyncio.run(_await(returned))
        return normalize(returned)
    except MetricReturnError as exc:
        return Score.from_error(str(exc))
    except (Exception, SystemExit) as exc:
        detail = str(exc)
        return Score.from_error(f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__, exc)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def load_rows(
    suite_name: str, dataset: str, spec: DatasetSpec, base_dir: Path | None, seed: int, geo: bool = False
) -> list[Any]:
    """A dataset's rows, in the order `load_named_rows` gives them."""
    return [row for _, row in load_named_rows(suite_name, dataset, spec, base_dir, seed, geo)]


def load_named_rows(
    suite_name: str, dataset: str, spec: DatasetSpec, base_dir: Path | None, seed: int, geo: bool = False
) -> list[tuple[str, Any]]:
    """A dataset's rows: pairs, GEO rows (for the rank metric) or problems, each with its
    name in node ids (suites/row_names.py: its position in a file, list or tuple, else
    its content's hash); raises SuiteError naming the suite and dataset when the data
    cannot be loaded at all."""
    where = f"suite {suite_name!r}: dataset {dataset!r}"
    try:
        if isinstance(spec, (str, Path)):
            path = Path(spec)
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            return by_position(list(iter_dataset(path, seed)) if geo else _read_pairs(path))
        if geo:
            raise SuiteError(f"{where}: the {GEO_METRIC} metric needs a GEO JSONL file path")
        rows = spec() if callable(spec) else spec
        pairs = [_pair(row, where, i) for i, row in enumerate(_bounded(rows, where))]
        return by_position(pairs) if isinstance(rows, list | tuple) else by_content(pairs)
    except SuiteError:
        raise
    except DatasetError as exc:
        raise SuiteError(f"{where} failed to load: {exc}") from None
    except Exception as exc:  # user data code: any failure is a load failure of the run
        raise SuiteError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None


def _bounded(rows: Iterable[Any], where: str) -> Iterator[Any]:
    """A Python dataset's rows, up to MAX_PYTHON_ROWS rows and MAX_PYTHON_BYTES of
    objects: data from code can be a never-ending generator, which would otherwise hang
    collection (even `--co`, even deselected by `-k`) while memory grows. YAML suites
    are bounded by their file size, JSONL data by its file."""
    size = 0
    for index, row in enumerate(rows):
        if index == MAX_PYTHON_ROWS:
            raise SuiteError(f"{where}: more than {MAX_PYTHON_ROWS:,} rows, the bound for data from Python code "
                             "(a never-ending generator?)")
        size += _footprint(row, MAX_PYTHON_BYTES - size)
        if size > MAX_PYTHON_BYTES:
            raise SuiteError(f"{where}: rows larger than {MAX_PYTHON_BYTES >> 20} MiB in memory, the bound for "
                             "data from Python code")
        yield row


def _footprint(value: Any, limit: int) -> int:
    """Bytes held by `value` and the containers in it (sys.getsizeof of each object once),
    counted until past `limit`."""
    seen: set[int] = set()
    stack = [value]
    total = 0
    while stack and total <= limit:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
    return total


def _pair(row: Any, where: str, index: int) -> Row:
    if isinstance(row, Mapping) and "input" in row:
        return (row["input"], row.get("expected"))
    if isinstance(row, (tuple, list)) and len(row) == 2:
        return (row[0], row[1])
    raise SuiteError(f"{where}: row {index} is not an (input, expected) pair: {row!r:.80}")


def _read_pairs(path: Path) -> list[Row]:
    """`{"input": ..., "expected": ...}` per line; a bad line is a load failure."""
    rows: list[Row] = []
    with open_dataset(path, str(path)) as handle:
        for line_no, raw in read_lines(handle):
            if raw is None:
                raise DatasetError(f"{path}:{line_no}: line longer than {MAX_LINE_BYTES >> 20} MiB")
            rows.extend(_pair_line(path, line_no, raw))
    return rows


def _pair_line(path: Path, line_no: int, raw: bytes) -> list[Row]:
    """The pair on one line of a suite's JSONL data (none for a blank line)."""
    try:
        line = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}:{line_no}: invalid UTF-8 at byte {exc.start}") from None
    if not line.strip():
        return []
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise DatasetError(f"{path}:{line_no}: invalid JSON: {exc}") from None
    if not isinstance(obj, dict) or "input" not in obj:
        raise DatasetError(f"{path}:{line_no}: expected an object with 'input' (and 'expected')")
    return [(obj["input"], obj.get("expected"))]


def suites_in(module: Any) -> list[Suite]:
    """The suites a module (a test module, a conftest.py, a suites file) declares, each
    once however many names it is bound to."""
    found = {id(obj): obj for obj in vars(module).values() if isinstance(obj, Suite)} if module is not None else {}
    return list(found.values())


__all__ = ["DatasetLine", "Metric", "Suite", "SuiteError", "load_named_rows", "load_rows", "score_row", "suite"]
