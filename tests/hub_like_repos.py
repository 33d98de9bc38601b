"""Kernel repositories that behave like real Hub kernels do, in kernel-builder's source format.

Each one reproduces, in a few lines, a behaviour seen in an unmodified kernels-community repository
built for this CPU (see DESIGN.md, "How real Hub kernels behave"); the project's builder builds
them (`kernel-explorer build PATH`) and the real `kernels` loader loads them:

- `write_repacking_moe`: megablocks' CPU layer. Its build.toml names the Hub repository
  kernels-community/megablocks, its CPU class has another name (`CPUMegaBlocksMoeMLP`) than the
  layer name Transformers' GPT-OSS marks (`MegaBlocksMoeMLP`), and on its first forward it repacks
  the experts' weights in place (transposed, bfloat16) and sets a flag on the module.
- `write_repacking_rmsnorm`: the same repacking in a layer of the Llama family (weights reshaped
  and converted to bfloat16 on first use).
- `write_op_without_cpu_kernel`: a layer calling an op the repository registers with a kernel for
  CUDA only (flash-attn2's `fwd`).
- `write_varlen_only_attention`: flash-attn2's CPU build: only `flash_attn_varlen_func` runs on the
  CPU and it refuses float32; `flash_attn_func` calls `fwd`, which has no CPU kernel.
- `write_missing_dependency`: a package that imports a module this machine lacks (megablocks
  imports `triton`).

Ops are registered with `torch.library` from Python, which leaves the dispatcher exactly as a
C++ `TORCH_LIBRARY` without a CPU `impl` does (a registered op with no kernel for the backend).
"""

from __future__ import annotations

from pathlib import Path

MISSING_MODULE = "kx_missing_dependency"

_REGISTER_OPS = """
import torch

NAMESPACE = __name__.split(".")[0]  # kernels imports the package under its metadata id
_library = torch.library.Library(NAMESPACE, "DEF")
_library.define("fwd(Tensor x) -> Tensor")
_library.define("varlen_fwd(Tensor x) -> Tensor")


def _identity(x):
    return x.clone()


# fwd has a kernel for CUDA only, as flash-attn2's CPU build: calling it on a CPU tensor raises
_library.impl("fwd", _identity, "CUDA")
_library.impl("varlen_fwd", _identity, "CPU")
ops = getattr(torch.ops, NAMESPACE)
"""


def _write(root: Path, name: str, files: dict[str, str], *, repo_id: str | None = None) -> Path:
    """A Python-only kernel-builder repository `name` under `root` (`[torch-noarch]`)."""
    repo = root / name
    package = repo / "torch-ext" / name.replace("-", "_")
    package.mkdir(parents=True, exist_ok=True)
    hub = f'\n[general.hub]\nrepo-id = "{repo_id}"\n' if repo_id else ""
    (repo / "build.toml").write_text(
        f'[general]\nname = "{name}"\nversion = 1\nlicense = "Apache-2.0"\nbackends = ["cpu"]\n'
        f"{hub}\n[torch-noarch]\n"
    )
    for relative, text in files.items():
        (package / relative).write_text(text)
    return repo


_MOE_LAYERS = '''
import torch
import torch.nn.functional as F
from torch import nn


class CPUMegaBlocksMoeMLP(nn.Module):
    """GPT-OSS's MoE block as megablocks' CPU layer computes it, weights packed on first use."""

    can_torch_compile = False

    def forward(self, hidden_states):
        experts = self.experts
        if not getattr(experts, "packed_weight", False):  # repack in place, as megablocks does
            for weight in (experts.gate_up_proj, experts.down_proj):
                weight.data = weight.data.transpose(-1, -2).contiguous().to(torch.bfloat16)
            experts.packed_weight = True
        batch, length, hidden = hidden_states.shape
        x = hidden_states.reshape(-1, hidden)
        _, scores, indices = self.router(x)
        out = torch.zeros_like(x)
        for slot in range(indices.shape[1]):
            for expert in indices[:, slot].unique().tolist():
                rows = (indices[:, slot] == expert).nonzero().squeeze(-1)
                gate_up_weight = experts.gate_up_proj[expert].float()
                gate_up = F.linear(x[rows], gate_up_weight, experts.gate_up_proj_bias[expert])
                y = experts._apply_gate(gate_up)
                y = F.linear(y, experts.down_proj[expert].float(), experts.down_proj_bias[expert])
                out.index_add_(0, rows, y * scores[rows, slot, None])
        return out.reshape(batch, length, hidden), scores


class MegaBlocksMoeMLP(nn.Module):
    """The CUDA class: Transformers maps it for cuda, rocm and xpu; never for the CPU."""

    def forward(self, hidden_states):
        raise RuntimeError("megablocks' CUDA layer needs a GPU")
'''

_REPACKING_RMSNORM = '''
import torch
from torch import nn

RAN = []  # ids of the modules this kernel ran on (a pure-Python kernel calls no ops of its own)


class RMSNorm(nn.Module):
    """RMSNorm that packs its weight on first use: two rows of bfloat16, and a flag."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        RAN.append(id(self))
        if not getattr(self, "packed_weight", False):
            self.weight.data = self.weight.data.to(torch.bfloat16).reshape(2, -1)
            self.packed_weight = True
        x = hidden_states.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (self.weight.reshape(-1).to(torch.float32) * x).to(hidden_states.dtype)
'''

_OP_RMSNORM = """
import torch
from torch import nn

from ._registration import ops


class RMSNorm(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return ops.fwd(hidden_states)  # no CPU kernel: NotImplementedError on this machine
"""

_VARLEN_ATTENTION = """
import torch

from ._registration import ops


def _refuse(q):
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError("FlashAttention only support fp16 and bf16 data type")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, **kwargs):
    _refuse(q)
    return ops.fwd(q)  # no CPU kernel


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **kwargs):
    _refuse(q)
    return ops.varlen_fwd(q)
"""


def write_repacking_moe(root: Path) -> Path:
    return _write(
        root,
        "megablocks",
        {"__init__.py": "from . import layers\n", "layers.py": _MOE_LAYERS},
        repo_id="kernels-community/megablocks",
    )


def write_repacking_rmsnorm(root: Path) -> Path:
    return _write(
        root, "packing-rmsnorm", {"__init__.py": "from . import layers\n", "layers.py": _REPACKING_RMSNORM}
    )


def write_op_without_cpu_kernel(root: Path) -> Path:
    files = {
        "__init__.py": "from . import layers\nfrom ._registration import ops\n",
        "_registration.py": _REGISTER_OPS,
        "layers.py": _OP_RMSNORM,
    }
    return _write(root, "cuda-only-rmsnorm", files)


def write_varlen_only_attention(root: Path) -> Path:
    files = {
        "__init__.py": "from ._registration import ops\nfrom .attention import *  # noqa: F403\n",
        "_registration.py": _REGISTER_OPS,
        "attention.py": _VARLEN_ATTENTION,
    }
    return _write(root, "varlen-attention", files)


def write_missing_dependency(root: Path) -> Path:
    files = {
        "__init__.py": f"import {MISSING_MODULE}  # noqa: F401\n\nfrom . import layers\n",
        "layers.py": _REPACKING_RMSNORM,
    }
    return _write(root, "needs-dependency", files)


def tiny_gpt_oss(seed: int = 0):  # type: ignore[no-untyped-def]
    """A randomly initialised GPT-OSS of two layers (its MLP is marked `MegaBlocksMoeMLP`)."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    torch.manual_seed(seed)
    config = GptOssConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=128,
        layer_types=["full_attention", "full_attention"],
        attn_implementation="eager",
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    model = GptOssForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "experts" in name or "router" in name:
                parameter.normal_(0, 0.05)
    return model


def tiny_qwen3_moe(seed: int = 0, vocab_size: int = 128):  # type: ignore[no-untyped-def]
    """A randomly initialised Qwen3-MoE of two layers, 4 experts choose 2 (a `Qwen3MoeExperts` each)."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    config = Qwen3MoeConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=128,
    )
    return Qwen3MoeForCausalLM(config).eval()


def tiny_mixtral(seed: int = 0):  # type: ignore[no-untyped-def]
    """A randomly initialised Mixtral of two layers, 4 experts choose 2 (a `MixtralExperts` each)."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(seed)
    config = MixtralConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=128,
    )
    return MixtralForCausalLM(config).eval()
