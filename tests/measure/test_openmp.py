"""One OpenMP pool at a time: the starting thread's idle pool is released before a worker-thread run.

Checked by what the mechanism does (the process's threads), not by a timing: a parallel op on this
thread leaves a pool of torch's threads minus one; releasing it ends those threads, and the next
parallel op makes them again.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

from kernel_explorer.measure.openmp import release_thread_pool


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _parallel_op() -> None:
    big = torch.ones(512, 512)
    big @ big  # an OpenMP parallel region on this thread at torch's thread count


def _settled(expected: int, seconds: float = 5.0) -> int:
    """The thread count, once it reaches `expected` or `seconds` pass (pool threads end asynchronously)."""
    deadline = time.monotonic() + seconds
    while _threads() != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return _threads()


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/task") or torch.get_num_threads() < 2, reason="needs Linux, 2+ threads"
)
def test_release_ends_this_threads_pool_and_the_next_region_makes_it_again() -> None:
    _parallel_op()
    with_pool = _threads()
    assert release_thread_pool() is True
    pool = torch.get_num_threads() - 1
    assert _settled(with_pool - pool) == with_pool - pool
    _parallel_op()
    assert _settled(with_pool) == with_pool


def test_release_outside_any_pool_is_harmless() -> None:
    assert release_thread_pool() in (True, False)
    assert release_thread_pool() in (True, False)  # twice in a row: nothing to release the second time
    assert torch.ones(3).sum().item() == 3.0
