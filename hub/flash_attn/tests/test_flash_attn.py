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


# (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim): decode, prefill (the row path up to 256 keys,
# the prefill path past them), q != k, head_dim off the vector
SHAPES = [
    (2, 1, 1, 9, 3, 64),
    (1, 7, 7, 9, 3, 64),
    (1, 63, 200, 9, 3, 64),
    (1, 300, 300, 9, 3, 64),
    (1, 3, 40, 6, 2, 48),
]


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


def reference_masked(q, k, v, key_mask, causal):
    """float64 attention on (batch, seqlen, heads, head_dim) with a (batch, seqlen_k) key mask
    (False: no query sees that key) and flash-attn's bottom-right causal alignment; a row that
    sees no key is 0, as the kernel's."""
    q64, k64, v64 = (t.double().transpose(1, 2) for t in (q, k, v))
    groups = q64.shape[1] // k64.shape[1]
    k64, v64 = k64.repeat_interleave(groups, 1), v64.repeat_interleave(groups, 1)
    scores = q64 @ k64.transpose(-1, -2) * q.shape[-1] ** -0.5
    keep = key_mask[:, None, None, :].expand_as(scores)
    if causal:
        lq, lk = q.shape[1], k.shape[1]
        keep = keep & torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)
    probs = scores.masked_fill(~keep, float("-inf")).softmax(-1).nan_to_num(0.0)
    return (probs @ v64).transpose(1, 2)


# (batch, seqlen_q, seqlen_k, heads, kv_heads): decode against a static cache, a decode long
# enough for key splits, a prefill with padding
MASKED = [(2, 1, 40, 9, 3), (1, 1, 3000, 9, 3), (2, 17, 70, 6, 2)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", MASKED)
@pytest.mark.parametrize("causal", [False, True])
def test_key_mask_hides_keys(kernel, dtype, shape, causal):
    """The op's key_mask: a static cache's filled prefix, left padding, holes, and a sequence whose
    every key is masked (its rows are 0); keys beyond the last visible one hold garbage that must
    not leak (NaN in them would poison any sum that read them)."""
    ops = kernel.ops
    b, lq, lk, h, hk = shape
    q = torch.randn(b, lq, h, 64).to(dtype)
    k, v = torch.randn(b, lk, hk, 64).to(dtype), torch.randn(b, lk, hk, 64).to(dtype)
    key_mask = torch.zeros(b, lk, dtype=torch.bool)
    key_mask[0, : lk // 3] = True  # a static cache: the filled prefix
    if b > 1:
        key_mask[1, 5:] = True  # left padding, and a hole
        key_mask[1, lk // 2] = False
    k[0, lk // 3 :], v[0, lk // 3 :] = float("nan"), float("nan")  # the unused tail of a cache
    out, _ = ops.fwd(q, k, v, None, None, None, 64**-0.5, causal, False, key_mask)
    k64, v64 = k.double().nan_to_num(0.0), v.double().nan_to_num(0.0)
    ref = reference_masked(q.double(), k64, v64, key_mask, causal)
    tol = tolerance(dtype)
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)
    hidden = torch.zeros(b, lk, dtype=torch.bool)
    none = ops.fwd(q, k, v, None, None, None, 64**-0.5, causal, False, hidden)[0]
    assert torch.equal(none, torch.zeros_like(none))
    with pytest.raises(RuntimeError, match="key_mask must be"):
        ops.fwd(q, k, v, None, None, None, 1.0, causal, False, key_mask[:, :-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_forward_takes_a_decode_steps_mask(kernel, dtype):
    """Transformers' SDPA mask for one decode token against a static cache, (batch, 1, 1, cache)
    bool, runs the kernel (not SDPA, which would give the same values) and matches float64."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 3
    q = torch.randn(2, 9, 1, 64).to(dtype)  # Transformers' (batch, heads, seqlen, head_dim)
    k, v = torch.randn(2, 3, 48, 64).to(dtype), torch.randn(2, 3, 48, 64).to(dtype)
    mask = torch.zeros(2, 1, 1, 48, dtype=torch.bool)
    mask[0, ..., :20], mask[1, ..., 4:31] = True, True
    out, _ = kernel.attention_forward(module, q, k, v, mask)
    key_mask = mask[:, 0, 0]
    ref = reference_masked(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), key_mask, False)
    tol = tolerance(dtype)
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)
    sdpa, _ = sdpa_attention_forward(module, q, k, v, mask)
    torch.testing.assert_close(out.float(), sdpa.float(), atol=tol, rtol=tol)
    with torch.profiler.profile() as prof:
        kernel.attention_forward(module, q, k, v, mask)
    calls = [e.name for e in prof.events()]
    assert any(name.endswith("::fwd") for name in calls) and not any("scaled_dot_product" in n for n in calls)
