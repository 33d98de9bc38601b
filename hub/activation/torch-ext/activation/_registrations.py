"""Fake (meta) kernels of the activation ops, registered through torch.library.

With these, torch.compile traces every activation without a graph break (fake tensors get their
shapes from here). The autograd kernels are in C++ (torch-ext/torch_binding.cpp: a Python one,
torch.library.register_autograd, costs ~9 us per call): SiLU-and-mul differentiates with a fused
C++ backward (`silu_and_mul_backward`: one pass instead of eager's nine tensors, no double
backward), the unary activations with ATen's own fused backward kernels (`silu_backward`,
`gelu_backward`), and NewGELU, FastGELU (the tanh GELU, up to a constant rounded at the 11th
digit) and QuickGELU with their formulas in float32, written in ATen ops and so differentiable
again (double backward). The out= forms have no backward: their C++ autograd kernel refuses
inputs that require grad.

Imported once per process per build: `kernels` may execute the package's `__init__` again (the
same build reached by a second path), but this submodule stays in `sys.modules`, so torch.library
never sees a second registration of the same op.
"""

from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix

UNARY = ("silu", "gelu", "gelu_tanh", "gelu_new", "gelu_fast", "gelu_quick")


def _unary_fake(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape)  # contiguous, as the kernel's


def _unary_out_fake(out: torch.Tensor, x: torch.Tensor) -> None:
    return None


def _check_gated(x: torch.Tensor) -> None:
    torch._check(
        x.dim() >= 1 and x.shape[-1] % 2 == 0,
        lambda: f"silu_and_mul: the last dimension must be even, got {tuple(x.shape)}",
    )


def _silu_and_mul_fake(x: torch.Tensor) -> torch.Tensor:
    _check_gated(x)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


def _silu_and_mul_out_fake(out: torch.Tensor, x: torch.Tensor) -> None:
    _check_gated(x)


def _silu_and_mul_backward_fake(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    _check_gated(x)
    return x.new_empty(x.shape)


for _name in UNARY:
    torch.library.register_fake(add_op_namespace_prefix(_name), _unary_fake)
    torch.library.register_fake(add_op_namespace_prefix(_name + "_out"), _unary_out_fake)
torch.library.register_fake(add_op_namespace_prefix("silu_and_mul"), _silu_and_mul_fake)
torch.library.register_fake(add_op_namespace_prefix("silu_and_mul_out"), _silu_and_mul_out_fake)
torch.library.register_fake(add_op_namespace_prefix("silu_and_mul_backward"), _silu_and_mul_backward_fake)
