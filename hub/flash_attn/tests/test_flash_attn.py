import pytest
import torch
import torch.nn.functional as F


def reference(q, k, v, causal):
    """float64 SDPA on (batch, seqlen, heads, head_dim); causal aligned bottom-right, as flash-attn's."""
    q64, k64, v64 = (t.double().transpose(1, 2) for t in (q, k, v))
    mask = None
    if causal:
        lq, lk = q.shape[1], k.shape[1]
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)
    return F.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask, enable_gqa=True).transpose(1, 2)


def tolerance(dtype):
    return {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]


# (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim): decode, prefill, q != k, head_dim off the vector
SHAPES = [(2, 1, 1, 9, 3, 64), (1, 7, 7, 9, 3, 64), (1, 63, 200, 9, 3, 64), (1, 3, 40, 6, 2, 48)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_matches_sdpa(kernel, dtype, shape, causal):
    b, lq, lk, h, hk, d = shape
    q = torch.randn(b, lq, h, d).to(dtype)
    k, v = torch.randn(b, lk, hk, d).to(dtype), torch.randn(b, lk, hk, d).to(dtype)
    out = kernel.flash_attn_func(q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == dtype
    tol = tolerance(dtype)
    torch.testing.assert_close(out.double(), reference(q, k, v, causal), atol=tol, rtol=tol)


def test_varlen_matches_each_sequence_alone(kernel):
    lengths = [5, 1, 12]
    q, k, v = (torch.randn(sum(lengths), 4, 32) for _ in range(3))
    cu = torch.tensor([0, 5, 6, 18], dtype=torch.int32)
    out = kernel.flash_attn_varlen_func(q, k, v, cu, cu, 12, 12, causal=True)
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        alone = kernel.flash_attn_func(q[None, s:e], k[None, s:e], v[None, s:e], causal=True)[0]
        torch.testing.assert_close(out[s:e], alone)


def test_kvcache_appends_and_attends(kernel):
    q = torch.randn(1, 1, 4, 32)
    k_cache, v_cache = torch.zeros(1, 16, 2, 32), torch.zeros(1, 16, 2, 32)
    k_cache[:, :5], v_cache[:, :5] = torch.randn(1, 5, 2, 32), torch.randn(1, 5, 2, 32)
    k_new, v_new = torch.randn(1, 1, 2, 32), torch.randn(1, 1, 2, 32)
    out = kernel.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=5, causal=True)
    torch.testing.assert_close(k_cache[:, 5], k_new[:, 0])
    ref = reference(q, k_cache[:, :6], v_cache[:, :6], True)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


def reference_with_sinks(q, k, v, sinks, causal):
    """float64 eager attention with one sink logit per head in each softmax's denominator, as
    Transformers' GPT-OSS and DeepSeek-V4 compute it (cat the sink column, softmax, drop it)."""
    q64, k64, v64 = (t.double().transpose(1, 2) for t in (q, k, v))
    groups = q64.shape[1] // k64.shape[1]
    k64, v64 = k64.repeat_interleave(groups, 1), v64.repeat_interleave(groups, 1)
    scores = q64 @ k64.transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        lq, lk = q.shape[1], k.shape[1]
        keep = torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)
        scores = scores.masked_fill(~keep, float("-inf"))
    sink = sinks.double().reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    probs = torch.cat([scores, sink], -1).softmax(-1)[..., :-1]
    return (probs @ v64).transpose(1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_sinks_as_transformers_passes_them(kernel, dtype, shape):
    b, lq, lk, h, hk, d = shape
    q = torch.randn(b, lq, h, d).to(dtype)
    k, v = torch.randn(b, lk, hk, d).to(dtype), torch.randn(b, lk, hk, d).to(dtype)
    sinks = torch.randn(h)
    ref = reference_with_sinks(q, k, v, sinks, True)
    tol = tolerance(dtype)
    out = kernel.flash_attn_func(q, k, v, causal=True, s_aux=sinks)
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)
    cu_q = torch.arange(0, (b + 1) * lq, lq, dtype=torch.int32)
    cu_k = torch.arange(0, (b + 1) * lk, lk, dtype=torch.int32)
    varlen = kernel.flash_attn_varlen_func(
        q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_q, cu_k, lq, lk, causal=True, s_aux=sinks
    )
    torch.testing.assert_close(varlen.double(), ref.flatten(0, 1), atol=tol, rtol=tol)
    if lk < 50 and dtype == torch.float32:  # few keys: a sink takes a share a kernel without sinks loses
        without = kernel.flash_attn_func(q, k, v, causal=True)
        assert (without.double() - ref).abs().max() > 100 * tol


def test_unsupported_options_raise(kernel):
    q = torch.randn(1, 2, 2, 16)
    with pytest.raises(ValueError, match="dropout_p"):
        kernel.flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="window_size"):
        kernel.flash_attn_func(q, q, q, window_size=(4, 0))


def test_backward_raises(kernel):
    q = torch.randn(1, 3, 2, 16, requires_grad=True)
    out = kernel.flash_attn_func(q, q.detach(), q.detach())
    with pytest.raises(RuntimeError, match="forward only"):
        out.sum().backward()
