"""How late the runner's event loop runs: the client's own share of a call's time.

A call's duration counts everything from its request slot to its answer, and a busy
client (its CPU spent on other calls, or the whole process held up by a loaded machine)
adds to it: the answer waits in the socket until the loop gets to it. To auto
concurrency that looks like a server queueing calls, and cutting the rows in flight
then only lowers the throughput. So a heartbeat runs on the loop while calls are out,
every BEAT seconds, and adds up how late it runs; the lateness within a call's span is
the time the client itself held it up."""

from __future__ import annotations

import asyncio
import bisect
import sys
from collections import deque
from collections.abc import Callable

BEAT = 0.02  # seconds between heartbeats
# Lateness within the interpreter's thread switch interval (5 ms) is another thread
# holding the GIL for its turn (pytest's main thread, a server in the same process),
# not a busy loop: only the lateness beyond it counts.
GRACE = sys.getswitchinterval()
HISTORY = 512  # heartbeats remembered (about 10 s): a longer call's span starts at the oldest


class LoopLag:
    def __init__(self, clock: Callable[[], float], busy: Callable[[], bool]) -> None:
        """`clock`: the controller's clock (seconds); `busy`: whether calls are out (the
        heartbeat stops when they are not, and starts again with the next `watch`)."""
        self.clock = clock
        self.busy = busy
        self.late = 0.0  # seconds the heartbeat ran late, added up
        self._times: deque[float] = deque(maxlen=HISTORY)  # when each heartbeat ran (the clock)
        self._totals: deque[float] = deque(maxlen=HISTORY)  # `late` then
        self._beating = False
        self._due = 0.0  # the running loop's time the next heartbeat is due

    def watch(self) -> None:
        """Keep the heartbeat going (on the running loop, if any)."""
        if self._beating:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._beating = True
        self._due = loop.time() + BEAT
        loop.call_at(self._due, self._beat, self._due)

    def _beat(self, due: float) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self.late += max(0.0, now - due - GRACE)
        self._times.append(self.clock())
        self._totals.append(self.late)
        if self.busy():
            self._due = now + BEAT
            loop.call_at(self._due, self._beat, self._due)
        else:
            self._beating = False

    def since(self, start: float) -> float:
        """Seconds the loop ran late since `start` (the clock), the heartbeat overdue now
        included (a stall's end is seen before its heartbeat runs)."""
        recorded = self._recorded_since(start)
        if not self._beating:
            return recorded
        return recorded + max(0.0, self._now() - self._due - GRACE)

    def _now(self) -> float:
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            return self._due

    def _recorded_since(self, start: float) -> float:
        at = bisect.bisect_right(self._times, start)
        if at:
            return self.late - self._totals[at - 1]
        if len(self._times) < HISTORY:
            return self.late  # every heartbeat so far ran after `start`
        return self.late - self._totals[0]  # a span longer than the history: what it holds
