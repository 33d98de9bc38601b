"""Layers for `kernelize`: `apply_rotary_transformers` replaces Transformers' `apply_rotary_pos_emb`
in the function form that `use_kernelized_func` attaches to attention modules (same signature)."""

import torch
from torch import nn

from . import apply_rotary


class apply_rotary_transformers(nn.Module):
    """transformers' apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)"""

    has_backward = True
    can_torch_compile = True

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim=1
    ):
        return apply_rotary(q, k, cos, sin, unsqueeze_dim)
