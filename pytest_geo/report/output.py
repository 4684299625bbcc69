"""Writing the report files a run asked for, for the plugin and `egeo` alike: the report is
built once (its rows are the records as they are, their calls already in the transcripts
spool), the transcripts file goes beside it, and each file is streamed to disk. A write
that fails (disk full, permissions changed since the start) is one line in
`Results.write_errors` while the other file is still written. The caller fails the run
for it; and the file a previous run left at that path is removed, so that CI never reads
it as this run's report."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any, TextIO

from pytest_geo.data.files import open_atomic
from pytest_geo.llm.file_lock import lock, locks_available
from pytest_geo.llm.redaction import run_redactor
from pytest_geo.report.html import TranscriptSample, sample_nodeids, write_html
from pytest_geo.report.json_report import build_report, write_json
from pytest_geo.report.results import Results
from pytest_geo.report.transcripts import TranscriptSpool, transcripts_path


class OutputPathError(ValueError):
    """An output path that is an input of the run or another output; names both."""


def check_output_paths(reports: Sequence[tuple[str, str | None]], inputs: Iterable[tuple[str, Path]],
                       base: Path, others: Sequence[tuple[str, str | None]] = ()) -> None:
    """Raise OutputPathError when a report path (`reports`: flag, value as given,
    relative to `base`), the transcripts file beside the first of them, or another
    file the run writes (`others`, e.g. --junitxml) is one of `inputs` (what, path) or
    another output: written at the end, it would replace the dataset or the other
    report without a word. A device (`/dev/stdout`) is left out: nothing is renamed
    over it, and nothing sits beside it."""
    named = [(f"{flag} {value}", base / value) for flag, value in reports if value]
    beside = next(((what, path) for what, path in named if not _is_device(path)), None)
    if beside is not None:
        named.append((f"the transcripts file {transcripts_path(beside[1]).name} of {beside[0]}",
                      transcripts_path(beside[1])))
    named += [(f"{flag} {value}", base / value) for flag, value in others if value]
    sources = list(inputs)
    earlier: list[tuple[str, Path]] = []
    for what, path in named:
        if _is_device(path):
            continue
        for other, other_path in earlier:
            if _same_file(path, other_path):
                raise OutputPathError(f"{what} is also {other}: one would overwrite the other; name two files")
        for source, source_path in sources:
            if _same_file(path, source_path):
                raise OutputPathError(f"{what} is {source}, an input of the run: writing it would replace it")
        earlier.append((what, path))


def prompt_inputs(folders: Iterable[Path]) -> list[tuple[str, Path]]:
    """The prompt files a run reads, for `check_output_paths`: the `*.txt` of each
    prompts directory, or the template file itself (a variant's)."""
    found = []
    for folder in folders:
        files = sorted(folder.glob("*.txt")) if folder.is_dir() else [folder]
        found += [(f"the prompt file {path}", path) for path in files]
    return found


def _same_file(a: Path, b: Path) -> bool:
    """One file under two names: the same path once links are followed, or (for files
    that exist) the same inode (a hard link)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def write_report_files(results: Results, json_path: str | None, html_path: str | None, *,
                       who: str, flags: tuple[str, str]) -> list[str]:
    """Write the JSON report to `json_path` and the HTML report to `html_path` (either may
    be None), and the rows' transcripts beside the first of them; `flags` name the two
    options in error lines. Returns the paths written."""
    if not json_path and not html_path:
        return []
    spool = results.spool()
    # The key out of every string (a dataset description, a prompt, a message may hold it).
    report = run_redactor().value(build_report(results))
    with folders_locked([path for path in (json_path, html_path) if path]):
        written = _write_files(results, report, spool, json_path, html_path, who, flags)
    spool.close()
    return written


def _write_files(results: Results, report: dict[str, Any], spool: TranscriptSpool, json_path: str | None,
                 html_path: str | None, who: str, flags: tuple[str, str]) -> list[str]:
    report["transcripts"] = _write_transcripts(results, spool, json_path, html_path, who, flags)
    sample = _sample(report, spool)
    written = []
    renderers: tuple[tuple[str, str | None, Callable[[TextIO], None]], ...] = (
        (flags[0], json_path, lambda out: write_json(out, report)),
        (flags[1], html_path, lambda out: write_html(out, report, sample)))
    for flag, path, render in renderers:
        if not path:
            continue
        try:
            with report_file(Path(path)) as out:
                render(out)
        except OSError as exc:
            error = f"{who}: {flag}: cannot write {path}: {exc.strerror or exc}"
            results.write_errors.append(error + _remove_previous(Path(path)))
        else:
            written.append(path)
    return written


@contextmanager
def folders_locked(paths: Iterable[str]) -> Iterator[None]:
    """An exclusive lock on each folder a report file goes to (in one order: no two runs
    wait on each other), held while the report, the page and the transcripts are written.
    Two runs writing one report path then write one after the other, and the files left
    are one run's, together: interleaved, one run's report could name the other's
    transcripts file, holding other rows. Transcripts keep their fixed name beside the
    report (the page, `egeo merge` and CI steps find them by it) rather than one per run,
    which would pile up. Without `fcntl` (Windows) nothing is locked."""
    folders = sorted({Path(path).resolve().parent for path in paths if not _is_device(Path(path))})
    with ExitStack() as held:
        for folder in folders if locks_available() else ():
            try:
                folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(folder, os.O_RDONLY)
            except OSError:  # the write itself will say why
                continue
            held.callback(os.close, fd)
            with suppress(OSError):  # a file system without locks: written as before, unlocked
                lock(fd)
        yield


def _write_transcripts(results: Results, spool: TranscriptSpool, json_path: str | None, html_path: str | None,
                       who: str, flags: tuple[str, str]) -> dict[str, Any] | None:
    """The transcripts file beside the JSON report (else beside the page); what the
    report says of it: its name and rows, or None when no row made a call or it could not
    be written (a line in `write_errors`, as for a report)."""
    if not spool.rows:
        return None
    for flag, report in ((flags[0], json_path), (flags[1], html_path)):
        if not report or _is_device(Path(report)):
            continue  # /dev/stdout or a pipe: nothing can sit beside it
        path = transcripts_path(report)
        try:
            spool.write_to(path)
        except OSError as exc:
            error = f"{who}: {flag}: cannot write the transcripts file {path}: {exc.strerror or exc}"
            results.write_errors.append(error + _remove_previous(path))
            return None
        results.transcripts_path = str(path)
        return {"path": path.name, "rows": spool.rows}
    return None


def _sample(report: dict[str, Any], spool: TranscriptSpool) -> TranscriptSample:
    """The transcripts the page embeds, read back from the spool (a bounded number)."""
    wanted = sample_nodeids(report["rows"])
    lines = dict(spool.lines(wanted))
    written = report.get("transcripts")
    return TranscriptSample(lines, written["path"] if written else None, spool.rows)


def _is_device(path: Path) -> bool:
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


@contextmanager
def report_file(path: Path) -> Iterator[TextIO]:
    """A text file to write a report to: atomically (a temp file renamed over the path),
    except over a device or a pipe (`/dev/stdout`, `>(jq .)`): renaming would replace the
    device node itself, which as root means a regular file where /dev/null was."""
    if _is_device(path):
        with path.open("w", encoding="utf-8") as handle:
            yield handle
        return
    with open_atomic(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        try:
            yield text
            text.flush()
        finally:
            text.detach()


def _remove_previous(path: Path) -> str:
    """Remove the report a previous run left at `path`; the words saying so, for the
    error line ("" when there was none)."""
    try:
        if not path.is_file():
            return ""
        path.unlink()
    except OSError as exc:
        return f"; the previous report there could not be removed: {exc.strerror or exc}"
    return " (the previous report there was removed)"
