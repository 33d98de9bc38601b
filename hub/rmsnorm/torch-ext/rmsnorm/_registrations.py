"""Fake (meta) kernels of the rmsnorm ops, registered through torch.library.

With these, torch.compile traces `rms_norm` without a graph break (fake tensors get their shape
and dtype from here, not from running the CPU kernel). The autograd kernels are in C++
(torch-ext/torch_binding.cpp: a Python one, torch.library.register_autograd, costs ~9 us per
call): `rms_norm`'s backward is the fused `rms_norm_backward`, which refuses a double backward;
the out= form has no backward and refuses inputs that require grad.

Imported once per process per build: `kernels` may execute the package's `__init__` again (the
same build reached by a second path), but this submodule stays in `sys.modules`, so torch.library
never sees a second registration of the same op.
"""

from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix


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
