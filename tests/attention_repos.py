"""Pure-Python attention repositories with flash-attn 2's call contract, written by the tests.

Real `kernels` repositories (built on the fly under `build/torch-cpu`), implemented with torch ops,
so Transformers' own flash-attention wrapper can run them on a CPU. Each call is counted in the
module's `CALLS`, so a test proves the repository's function ran, not PyTorch's own attention.
"""

from __future__ import annotations

from pathlib import Path

from kernel_repos import write_repo

FLASH_ATTN = """
import torch

CALLS = {"flash_attn_func": 0, "flash_attn_varlen_func": 0}


def _attend(q, k, v, softmax_scale, causal):
    # q: [Lq, H, D], k/v: [Lk, Hkv, D]; causal aligned bottom-right as in flash-attn >= 2.1
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * scale
    if causal:
        lq, lk = q.shape[0], k.shape[0]
        keep = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.float()).to(q.dtype)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, **kwargs):
    CALLS["flash_attn_func"] += 1
    return torch.stack([_attend(q[b], k[b], v[b], softmax_scale, causal) for b in range(q.shape[0])])


def flash_attn_varlen_func(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
    dropout_p=0.0, softmax_scale=None, causal=False, **kwargs
):
    CALLS["flash_attn_varlen_func"] += 1
    out = torch.empty_like(q)
    for i in range(len(cu_seqlens_q) - 1):
        qs, qe = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        ks, ke = int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
        out[qs:qe] = _attend(q[qs:qe], k[ks:ke], v[ks:ke], softmax_scale, causal)
    return out
"""

NO_CONTRACT = """
def something_else(x):
    return x
"""


def write_attention_repo(root: Path, name: str = "torch-flash-attn", *, source: str = FLASH_ATTN) -> Path:
    """Write a noarch attention repository `name` under `root` (its functions in `__init__.py`)."""
    return write_repo(root, name, layers="", init=source)
