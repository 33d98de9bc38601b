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
