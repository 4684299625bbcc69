"""Advisory locks on an open file, shared by the answer cache and the budget ledger.

`fcntl` exists on POSIX systems only, so it is imported here when a lock is taken, never
when pytest-geo is imported: an import at module level would stop every pytest run from
starting on Windows wherever pytest-geo is installed."""

from __future__ import annotations

from types import ModuleType

NO_LOCKS = "file locks (fcntl) are not available on this platform: the answer cache is not written"


class LocksUnavailable(OSError):
    """This platform has no `fcntl`: the cache then writes nothing, a budget cannot start."""


def _fcntl() -> ModuleType:
    try:
        import fcntl
    except ImportError:
        raise LocksUnavailable(NO_LOCKS) from None
    return fcntl


def locks_available() -> bool:
    try:
        _fcntl()
    except LocksUnavailable:
        return False
    return True


def lock(fd: int, wait: bool = True) -> None:
    """An exclusive lock on `fd`; OSError (BlockingIOError) when `wait` is False and
    another process holds it."""
    fcntl = _fcntl()
    fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)


def unlock(fd: int) -> None:
    fcntl = _fcntl()
    fcntl.flock(fd, fcntl.LOCK_UN)
