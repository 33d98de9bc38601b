"""CPU activation kernels (float32, bfloat16, float16), drop-ins for Transformers' activations.

Every function takes an optional `out=` (contiguous, same shape and dtype) to skip the allocation.
"""

import torch

from ._ops import ops

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check(x: torch.Tensor, name: str) -> None:
    # The ops only exist for CPU tensors; say so plainly instead of a dispatcher error.
    if not x.is_cpu:  # is_cpu: a fifth of the cost of device.type, on every call
        raise RuntimeError(f"{name}: this is a CPU kernel, got a tensor on {x.device}; use PyTorch there")
    if x.dtype not in _DTYPES:
        raise TypeError(f"{name}: supports float32, bfloat16 and float16, got {x.dtype}; use PyTorch")


def _unary(name: str):
    op, op_out = getattr(ops, name), getattr(ops, name + "_out")

    def run(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        _check(x, name)
        if out is None:
            return op(x)
        op_out(out, x)
        return out

    run.__name__ = name
    return run


silu = _unary("silu")
gelu = _unary("gelu")
gelu_tanh = _unary("gelu_tanh")
gelu_new = _unary("gelu_new")
gelu_fast = _unary("gelu_fast")
gelu_quick = _unary("gelu_quick")
silu_and_mul = _unary("silu_and_mul")


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

__all__ = [
    "gelu",
    "gelu_fast",
    "gelu_new",
    "gelu_quick",
    "gelu_tanh",
    "isa",
    "isa_choices",
    "isa_paths",
    "isa_reason",
    "layers",
    "reset_isa",
    "set_isa",
    "silu",
    "silu_and_mul",
]
