"""The memory kind's CUDA path (the caching allocator's counters), run by tests/gpu/check.sh on a
machine with a GPU (skipped elsewhere)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_a_cuda_linear_allocates_its_output_and_keeps_nothing() -> None:
    """After a warm-up call (cuBLAS takes its workspace from the caching allocator once, and keeps
    it), a Linear's peak is its output (147456 bytes: a multiple of the allocator's 512-byte
    blocks) and it leaves nothing allocated once the output is dropped."""
    from kernel_explorer.measure.kinds.memory import allocated_during

    linear = torch.nn.Linear(576, 1536, device="cuda")
    x = torch.randn(24, 576, device="cuda")
    with torch.no_grad():
        allocated_during(lambda: linear(x), "cuda")
        used = allocated_during(lambda: linear(x), "cuda")
    output = 24 * 1536 * 4
    assert output <= used.peak_bytes <= output * 1.01
    assert used.retained_bytes == 0


def test_memory_of_a_cuda_model_is_measured_and_restored() -> None:
    """On CUDA the bundled (CPU) kernels do not switch on: every pair is PyTorch against itself, and
    the model's weights and prefill are read through the caching allocator."""
    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import tiny_llama
    from kernel_explorer.measure.kinds import LayerRequest
    from kernel_explorer.measure.kinds.memory import KIND
    from kernel_explorer.measure.verdict import Verdict

    explorer = Explorer(tiny_llama().cuda())
    request = LayerRequest(
        explorer._switchboard,
        lambda grad: explorer.captured_inputs(grad=grad),
        ["RMSNorm"],
        options={"repeats": 3, "lengths": []},
    )
    handle = explorer.run(KIND.plan(request), background=False)
    assert handle.outcome == "finished", handle.error
    layers = [r.values for r in explorer.results.records("layer_memory")]
    assert layers and all(v.device == "cuda" and not v.kernel_on and v.pytorch_peak_bytes > 0 for v in layers)
    prefill = [r.values for r in explorer.results.records("model_prefill_memory")]
    assert prefill and all(p.peak_bytes > 0 for p in prefill)
    rows = KIND.summarize(explorer.results).rows
    assert rows[0]["verdict"] is Verdict.KERNEL_OFF
    assert not any(now.is_kernel for now in explorer.running())
