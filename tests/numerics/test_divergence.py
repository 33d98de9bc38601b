"""Divergence metrics and the float64 reference."""

from __future__ import annotations

import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from kernel_explorer.numerics.divergence import divergence, float64_reference, ulp_distance


def test_ulp_distance_counts_representable_steps() -> None:
    one = torch.tensor([1.0, -1.0, 0.0, 2.0])
    up = torch.nextafter(one, torch.full_like(one, 10.0))
    assert ulp_distance(one, up).tolist() == [1, 1, 1, 1]
    assert ulp_distance(torch.tensor([-0.0]), torch.tensor([0.0])).item() == 0
    assert ulp_distance(torch.tensor([-1e-45]), torch.tensor([1e-45])).item() == 2  # across zero
    bf16 = torch.tensor([1.0], dtype=torch.bfloat16)
    assert ulp_distance(bf16, bf16 + 0.0078125).item() == 1  # bfloat16's step at 1.0 is 2**-7


def test_metrics_for_a_pair() -> None:
    p = torch.tensor([1.0, 2.0, 4.0, 8.0])
    k = p.clone()
    k[3] = torch.nextafter(k[3], torch.tensor(100.0))
    values = divergence(k, p, p.double())
    assert values["bitwise_equal"] == 0.75 and values["max_ulp"] == 1 and values["allclose"] is True
    assert values["max_abs"] == float(k[3] - p[3]) and values["pytorch_err64"] == 0.0
    assert values["kernel_err64"] == values["max_abs"]
    far = divergence(p + 1, p, None)
    assert far["allclose"] is False and far["kernel_err64"] is None and far["max_rel"] == 1.0


def test_float64_reference_really_computes_in_float64() -> None:
    norm = LlamaRMSNorm(8).to(torch.bfloat16)
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    ref = float64_reference(norm, (x,), {})
    assert ref.dtype == torch.float64
    exact = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    torch.testing.assert_close(ref, norm.weight.double() * exact, rtol=1e-12, atol=1e-12)
    assert norm.weight.dtype == torch.bfloat16  # the module itself is untouched


def test_accuracy_verdicts_are_judged_against_float64_not_against_pytorch() -> None:
    from kernel_explorer.measure.records import LayerDivergence
    from kernel_explorer.numerics.divergence import AS_ACCURATE, BITWISE_EQUAL, accuracy_verdict

    def found(bitwise: float, kernel_err: float | None, pytorch_err: float | None) -> LayerDivergence:
        return LayerDivergence(
            "float32",
            8,
            bitwise,
            True,
            kernel_err64=kernel_err,
            pytorch_err64=pytorch_err,
            reference_max_abs=2.0,
        )

    eps = torch.finfo(torch.float32).eps
    assert accuracy_verdict([found(1.0, 1e-7, 1e-7)]) == BITWISE_EQUAL
    # worse than PyTorch by less than one ULP of the largest output value: a different rounding
    assert accuracy_verdict([found(0.5, 1e-7 + 1.5 * eps, 1e-7)]) == AS_ACCURATE
    assert accuracy_verdict([found(0.5, 1e-7, 3e-7)]) == AS_ACCURATE  # more accurate than PyTorch
    assert accuracy_verdict([found(1.0, 0, 0), found(0.5, 4e-6, 1e-6)]) == (
        "less accurate (4.0x PyTorch's error against float64)"
    )
    assert accuracy_verdict([found(0.5, None, None)]).startswith("differs from PyTorch (no float64")
    assert accuracy_verdict([]) == "not measured"


def test_a_layers_accuracy_compares_each_sides_worst_over_its_instances() -> None:
    """Per-instance ratios of two rounding-sized errors scatter: the verdict compares each side's
    worst error over the instances (each relative to its instance's scale), not the worst ratio."""
    from kernel_explorer.measure.records import LayerDivergence
    from kernel_explorer.numerics.divergence import AS_ACCURATE, accuracy_verdict

    def found(kernel_err: float, pytorch_err: float, scale: float = 2.0) -> LayerDivergence:
        return LayerDivergence(
            "float32",
            8,
            0.5,
            True,
            kernel_err64=kernel_err,
            pytorch_err64=pytorch_err,
            reference_max_abs=scale,
        )

    # SmolLM2's attention at 16 tokens, in small: one instance at 2x, the kernel's worst below PyTorch's
    scattered = [found(1.0e-6, 5.0e-7), found(7.0e-7, 1.4e-6), found(2.2e-6, 4.7e-6)]
    assert accuracy_verdict(scattered) == AS_ACCURATE
    # worse on every instance: its worst is worse
    assert accuracy_verdict([found(2.0e-6, 1.0e-6), found(3.0e-6, 1.5e-6)]) == (
        "less accurate (2.0x PyTorch's error against float64)"
    )
    # far worse on one instance of small outputs, beside one of large outputs: not hidden by its scale
    mixed = [found(1.0e-4, 1.0e-4, scale=1000.0), found(3.0e-8, 1.0e-9, scale=0.01)]
    assert accuracy_verdict(mixed).startswith("less accurate (30.0x")
