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

# Passes a trial on one sequence (the probe's), then raises on a batch: a fault only a forward shows.
RAISING_ON_BATCH_RMSNORM = """
import torch
from torch import nn

RAN = []  # ids of the modules this kernel ran on (a pure-Python kernel calls no ops of its own)


class RMSNorm(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        RAN.append(id(self))
        if hidden_states.shape[0] > 1:
            raise RuntimeError("injected fault: this kernel raises on batches")
        x = hidden_states.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(hidden_states.dtype)
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


# A repository in kernel-builder's standard format, as its authors write it: RMSNorm with a
# portable section and an AVX2 section (its own cxx-flags), chosen at run time in the binding, and
# a CUDA section this machine cannot build. The kernel sources are plain C++ (quick to compile).
_PEER_KERNEL = """
#include <cmath>
#include <cstdint>
void rms_norm_{isa}(const float* x, const float* w, float* y, int64_t rows, int64_t hidden, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * hidden;
    double sum = 0;
    for (int64_t i = 0; i < hidden; ++i) sum += double(xr[i]) * xr[i];
    float scale = 1.f / std::sqrt(float(sum / hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i) y[r * hidden + i] = w[i] * (xr[i] * scale);
  }
}
"""
_PEER_BINDING = """
#include <torch/library.h>
#include <ATen/ATen.h>
#include "registration.h"
#include "torch_binding.h"

#if defined(__x86_64__)
static bool use_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#else
static bool use_avx2() { return false; }
#endif

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat).contiguous(), wf = weight.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(xf);
  int64_t hidden = x.size(-1), rows = x.numel() / hidden;
#if defined(__x86_64__)
  if (use_avx2()) {
    rms_norm_avx2(xf.data_ptr<float>(), wf.data_ptr<float>(), out.data_ptr<float>(), rows, hidden, eps);
    return out.to(x.scalar_type());
  }
#endif
  rms_norm_portable(xf.data_ptr<float>(), wf.data_ptr<float>(), out.data_ptr<float>(), rows, hidden, eps);
  return out.to(x.scalar_type());
}

std::string path() { return use_avx2() ? "avx2" : "portable"; }

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  ops.def("path() -> str", &path);
#if defined(CPU_KERNEL)
  ops.impl("rms_norm", c10::DeviceType::CPU, &rms_norm);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
"""
_PEER_HEADER = """
#pragma once
#include <cstdint>
void rms_norm_portable(const float* x, const float* w, float* y, int64_t rows, int64_t hidden, float eps);
void rms_norm_avx2(const float* x, const float* w, float* y, int64_t rows, int64_t hidden, float eps);
"""
_PEER_INIT = '''
import torch

from ._ops import ops
from . import layers


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return ops.rms_norm(x, weight, eps)


def path() -> str:
    """The code path the binding chose at run time: avx2 or portable."""
    return ops.path()


__all__ = ["layers", "path", "rms_norm"]
'''
_PEER_LAYERS = """
import torch
from torch import nn

from ._ops import ops


class RMSNorm(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return ops.rms_norm(hidden_states, self.weight, self.variance_epsilon)
"""
PEER_BUILD_TOML = """
[general]
name = "{name}"
version = 1
license = "Apache-2.0"
backends = ["cpu", "cuda"]

[general.hub]
repo-id = "someone/{name}"

[torch]
src = ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"]

[kernel.rms_norm_cpu]
backend = "cpu"
depends = ["torch"]
src = ["rms_norm_cpu/rms_norm_portable.cpp"]

[kernel.rms_norm_avx2]
backend = "cpu"
depends = ["torch"]
src = ["rms_norm_avx2/rms_norm_avx2.cpp"]
cxx-flags = ["-mavx2", "-mfma"]

[kernel.rms_norm_cuda]
backend = "cuda"
depends = ["torch"]
src = ["rms_norm_cuda/rms_norm.cu"]
"""


def write_standard_repo(root: Path, name: str = "peer-rmsnorm") -> Path:
    """A kernel-builder repository with several [kernel.*] sections (sources, not built)."""
    python_name = name.replace("-", "_")
    files = {
        "build.toml": PEER_BUILD_TOML.format(name=name),
        "torch-ext/torch_binding.cpp": _PEER_BINDING,
        "torch-ext/torch_binding.h": _PEER_HEADER,
        "rms_norm_cpu/rms_norm_portable.cpp": _PEER_KERNEL.replace("{isa}", "portable"),
        "rms_norm_avx2/rms_norm_avx2.cpp": _PEER_KERNEL.replace("{isa}", "avx2"),
        "rms_norm_cuda/rms_norm.cu": "// CUDA: not built on a CPU machine\n",
        f"torch-ext/{python_name}/__init__.py": _PEER_INIT,
        f"torch-ext/{python_name}/layers.py": _PEER_LAYERS,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def write_noarch_repo(root: Path, name: str = "py-rmsnorm") -> Path:
    """A Python-only kernel-builder repository ([torch-noarch])."""
    python_name = name.replace("-", "_")
    (root / "torch-ext" / python_name).mkdir(parents=True, exist_ok=True)
    (root / "build.toml").write_text(
        f'[general]\nname = "{name}"\nversion = 1\nlicense = "MIT"\nbackends = ["cpu"]\n\n[torch-noarch]\n'
    )
    (root / "torch-ext" / python_name / "__init__.py").write_text("from . import layers\n")
    (root / "torch-ext" / python_name / "layers.py").write_text(SCALED_RMSNORM)
    return root
