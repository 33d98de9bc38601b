"""How far a kernel's output is from PyTorch's, and from a float64 run of the original forward.

Comparing both outputs against the same float64 reference tells a user whether the kernel is
less accurate than PyTorch or only rounds differently (same error, other bits).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from torch import nn

_INT_VIEW = {4: "int32", 2: "int16"}


def ordered_bits(x: torch.Tensor) -> torch.Tensor:
    """Float bits mapped to integers that order like the floats (so ULP distance is a difference)."""
    import torch

    width = x.element_size()
    if width not in _INT_VIEW:
        x, width = x.to(torch.float32), 4
    bits = x.contiguous().view(getattr(torch, _INT_VIEW[width])).to(torch.int64)
    magnitude = bits & ((1 << (8 * width - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in units in the last place of `a`'s dtype (NaN/inf positions: 0)."""
    import torch

    finite = torch.isfinite(a) & torch.isfinite(b)
    distance = (ordered_bits(a) - ordered_bits(b)).abs()
    return torch.where(finite, distance, torch.zeros_like(distance))


def divergence(kernel: torch.Tensor, pytorch: torch.Tensor, reference: torch.Tensor | None) -> dict[str, Any]:
    """Metrics for one output pair; `reference` is the float64 run (or None when unavailable)."""
    import torch

    k, p = kernel.detach(), pytorch.detach()
    if k.numel() == 0:
        return {
            "dtype": str(k.dtype).removeprefix("torch."),
            "elements": 0,
            "bitwise_equal": 1.0,
            "allclose": True,
        }
    diff = (k.double() - p.double()).abs()
    scale = p.double().abs().clamp_min(torch.finfo(p.dtype).tiny if p.is_floating_point() else 1.0)
    ulps = ulp_distance(k, p) if k.is_floating_point() else diff.to(torch.int64)
    try:
        torch.testing.assert_close(k, p)
        close = True
    except AssertionError:
        close = False
    values: dict[str, Any] = {
        "dtype": str(k.dtype).removeprefix("torch."),
        "elements": k.numel(),
        "max_abs": diff.max().item(),
        "max_rel": (diff / scale).max().item(),
        "mean_abs": diff.mean().item(),
        "max_ulp": int(ulps.max().item()),
        "mean_ulp": ulps.double().mean().item(),
        "bitwise_equal": (ulps == 0).double().mean().item(),
        "allclose": close,
        "kernel_err64": None,
        "pytorch_err64": None,
    }
    if reference is not None:
        ref = reference.detach().double()
        values["kernel_err64"] = (k.double() - ref).abs().max().item()
        values["pytorch_err64"] = (p.double() - ref).abs().max().item()
        values["reference_max_abs"] = ref.abs().max().item()
    return values


class Judged(Protocol):
    """One divergence record as `accuracy_verdict` reads it (a `LayerDivergence` or a
    `GradientDivergence` of `kernel_explorer.records`): the metrics `divergence` computes."""

    @property
    def dtype(self) -> str | None: ...
    @property
    def bitwise_equal(self) -> float | None: ...
    @property
    def kernel_err64(self) -> float | None: ...
    @property
    def pytorch_err64(self) -> float | None: ...
    @property
    def reference_max_abs(self) -> float | None: ...


BITWISE_EQUAL = "bitwise equal"
AS_ACCURATE = "rounds differently (as accurate as PyTorch against float64)"


def accuracy_verdict(found: Sequence[Judged]) -> str:
    """One phrase for a layer's divergence records, judged against float64, never against PyTorch alone.

    Each side's error is its worst over the records (a layer's instances, each gradient), each
    record's error taken relative to the largest value of its float64 output, so that one instance
    of large activations does not hide the others. "As accurate" allows the kernel's worst to exceed
    PyTorch's by at most one unit in the last place (a different rounding of the same result);
    beyond that it is "less accurate", with the factor.

    Why each side's worst, not the worst of the per-record ratios: at the scale of rounding a
    record's two errors are a few units in the last place each, and their ratio scatters. On
    SmolLM2's 30 attention instances at 16 tokens the ratios ran from 0.40x to 2.02x, the kernel
    the more accurate in 23 of them and its worst error (2.2e-6) half PyTorch's (4.7e-6), yet the
    worst ratio read "2.0x less accurate". A kernel worse on every record, or far worse on any,
    still raises its worst above PyTorch's.
    """
    import torch

    if not found:
        return "not measured"
    if all(d.bitwise_equal == 1.0 for d in found):
        return BITWISE_EQUAL
    measured = [
        (d, d.kernel_err64, d.pytorch_err64)
        for d in found
        if d.kernel_err64 is not None and d.pytorch_err64 is not None
    ]
    if not measured:
        return "differs from PyTorch (no float64 reference to judge accuracy)"
    kernel_worst = pytorch_worst = one_ulp = 0.0
    for d, kernel_err64, pytorch_err64 in measured:
        dtype = getattr(torch, d.dtype or "", None)
        eps = torch.finfo(dtype).eps if isinstance(dtype, torch.dtype) and dtype.is_floating_point else 0.0
        scale = d.reference_max_abs or 1.0  # an all-zero reference: the errors as they are
        kernel_worst = max(kernel_worst, kernel_err64 / scale)
        pytorch_worst = max(pytorch_worst, pytorch_err64 / scale)
        one_ulp = max(one_ulp, eps if d.reference_max_abs else 0.0)
    if kernel_worst <= pytorch_worst + one_ulp:
        return AS_ACCURATE
    return f"less accurate ({kernel_worst / max(pytorch_worst, 1e-300):.1f}x PyTorch's error against float64)"


#: how many times the bound below a kernel's error against float64 must exceed to be "wrong"
WRONG_FACTOR = 8.0


def wrong_bound(pytorch_err64: float, reference_max_abs: float, dtype: Any) -> float:
    """The largest error against float64 a kernel's output may have and still compute what PyTorch
    computes: `WRONG_FACTOR` x the larger of PyTorch's own error and one unit of resolution at the
    output's largest value, the resolution being the coarser of the output dtype's and bfloat16's.

    Why each part: PyTorch's own error is the scale of a correct result here (a bfloat16 eager
    attention is already off by several of its units); the resolution floor keeps a PyTorch that
    happens to be exact from making every reordered sum "wrong"; bfloat16's resolution, not only
    the output's, because real CPU kernels compute a float32 layer in half precision or int8 on
    purpose (megablocks packs its experts to bfloat16; the bundled quantized Linear quantizes its
    prefill activations per block of 32), which is less accurate, not wrong. 8 such units (1/16 of
    the output's largest value) is beyond any of those and well below what a kernel computing
    another function is off by: dropped attention sinks, a missing mask, a wrong scale, another
    dtype's bug, all move outputs by a sizeable fraction of their scale.
    """
    import torch

    eps = torch.finfo(torch.bfloat16).eps
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        eps = max(eps, torch.finfo(dtype).eps)
    return WRONG_FACTOR * max(pytorch_err64, eps * reference_max_abs)


def to_float64(value: Any) -> Any:
    """`value` with every floating tensor in it as float64 (other leaves as they are)."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(
        lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t, value
    )


def float64_everywhere() -> Any:
    """A TorchFunctionMode in which an original forward's casts to float32/bfloat16/float16 give
    float64, so a layer that upcasts internally (RMSNorm computes in float32) really runs in float64."""
    import torch
    from torch.overrides import TorchFunctionMode

    class Float64Everywhere(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in (torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16):
                return args[0].double()
            if func is torch.Tensor.to:
                args = tuple(torch.float64 if _is_low_float(a) else a for a in args)
                if _is_low_float(kwargs.get("dtype")):
                    kwargs["dtype"] = torch.float64
            return func(*args, **kwargs)

    return Float64Everywhere()


def float64_shadow(target: nn.Module, *, grad: bool = False) -> nn.Module:
    """A shallow copy of `target` running its class forward, with float64 copies of its own
    parameters (requiring grad like the originals when `grad`) and buffers."""
    shadow: Any = copy.copy(target)  # shares children and attributes; own parameter/buffer dicts below
    shadow._parameters = {
        k: (None if v is None else v.detach().double().requires_grad_(grad and v.requires_grad))
        for k, v in target._parameters.items()
    }
    shadow._buffers = {k: (None if v is None else to_float64(v)) for k, v in target._buffers.items()}
    return shadow


def float64_reference(target: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The original (class) forward of `target` on float64 inputs and weights.

    Casts the original forward makes to float32/bfloat16/float16 are redirected to float64 for the
    call, so a layer that upcasts internally (RMSNorm computes in float32) is really computed in
    float64.
    """
    import torch

    shadow = float64_shadow(target)
    with torch.no_grad(), float64_everywhere():
        return type(target).forward(shadow, *to_float64(args), **to_float64(kwargs))


def _is_low_float(value: Any) -> bool:
    import torch

    return isinstance(value, torch.dtype) and value in (torch.float32, torch.bfloat16, torch.float16)
