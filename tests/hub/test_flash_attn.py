"""The bundled CPU attention repository (hub/flash_attn) against float64 attention, on every
compiled ISA path, loaded through kernels' real loader; its flash-attn 2 call contract; its bad
inputs; and Transformers' own flash-attention wrapper running it inside a model.

Accuracy rule (as for the other bundled kernels): the kernel's error against a float64 run of the
same inputs is never more than twice SDPA's error in the input dtype (or a floor of one ulp of
the output's magnitude).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim): odd lengths, q != k, GQA 9/3, MQA,
# head_dim 64 and 128, and head_dims off the vector width (the generic tiles). Tasks that see up to
# 256 keys x 64 head_dim take the row path, longer ones the prefill path: 300 tokens causal splits
# between them by query block, 140 keys at head_dim 128 take the prefill path with few rows.
SHAPES = [
    (2, 1, 1, 9, 3, 64),
    (1, 7, 7, 9, 3, 64),
    (2, 63, 63, 9, 3, 128),
    (1, 65, 65, 8, 1, 64),
    (1, 200, 200, 9, 3, 64),
    (1, 63, 200, 9, 3, 64),
    (2, 65, 7, 4, 2, 128),
    (1, 1, 511, 9, 3, 64),
    (1, 3, 40, 6, 2, 48),
    (1, 17, 30, 2, 2, 80),
    (1, 300, 300, 9, 3, 64),
    (1, 20, 140, 4, 2, 128),
]


def _rand(*shape: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _qkv(b: int, lq: int, lk: int, h: int, hk: int, d: int, dtype: torch.dtype):
    """(batch, seqlen, heads, head_dim) views of (batch, heads, seqlen, head_dim) tensors, as
    Transformers' wrapper passes them (non-contiguous)."""
    q = _rand(b, h, lq, d, dtype=dtype, seed=1).transpose(1, 2)
    k = _rand(b, hk, lk, d, dtype=dtype, seed=2).transpose(1, 2)
    v = _rand(b, hk, lk, d, dtype=dtype, seed=3).transpose(1, 2)
    return q, k, v


def _sdpa(q, k, v, causal: bool, dtype: torch.dtype, scale: float | None = None) -> torch.Tensor:
    """SDPA in `dtype` with flash-attn's bottom-right causal mask, (batch, seqlen, heads, d)."""
    q, k, v = (t.to(dtype).transpose(1, 2) for t in (q, k, v))
    lq, lk = q.shape[2], k.shape[2]
    mask = None
    if causal:
        mask = torch.arange(lk)[None] <= torch.arange(lq)[:, None] + lk - lq
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    return out.transpose(1, 2)


def _assert_accurate(out: torch.Tensor, q, k, v, causal: bool, scale: float | None = None) -> None:
    exact = _sdpa(q, k, v, causal, torch.float64, scale)
    assert out.dtype == q.dtype and out.shape == q.shape
    seen = ~exact.isnan()  # rows with no visible key (causal, seqlen_q > seqlen_k) are 0 here
    assert torch.all(out[~seen] == 0)
    if not seen.any():
        return
    err = (out.double() - exact)[seen].abs().max().item()
    err_sdpa = (_sdpa(q, k, v, causal, q.dtype, scale).double() - exact)[seen].abs().max().item()
    floor = torch.finfo(q.dtype).eps * exact[seen].abs().max().item()
    assert err <= 2 * max(err_sdpa, floor), (err, err_sdpa)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flash_attn_func_matches_float64(hub: dict, isa: str, dtype: torch.dtype) -> None:
    fa = hub["flash_attn"]
    for shape in SHAPES:
        for causal in (False, True):
            q, k, v = _qkv(*shape, dtype=dtype)
            _assert_accurate(fa.flash_attn_func(q, k, v, causal=causal), q, k, v, causal)


def test_softmax_scale_and_lse(hub: dict) -> None:
    fa = hub["flash_attn"]
    q, k, v = _qkv(1, 9, 30, 4, 2, 64, torch.float32)
    out, lse, probs = fa.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True, return_attn_probs=True)
    _assert_accurate(out, q, k, v, True, scale=0.3)
    assert probs is None and lse.shape == (1, 4, 9) and lse.dtype == torch.float32
    scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double().repeat_interleave(2, 2)) * 0.3
    mask = torch.arange(30)[None] <= torch.arange(9)[:, None] + 21
    want = scores.masked_fill(~mask, float("-inf")).logsumexp(-1)
    torch.testing.assert_close(lse.double(), want, rtol=1e-5, atol=1e-5)


def test_causal_rows_without_keys_are_zero(hub: dict) -> None:
    """seqlen_q > seqlen_k, bottom-right aligned: the first rows see no key (flash-attn >= 2.1)."""
    q, k, v = _qkv(1, 10, 4, 2, 1, 64, torch.float32)
    out = hub["flash_attn"].flash_attn_func(q, k, v, causal=True)
    assert torch.all(out[:, :6] == 0) and torch.all(out[:, 6:].abs().sum(-1) > 0)
    _assert_accurate(out, q, k, v, True)


def test_a_causal_row_gives_its_future_keys_no_weight_at_all(hub: dict, isa: str) -> None:
    """Masked keys weigh exactly 0, on every code path: a row whose visible values are 0 reads 0
    however large the values it must not see. The AVX2 exp once gave -inf scores a weight of
    1.6e-38 (its clamp), so such a row read 1.6e-8 here; in a tiny random Apertus a zero token's
    attention read 4e-39 and two RMSNorms made it 2e-3 of the logits."""
    q, k, v = _qkv(1, 33, 33, 2, 1, 64, torch.float32)
    v = v.clone()
    v[:, :16] = 0
    v[:, 16:] = 1e30
    out = hub["flash_attn"].flash_attn_func(q, k, v.contiguous(), causal=True)
    assert torch.equal(out[:, :16], torch.zeros_like(out[:, :16]))
    assert torch.all(out[:, 16:].abs().amax(-1) > 1e27)  # the rows that may see them do


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_varlen_matches_each_sequence(hub: dict, isa: str, dtype: torch.dtype) -> None:
    fa = hub["flash_attn"]
    lens_q, lens_k = [1, 7, 63, 65, 200], [1, 9, 63, 130, 200]
    q = _rand(sum(lens_q), 9, 64, dtype=dtype, seed=4)
    k = _rand(sum(lens_k), 3, 64, dtype=dtype, seed=5)
    v = _rand(sum(lens_k), 3, 64, dtype=dtype, seed=6)
    cu_q = F.pad(torch.tensor(lens_q).cumsum(0), (1, 0)).to(torch.int32)
    cu_k = F.pad(torch.tensor(lens_k).cumsum(0), (1, 0)).to(torch.int32)
    for causal in (False, True):
        out = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal)
        assert out.shape == q.shape
        for i in range(len(lens_q)):
            sq, sk = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
            _assert_accurate(out[None, sq], q[None, sq], k[None, sk], v[None, sk], causal)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_kvcache_decode(hub: dict, isa: str, dtype: torch.dtype) -> None:
    """One query token against 1, 511 and 2048 cached tokens (keys split over the threads and the
    partial softmaxes merged), the new token written into the cache in place."""
    fa = hub["flash_attn"]
    lens = [1, 511, 2048]
    k_cache = _rand(3, 2048, 3, 64, dtype=dtype, seed=7)
    v_cache = _rand(3, 2048, 3, 64, dtype=dtype, seed=8)
    q = _rand(3, 1, 9, 64, dtype=dtype, seed=9)
    for causal in (False, True):
        out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor(lens), causal=causal)
        for b, n in enumerate(lens):
            kb, vb = k_cache[b : b + 1, :n], v_cache[b : b + 1, :n]
            _assert_accurate(out[b : b + 1], q[b : b + 1], kb, vb, causal)
    k_new, v_new = _rand(3, 1, 3, 64, dtype=dtype, seed=10), _rand(3, 1, 3, 64, dtype=dtype, seed=11)
    starts = torch.tensor([0, 510, 2047], dtype=torch.int32)
    out, lse = fa.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new, v_new, cache_seqlens=starts, causal=True, return_softmax_lse=True
    )
    assert lse.shape == (3, 9, 1)
    for b, n in enumerate(lens):
        assert torch.equal(k_cache[b, n - 1], k_new[b, 0]) and torch.equal(v_cache[b, n - 1], v_new[b, 0])
        _assert_accurate(out[b : b + 1], q[b : b + 1], k_cache[b : b + 1, :n], v_cache[b : b + 1, :n], True)


def test_signatures_match_flash_attn_2(hub: dict) -> None:
    """The keyword names Transformers inspects to decide what it passes."""
    import inspect

    fa = hub["flash_attn"]
    params = list(inspect.signature(fa.flash_attn_varlen_func).parameters)
    assert params[:7] == ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"]
    for name in ("dropout_p", "softmax_scale", "causal", "window_size", "softcap", "deterministic"):
        assert name in params
    func = inspect.signature(fa.flash_attn_func).parameters
    assert list(func)[:5] == ["q", "k", "v", "dropout_p", "softmax_scale"]
    assert func["window_size"].default == (-1, -1) and func["causal"].default is False
    kv = list(inspect.signature(fa.flash_attn_with_kvcache).parameters)
    assert kv[:5] == ["q", "k_cache", "v_cache", "k", "v"] and "cache_seqlens" in kv


def test_bad_inputs_raise_one_line(hub: dict) -> None:
    fa = hub["flash_attn"]
    q, k, v = _qkv(1, 5, 5, 4, 2, 64, torch.float32)
    cu = torch.tensor([0, 5], dtype=torch.int32)
    q0, k0, v0 = q[0], k[0], v[0]
    cases = [
        (lambda: fa.flash_attn_func(q, k, v, dropout_p=0.1), ValueError, "dropout_p"),
        (lambda: fa.flash_attn_func(q, k, v, window_size=(3, 3)), ValueError, "window_size"),
        (lambda: fa.flash_attn_func(q, k, v, softcap=30.0), ValueError, "softcap"),
        (lambda: fa.flash_attn_func(q, k, v, alibi_slopes=torch.ones(4)), ValueError, "alibi"),
        (lambda: fa.flash_attn_varlen_func(q0, k0, v0, cu, cu, 5, 5, block_table=cu), ValueError,
         "block_table"),
        (lambda: fa.flash_attn_func(q, k[:, :, :1].expand(-1, -1, 3, -1), v[:, :, :1].expand(-1, -1, 3, -1)),
         RuntimeError, "multiple"),
        (lambda: fa.flash_attn_func(q, k.bfloat16(), v), RuntimeError, "share a dtype"),
        (lambda: fa.flash_attn_func(q.double(), k.double(), v.double()), RuntimeError, "float32"),
        (lambda: fa.flash_attn_func(q, k[..., :32], v[..., :32]), RuntimeError, "head_dim"),
        (lambda: fa.flash_attn_func(q[0], k[0], v[0]), RuntimeError, "expected"),
        (lambda: fa.flash_attn_varlen_func(q[0], k[0], v[0], torch.tensor([0, 9]), cu, 9, 5), RuntimeError,
         "cu_seqlens_q"),
        (lambda: fa.flash_attn_with_kvcache(q, k, v, k[:, :1], v[:, :1], cache_seqlens=5), ValueError,
         "overflows"),
        (lambda: fa.flash_attn_with_kvcache(q, k, v, k[:, :1]), ValueError, "both k and v"),
    ]  # fmt: skip
    for call, error, words in cases:
        with pytest.raises(error, match=words) as info:
            call()
        assert "\n" not in str(info.value).strip(), str(info.value)


def test_forward_with_grad_runs_and_backward_refuses(hub: dict) -> None:
    q, k, v = (t.detach().requires_grad_() for t in _qkv(1, 5, 5, 4, 2, 64, torch.float32))
    out = hub["flash_attn"].flash_attn_func(q, k, v, causal=True)
    with pytest.raises(RuntimeError, match="forward only"):
        out.sum().backward()


def test_fake_kernel_matches_the_op(hub: dict) -> None:
    """The registered fake kernel (what torch.compile traces) agrees with the real op."""
    fa = hub["flash_attn"]
    op = fa._ops.ops.fwd.default
    q, k, v = _qkv(2, 7, 9, 4, 2, 64, torch.float32)
    torch.library.opcheck(op, (q, k, v, None, None, None, 0.125, True))
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    torch.library.opcheck(op, (q[0], k[0], v[0], cu, cu, None, 0.125, False))
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # heads_first: (batch, heads, seqlen, head_dim)
    torch.library.opcheck(op, (qh, kh, vh, None, None, None, 0.125, True, True))
    out, lse = op(qh, kh, vh, None, None, None, 0.125, True, True)
    ref, ref_lse = op(q, k, v, None, None, None, 0.125, True)
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse)


def test_transformers_own_wrapper_runs_it(hub: dict, session_cache, monkeypatch: pytest.MonkeyPatch) -> None:
    """`attn_implementation="org/repo"` -> Transformers' `load_and_register_attn_kernel` ->
    `flash_attention_forward`: the Hub is unreachable here, so kernels' own local override
    (LOCAL_KERNELS) points the repo id at the built repository. Dense, padded (varlen) and
    cached-decode paths match SDPA's, and greedy generation is identical."""
    from kernel_explorer.build.bundled import bundled_repo_path
    from kernel_explorer.loading import tiny_llama

    monkeypatch.setenv("LOCAL_KERNELS", f"kernel-explorer/flash-attn={bundled_repo_path('flash_attn')}")
    model = tiny_llama()
    ids = torch.randint(0, 256, (2, 37), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 37, dtype=torch.long)
    mask[1, :9] = 0  # left padding: Transformers unpads and calls flash_attn_varlen_func
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        dense_ref, padded_ref = model(ids).logits, model(ids, attention_mask=mask).logits
        gen_ref = model.generate(ids[:1], max_new_tokens=12, do_sample=False)
        model.set_attn_implementation("kernel-explorer/flash-attn")
        assert model.config._attn_implementation == "kernel-explorer/flash-attn"
        torch.testing.assert_close(model(ids).logits, dense_ref, rtol=1e-4, atol=1e-5)
        padded = model(ids, attention_mask=mask).logits
        torch.testing.assert_close(padded[0], padded_ref[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(padded[1, 9:], padded_ref[1, 9:], rtol=1e-4, atol=1e-5)
        assert torch.equal(model.generate(ids[:1], max_new_tokens=12, do_sample=False), gen_ref)


def _ran_kernel(fn, *args, **kwargs) -> tuple[object, bool]:
    """fn(*args, **kwargs), and whether the attention op ran in it (torch.profiler's events)."""
    with torch.profiler.profile() as prof:
        result = fn(*args, **kwargs)
    return result, any(e.name.endswith("::fwd") and "flash_attn" in e.name for e in prof.events())


def test_attention_forward_runs_the_kernel_where_sdpa_skips_its_mask(hub: dict) -> None:
    """`attention_forward` (Transformers' attention-interface signature): without a mask it runs the
    kernel itself, to SDPA's accuracy and causal semantics (a prefill, a one-token decode against a
    longer cache, and one decode token with SDPA's boolean mask, a static cache's unused tail or
    padding, taken as the op's key_mask); with a mask over several query tokens it answers with
    Transformers' own sdpa_attention_forward."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    fa = hub["flash_attn"]
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 3
    for lq, lk in ((16, 16), (128, 128), (1, 300)):
        q = _rand(1, 9, lq, 64, dtype=torch.float32, seed=1)
        k = _rand(1, 3, lk, 64, dtype=torch.float32, seed=2)
        v = _rand(1, 3, lk, 64, dtype=torch.float32, seed=3)
        (out, weights), ran = _ran_kernel(fa.attention_forward, module, q, k, v, None, scaling=0.125)
        assert ran and weights is None and out.shape == (1, lq, 9, 64)
        ref, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.125)
        exact, _ = sdpa_attention_forward(module, q.double(), k.double(), v.double(), None, scaling=0.125)
        err, err_sdpa = ((t.double() - exact).abs().max().item() for t in (out, ref))
        assert err <= 1.5 * max(err_sdpa, torch.finfo(torch.float32).eps), (lq, lk, err, err_sdpa)
    # a mask (left padding here, or a static cache): Transformers' sdpa_attention_forward's own result
    mask = torch.ones(1, 1, 5, 9, dtype=torch.bool).tril(4)
    mask[..., :2] = False
    q = _rand(1, 9, 5, 64, dtype=torch.float32, seed=4)
    k, v = _rand(1, 3, 9, 64, dtype=torch.float32, seed=5), _rand(1, 3, 9, 64, dtype=torch.float32, seed=6)
    (masked, _), ran = _ran_kernel(fa.attention_forward, module, q, k, v, mask, scaling=0.125)
    assert not ran
    assert torch.equal(masked, sdpa_attention_forward(module, q, k, v, mask, scaling=0.125)[0])
    # one decode token against a static cache of 200 slots, 2 of padding then 129 filled
    mask = torch.zeros(1, 1, 1, 200, dtype=torch.bool)
    mask[..., 2:131] = True
    q = _rand(1, 9, 1, 64, dtype=torch.float32, seed=7)
    k = _rand(1, 3, 200, 64, dtype=torch.float32, seed=8)
    v = _rand(1, 3, 200, 64, dtype=torch.float32, seed=9)
    (out, _), ran = _ran_kernel(fa.attention_forward, module, q, k, v, mask, scaling=0.125)
    assert ran
    ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.125)
    exact, _ = sdpa_attention_forward(module, q.double(), k.double(), v.double(), mask, scaling=0.125)
    err, err_sdpa = ((t.double() - exact).abs().max().item() for t in (out, ref))
    assert err <= 1.5 * max(err_sdpa, torch.finfo(torch.float32).eps), (err, err_sdpa)


class SinkAttention(torch.nn.Module):
    """A model's attention module whose module (this test file) has its own eager attention."""

    is_causal, num_key_value_groups = True, 3


def eager_attention_forward(
    module, query, key, value, attention_mask, *, dropout=0.0, scaling=None, **kwargs
):  # type: ignore[no-untyped-def]
    """GPT-OSS's eager with sinks: one extra logit per head in each softmax's denominator; causal
    only through the mask it is given, as Transformers' eager functions are."""
    key = key.repeat_interleave(module.num_key_value_groups, dim=1)
    value = value.repeat_interleave(module.num_key_value_groups, dim=1)
    scores = query @ key.transpose(-1, -2) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask[..., : key.shape[-2]]
    sinks = kwargs["s_aux"].reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    probs = torch.cat([scores, sinks], dim=-1).softmax(dim=-1)[..., :-1]
    return (probs @ value).transpose(1, 2), probs


def test_attention_forward_answers_sinks_with_the_models_eager_not_sdpa(hub: dict) -> None:
    """SDPA ignores attention sinks: a call with `s_aux` answered there would be silently wrong on
    GPT-OSS or DeepSeek-V4. It goes to the model module's own eager attention, and a module without
    one is refused in one line."""
    fa = hub["flash_attn"]
    q = _rand(1, 9, 12, 64, dtype=torch.float32, seed=1)
    k = _rand(1, 3, 12, 64, dtype=torch.float32, seed=2)
    v = _rand(1, 3, 12, 64, dtype=torch.float32, seed=3)
    sinks = torch.linspace(-1.0, 2.0, 9)
    # what the model's mask function gives eager: 0 where a query sees a key, the dtype's min after
    later = torch.ones(12, 12, dtype=torch.bool).triu(1)
    causal = torch.zeros(12, 12).masked_fill(later, torch.finfo().min)[None, None]
    # SDPA's mask function leaves the plain causal mask out (None): the kernel hands eager one
    out, _ = fa.attention_forward(SinkAttention(), q, k, v, None, scaling=0.125, s_aux=sinks)
    want, _ = eager_attention_forward(SinkAttention(), q, k, v, causal, scaling=0.125, s_aux=sinks)
    unmasked, _ = eager_attention_forward(SinkAttention(), q, k, v, None, scaling=0.125, s_aux=sinks)
    assert (out - unmasked).abs().max() > 1e-3  # the kernel's answer is causal
    without, _ = fa.attention_forward(SinkAttention(), q, k, v, None, scaling=0.125)
    assert torch.equal(out, want) and (out - without).abs().max() > 1e-3  # the sinks were applied
    plain = torch.nn.Module()
    plain.is_causal, plain.num_key_value_groups = True, 3
    with pytest.raises(ValueError, match=r"attention sinks \(s_aux\), which SDPA ignores"):
        fa.attention_forward(plain, q, k, v, None, scaling=0.125, s_aux=sinks)
