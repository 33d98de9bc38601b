"""Layer comparison and determinism on captured activations."""

from __future__ import annotations

import pytest
import torch

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.models import tiny_llama


@pytest.fixture
def explorer(hub: dict) -> Explorer:
    found = Explorer(tiny_llama(), include_transformers=False)
    found.capture(torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(3)))
    yield found
    found.reset()


def test_compare_streams_divergence_then_interleaved_pairs(explorer: Explorer) -> None:
    handle = explorer.compare("RMSNorm", pairs=3)
    assert handle.outcome == "finished"
    divergence = explorer.results.records("layer_divergence")
    latency = explorer.results.records("layer_latency")
    assert len(divergence) == 5 and len(latency) == 5 * 3
    assert all(r.values.kernel_on for r in divergence + latency)
    for record in divergence:
        values = record.values
        assert values.dtype == "float32" and values.allclose is True
        # the kernel sums in another order: a few ULP at most, and as close to float64 as PyTorch
        assert values.max_ulp <= 8
        assert values.kernel_err64 <= 4 * values.pytorch_err64 + 1e-7
    for record in latency:
        assert record.values.pytorch_s > 0 and record.values.kernel_s > 0
        assert record.values.speedup == pytest.approx(record.values.pytorch_s / record.values.kernel_s)
    assert not any(now.is_kernel for now in explorer.running())  # switched on for the run only


def test_switches_the_user_made_are_kept(explorer: Explorer) -> None:
    explorer.on("RMSNorm", "model.norm")
    explorer.compare("RMSNorm", pairs=1)
    assert [now.instance for now in explorer.running("RMSNorm") if now.is_kernel] == ["model.norm"]


def test_unknown_layer_fails_before_anything_runs(explorer: Explorer) -> None:
    with pytest.raises(KernelExplorerError, match="has no kernel layer 'LayerNorm'"):
        explorer.compare("LayerNorm")
    assert len(explorer.results) == 0


def test_determinism_of_the_bundled_kernels(explorer: Explorer) -> None:
    explorer.compare("SiLU", "rotary_pos_emb", pairs=1, determinism_runs=4)
    records = explorer.results.records("layer_determinism")
    assert len(records) == 2 + 2
    for record in records:
        assert record.values.runs == 4
        assert record.values.kernel_identical == 1.0
        assert record.values.pytorch_deterministic_identical == 1.0
    assert not torch.are_deterministic_algorithms_enabled()
