"""Layers for `kernelize`: a forward for Transformers' LlamaRMSNorm (uses its `weight` and
`variance_epsilon`; no `__init__`, as `kernels` requires)."""

import torch
from torch import nn

from . import rms_norm


class RMSNorm(nn.Module):
    """transformers.models.llama.modeling_llama.LlamaRMSNorm (and T5LayerNorm-style norms)."""

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)
