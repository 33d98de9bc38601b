"""Fake (meta) kernels and autograd formulas of the rmsnorm ops, registered through torch.library.

With these, torch.compile traces `rms_norm` without a graph break (fake tensors get their shape
and dtype from here, not from running the CPU kernel), and autograd differentiates it with the
fused C++ backward (`rms_norm_backward`) instead of leaving the output without a gradient path.
The out= form has no backward: its C++ autograd kernel refuses inputs that require grad.

Imported once per process per build: `kernels` may execute the package's `__init__` again (the
same build reached by a second path), but this submodule stays in `sys.modules`, so torch.library
never sees a second registration of the same op.
"""

from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix, ops


def _out_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    return x.dtype if x.dtype == weight.dtype else torch.float32


def _check_shapes(x: torch.Tensor, weight: torch.Tensor) -> None:
    torch._check(x.dim() >= 1, lambda: "rms_norm: input must have at least one dimension")
    torch._check(
        weight.dim() == 1 and weight.shape[0] == x.shape[-1],
        lambda: (
            f"rms_norm: weight of shape {tuple(weight.shape)} does not match the last dimension "
            f"of the input {tuple(x.shape)}"
        ),
    )


@torch.library.register_fake(add_op_namespace_prefix("rms_norm"))
def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    _check_shapes(x, weight)
    return x.new_empty(x.shape, dtype=_out_dtype(x, weight))  # contiguous, as the kernel's


@torch.library.register_fake(add_op_namespace_prefix("rms_norm_out"))
def _rms_norm_out_fake(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    _check_shapes(x, weight)


@torch.library.register_fake(add_op_namespace_prefix("rms_norm_backward"))
def _rms_norm_backward_fake(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float, weight_grad: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_shapes(x, weight)
    return x.new_empty(x.shape), weight.new_empty(weight.shape if weight_grad else (0,))


def _setup_context(ctx, inputs: tuple, output: torch.Tensor) -> None:
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
    x, weight = ctx.saved_tensors
    weight_grad = ctx.needs_input_grad[1]
    dx, dw = ops.rms_norm_backward(grad, x, weight, ctx.eps, weight_grad)
    return (dx if ctx.needs_input_grad[0] else None), (dw if weight_grad else None), None


torch.library.register_autograd(add_op_namespace_prefix("rms_norm"), _backward, setup_context=_setup_context)


def _no_double_backward(ctx, *grads: torch.Tensor):
    raise RuntimeError(
        "rms_norm: the fused backward has no backward of its own (double backward); "
        "use PyTorch's RMSNorm where higher-order gradients are needed"
    )


torch.library.register_autograd(
    add_op_namespace_prefix("rms_norm_backward"),
    _no_double_backward,
    setup_context=lambda ctx, inputs, output: None,
)
