"""The rows' transcripts (every model call of a row) kept out of the reports and out of
memory: as each row's record arrives its calls are taken out and written, gzip-compressed,
one JSON line per row, to a spool file; the record that stays in memory holds only the
row's results and how many calls it made (`n_calls`).

At the end the spool becomes `<report>.transcripts.jsonl.gz` beside the report, and the
HTML report reads the few rows it embeds back from it. The text is what the engine kept
(answers redacted by the client, llm/redaction.py), with the key also taken out of the
prompts (a dataset or a prompt file may hold it): nothing is added here.

A line is `{"nodeid": ..., "calls": [...]}`, or with --geo-repeats
`{"nodeid": ..., "repeats": [{"repeat": 0, "order": [...], "rank_before": ..., "rank_after": ...,
"rank_improvement": ..., "error": ..., "calls": [...]}, ...]}`: each repeat's calls with the
candidate order they were given and the ranks they produced (copied from the report's
record), so a line read alone (the HTML page opening the file) shows what an embedded
row shows. Lines come in the order rows finished, which is not the report's order: a
reader matches them by node id."""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from pytest_geo.data.files import open_atomic
from pytest_geo.data.record import ModelCall, RowRecord
from pytest_geo.llm.redaction import run_redactor

SUFFIX = ".transcripts.jsonl.gz"
# Transcripts repeat the same prompts row after row: the fastest level already shrinks
# them well, at a fraction of the default level's CPU per row.
COMPRESSION = 1
# A repeat's results kept beside its calls in the file (the rest stays in the report).
RUN_FIELDS = ("order", "rank_before", "rank_after", "rank_improvement", "error")


def transcripts_path(report: str | Path) -> Path:
    """`r.json` and `r.html` -> `r.transcripts.jsonl.gz`, in the report's folder."""
    path = Path(report)
    return path.with_name(path.stem + SUFFIX) if path.suffix else path.with_name(path.name + SUFFIX)


def take_transcript(record: RowRecord) -> dict[str, Any] | None:
    """Take the calls out of `record` (in place), leaving their count in `n_calls`; the
    row's transcript line, or None when the row made no call."""
    repeats = record.get("repeats")
    if repeats:
        runs = [{"repeat": r.get("repeat", i), **{name: r[name] for name in RUN_FIELDS if name in r},
                 "calls": r.pop("calls", [])} for i, r in enumerate(repeats)]
        record.pop("calls", None)
        record["n_calls"] = sum(len(r["calls"]) for r in runs)
        _add_up(record, [call for r in runs for call in r["calls"]])
        return {"nodeid": record["nodeid"], "repeats": runs}
    calls = record.pop("calls", None)
    if calls is None:
        return None
    record["n_calls"] = len(calls)
    _add_up(record, calls)
    return {"nodeid": record["nodeid"], "calls": calls}


def _add_up(record: RowRecord, calls: list[ModelCall]) -> None:
    """The row's model seconds and tokens, its calls' added up (they stay in the transcript)."""
    record["model_seconds"] = round(sum(c.get("seconds", 0.0) for c in calls), 3)
    record["prompt_tokens"] = sum(c.get("prompt_tokens", 0) for c in calls)
    record["completion_tokens"] = sum(c.get("completion_tokens", 0) for c in calls)


def slim_copy(record: RowRecord) -> RowRecord:
    """A copy sharing everything with `record` but its calls, the only part changed."""
    copied = RowRecord(**record)
    if record.get("repeats"):
        copied["repeats"] = [dict(r) for r in record["repeats"]]
    return copied


def with_transcript(record: Mapping[str, Any], line: Mapping[str, Any] | None) -> dict[str, Any]:
    """The record with its calls put back from its transcript line (a copy)."""
    full = dict(record)
    if line is None:
        return full
    if "repeats" in line and full.get("repeats"):
        full["repeats"] = [{**r, "calls": run.get("calls", [])} for r, run in zip(full["repeats"], line["repeats"],
                                                                                  strict=False)]
    elif "calls" in line:
        full["calls"] = line["calls"]
    return full


def line_text(line: Mapping[str, Any]) -> str:
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"


class TranscriptSpool:
    """Transcript lines as rows finish, gzip-compressed in an anonymous temporary file
    (removed by the system however the run ends). With `keep=False` (no report asked)
    the calls are only taken out. With `copy=True` (an xdist worker: the record is still
    on its way to the controller, which keeps the calls) the record is left as it is and
    a copy without calls is kept."""

    def __init__(self, keep: bool = True, copy: bool = False) -> None:
        self.keep, self.copy = keep, copy
        # The prompts hold dataset text and prompt files: the key is taken out of them too,
        # as the client takes it out of answers.
        self._redactor = run_redactor()
        self.rows = 0
        self._file: IO[bytes] | None = tempfile.TemporaryFile() if keep else None  # noqa: SIM115 (closed in close())
        self._gzip: gzip.GzipFile | None = (
            gzip.GzipFile(fileobj=self._file, mode="wb", compresslevel=COMPRESSION, mtime=0)
            if self._file is not None else None)

    def take(self, record: RowRecord) -> RowRecord:
        """The record to keep: `record` without its calls (a copy with `copy=True`)."""
        if self.copy:
            record = slim_copy(record)
        line = take_transcript(record)
        if line is not None and self._gzip is not None:
            self._gzip.write(line_text(self._redactor.value(line)).encode("utf-8"))
            self.rows += 1
        return record

    def _finished(self) -> IO[bytes] | None:
        """The spool's file with the gzip stream ended (no more lines after this)."""
        if self._gzip is not None:
            self._gzip.close()
            self._gzip = None
        return self._file

    def lines(self, nodeids: Collection[str] | None = None) -> Iterator[tuple[str, str]]:
        """(node id, the line's JSON text) in the order rows finished; only those of
        `nodeids` when given. Text, not parsed: a line is parsed when it is used."""
        spool = self._finished()
        if spool is None or not self.rows:
            return
        spool.seek(0)
        with gzip.GzipFile(fileobj=spool, mode="rb") as reader:
            for raw in reader:
                nodeid = _nodeid(raw)
                if nodeid is not None and (nodeids is None or nodeid in nodeids):
                    yield nodeid, raw.decode("utf-8")

    def write_to(self, path: Path) -> None:
        """Copy the compressed lines to `path` (atomically: a temp file renamed over it)."""
        spool = self._finished()
        if spool is None:
            return
        spool.seek(0)
        with open_atomic(path) as out:
            shutil.copyfileobj(spool, out, 1 << 20)

    def close(self) -> None:
        self._finished()
        if self._file is not None:
            self._file.close()
            self._file = None


def _nodeid(line: bytes) -> str | None:
    """A line's node id without parsing the whole line (it is written first)."""
    prefix = b'{"nodeid":'
    if not line.startswith(prefix):
        return None
    value, _ = json.JSONDecoder().raw_decode(line[len(prefix):].decode("utf-8"))
    return value if isinstance(value, str) else None
