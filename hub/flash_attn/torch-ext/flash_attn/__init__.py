"""CPU flash attention with flash-attn 2's call contract, for Transformers' Hub attention kernels.

Contract (what Transformers' `flash_attention_forward` / `_flash_attention_forward` call, with
flash-attn 2's names, shapes and defaults; Transformers reads the keyword names of
`flash_attn_varlen_func` and `flash_attn_with_kvcache` to decide what it may pass):

- ``flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
  softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False)``
  q (batch, seqlen_q, nheads, headdim), k/v (batch, seqlen_k, nheads_k, headdim) -> out like q;
  with return_attn_probs, ``(out, softmax_lse (batch, nheads, seqlen_q) float32, None)``.
- ``flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
  dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
  alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None)``
  q (total_q, nheads, headdim), k/v (total_k, nheads_k, headdim), cu_seqlens (batch + 1,) int32
  -> out (total_q, nheads, headdim); lse (nheads, total_q).
- ``flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
  cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
  softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
  alibi_slopes=None, num_splits=0, return_softmax_lse=False)``
  q (batch, seqlen_q, nheads, headdim), caches (batch, seqlen_cache, nheads_k, headdim); k/v new
  tokens (batch, seqlen_new, nheads_k, headdim) are written into the caches in place at
  cache_seqlens (int or (batch,) int32) and attended to -> out, or (out, lse) with
  return_softmax_lse.

Semantics: softmax_scale defaults to headdim ** -0.5; nheads must be a multiple of nheads_k
(GQA/MQA: query head h reads KV head h // (nheads // nheads_k), K/V are never expanded); causal
with seqlen_q != seqlen_k is aligned bottom-right (flash-attn >= 2.1): query i sees keys
j <= i + seqlen_k - seqlen_q, and a row that sees no key is 0. float32, bfloat16 and float16 on
CPU, any token/head strides (headdim contiguous), headdim 1 to 256; accumulation in float32.
Deterministic always. Forward only (a backward raises). Not supported, each a one-line
ValueError rather than a different result: dropout_p > 0, window_size other than (-1, -1),
softcap != 0, alibi_slopes, block_table (paged KV), rotary in kvcache, cache_batch_idx,
cache_leftpad.

Attention sinks: every function takes ``s_aux`` (nheads,), as vllm's flash-attn 3 does and as
Transformers' flash glue passes them (it drops sinks for a kernel whose function takes neither
``s_aux`` nor ``learnable_sink``; GPT-OSS and DeepSeek-V4 pass them): one extra logit per head in
each softmax's denominator and none in its numerator, as eager's ``cat([scores, sinks]).softmax()
[..., :-1]``. Applied from the log-sum-exp the op returns: with ``lse`` the row's log-sum-exp of
its scores, the softmax with the sink is the one without, times ``exp(lse) / (exp(lse) +
exp(s_aux))`` = ``sigmoid(lse - s_aux)``, in float32; the returned lse includes the sink.

Op: ``torch.ops.<id>.fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, softmax_scale, causal,
heads_first=False, key_mask=None) -> (out, lse)`` (heads_first: dense q/k/v as (batch, heads,
seqlen, headdim), the output still (batch, seqlen, heads, headdim); key_mask: a dense call's
(batch, seqlen_k) bool, False hiding that key from every query row); ``isa()`` /
``set_isa(name)`` report and force the code path (avx512bf16, avx512, avx2, portable).
"""

from __future__ import annotations

import torch

from ._ops import ops

_NAME = "flash_attn (CPU)"


def _refuse(what: str, hint: str) -> None:
    raise ValueError(f"{_NAME}: {what} is not supported; {hint}")


def _check_options(
    dropout_p: float = 0.0,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
) -> None:
    if dropout_p:
        _refuse(f"dropout_p={dropout_p}", "it is an inference kernel: pass dropout_p=0.0 (model.eval())")
    if tuple(window_size) != (-1, -1):
        _refuse(f"window_size={tuple(window_size)} (sliding window)", "use attn_implementation='sdpa'")
    if softcap:
        _refuse(f"softcap={softcap}", "use attn_implementation='eager' for logit soft-capping")
    if alibi_slopes is not None:
        _refuse("alibi_slopes", "use attn_implementation='eager' for ALiBi")
    if block_table is not None:
        _refuse("block_table (paged KV cache)", "use a contiguous cache with flash_attn_with_kvcache")


def _scale(q: torch.Tensor, softmax_scale: float | None) -> float:
    return float(q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale)


def _with_sinks(
    out: torch.Tensor, lse: torch.Tensor, s_aux: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`out` and `lse` with one sink logit per head added to every softmax's denominator.

    lse is (..., nheads, seqlen) ((nheads, total) for varlen), out (..., seqlen, nheads, headdim); a
    row that sees no key (lse +inf, as flash-attn) keeps its 0.
    """
    if s_aux is None:
        return out, lse
    heads = lse.shape[-2]
    sinks = s_aux.detach().to(device=lse.device, dtype=torch.float32).reshape(-1)
    if sinks.numel() != heads:
        raise ValueError(
            f"{_NAME}: s_aux must hold one sink per query head ({heads}), got {tuple(s_aux.shape)}"
        )
    sinks = sinks.reshape(heads, 1)
    keep = torch.sigmoid(lse - sinks)  # exp(lse) / (exp(lse) + exp(sink)), without overflow
    out = (out.float() * keep.transpose(-1, -2).unsqueeze(-1)).to(out.dtype)
    return out, torch.logaddexp(lse, sinks.expand_as(lse))


def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    s_aux: torch.Tensor | None = None,
):
    """Attention over (batch, seqlen, heads, headdim) tensors; see the module docstring."""
    _check_options(dropout_p, window_size, softcap, alibi_slopes)
    out, lse = ops.fwd(q, k, v, None, None, None, _scale(q, softmax_scale), bool(causal))
    out, lse = _with_sinks(out, lse, s_aux)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    block_table: torch.Tensor | None = None,
    s_aux: torch.Tensor | None = None,
):
    """Attention over packed sequences (total, heads, headdim) cut by cu_seqlens; max_seqlen_* are
    accepted for the contract and not needed (the lengths come from cu_seqlens)."""
    _check_options(dropout_p, window_size, softcap, alibi_slopes, block_table)
    out, lse = ops.fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, None, _scale(q, softmax_scale), bool(causal))
    out, lse = _with_sinks(out, lse, s_aux)
    return (out, lse, None) if return_attn_probs else out


def _append_to_cache(cache: torch.Tensor, new: torch.Tensor, starts: torch.Tensor, name: str) -> None:
    if new.dim() != 4 or new.shape[0] != cache.shape[0] or new.shape[2:] != cache.shape[2:]:
        raise ValueError(
            f"{_NAME}: {name} must be (batch, seqlen_new, nheads_k, headdim) matching the cache "
            f"{tuple(cache.shape)}, got {tuple(new.shape)}"
        )
    n = new.shape[1]
    if int(starts.max()) + n > cache.shape[1]:
        raise ValueError(
            f"{_NAME}: appending {n} tokens at cache_seqlens up to {int(starts.max())} overflows the "
            f"cache of {cache.shape[1]} tokens; allocate a longer cache"
        )
    for b, s in enumerate(starts.tolist()):
        cache[b, s : s + n] = new[b]


def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    rotary_cos: torch.Tensor | None = None,
    rotary_sin: torch.Tensor | None = None,
    cache_seqlens: int | torch.Tensor | None = None,
    cache_batch_idx: torch.Tensor | None = None,
    cache_leftpad: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    rotary_interleaved: bool = True,
    alibi_slopes: torch.Tensor | None = None,
    num_splits: int = 0,
    return_softmax_lse: bool = False,
    s_aux: torch.Tensor | None = None,
):
    """Decode against a KV cache: the keys of each sequence are split over the threads and the
    partial softmaxes merged; see the module docstring."""
    _check_options(0.0, window_size, softcap, alibi_slopes, block_table)
    if rotary_cos is not None or rotary_sin is not None:
        _refuse("rotary_cos/rotary_sin", "apply the rotary embedding before the call")
    if cache_batch_idx is not None or cache_leftpad is not None:
        _refuse("cache_batch_idx/cache_leftpad", "pass a cache whose batch rows are the query's, unpadded")
    batch = q.shape[0]
    seqused = None
    if cache_seqlens is not None:
        seqused = torch.as_tensor(cache_seqlens, dtype=torch.int32).reshape(-1).expand(batch).contiguous()
    if (k is None) != (v is None):
        raise ValueError(f"{_NAME}: give both k and v (new tokens for the cache), or neither")
    if k is not None:
        if seqused is None:
            raise ValueError(f"{_NAME}: appending k/v needs cache_seqlens (where each sequence's cache ends)")
        _append_to_cache(k_cache, k, seqused, "k")
        _append_to_cache(v_cache, v, seqused, "v")
        seqused = seqused + k.shape[1]
    out, lse = ops.fwd(q, k_cache, v_cache, None, None, seqused, _scale(q, softmax_scale), bool(causal))
    out, lse = _with_sinks(out, lse, s_aux)
    return (out, lse) if return_softmax_lse else out


#: keywords that make `attention_forward` answer with SDPA when set (what the kernel does not do)
_SDPA_ONLY = frozenset(("softcap", "position_bias", "s_aux", "cache", "output_attentions"))
_fwd = ops.fwd.default  # the overload itself: skips the packet's lookup on each call


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
):
    """Transformers' attention-interface function (the signature of its `sdpa_attention_forward`),
    running this kernel without Transformers' flash-attention glue.

    Registered under a name with `transformers.AttentionInterface.register(name, attention_forward)`
    and SDPA's mask (`AttentionMaskInterface.register(name, transformers.masking_utils.sdpa_mask)`),
    then `model.set_attn_implementation(name)`, a model calls it with (batch, heads, seqlen,
    headdim) tensors and SDPA's mask. Where SDPA would run without a mask (no padding: a causal
    prefill, or one decode token against a cache), the kernel runs on those tensors as they are
    (the op's heads_first layout), with SDPA's causal semantics (a prefill whose
    keys outnumber its queries keeps the first seqlen_q keys, as `sdpa_attention_forward` does;
    one query token sees every key). One decode token with SDPA's boolean mask (a static cache's
    unused tail, or padding) runs the kernel too, the mask as the op's key_mask: this is every
    step of a compiled decode on a static cache, where SDPA would first expand K and V to every
    query head. Anything else (a mask over several query tokens or a float one, dropout,
    position_bias, attention sinks, a paged cache, softcap, value head_dim != query head_dim) is
    answered by Transformers' own `sdpa_attention_forward`, so the result is always PyTorch's where
    the kernel does not apply. Returns (out (batch, seqlen, heads, headdim), None).

    Why it exists: through `flash_attn_func`, Transformers wraps the kernel in
    `flash_attention_forward`, whose Python (kwargs processing, PEFT dtype check, and for a batch of
    one with position_ids, `_is_packed_sequence`: six small ATen ops reading the position ids)
    costs more than the whole SDPA call at 16 tokens (bench/attention_glue.py).
    """
    # the common call (no mask, a model's own keywords only: position_ids, use_cache, ...) decides
    # in a few attribute reads: this runs 30 times per token and at 16 tokens the op itself takes
    # ~15 us, so every 0.1 us here shows in the row the explorer measures
    qs, ks = query.shape, key.shape
    key_mask = None
    if attention_mask is not None and (
        attention_mask.dtype == torch.bool  # a decode step's boolean mask: which keys its one query sees
        and attention_mask.dim() == 4
        and attention_mask.shape[1] == attention_mask.shape[2] == qs[2] == 1
        and attention_mask.shape[3] == ks[2]
    ):
        key_mask = attention_mask[:, 0, 0].expand(qs[0], -1)
    if (
        (attention_mask is not None and key_mask is None)
        or dropout
        or not (
            not kwargs
            or _SDPA_ONLY.isdisjoint(kwargs)
            or all(kwargs.get(name) is None or kwargs.get(name) is False for name in _SDPA_ONLY)
        )
        or not (ks[-1] == value.shape[-1] == qs[-1] <= 256)
        or qs[1] % ks[1]
    ):
        if kwargs.get("s_aux") is not None:  # SDPA drops sinks: the model's own eager takes them
            return _eager_with_sinks(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    q_len, k_len = qs[2], ks[2]
    causal = (is_causal if is_causal is not None else getattr(module, "is_causal", True)) and q_len > 1
    if causal and k_len > q_len:  # as sdpa_attention_forward: top-left, the first q_len keys
        key, value = key[:, :, :q_len], value[:, :, :q_len]
    scale = qs[-1] ** -0.5 if scaling is None else float(scaling)
    # heads_first: no transposes
    return _fwd(query, key, value, None, None, None, scale, bool(causal), True, key_mask)[0], None


def _eager_with_sinks(module, query, key, value, attention_mask, dropout, scaling, **kwargs):
    """A call with attention sinks (`s_aux`) answered by the model's own `eager_attention_forward`:
    Transformers' `sdpa_attention_forward` ignores sinks, so answering it there would be silently
    wrong (GPT-OSS, DeepSeek-V4); a model module without one is refused in one line."""
    import sys

    eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if eager is None:
        raise ValueError(
            f"{_NAME}: this call passes attention sinks (s_aux), which SDPA ignores, and "
            f"{type(module).__module__} has no eager_attention_forward to answer it; use the model's "
            "eager attention for it"
        )
    q_len, k_len = query.shape[2], key.shape[2]
    if attention_mask is None and getattr(module, "is_causal", True) and q_len > 1:
        # SDPA's mask function leaves a plain causal mask out (SDPA's is_causal applies it); the
        # model's eager reads its mask from the call, so without one it attended to later tokens
        later = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).triu(k_len - q_len + 1)
        attention_mask = torch.zeros(q_len, k_len, dtype=query.dtype, device=query.device)
        attention_mask = attention_mask.masked_fill(later, torch.finfo(query.dtype).min)[None, None]
    return eager(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


def isa() -> str:
    """The code path most ops run (avx512bf16, avx512, avx2 or portable): each op runs the fastest
    this CPU runs for it, timed once per machine at its first use, unless KERNEL_EXPLORER_ISA or
    `set_isa` chose one for all (see `isa_choices`)."""
    return ops.isa()


def isa_reason() -> str:
    """Why `isa()` runs, in one line: the measured ratios against the other paths, or who forced it."""
    return ops.isa_reason()


def isa_paths() -> list[str]:
    """The code paths this build carries and this CPU runs, widest first."""
    return list(ops.isa_paths())


def isa_choices() -> list[str]:
    """Each op's own choice, one line per op and dtype ("silu bfloat16: avx512bf16 formula: ..."):
    every op times the paths (and, where it has several, its forms) on its own workload."""
    return list(ops.isa_choices())


def set_isa(name: str) -> str:
    """Put every op on one code path (tests, benchmarks, comparing paths); one of `isa_paths()`,
    optionally with a form ("avx512bf16 formula") for the ops that have several."""
    return ops.set_isa(name)


def reset_isa() -> str:
    """Undo `set_isa`: back to the measured (or KERNEL_EXPLORER_ISA's) path; returns it."""
    return ops.reset_isa()


from . import _registrations  # noqa: E402, F401  (fake kernel + a backward that refuses)

#: forward only, as kernels' layer classes declare it: the explorer keeps PyTorch's attention when
#: training (a backward through the op raises)
has_backward = False

__all__ = [
    "attention_forward",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "isa",
    "isa_choices",
    "isa_paths",
    "isa_reason",
    "reset_isa",
    "set_isa",
]
