"""The cyclic garbage collector's pace while rows run, and its restoration afterwards.

CPython collects its youngest generation each time the tracked objects allocated outnumber
those freed by 700. A model call in flight holds a few hundred of them (the SDK's request
options, httpx2's and aiohttp's requests and headers, our request and answer) until its
answer comes, so at that pace the collector keeps walking calls in flight, finds them alive
and moves them to the older generations, whose collections walk them again (README,
"Client CPU per model call", says what that cost). While a runner is open the threshold is
raised to YOUNG_THRESHOLD (never lowered): calls in flight are freed about as fast as they
are made, so the count seldom gets there, and a collection comes once what is kept (the
outcomes, a reference cycle left as garbage) has grown by that much. Garbage is still
collected, later; `gc.collect()` still collects everything at once. The threshold in force
when the first runner opened is put back when the last one closes, unless something else
changed it meanwhile (then it is theirs, and left as it is)."""

from __future__ import annotations

import gc
import threading

YOUNG_THRESHOLD = 10_000

_lock = threading.Lock()
_holders = 0
_saved: tuple[int, ...] | None = None  # the thresholds before the first holder
_ours: tuple[int, ...] | None = None  # what we set, to tell whether anyone changed it since


def hold() -> None:
    """A runner opened: raise the young generation's threshold (first holder only)."""
    global _holders, _saved, _ours
    with _lock:
        _holders += 1
        if _holders > 1:
            return
        _saved = gc.get_threshold()
        young, *older = _saved
        if young >= YOUNG_THRESHOLD or young == 0:  # already as slow, or 0: collection off
            _ours = None
            return
        gc.set_threshold(YOUNG_THRESHOLD, *older)
        _ours = gc.get_threshold()


def release() -> None:
    """A runner closed: the last one puts the saved threshold back, if it is still ours."""
    global _holders, _saved, _ours
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders > 0:
            return
        if _ours is not None and _saved is not None and gc.get_threshold() == _ours:
            gc.set_threshold(*_saved)
        _saved = _ours = None
