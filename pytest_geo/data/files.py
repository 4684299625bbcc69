"""Atomic file writes: a temporary file beside the target, then a rename, so a reader (or
the next run, after a kill -9) sees the old file or the new one, never half of one.
And reading input only from regular files: a FIFO would block the run, `/dev/zero` or a
socket would feed it without end."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO


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


class NotRegularFile(OSError):
    """An input path that is a FIFO, a device, a socket or a directory."""


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def open_regular(path: Path | str) -> BinaryIO:
    """Open `path` for binary reading if (after symlinks) it is a regular file; else
    raise NotRegularFile saying what it is. O_NONBLOCK: opening a FIFO for reading would
    otherwise wait for a writer before there is anything to check."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise NotRegularFile(f"not a regular file ({kind})")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
