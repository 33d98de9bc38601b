"""Fake (meta) kernel and autograd formula of the rotary op, registered through torch.library.

The rotation is linear in q and k, and its transpose is the same rotation with sin replaced by
-cat(sin[..., d/2:], sin[..., :d/2]): so the backward for q and k is the forward kernel itself, run
on the gradients, with the same roundings eager's autograd makes. Gradients for cos and sin (rarely
wanted: they come from the position embedding) use the eager formula, and only then are q and k
kept for the backward. The out= form has no backward: its C++ autograd kernel refuses inputs that
require grad.

Imported once per process per build: `kernels` may execute the package's `__init__` again (the
same build reached by a second path), but this submodule stays in `sys.modules`, so torch.library
never sees a second registration of the same op.
"""

from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix, ops


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _check(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor) -> None:
    torch._check(
        q.shape[-1] % 2 == 0 and q.shape[-1] == cos.shape[-1] and k.shape[-1] == cos.shape[-1],
        lambda: (
            f"apply_rotary: the last dimension must be even and match cos/sin, got "
            f"{tuple(q.shape)} and {tuple(cos.shape)}"
        ),
    )


@torch.library.register_fake(add_op_namespace_prefix("apply_rotary"))
def _apply_rotary_fake(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    _check(q, k, cos)
    return q.new_empty(q.shape), k.new_empty(k.shape)  # contiguous, as the kernel's


@torch.library.register_fake(add_op_namespace_prefix("apply_rotary_out"))
def _apply_rotary_out_fake(
    q_out: torch.Tensor,
    k_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int,
) -> None:
    _check(q, k, cos)


def _setup_context(ctx, inputs: tuple, output: tuple[torch.Tensor, torch.Tensor]) -> None:
    q, k, cos, sin, unsqueeze_dim = inputs
    ctx.unsqueeze_dim = unsqueeze_dim
    ctx.trig_grad = cos.requires_grad or sin.requires_grad
    if ctx.trig_grad:
        ctx.save_for_backward(cos, sin, q, k)
    else:
        ctx.save_for_backward(cos, sin)


def _backward(ctx, grad_q: torch.Tensor, grad_k: torch.Tensor) -> tuple:
    cos, sin, *qk = ctx.saved_tensors
    dim = ctx.unsqueeze_dim
    need_q, need_k, need_cos, need_sin = ctx.needs_input_grad[:4]
    dq = dk = dcos = dsin = None
    if need_q or need_k:
        half = sin.shape[-1] // 2
        sin_t = -torch.cat((sin[..., half:], sin[..., :half]), dim=-1)
        dq, dk = ops.apply_rotary(grad_q, grad_k, cos, sin_t, dim)
    if need_cos or need_sin:
        q, k = qk
        shape = cos.unsqueeze(dim).shape

        def reduce(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return (a.sum_to_size(shape) + b.sum_to_size(shape)).squeeze(dim)

        if need_cos:
            dcos = reduce(grad_q * q, grad_k * k)
        if need_sin:
            dsin = reduce(grad_q * _rotate_half(q), grad_k * _rotate_half(k))
    return (dq if need_q else None), (dk if need_k else None), dcos, dsin, None


torch.library.register_autograd(
    add_op_namespace_prefix("apply_rotary"), _backward, setup_context=_setup_context
)
