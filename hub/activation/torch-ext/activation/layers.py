"""Layers for `kernelize`: forwards that replace Transformers' activation classes.

As `kernels` requires, these classes have no `__init__` and only `has_backward` /
`can_torch_compile` as class attributes; the forward signatures match the originals.
"""

import torch
from torch import nn

from . import gelu, gelu_fast, gelu_new, gelu_quick, gelu_tanh, silu, silu_and_mul


class Silu(nn.Module):
    """transformers.activations.SiLUActivation"""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return silu(input)


class SiluAndMul(nn.Module):
    """silu(x[..., :d]) * x[..., d:], the gated MLP activation."""

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)


class Gelu(nn.Module):
    """transformers.activations.GELUActivation (exact erf GELU)"""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return gelu(input)


class GeluTanh(nn.Module):
    """transformers.activations.GELUTanh (F.gelu with approximate="tanh")"""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return gelu_tanh(input)


class NewGELU(nn.Module):
    """transformers.activations.NewGELUActivation"""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return gelu_new(input)


class FastGELU(nn.Module):
    """transformers.activations.FastGELUActivation"""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return gelu_fast(input)


class QuickGELU(nn.Module):
    """transformers.activations.QuickGELUActivation"""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return gelu_quick(input)
