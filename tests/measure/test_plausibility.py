"""Plausibility flags: each check fires on the case it is for, and stays quiet on an honest one."""

from __future__ import annotations

import torch

from kernel_explorer.measure.plausibility import (
    copy_bandwidth,
    ignores_its_input,
    plausibility_notes,
    tensor_bytes,
)
from kernel_explorer.measure.stats import median_interval


def test_a_kernel_that_returns_a_stale_output_is_caught() -> None:
    x = torch.randn(64, 32)
    stale = torch.nn.functional.silu(x)

    def honest(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(t)

    def cached(t: torch.Tensor) -> torch.Tensor:
        return stale.clone()

    assert not ignores_its_input(honest, honest, (x,), {}, honest(x))
    assert ignores_its_input(cached, honest, (x,), {}, cached(x))


def test_notes_for_a_huge_speedup_and_for_beating_a_copy() -> None:
    assert (
        plausibility_notes(
            median_interval([3.0] * 7), kernel_s=1e-3, bytes_moved=1 << 20, ignores_input=False
        )
        == ()
    )
    (note,) = plausibility_notes(
        median_interval([14.0] * 7), kernel_s=None, bytes_moved=0, ignores_input=False
    )
    assert "above 10x" in note
    nbytes = 64 << 20
    too_fast = nbytes / (copy_bandwidth(nbytes) * 3)  # three times faster than copying the bytes
    (note,) = plausibility_notes(None, kernel_s=too_fast, bytes_moved=nbytes, ignores_input=False)
    assert "faster than a plain copy" in note


def test_tensor_bytes_walks_args_and_kwargs() -> None:
    assert tensor_bytes((torch.ones(4), [torch.ones(2, dtype=torch.bfloat16)]), {"w": torch.ones(3)}) == 32


def test_a_stalled_multithreaded_copy_does_not_make_the_copy_limit_absurdly_low(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """On a loaded machine torch's two-thread copy of 1 MB took 10 ms a call (best of ten): the limit
    must not follow it, or every kernel would read "faster than a plain copy" for the whole process."""
    import time

    from kernel_explorer.measure import plausibility

    real_copy = torch.Tensor.copy_

    def stalled(self: torch.Tensor, src: torch.Tensor, *args, **kwargs) -> torch.Tensor:  # type: ignore[no-untyped-def]
        time.sleep(2e-3)  # waiting for a thread that is not scheduled
        return real_copy(self, src, *args, **kwargs)

    plausibility._copy_bandwidth_bucket.cache_clear()
    monkeypatch.setattr(torch.Tensor, "copy_", stalled)
    try:
        limit = copy_bandwidth(1 << 20)
    finally:
        monkeypatch.undo()
        plausibility._copy_bandwidth_bucket.cache_clear()
    assert limit > 2e9  # a stalled copy reads 0.5 GB/s; any working single-threaded copy is faster
    assert plausibility_notes(None, kernel_s=1e-3, bytes_moved=1 << 20, ignores_input=False) == ()


def test_per_pair_speedups_far_from_the_ratio_of_median_times_get_a_note() -> None:
    """Measured under load: attention's per-pair median read 0.43x while its median times gave 0.09x
    (34.7 us against 390 us). Pairs that agree with the medians get no note."""
    interval = median_interval([0.43] * 7)
    (note,) = plausibility_notes(
        interval, kernel_s=390e-6, bytes_moved=0, ignores_input=False, pytorch_s=34.7e-6
    )
    assert "0.43x" in note and "0.09x" in note and "changed state" in note
    agreeing = plausibility_notes(
        median_interval([2.0] * 7), kernel_s=1e-3, bytes_moved=0, ignores_input=False, pytorch_s=2.1e-3
    )
    assert agreeing == ()
