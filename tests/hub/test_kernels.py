"""Correctness of the bundled CPU kernels against eager PyTorch, for every compiled ISA path,
dtype and awkward shape, loaded through kernels' real loader (`get_local_kernel`).

Two checks per case: the kernel is within torch.testing's default tolerances of eager, and its
error against a float64 run of the same formula is never more than twice eager's own error.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
import transformers.activations as A
from isa_paths import runnable_isas
from transformers.models.llama.modeling_llama import LlamaRMSNorm

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# the `isa` fixture (every compiled code path this CPU runs) is in conftest.py


def _inputs(shape: tuple[int, ...], dtype: torch.dtype, scale: float = 3.0) -> torch.Tensor:
    return (torch.randn(shape, generator=torch.Generator().manual_seed(0)) * scale).to(dtype)


def _odd_views(dtype: torch.dtype) -> list[torch.Tensor]:
    """One element, lengths off the vector width, zero-size, and two non-contiguous views."""
    return [
        _inputs((1,), dtype),
        _inputs((17,), dtype),
        _inputs((3, 33), dtype),
        _inputs((2, 3, 4099), dtype),
        _inputs((0, 8), dtype),
        _inputs((40, 34), dtype).t(),
        _inputs((6, 100), dtype)[:, ::3],
    ]


def _assert_accuracy(kernel_out: torch.Tensor, eager_out: torch.Tensor, exact: torch.Tensor) -> None:
    assert kernel_out.dtype == eager_out.dtype and kernel_out.shape == eager_out.shape
    if exact.numel() == 0:
        return
    err_kernel = (kernel_out.double() - exact).abs().max().item()
    err_eager = (eager_out.double() - exact).abs().max().item()
    floor = torch.finfo(eager_out.dtype).eps * exact.abs().max().item()
    assert err_kernel <= 2 * max(err_eager, floor), (err_kernel, err_eager)


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": A.NewGELUActivation(),
    "gelu_fast": A.FastGELUActivation(),
    "gelu_quick": A.QuickGELUActivation(),
    "silu_and_mul": lambda x: F.silu(x[..., : x.shape[-1] // 2]) * x[..., x.shape[-1] // 2 :],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ACTIVATIONS)
def test_activation_matches_eager(hub: dict, isa: str, op: str, dtype: torch.dtype) -> None:
    fn, ref = getattr(hub["activation"], op), ACTIVATIONS[op]
    for x in _odd_views(dtype):
        if op == "silu_and_mul" and x.shape[-1] % 2:
            continue
        got, want = fn(x), ref(x)
        torch.testing.assert_close(got, want, msg=lambda m, x=x: f"{op} {tuple(x.shape)}: {m}")
        _assert_accuracy(got, want, ref(x.double()))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_activation_sweep_over_the_whole_range(hub: dict, isa: str, dtype: torch.dtype) -> None:
    """400,000 points across [-12, 12]: the fast exp/tanh stay within tolerance everywhere, and
    where eager rounds tanh to a 16-bit type before `1 + tanh` (NewGELU, FastGELU) the kernel
    rounds it the same way, so those are bitwise equal to eager."""
    x = torch.linspace(-12, 12, 400_002, dtype=torch.float64).to(dtype)  # even, for silu_and_mul
    for op, ref in ACTIVATIONS.items():
        got, want = getattr(hub["activation"], op)(x), ref(x)
        torch.testing.assert_close(got, want, msg=lambda m, op=op: f"{op}: {m}")
        _assert_accuracy(got, want, ref(x.double()))
        if dtype != torch.float32 and op in ("gelu_new", "gelu_fast"):
            assert torch.equal(got, want), op


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_activations_on_every_input_value(hub: dict, isa: str, dtype: torch.dtype) -> None:
    """A 16-bit unary activation runs as a lookup in a table the kernel fills from its formula on
    first use, so every one of the 65,536 inputs (infinities, NaNs and subnormals included) is
    checked here: within tolerance of eager, NaN where eager gives NaN, bitwise equal to eager for
    NewGELU and FastGELU, and as accurate as eager where the function is not trivial.

    One eager quirk: F.gelu's vectorized path overflows above half the largest value (inf, and
    NaN at +inf) where its own one-element path returns x, as the kernel does. There the
    reference is eager's one-element path."""
    x = torch.arange(-(2**15), 2**15, dtype=torch.int16).view(dtype)
    near_zero = x.abs() <= 12  # beyond, every op is 0, x or NaN in 16 bits
    for op, ref in ACTIVATIONS.items():
        if op == "silu_and_mul":
            continue
        got, want = getattr(hub["activation"], op)(x), ref(x)
        if op == "gelu":
            huge = x > torch.finfo(dtype).max / 2
            want[huge] = torch.cat([ref(v.reshape(1)) for v in x[huge]])
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m, op=op: f"{op}: {m}")
        assert torch.equal(got.isnan(), want.isnan()), op
        if op in ("gelu_new", "gelu_fast"):
            assert torch.equal(got[~want.isnan()], want[~want.isnan()]), op
        _assert_accuracy(got[near_zero], want[near_zero], ref(x[near_zero].double()))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_silu_and_mul_is_unary_silu_times_up_half(hub: dict, isa: str, dtype: torch.dtype) -> None:
    """silu_and_mul rounds silu(a) to the 16-bit type before the multiply, as eager does; that
    rounded silu is the unary op's (the AVX2 bfloat16 path reads it from the unary op's table, the
    others compute the same formula), so the result is the unary silu times b bit for bit, across
    row lengths that end mid-vector and rows of a strided view."""
    act = hub["activation"]
    x = _inputs((7, 2 * 4099), dtype)
    for view in (x, x[:, : 2 * 4096], x[::2, : 2 * 21]):
        d = view.shape[-1] // 2
        expected = act.silu(view[..., :d].contiguous()) * view[..., d:]
        assert torch.equal(act.silu_and_mul(view), expected), (isa, tuple(view.shape))


@pytest.mark.parametrize("op", ["silu", "gelu_new", "silu_and_mul"])
def test_activation_out_form_writes_in_place(hub: dict, op: str) -> None:
    x = _inputs((5, 64), torch.bfloat16)
    expected = getattr(hub["activation"], op)(x)
    out = torch.empty_like(expected)
    assert getattr(hub["activation"], op)(x, out=out) is out
    assert torch.equal(out, expected)


def _resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def test_large_outputs_are_ordinary_tensors_and_are_freed(hub: dict) -> None:
    """Outputs of 32 MiB and more live in huge pages from the kernels' own allocator: they must
    behave like any tensor (clone, resize, in-place ops) and go back to the system when dropped."""
    x = _inputs((2048, 4096), torch.float32)  # 32 MiB: the first size that takes huge pages
    q = _inputs((1, 32, 2048, 128), torch.float32)
    cos, sin = _inputs((1, 2048, 128), torch.float32), _inputs((1, 2048, 128), torch.float32)
    weight = torch.ones(4096)
    calls = {
        "silu": lambda: hub["activation"].silu(x),
        "rms_norm": lambda: hub["rmsnorm"].rms_norm(x, weight, 1e-6),
        "rotary": lambda: hub["rotary"].apply_rotary(q, q, cos, sin)[0],
    }
    for name, call in calls.items():
        y = call()
        assert y.is_contiguous() and y.untyped_storage().nbytes() >= 32 * 2**20, name
        twice = y.clone().mul_(2)
        torch.testing.assert_close(twice / 2, y)
        y.resize_(2, 3).fill_(1.0)  # a resizable storage, like at::empty's
        assert y.sum().item() == 6
    # Outputs this large are also streamed past the cache, after a peel to the first aligned
    # boundary: check the values, for an aligned output and for one that starts mid-line.
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        shifted = torch.empty(xd.numel() + 3, dtype=dtype)[3:].view(xd.shape)
        for op in ("silu", "gelu_tanh"):
            want = ACTIVATIONS[op](xd)
            torch.testing.assert_close(getattr(hub["activation"], op)(xd), want)
            torch.testing.assert_close(getattr(hub["activation"], op)(xd, out=shifted), want)
        qd, cd, sd = q.to(dtype), cos.to(dtype), sin.to(dtype)
        want_q, _ = apply_rotary_pos_emb(qd, qd, cd, sd)
        torch.testing.assert_close(hub["rotary"].apply_rotary(qd, qd, cd, sd)[0], want_q)
    before = _resident_mib()
    for _ in range(20):
        for call in calls.values():
            call()
    assert _resident_mib() - before < 200, "huge-page outputs are not released"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_streamed_outputs_on_every_isa(hub: dict, isa: str, dtype: torch.dtype) -> None:
    """Outputs of 8 MiB and more are written with non-temporal stores on the AVX-512 and AVX2
    paths, in map1 (after a peel to the first 64-byte line), row by row in silu_and_mul, RMSNorm
    and rotary: bitwise the same values as the cached stores give on a small slice."""
    x = _inputs((1024, 4096), dtype)  # 8 MiB in bfloat16, 16 MiB in float32
    act, rms = hub["activation"], hub["rmsnorm"]
    shifted = torch.empty(x.numel() + 3, dtype=dtype)[3:].view(x.shape)
    for op in ("silu", "gelu_new"):
        small = getattr(act, op)(x[:2])
        assert torch.equal(getattr(act, op)(x)[:2], small), op
        assert torch.equal(getattr(act, op)(x, out=shifted)[:2], small), op
    gated = torch.cat([x, x], dim=-1)
    assert torch.equal(act.silu_and_mul(gated)[:2], act.silu_and_mul(gated[:2])), "silu_and_mul"
    w = _inputs((4096,), dtype, scale=1.0)
    assert torch.equal(rms.rms_norm(x, w, 1e-6)[:2], rms.rms_norm(x[:2], w, 1e-6)), "rms_norm"
    q = x.view(1, 32, 1024, 128)
    cos, sin = _inputs((1, 1024, 128), dtype), _inputs((1, 1024, 128), dtype)
    head = q[:, :1].contiguous()
    got = hub["rotary"].apply_rotary(q, q, cos, sin)[0][:, :1]
    assert torch.equal(got, hub["rotary"].apply_rotary(head, head, cos, sin)[0]), "rotary"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("weight_dtype", ["same", torch.float32], ids=str)
def test_rmsnorm_matches_llama_rmsnorm(hub: dict, isa: str, dtype: torch.dtype, weight_dtype) -> None:
    wdt = dtype if weight_dtype == "same" else weight_dtype
    for x in _odd_views(dtype):
        norm = LlamaRMSNorm(x.shape[-1], eps=1e-5)
        norm.weight.data = _inputs((x.shape[-1],), wdt, scale=1.0)
        got = hub["rmsnorm"].rms_norm(x, norm.weight, norm.variance_epsilon)
        want = norm(x)
        # Where eager rounds the normalised row to a 16-bit dtype, a sum reordered by one ulp can
        # flip that rounding: allow one ulp of the input dtype there (float32 gets the defaults).
        tol = {} if dtype == torch.float32 else {"rtol": torch.finfo(dtype).eps, "atol": 1e-5}
        torch.testing.assert_close(got, want, **tol)
        exact_norm = LlamaRMSNorm(x.shape[-1], eps=1e-5).double()
        exact_norm.weight.data = norm.weight.data.double()
        _assert_accuracy(got, want, exact_norm(x.double()))


def test_rmsnorm_out_form(hub: dict) -> None:
    x, w = _inputs((4, 96), torch.float32), _inputs((96,), torch.float32)
    out = torch.empty(4, 96)
    assert hub["rmsnorm"].rms_norm(x, w, 1e-6, out=out) is out
    assert torch.equal(out, hub["rmsnorm"].rms_norm(x, w, 1e-6))


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """Transformers' formula, written out: the decorated original is a module that kernelize
    may have switched elsewhere in this process, so it cannot serve as the reference."""

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        return torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)

    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


ROTARY_SHAPES = [  # (batch, q heads, kv heads, seq, head_dim)
    (1, 9, 3, 7, 64),
    (2, 4, 4, 5, 6),
    (1, 1, 1, 1, 2),
    (1, 32, 8, 33, 128),
    (1, 2, 2, 0, 8),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_matches_transformers(hub: dict, isa: str, dtype: torch.dtype) -> None:
    apply = hub["rotary"].apply_rotary
    for b, h, kv, s, d in ROTARY_SHAPES:
        q, k = _inputs((b, h, s, d), dtype, 1.0), _inputs((b, kv, s, d), dtype, 1.0)
        cos, sin = _inputs((b, s, d), dtype, 1.0), _inputs((b, s, d), dtype, 1.0)
        q_t = _inputs((b, s, h, d), dtype, 1.0).transpose(1, 2)  # attention's non-contiguous layout
        for qq in (q, q_t):
            got, want = apply(qq, k, cos, sin), apply_rotary_pos_emb(qq, k, cos, sin)
            torch.testing.assert_close(got, want)
            exact = apply_rotary_pos_emb(qq.double(), k.double(), cos.double(), sin.double())
            for g, w, e in zip(got, want, exact, strict=True):
                _assert_accuracy(g, w, e)
        # unsqueeze_dim=2: the (batch, seq, heads, dim) layout
        got = apply(q.transpose(1, 2), k.transpose(1, 2), cos, sin, 2)
        torch.testing.assert_close(
            got, apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin, 2)
        )


def test_rotary_out_form_writes_in_place(hub: dict) -> None:
    apply = hub["rotary"].apply_rotary
    q, k = _inputs((1, 4, 5, 16), torch.bfloat16), _inputs((1, 2, 5, 16), torch.bfloat16)
    cos, sin = _inputs((1, 5, 16), torch.bfloat16), _inputs((1, 5, 16), torch.bfloat16)
    out = (torch.empty_like(q), torch.empty_like(k))
    assert apply(q, k, cos, sin, out=out) is out
    assert all(torch.equal(o, e) for o, e in zip(out, apply(q, k, cos, sin), strict=True))
    # the eager fallback (mixed dtypes) fills out= too
    mixed = apply(q.float(), k.float(), cos, sin.float(), out=(torch.empty(q.shape), torch.empty(k.shape)))
    torch.testing.assert_close(mixed, apply_rotary_pos_emb(q.float(), k.float(), cos, sin.float()))
    with pytest.raises(RuntimeError, match="out= must be a contiguous"):
        apply(q, k, cos, sin, out=(torch.empty_like(k), torch.empty_like(k)))


def test_rotary_mixed_dtypes_and_odd_dim_take_the_eager_path(hub: dict) -> None:
    q, k = _inputs((1, 2, 3, 8), torch.bfloat16), _inputs((1, 2, 3, 8), torch.bfloat16)
    cos, sin = _inputs((1, 3, 8), torch.float32), _inputs((1, 3, 8), torch.float32)
    got = hub["rotary"].apply_rotary(q, k, cos, sin)
    assert got[0].dtype == torch.float32  # eager's promotion
    torch.testing.assert_close(got, apply_rotary_pos_emb(q, k, cos, sin))
    q5, c5 = _inputs((1, 1, 2, 5), torch.float32), _inputs((1, 2, 5), torch.float32)
    torch.testing.assert_close(
        hub["rotary"].apply_rotary(q5, q5, c5, c5), apply_rotary_pos_emb(q5, q5, c5, c5)
    )


@pytest.mark.parametrize(
    ("repo", "call"),
    [
        ("activation", lambda m, x: m.silu(x)),
        ("activation", lambda m, x: m.silu_and_mul(x)),
        (
            "rmsnorm",
            lambda m, x: m.rms_norm(x, torch.ones(x.shape[-1], dtype=x.dtype, device=x.device), 1e-6),
        ),
        ("rotary", lambda m, x: m.apply_rotary(x, x, x[0], x[0])),
    ],
)
def test_unsupported_dtype_and_device_raise_clear_errors(hub: dict, repo: str, call) -> None:
    with pytest.raises(TypeError, match=r"float32, bfloat16 and float16.*use PyTorch"):
        call(hub[repo], torch.ones(2, 4, 4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"CPU kernel.*meta"):
        call(hub[repo], torch.ones(2, 4, 4, device="meta"))


def test_c_level_checks_name_the_problem(hub: dict) -> None:
    ops = hub["rmsnorm"].ops
    with pytest.raises(RuntimeError, match="does not match the last dimension"):
        ops.rms_norm(torch.ones(2, 8), torch.ones(7), 1e-6)
    with pytest.raises(RuntimeError, match="out= must be a contiguous"):
        hub["activation"].silu(torch.ones(4), out=torch.empty(5))
    with pytest.raises(RuntimeError, match="last dimension must be even"):
        hub["activation"].silu_and_mul(torch.ones(3))


def test_isa_choice_is_a_path_this_cpu_runs(hub: dict) -> None:
    """Chosen by measurement (tests/hub/test_isa_choice.py), so not always the widest."""
    assert {module.isa() for module in hub.values()} <= set(runnable_isas())
    assert math.isfinite(hub["activation"].silu(torch.ones(1)).item())
