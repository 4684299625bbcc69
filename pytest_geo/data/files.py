"""Atomic file writes: a temporary file beside the target, then a rename, so a reader (or
the next run, after a kill -9) sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def _umask() -> int:
    # Read once, at import (single-threaded): os.umask can only be read by setting it.
    mask = os.umask(0)
    os.umask(mask)
    return mask


NEW_FILE_MODE = 0o666 & ~_umask()


def write_text_atomic(path: Path, text: str, *, durable: bool = True) -> None:
    """Replace `path` with `text`. An existing file keeps its permissions; `durable`
    also fsyncs before the rename (the cache skips it: a lost entry is only a miss)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
