"""Fake (meta) kernels and autograd formulas of the activation ops, registered through torch.library.

With these, torch.compile traces every activation without a graph break, and autograd
differentiates them: SiLU-and-mul with a fused C++ backward (`silu_and_mul_backward`: one pass
instead of eager's nine tensors), the unary activations with ATen's own fused backward kernels
(`silu_backward`, `gelu_backward`), and NewGELU, FastGELU (the tanh GELU, up to a constant
rounded at the 11th digit) and QuickGELU with their formulas in float32. These composite formulas
are differentiable again, so double backward works for the unary ops. The out= forms have no
backward: their C++ autograd kernel refuses inputs that require grad.

Imported once per process per build: `kernels` may execute the package's `__init__` again (the
same build reached by a second path), but this submodule stays in `sys.modules`, so torch.library
never sees a second registration of the same op.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._ops import add_op_namespace_prefix, ops

_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
UNARY = ("silu", "gelu", "gelu_tanh", "gelu_new", "gelu_fast", "gelu_quick")
_aten = torch.ops.aten


def _tanh_gelu_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """d/dx 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), as s + x u' s (1 - s) with
    s = sigmoid(2u) = (1 + tanh(u)) / 2: ATen's gelu_backward forms 1 - tanh(u)^2, which cancels
    where tanh saturates (12 ulp off in float32 at |x| ~ 3), and 1 - s here is sigmoid(-2u),
    computed directly. In float32, for every input dtype (rounded once at the end)."""
    xf = x.float()
    x2 = xf * xf
    two_u = (2 * _SQRT_2_OVER_PI) * xf * (1 + 0.044715 * x2)
    s = torch.sigmoid(two_u)
    slope = (2 * _SQRT_2_OVER_PI) * xf * (1 + 3 * 0.044715 * x2)
    return (grad.float() * (s + slope * s * torch.sigmoid(-two_u))).to(x.dtype)


def _gelu_quick_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    s = torch.sigmoid(1.702 * xf)
    return (grad.float() * (s + 1.702 * xf * s * (1 - s))).to(x.dtype)


BACKWARD: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "silu": lambda grad, x: _aten.silu_backward(grad, x),
    "gelu": lambda grad, x: _aten.gelu_backward(grad, x, approximate="none"),
    "gelu_tanh": lambda grad, x: _aten.gelu_backward(grad, x, approximate="tanh"),
    "gelu_new": _tanh_gelu_backward,
    "gelu_fast": _tanh_gelu_backward,
    "gelu_quick": _gelu_quick_backward,
    "silu_and_mul": lambda grad, x: ops.silu_and_mul_backward(grad, x),
}


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


def _save_input(ctx, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])


def _autograd(name: str) -> Callable:
    formula = BACKWARD[name]

    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return formula(grad, x)

    backward.__name__ = f"{name}_backward"
    return backward


def _no_double_backward(ctx, *grads: torch.Tensor):
    raise RuntimeError(
        "silu_and_mul: the fused backward has no backward of its own (double backward); "
        "use PyTorch's formula where higher-order gradients are needed"
    )


for _name in UNARY:
    torch.library.register_fake(add_op_namespace_prefix(_name), _unary_fake)
    torch.library.register_fake(add_op_namespace_prefix(_name + "_out"), _unary_out_fake)
torch.library.register_fake(add_op_namespace_prefix("silu_and_mul"), _silu_and_mul_fake)
torch.library.register_fake(add_op_namespace_prefix("silu_and_mul_out"), _silu_and_mul_out_fake)
torch.library.register_fake(add_op_namespace_prefix("silu_and_mul_backward"), _silu_and_mul_backward_fake)
for _name in (*UNARY, "silu_and_mul"):
    torch.library.register_autograd(
        add_op_namespace_prefix(_name), _autograd(_name), setup_context=_save_input
    )
torch.library.register_autograd(
    add_op_namespace_prefix("silu_and_mul_backward"),
    _no_double_backward,
    setup_context=lambda ctx, inputs, output: None,
)
