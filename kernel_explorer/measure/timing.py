"""Timing that means something: interleaved pairs, calibrated repeats, CUDA events on a GPU.

A and B run alternately (A B, then B A) on the same inputs, so drift in clock speed or machine
load hits both alike; a timed block repeats a call until it lasts long enough for the clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

MIN_BLOCK_SECONDS = 2e-4  # a timed block lasts at least this long (perf_counter resolution ~50 ns)
MAX_REPEAT = 10_000


class Clock:
    """Seconds per call of `fn`, over `repeat` back-to-back calls.

    On CPU: `time.perf_counter`. On CUDA: events around the block and a synchronize, so the time
    is the GPU's, not the launch's.
    """

    def __init__(self, device: str = "cpu") -> None:
        self.cuda = device in ("cuda", "rocm")

    def per_call(self, fn: Callable[[], object], repeat: int) -> float:
        """Seconds per call, without autograd (inference is what is compared)."""
        import torch

        with torch.no_grad():
            return self._per_call(fn, repeat)

    def _per_call(self, fn: Callable[[], object], repeat: int) -> float:
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

    def calibrate(self, fn: Callable[[], object], min_seconds: float | None = None) -> int:
        """Repeats per block so one block lasts at least `min_seconds` (after one warm-up call)."""
        min_seconds = MIN_BLOCK_SECONDS if min_seconds is None else min_seconds
        fn()
        once = max(self.per_call(fn, 1), 1e-9)
        return int(min(MAX_REPEAT, max(1, min_seconds / once)))


def interleaved_pair(
    clock: Clock,
    a: Callable[[], object],
    b: Callable[[], object],
    repeat: int,
    b_first: bool,
    *,
    a_side: Callable[[], AbstractContextManager[object]] = nullcontext,
    b_side: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> tuple[float, float]:
    """Seconds per call of `a` and of `b`, timed back to back in the order given: the one A/B, B/A
    alternation every comparison times with (layers, training, model prefill and decode, a training
    step, compiled prefill), so they all alternate alike.

    `a_side` / `b_side` make the context each side is timed in (the model's lock, all layers on
    PyTorch for the reference side); entered around that side's block only, so switching is not timed.
    """
    order = ((b, b_side), (a, a_side)) if b_first else ((a, a_side), (b, b_side))
    seconds = []
    for fn, side in order:
        with side():
            seconds.append(clock.per_call(fn, repeat))
    return (seconds[1], seconds[0]) if b_first else (seconds[0], seconds[1])
