"""Small pure-Python kernel repositories in the Hub layout, written on the fly for fault injection.

They are real repositories (metadata.json, __init__.py, layers.py under build/<variant>/) that
`kernels` loads like any other; each one is broken in exactly one way.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

RAISING_RMSNORM = """
import torch
from torch import nn


class RMSNorm(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("injected fault: this kernel raises when run")
"""

SCALED_RMSNORM = '''
import torch
from torch import nn


class RMSNorm(nn.Module):
    """Correct RMSNorm, computed in float64: a pure-Python kernel that differs from PyTorch."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = hidden_states.to(torch.float64)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (self.weight.to(torch.float64) * x).to(hidden_states.dtype)
'''


# SCALED_RMSNORM declaring that it has no backward: kernelize keeps PyTorch for it in training mode.
NO_BACKWARD_RMSNORM = SCALED_RMSNORM.replace(
    "    def forward(", "    has_backward = False\n\n    def forward(", 1
)


def write_repo(
    root: Path,
    name: str,
    *,
    layers: str = SCALED_RMSNORM,
    init: str = "from . import layers\n",
    variant: str = "torch-cpu",
) -> Path:
    """Write repository `name` under `root` with one build variant; returns the repository path."""
    repo = root / name
    build = repo / "build" / variant
    build.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1((layers + init + variant).encode()).hexdigest()[:10]
    metadata = {
        "id": f"_{name.replace('-', '_')}_{digest}",
        "name": name,
        "version": 1,
        "license": "apache-2.0",
        "python-depends": [],
        "backend": {"type": "cpu" if "cpu" in variant else "cuda"},
    }
    (build / "metadata.json").write_text(json.dumps(metadata))
    (build / "__init__.py").write_text(init)
    (build / "layers.py").write_text(layers)
    return repo
