"""Timing that means something: interleaved pairs, calibrated repeats, CUDA events on a GPU.

A and B run alternately (A B, then B A) on the same inputs, so drift in clock speed or machine
load hits both alike; a timed block repeats a call until it lasts long enough for the clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

MIN_BLOCK_SECONDS = 2e-4  # a timed block lasts at least this long (perf_counter resolution ~50 ns)
MAX_REPEAT = 10_000


class Clock:
    """Seconds per call of `fn`, over `repeat` back-to-back calls.

    On CPU: `time.perf_counter`. On CUDA: events around the block and a synchronize, so the time
    is the GPU's, not the launch's.
    """

    def __init__(self, device: str = "cpu") -> None:
        self.cuda = device in ("cuda", "rocm")

    def per_call(self, fn: Callable[[], Any], repeat: int) -> float:
        """Seconds per call, without autograd (inference is what is compared)."""
        import torch

        with torch.no_grad():
            return self._per_call(fn, repeat)

    def _per_call(self, fn: Callable[[], Any], repeat: int) -> float:
        if self.cuda:
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(repeat):
                fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3 / repeat
        begin = time.perf_counter()
        for _ in range(repeat):
            fn()
        return (time.perf_counter() - begin) / repeat

    def calibrate(self, fn: Callable[[], Any], min_seconds: float | None = None) -> int:
        """Repeats per block so one block lasts at least `min_seconds` (after one warm-up call)."""
        min_seconds = MIN_BLOCK_SECONDS if min_seconds is None else min_seconds
        fn()
        once = max(self.per_call(fn, 1), 1e-9)
        return int(min(MAX_REPEAT, max(1, min_seconds / once)))


def interleaved_pair(
    clock: Clock, a: Callable[[], Any], b: Callable[[], Any], repeat: int, b_first: bool
) -> tuple[float, float]:
    """Seconds per call of `a` and of `b`, timed back to back in the order given."""
    if b_first:
        tb = clock.per_call(b, repeat)
        ta = clock.per_call(a, repeat)
    else:
        ta = clock.per_call(a, repeat)
        tb = clock.per_call(b, repeat)
    return ta, tb
