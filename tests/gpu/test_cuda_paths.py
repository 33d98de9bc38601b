"""CUDA paths, run by tests/gpu/check.sh on a machine with a GPU (skipped elsewhere).

They need a real CUDA device: hardware detection, CUDA-event timing, measurements on the GPU.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_hardware_snapshot_sees_the_gpu() -> None:
    from kernel_explorer.inspect.hardware import detect_hardware

    snapshot = detect_hardware()
    assert snapshot.accelerators, "no accelerator reported"
    assert torch.cuda.get_device_name(0) in str(snapshot)
    assert snapshot.kernels_backend.startswith("cu")
    assert any(snapshot.kernels_backend in variant for variant in snapshot.accepted_variants)


def test_cuda_event_clock_agrees_with_torch_benchmark() -> None:
    from torch.utils import benchmark

    from kernel_explorer.measure.timing import Clock

    a = torch.randn(4096, 4096, device="cuda")
    clock = Clock("cuda")
    repeat = clock.calibrate(lambda: a @ a, min_seconds=5e-3)
    ours = sorted(clock.per_call(lambda: a @ a, repeat) for _ in range(11))[5]
    theirs = benchmark.Timer("a @ a", globals={"a": a}).blocked_autorange(min_run_time=0.5).median
    assert abs(ours / theirs - 1) < 0.10, (ours, theirs)


def test_explorer_on_a_cuda_model_measures_and_restores() -> None:
    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import tiny_llama

    model = tiny_llama().cuda()
    explorer = Explorer(model)
    assert explorer._switchboard.device == "cuda"
    bundled = [c for c in explorer._catalog.candidates("RMSNorm") if c.source == "bundled"]
    found = explorer._catalog.availability(bundled[0], device="cuda", mode=explorer.mode)
    assert "mapped for cpu, the model is on cuda" in found.reason
    handle = explorer.compare_model(lengths=(64,), decode_tokens=4, pairs=1)
    assert handle.outcome == "finished", handle.error
    assert explorer.results.records("model_prefill")[0].values["kernel_s"] > 0
    assert not any(now.is_kernel for now in explorer.running())
