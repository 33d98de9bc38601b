"""One OpenMP thread pool at a time, so a run on a worker thread times a kernel as the main thread does.

Why this exists (measured on this project's 2-core guests, torch 2.13's bundled libgomp): the
bundled elementwise kernels enter `at::parallel_for` (an OpenMP parallel region) from 4,096
elements. libgomp keeps one pool of threads per thread that opens a parallel region, and keeps it
after the region ends. Once the main thread has run anything parallel (loading the model, the
capture forward), a worker thread that opens a region gets a second pool, and libgomp then counts
more threads than CPUs and waits for each region's threads by sleeping (futex) instead of spinning
(its "throttled" spin count). SiLU on a (15, 1536) float32 input: 6.1 us from the main thread,
17 us from a worker while the main thread's pool exists, 6.1 us from the same worker once the main
thread's pool is released; and 38 us from the main thread while a worker's pool is alive. The
thread itself costs nothing: whichever thread measures, only one pool may exist.

So before a run starts on a worker thread, the starting thread (the main one, in a notebook or a
script) releases its own idle pool with OpenMP 5.0's `omp_pause_resource_all`; the next parallel
region on the main thread makes a new one (about 50 us, once). The worker's pool goes when its
thread ends. A pool can only be released by its own thread, so a parallel op the main thread runs
while a background run is going (a model forward in another cell) makes two pools again: both
slow down, which is the machine being shared, and the run's records show it.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any

OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: release the threads, keep the runtime usable
_RUNTIMES = ("libgomp", "libiomp", "libomp")  # GNU, Intel, LLVM: all export omp_pause_resource_all


@functools.lru_cache(maxsize=1)
def _pause_all() -> Any:
    """`omp_pause_resource_all` of the OpenMP runtime torch loaded, or None (none loaded, no /proc)."""
    import torch  # noqa: F401 - its OpenMP runtime must be the one loaded

    maps = Path("/proc/self/maps")
    if not maps.exists():
        return None
    for line in maps.read_text().splitlines():
        path = line.split()[-1] if line.split() else ""
        if any(Path(path).name.startswith(name) for name in _RUNTIMES):
            try:
                function = ctypes.CDLL(path).omp_pause_resource_all
            except (OSError, AttributeError):  # an OpenMP before 5.0: nothing to release with
                continue
            function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
            return function
    return None


def release_thread_pool() -> bool:
    """Release the calling thread's idle OpenMP pool; True when a runtime did so.

    Call it on the thread that starts a worker-thread run, outside any parallel region (as the
    runner does): the worker's parallel regions then have the CPUs' only pool.
    """
    function = _pause_all()
    if function is None:
        return False
    return function(OMP_PAUSE_SOFT) == 0
