"""The board's lock: re-entrant, and handed to a waiting thread when its holder lets go.

A measurement takes the board's lock around every timed pair and takes it again microseconds later.
With a plain `threading.RLock` the thread that had just released it won the race for it again and
again (the waiter is still being woken when the holder asks again), so a switch clicked during a
Run waited seconds for its turn: 2 to 5 s on a 2-core machine with one core busy, against the 1 s
a click must be answered in. Here a thread that finds the lock taken says so, and the holder, on
its last release, waits (at most `HANDOVER_S`) until that thread has it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

#: the longest a releasing holder waits for a waiting thread to take the lock
HANDOVER_S = 0.05


class HandingRLock:
    """A re-entrant lock that a releasing holder hands to a thread waiting for it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._count = threading.Lock()
        self._waiting = 0
        self._depth = 0  # the holder's nesting (changed only by the holder)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking=False):
            if not blocking:
                return False
            with self._count:
                self._waiting += 1
            try:
                if not self._lock.acquire(True, timeout):
                    return False
            finally:
                with self._count:
                    self._waiting -= 1
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        last = self._depth == 0
        self._lock.release()
        if last and self._waiting:
            deadline = time.monotonic() + HANDOVER_S
            while self._waiting and time.monotonic() < deadline:
                time.sleep(0.0002)  # the waiter, woken by the release, takes the lock meanwhile

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()
