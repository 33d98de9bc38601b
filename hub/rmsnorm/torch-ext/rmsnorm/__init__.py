"""CPU RMSNorm (float32, bfloat16, float16), a drop-in for Transformers' LlamaRMSNorm forward."""

import torch

from ._ops import ops

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    """weight * (x * rsqrt(mean(x^2, -1) + eps)).to(x.dtype), accumulated in float32.

    Returns x's dtype when weight has the same dtype, float32 otherwise, exactly as eager does.
    """
    for t in (x, weight):
        if not t.is_cpu:
            raise RuntimeError(
                f"rms_norm: this is a CPU kernel, got a tensor on {t.device}; use PyTorch there"
            )
        if t.dtype not in _DTYPES:
            raise TypeError(f"rms_norm: supports float32, bfloat16 and float16, got {t.dtype}; use PyTorch")
    if out is None:
        return ops.rms_norm(x, weight, eps)
    ops.rms_norm_out(out, x, weight, eps)
    return out


def isa() -> str:
    """The code path most ops run (avx512bf16, avx512, avx2 or portable): each op runs the fastest
    this CPU runs for it, timed once per machine at its first use, unless KERNEL_EXPLORER_ISA or
    `set_isa` chose one for all (see `isa_choices`)."""
    return ops.isa()


def isa_reason() -> str:
    """Why `isa()` runs, in one line: the measured ratios against the other paths, or who forced it."""
    return ops.isa_reason()


def isa_paths() -> list[str]:
    """The code paths this build carries and this CPU runs, widest first."""
    return list(ops.isa_paths())


def isa_choices() -> list[str]:
    """Each op's own choice, one line per op and dtype ("silu bfloat16: avx512bf16 formula: ..."):
    every op times the paths (and, where it has several, its forms) on its own workload."""
    return list(ops.isa_choices())


def set_isa(name: str) -> str:
    """Put every op on one code path (tests, benchmarks, comparing paths); one of `isa_paths()`,
    optionally with a form ("avx512bf16 formula") for the ops that have several."""
    return ops.set_isa(name)


def reset_isa() -> str:
    """Undo `set_isa`: back to the measured (or KERNEL_EXPLORER_ISA's) path; returns it."""
    return ops.reset_isa()


from . import _registrations, layers  # noqa: E402, F401  (fake kernels; layers use the functions above)

__all__ = ["isa", "isa_choices", "isa_paths", "isa_reason", "layers", "reset_isa", "rms_norm", "set_isa"]
