"""Atomic file writes: a temporary file beside the target, then a rename, so a reader (or
the next run, after a kill -9) sees the old file or the new one, never half of one.
And reading input only from regular files: a FIFO would block the run, `/dev/zero` or a
socket would feed it without end, and a /proc file (regular, of size 0) such as
/proc/self/environ would hand the process's environment, keys included, to the run."""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
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
    also fsyncs before the rename (the cache skips it: a lost entry is only a miss).
    The temporary file is opened with plain `os` calls: the answer cache writes one per
    model call, and mkstemp's random names and a text wrapper cost more than the write."""
    mode, fd, tmp = _begin(path)
    try:
        try:
            write_all(fd, text.encode("utf-8"))
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        _finish(tmp, path, mode)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def open_atomic(path: Path, *, buffering: int = 1 << 20) -> Iterator[BinaryIO]:
    """A file to write `path` piece by piece, as `write_text_atomic` writes it whole:
    beside it, fsynced, then renamed over it (an existing file keeps its permissions);
    removed instead when the block raises. A report of any size is written this way in
    memory that does not grow with it."""
    mode, fd, tmp = _begin(path)
    try:
        with os.fdopen(fd, "wb", buffering=buffering) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        _finish(tmp, path, mode)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (`os.write` may write part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


_TEMPS = itertools.count()


def _begin(path: Path) -> tuple[int | None, int, Path]:
    """The mode `path` has now (None when it does not exist), and a new temporary file
    beside it: its descriptor and name."""
    try:
        mode: int | None = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
    return mode, fd, tmp


def _finish(tmp: Path, path: Path, mode: int | None) -> None:
    """The written temporary file takes the old file's permissions and its place."""
    if mode is not None and mode != NEW_FILE_MODE:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def _create_temp(path: Path) -> tuple[int, Path]:
    """A new file beside `path` named `.<name>.<pid>.<n>.tmp`, created with the umask's
    mode (a name left by a killed process of the same pid is skipped)."""
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_TEMPS)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue


IS_DIRECTORY = "it is a directory"


def unwritable(path: Path) -> str | None:
    """Why a file cannot be written at `path` (None when it can, its missing directories
    made on the way): IS_DIRECTORY, a file where a directory must go, or no write access
    to the directory it goes in. Asked before a run's work, not found after it."""
    if path.is_dir():
        return IS_DIRECTORY
    parent = path.parent
    while not parent.exists() and parent != parent.parent:  # written with its missing directories
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"no write access to {parent}"
    return None


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


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of `path` if it is a plain file of at most `limit` bytes; else raise
    NotRegularFile (a FIFO, a device, or a file giving more bytes than its size says, as
    /proc and /sys files do) or OSError naming the size."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise OSError(f"larger than {_size(limit)} ({size:,} bytes)")
        data = handle.read(size + 1)
    if len(data) > size:
        raise NotRegularFile(f"not a plain file (it gives more bytes than its size of {size} says: "
                             "a /proc or /sys file?)")
    return data


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit:,} bytes"
