"""CPU rotary position embedding (float32, bfloat16, float16), a drop-in for Transformers'
`apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`."""

import torch

from ._ops import ops

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _reference(q, k, cos, sin, unsqueeze_dim):
    # The eager formula: the correct (slower) path for what the kernel does not cover.
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (_rotate_half(q) * sin), (k * cos) + (_rotate_half(k) * sin)


def apply_rotary(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int = 1,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q * cos + rotate_half(q) * sin (and the same for k), cos/sin unsqueezed at `unsqueeze_dim`.

    Mixed dtypes or an odd head dim take the eager formula, so the result is always what
    Transformers computes. `out=(q_out, k_out)` (contiguous, q's and k's shapes and dtype)
    skips the two allocations.
    """
    tensors = (q, k, cos, sin)
    for t in tensors:
        if not t.is_cpu:
            raise RuntimeError(
                f"apply_rotary: this is a CPU kernel, got a tensor on {t.device}; use PyTorch there"
            )
        if t.dtype not in _DTYPES:
            raise TypeError(
                f"apply_rotary: supports float32, bfloat16 and float16, got {t.dtype}; use PyTorch"
            )
    if len({t.dtype for t in tensors}) > 1 or q.shape[-1] % 2 or q.shape[-1] != cos.shape[-1]:
        q_embed, k_embed = _reference(q, k, cos, sin, unsqueeze_dim)
        if out is None:
            return q_embed, k_embed
        out[0].copy_(q_embed)
        out[1].copy_(k_embed)
        return out
    if out is None:
        return ops.apply_rotary(q, k, cos, sin, unsqueeze_dim)
    ops.apply_rotary_out(out[0], out[1], q, k, cos, sin, unsqueeze_dim)
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

__all__ = ["apply_rotary", "isa", "isa_choices", "isa_paths", "isa_reason", "layers", "reset_isa", "set_isa"]
