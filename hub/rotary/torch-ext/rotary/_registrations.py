"""Fake (meta) kernels of the rotary ops, registered through torch.library.

With these, torch.compile traces `apply_rotary` without a graph break. The autograd kernels are in
C++ (torch-ext/torch_binding.cpp: a Python one, torch.library.register_autograd, costs ~9 us per
call): the backward for q and k is the forward kernel run on the gradients with the transposed
rotation, cos and sin get eager's formula; the out= form has no backward and refuses inputs that
require grad.

Imported once per process per build: `kernels` may execute the package's `__init__` again (the
same build reached by a second path), but this submodule stays in `sys.modules`, so torch.library
never sees a second registration of the same op.
"""

from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix


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
