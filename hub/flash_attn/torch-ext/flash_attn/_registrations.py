"""Fake (meta) kernel of the attention op, registered through torch.library.

With it, torch.compile traces `fwd` without a graph break (fake tensors get their shapes from
here). The autograd entry is in C++ (torch-ext/torch_binding.cpp: a Python one costs ~9 us per call): a
forward with inputs that require grad runs, and a backward through it raises.

Imported once per process per build: `kernels` may execute the package's `__init__` again, but
this submodule stays in `sys.modules`, so torch.library never sees a second registration.
"""

from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix


@torch.library.register_fake(add_op_namespace_prefix("fwd"))
def _fwd_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor | None,
    cu_seqlens_k: torch.Tensor | None,
    seqused_k: torch.Tensor | None,
    softmax_scale: float,
    causal: bool,
    heads_first: bool = False,
    key_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    varlen = cu_seqlens_q is not None
    torch._check(not (heads_first and varlen), lambda: "flash_attn: heads_first takes dense tensors")
    if heads_first:
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    torch._check(q.dim() == (3 if varlen else 4), lambda: f"flash_attn: q has shape {tuple(q.shape)}")
    torch._check(q.shape[-2] % k.shape[-2] == 0, lambda: "flash_attn: heads must be a multiple of kv heads")
    lse_shape = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    return q.new_empty(q.shape), q.new_empty(lse_shape, dtype=torch.float32)
