"""The bundled `quantized-linear` repository: Q8_0 / Q4_1 packing, its ops and its layers, loaded
through kernels' real loader.

The kernel is checked against a float64 product with the dequantized weight (what it stands for)
on every compiled ISA path, both activation dtypes, with and without bias, on shapes off every
vector width and on the GEMV (few rows), the int8 GEMM and the dequantize-and-matmul GEMM (many
rows) paths. The int8 GEMM quantizes the activations: its bound adds, per block of 32, half a
step of the activations' int8 grid times the block's weights (`_int8_allowance`). Packing is checked
against ggml's reference quantizer (the `gguf` package's bit-exact port) and, on the default
model, to give back the checkpoint's weights bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from kernel_explorer.build.bundled import bundled_repo_path

FORMATS = ["q8_0", "q4_1"]
DTYPES = [torch.float32, torch.bfloat16]
EPS32 = torch.finfo(torch.float32).eps


@pytest.fixture(scope="module")
def ql(hub: dict):
    return hub["quantized_linear"]


@pytest.fixture(params=["auto", "maddubs"])
def int8_dot(request: pytest.FixtureRequest, ql, isa: str) -> Iterator[str]:
    """The int8 GEMM's dot product on the path: VNNI where the CPU has it ('auto'), then AVX2's
    vpmaddubsw code ('maddubs') where the path also carries a VNNI variant (avx512, avx2); a
    path with one code (avx512bf16, portable) runs once."""
    auto = ql.set_int8_dot("auto")
    dot = ql.set_int8_dot(request.param)
    if request.param == "maddubs" and dot == auto:
        ql.set_int8_dot("auto")
        pytest.skip(f"the {isa} path has one int8 dot product here ({dot})")
    yield dot
    ql.set_int8_dot("auto")


def _randn(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


def _int8_allowance(
    x: torch.Tensor, w: torch.Tensor, packed: torch.Tensor, fmt: str, passes: int
) -> torch.Tensor:
    """(rows, out) float64: what quantizing x per block of 32 to int8 may cost the int8 GEMM.

    Each activation moves by at most half a step of its block's grid (max|x| / 127 / 2; 0.51 for
    the float32 rounding of x / step); that error multiplies the block's weights, less Q4_1's
    centre m + 8 d (the kernel takes d (q - 8) on the integers, m + 8 d with the exact sum of x).
    A second pass quantizes that residual (at most half a step) in turn: 0.52 / 127 of it remains."""
    xb = x.double().reshape(x.shape[0], -1, 32)
    half_step = 0.51 * xb.abs().amax(-1) / 127  # (rows, blocks)
    if passes == 2:
        half_step = half_step * 0.52 / 127
    wb = w.double().reshape(w.shape[0], -1, 32)
    if fmt == "q4_1":
        blocks = packed.reshape(w.shape[0], -1, 20)
        d, m = (blocks[:, :, i : i + 2].contiguous().view(torch.float16).double() for i in (0, 2))
        wb = wb - (m + 8 * d)  # (out, blocks, 32) minus (out, blocks, 1)
    return half_step @ wb.abs().sum(-1).T


def _assert_close_to_float64(
    y: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    int8: tuple[torch.Tensor, str, int] | None = None,
) -> None:
    """y against x @ w^T + bias in float64; the bound is float32 accumulation over in_features
    (relative to the sum of |terms|), plus, for bfloat16, the output's rounding and that of the
    weights (the dequantize-and-matmul path multiplies bfloat16 activations by bfloat16 panels, as
    F.linear does), plus, when `int8` (packed, format, passes) says the int8 GEMM ran,
    `_int8_allowance`."""
    ref = x.double() @ w.double().T
    size = x.double().abs() @ w.double().abs().T
    if bias is not None:
        ref, size = ref + bias.double(), size + bias.double().abs()
    allowed = 2 * (w.shape[1] + 2) * EPS32 * size + 1e-30
    if y.dtype == torch.bfloat16:
        allowed = allowed + 2.0**-8 * ref.abs() + 2.0**-8 * size
    if int8 is not None:
        allowed = allowed + _int8_allowance(x, w, *int8)
    err = (y.double() - ref).abs()
    assert (err <= allowed).all(), (err - allowed).max().item()


def _int8_ran(
    rows: int, packed: torch.Tensor, fmt: str, passes: int | None = None, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, str, int] | None:
    """The allowance's arguments when an int8 path ran (the GEMV up to GEMV_MAX_ROWS rows, the GEMM
    above: the same arithmetic); passes None: the default (the float GEMV up to GEMV_MAX_ROWS
    rows; above, 2 for float32 and 1 for 16-bit activations)."""
    if passes is None:
        passes = 0 if rows <= GEMV_MAX_ROWS else 2 if dtype == torch.float32 else 1
    return (packed, fmt, passes) if passes and rows else None


GEMV_MAX_ROWS = 8  # torch_binding.cpp's kGemvMaxRows: above it, the GEMM paths


# ---------------------------------------------------------------------------------------------
# The kernel against float64, on every compiled path


@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fmt", FORMATS)
def test_linear_matches_float64_on_odd_shapes(
    ql, isa: str, int8_dot: str, fmt: str, dtype: torch.dtype, with_bias: bool
) -> None:
    assert ql.isa() == isa and ql.int8_dot() == int8_dot
    for k in (32, 64, 96):
        for n in (1, 7, 129):
            packed = ql.quantize(_randn(n, k, seed=k + n), fmt)
            w = ql.dequantize(packed, fmt)
            bias = _randn(n, seed=3).to(dtype) if with_bias else None
            for rows in (1, 3, 8, 9, 17, 512):  # GEMV (one and several rows per pass) and GEMM
                x = _randn(rows, k, seed=rows, scale=2.0).to(dtype)
                y = ql.linear(x, packed, fmt, bias)
                assert y.dtype == dtype and y.shape == (rows, n)
                _assert_close_to_float64(y, x, w, bias, _int8_ran(rows, packed, fmt, dtype=dtype))
                for passes in (0, 1, 2):
                    y = ql.linear(x, packed, fmt, bias, int8_passes=passes)
                    _assert_close_to_float64(y, x, w, bias, _int8_ran(rows, packed, fmt, passes))


@pytest.mark.parametrize("fmt", FORMATS)
def test_batched_and_strided_inputs(ql, isa: str, int8_dot: str, fmt: str) -> None:
    packed = ql.quantize(_randn(40, 64), fmt)
    w = ql.dequantize(packed, fmt)
    for x in (_randn(2, 3, 64), _randn(2, 9, 64), _randn(64, 6).t(), _randn(5, 128)[:, ::2], _randn(0, 64)):
        y = ql.linear(x, packed, fmt)
        assert y.shape == (*x.shape[:-1], 40)
        rows = x.reshape(-1, 64).shape[0]
        _assert_close_to_float64(y.reshape(-1, 40), x.reshape(-1, 64), w, None, _int8_ran(rows, packed, fmt))


@pytest.mark.parametrize("fmt", FORMATS)
def test_kernel_agrees_with_pytorch_on_the_same_weights(ql, fmt: str) -> None:
    """The dequantize-and-matmul path runs ATen's matmul on the exact dequantized weights:
    PyTorch's own answer to float32 rounding; the float GEMV sums in another order (within float32
    accumulation error)."""
    packed = ql.quantize(_randn(96, 576), fmt)
    w = ql.dequantize(packed, fmt)
    for rows in (17, 64):
        x = _randn(rows, 576, seed=rows)
        torch.testing.assert_close(ql.linear(x, packed, fmt, int8_passes=0), nn.functional.linear(x, w))
    for rows in (1, 5):
        x = _randn(rows, 576, seed=rows)
        torch.testing.assert_close(
            ql.linear(x, packed, fmt), nn.functional.linear(x, w), rtol=1e-5, atol=1e-4
        )  # the default for decode's rows: the float GEMV


@pytest.mark.parametrize("passes", [2, 1, 0], ids=["int8x2", "int8", "dequant"])
@pytest.mark.parametrize("rows", [3, 64])
def test_every_path_under_inference_mode_and_autograd(ql, rows: int, passes: int) -> None:
    """The GEMM paths' worker threads run ATen ops: they must see the caller's inference mode (the
    output is an inference tensor) and run below autograd (an input may require grad)."""
    packed = ql.quantize(_randn(300, 64), "q4_1")
    w = ql.dequantize(packed, "q4_1")
    x = _randn(rows, 64)
    int8 = _int8_ran(rows, packed, "q4_1", passes)
    with torch.inference_mode():
        y = ql.linear(x, packed, "q4_1", int8_passes=passes)
    assert y.is_inference()
    _assert_close_to_float64(y, x, w, None, int8)
    y = ql.linear(x.requires_grad_(), packed, "q4_1", int8_passes=passes)
    assert y.requires_grad
    _assert_close_to_float64(y.detach(), x.detach(), w, None, int8)


@pytest.mark.parametrize("rows", [3, 64], ids=["gemv", "gemm"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_int8_gemm_is_a_different_numeric_path_all_isas_agree_on(ql, fmt: str, rows: int) -> None:
    """On SmolLM2's MLP shape one int8 pass is not float32's rounding (its RMS error against
    float64 is orders above the float paths') but stays within 1% of the output's RMS; the second
    pass (the residual's) takes it under 1e-4; the SIMD paths compute the same integer dot products
    and scale them in the same order (bitwise-equal results), the portable one agrees with them to
    float32 rounding. So for the int8 GEMV (decode's rows) as for the int8 GEMM."""
    packed = ql.quantize(_randn(1536, 576, scale=0.05), fmt)
    w = ql.dequantize(packed, fmt).double()
    x = _randn(rows, 576, seed=5)
    ref = x.double() @ w.T
    rms = ref.pow(2).mean().sqrt()
    results: dict[tuple[str, int], torch.Tensor] = {}
    before = ql.isa()
    try:
        for isa in ql.isa_paths():
            ql.set_isa(isa)
            err = {}
            for passes in (0, 1, 2):
                results[isa, passes] = y = ql.linear(x, packed, fmt, int8_passes=passes).double()
                err[passes] = ((y - ref).pow(2).mean().sqrt() / rms).item()
            assert err[0] < 1e-6 and 1e-4 < err[1] < 1e-2 and 1e-7 < err[2] < 1e-4, (isa, err)
    finally:
        ql.set_isa(before)
    for passes in (1, 2):
        first = results[ql.isa_paths()[0], passes]
        for isa in ql.isa_paths():
            if isa == "portable":  # plain C++: its own order of float operations
                torch.testing.assert_close(results[isa, passes], first, rtol=1e-5, atol=1e-5 * rms.item())
            else:  # the same integers, scales and float operations in the same order on every SIMD path
                assert torch.equal(results[isa, passes], first), (isa, passes)


@pytest.mark.parametrize("fmt", FORMATS)
def test_int8_gemv_computes_the_int8_gemms_numbers(ql, isa: str, fmt: str) -> None:
    """Decode's int8 GEMV reads the GGML blocks as they are (no centring of Q4_1's nibbles, no
    repacking) yet takes the same rounding of x and the same error as the GEMM: 8 rows on the GEMV
    agree with the same 8 rows inside a 9-row GEMM to float32 rounding, one pass (0.4% from float)
    and two."""
    packed = ql.quantize(_randn(200, 576, scale=0.05), fmt)
    x = _randn(9, 576, seed=11, scale=3.0)
    for passes in (1, 2):
        gemm = ql.linear(x, packed, fmt, int8_passes=passes)[:8]
        gemv = ql.linear(x[:8].contiguous(), packed, fmt, int8_passes=passes)
        scale = gemm.pow(2).mean().sqrt().item()
        torch.testing.assert_close(gemv, gemm, rtol=1e-5, atol=1e-6 * scale)
        float_path = ql.linear(x[:8].contiguous(), packed, fmt, int8_passes=0)
        assert (gemv - float_path).abs().max() > 10 * (gemv - gemm).abs().max()  # an int8 path ran


@pytest.mark.parametrize("shape", [(192, 576), (1536, 576), (576, 1536), (48, 96)], ids=str)
def test_gemv_layout_computes_the_int8_gemvs_numbers(ql, isa: str, shape: tuple[int, int]) -> None:
    """The GEMV layout (16 output rows per instruction) regroups the very blocks: on it the int8
    GEMV takes the same activations and integers as on GGML's row-major blocks and differs from it
    in float32 rounding order only, one pass and two, 1 to 8 rows (5: a pass of 4 and one of 1),
    with and without bias; the float GEMV it is not."""
    n, k = shape
    packed = ql.quantize(_randn(n, k, scale=0.05), "q4_1")
    grouped = ql.gemv_layout(packed)
    assert grouped.shape == packed.shape and grouped.dtype == torch.uint8
    assert not torch.equal(grouped, packed)
    assert torch.equal(grouped.flatten().sort()[0], packed.flatten().sort()[0])  # the same bytes
    bias = _randn(n, seed=3)
    for rows in (1, 3, 5, 8):
        x = _randn(rows, k, seed=rows, scale=2.0)
        for passes in (1, 2):
            for b in (None, bias):
                rowwise = ql.linear(x, packed, "q4_1", b, int8_passes=passes)
                y = ql.linear(x, packed, "q4_1", b, int8_passes=passes, gemv=grouped)
                scale = rowwise.pow(2).mean().sqrt().item()
                torch.testing.assert_close(y, rowwise, rtol=1e-5, atol=2e-6 * scale)
        float_path = ql.linear(x, packed, "q4_1", int8_passes=0)
        one = ql.linear(x, packed, "q4_1", int8_passes=1, gemv=grouped)
        assert (one - float_path).abs().max() > 10 * (
            one - ql.linear(x, packed, "q4_1", int8_passes=1)
        ).abs().max()
        # the default (None) up to 8 rows: two int8 passes on the layout, the float GEMV without it
        assert torch.equal(
            ql.linear(x, packed, "q4_1", gemv=grouped),
            ql.linear(x, packed, "q4_1", int8_passes=2, gemv=grouped),
        )
        assert torch.equal(ql.linear(x, packed, "q4_1"), float_path)
        assert torch.equal(
            ql.linear(x.bfloat16(), packed, "q4_1", gemv=grouped),
            ql.linear(x.bfloat16(), packed, "q4_1", int8_passes=1, gemv=grouped),
        )


def test_gemv_layout_all_isas_agree(ql) -> None:
    """The SIMD paths compute the same integers (vpdpbusd or vpmaddubsw's int16 sums) and scale them
    in the same order: bitwise-equal results; the portable path agrees to float32 rounding."""
    packed = ql.quantize(_randn(1536, 576, scale=0.05), "q4_1")
    grouped = ql.gemv_layout(packed)
    x, bias = _randn(3, 576, seed=9), _randn(1536, seed=4)
    results: dict[tuple[str, int], torch.Tensor] = {}
    before = ql.isa()
    try:
        for isa in ql.isa_paths():
            ql.set_isa(isa)
            for passes in (1, 2):
                results[isa, passes] = ql.linear(x, packed, "q4_1", bias, int8_passes=passes, gemv=grouped)
    finally:
        ql.set_isa(before)
    for passes in (1, 2):
        first = results[ql.isa_paths()[0], passes]
        for isa in ql.isa_paths():
            if isa == "portable":
                torch.testing.assert_close(results[isa, passes], first, rtol=1e-5, atol=1e-5)
            else:
                assert torch.equal(results[isa, passes], first), (isa, passes)


def _anon_huge_kib(t: torch.Tensor) -> int:
    """KiB of transparent huge pages backing t's bytes, from /proc/self/smaps."""
    start, end, in_range, kib = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), False, 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            low, high = (int(a, 16) for a in head.split("-"))
            in_range = low < end and high > start
        elif in_range and head == "AnonHugePages:":
            kib += int(line.split()[1])
    return kib


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages are Linux's")
@pytest.mark.parametrize("fmt", ["q4_1", "q8_0"])
def test_large_gemv_layouts_sit_on_huge_pages(ql, fmt: str) -> None:
    """From 2 MiB up a GEMV layout (what decode streams whole every token) is 2 MiB-aligned and
    advised onto transparent huge pages, which back it where the system offers them; smaller ones
    are ATen's. The numbers are the same either way, and a copy of the layout still serves."""
    packed = ql.quantize(_randn(2048, 2048, scale=0.02), fmt)  # 2.5 / 4.25 MiB
    grouped = ql.gemv_layout(packed, fmt)
    assert grouped.numel() >= 2 << 20 and grouped.data_ptr() % (2 << 20) == 0
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if mode.exists() and "[never]" not in mode.read_text():
        assert _anon_huge_kib(grouped) >= 2048, mode.read_text()
    x = _randn(1, 2048, seed=5)
    copied = grouped.clone()  # ATen's pages
    assert _anon_huge_kib(copied) == 0 or "[always]" in mode.read_text()
    assert torch.equal(ql.linear(x, packed, fmt, gemv=grouped), ql.linear(x, packed, fmt, gemv=copied))
    small_packed = ql.quantize(_randn(192, 576), fmt)
    small = ql.gemv_layout(small_packed, fmt)
    assert small.numel() < 2 << 20 and torch.equal(small, ql.gemv_layout(small_packed.clone(), fmt))


def test_gemv_layout_bad_inputs_say_what_to_do(ql) -> None:
    packed = ql.quantize(_randn(40, 64), "q4_1")
    with pytest.raises(RuntimeError, match="groups of 16, got 40; such a weight keeps GGML's layout"):
        ql.gemv_layout(packed)
    with pytest.raises(RuntimeError, match="from quantize_q4_1"):
        ql.gemv_layout(ql.quantize(_randn(32, 64), "q8_0"))
    packed = ql.quantize(_randn(32, 64), "q4_1")
    with pytest.raises(RuntimeError, match="gemv must be gemv_layout_q4_1 of the packed weight"):
        ql.linear(_randn(1, 64), packed, "q4_1", int8_passes=1, gemv=ql.gemv_layout(packed)[:16])
    with pytest.raises(RuntimeError, match="gemv must be gemv_layout_q8_0 of the packed weight"):
        ql.linear(_randn(1, 64), ql.quantize(_randn(32, 64), "q8_0"), "q8_0", gemv=ql.gemv_layout(packed))
    with pytest.raises(ValueError, match="unknown format 'q4_0'"):
        ql.gemv_layout(packed, "q4_0")


@pytest.mark.parametrize("shape", [(192, 576), (49152 // 16, 576), (48, 96)], ids=str)
def test_q8_0_gemv_layout_computes_the_int8_gemvs_numbers(ql, isa: str, shape: tuple[int, int]) -> None:
    """Q8_0 (a GGUF's lm_head) has a GEMV layout too, whose int8 GEMV (signed weights: |q_w| times
    q_x with q_w's sign) takes the same activations and integers as on GGML's row-major blocks and
    differs from it in float32 rounding order only, 1 to 8 rows, one pass and two, with and without
    bias; by default (None) its decode rows take two passes on the layout."""
    n, k = shape
    packed = ql.quantize(_randn(n, k, scale=0.05), "q8_0")
    grouped = ql.gemv_layout(packed, "q8_0")
    assert grouped.shape == packed.shape and not torch.equal(grouped, packed)
    assert torch.equal(grouped.flatten().sort()[0], packed.flatten().sort()[0])  # the same bytes
    bias = _randn(n, seed=3)
    for rows in (1, 3, 5, 8):
        x = _randn(rows, k, seed=rows, scale=2.0)
        for passes in (1, 2):
            for b in (None, bias):
                rowwise = ql.linear(x, packed, "q8_0", b, int8_passes=passes)
                y = ql.linear(x, packed, "q8_0", b, int8_passes=passes, gemv=grouped)
                scale = rowwise.pow(2).mean().sqrt().item()
                torch.testing.assert_close(y, rowwise, rtol=1e-5, atol=2e-6 * scale)
        assert torch.equal(
            ql.linear(x, packed, "q8_0", gemv=grouped),
            ql.linear(x, packed, "q8_0", int8_passes=2, gemv=grouped),
        )


def test_q8_0_gemv_layout_all_isas_agree_and_the_layer_keeps_it(ql) -> None:
    """Every path, the portable one included, computes the same integers and scales them in the same
    order: bitwise-equal results. A Q8_0 layer of out_features a multiple of 16 keeps the layout
    (decode reads it) unless float32 arithmetic is asked for."""
    packed = ql.quantize(_randn(1536, 576, scale=0.05), "q8_0")
    grouped = ql.gemv_layout(packed, "q8_0")
    x, bias = _randn(3, 576, seed=9), _randn(1536, seed=4)
    results = {}
    try:
        for isa in ql.isa_paths():
            ql.set_isa(isa)
            results[isa] = [ql.linear(x, packed, "q8_0", bias, int8_passes=p, gemv=grouped) for p in (1, 2)]
    finally:
        ql.reset_isa()
    first = results[ql.isa_paths()[0]]
    for isa, ys in results.items():
        assert all(torch.equal(y, f) for y, f in zip(ys, first, strict=True)), isa
    lin = _linear(k=576, n=64)
    x1 = _randn(1, 576, seed=1)
    y = ql.layers.Q8_0Linear.forward(lin, x1)
    data, layout = lin._kernel_packed.data, lin._kernel_packed.gemv
    assert torch.equal(layout, ql.gemv_layout(data, "q8_0"))
    assert torch.equal(y, ql.linear(x1, data, "q8_0", lin.bias, int8_passes=2, gemv=layout))
    ql.layers.use_int8_gemm(lin, 0)
    assert torch.equal(
        ql.layers.Q8_0Linear.forward(lin, x1), ql.linear(x1, data, "q8_0", lin.bias, int8_passes=0)
    )
    assert lin._kernel_packed.gemv is None


def test_layer_keeps_the_gemv_layout_unless_float32_arithmetic_is_asked(ql) -> None:
    """A Q4_1 layer keeps its blocks in the GEMV layout too, which its decode rows run on (two int8
    passes by default, one when asked; prefill still reads the GGML blocks); with float32
    arithmetic asked for it lets the copy go, and takes it again after. out_features off 16: no
    layout, the float GEMV by default."""
    lin = _linear(k=576, n=192)
    x1, x32 = _randn(1, 576, seed=1), _randn(32, 576, seed=2)
    y_default = ql.layers.Q4_1Linear.forward(lin, x1)
    data, grouped = lin._kernel_packed.data, lin._kernel_packed.gemv
    assert torch.equal(grouped, ql.gemv_layout(data))
    assert torch.equal(y_default, ql.linear(x1, data, "q4_1", lin.bias, int8_passes=2, gemv=grouped))
    ql.layers.use_int8_gemm(lin, 1)
    y1 = ql.layers.Q4_1Linear.forward(lin, x1)
    assert lin._kernel_packed.data is data and lin._kernel_packed.gemv is grouped  # not repacked
    assert torch.equal(y1, ql.linear(x1, data, "q4_1", lin.bias, int8_passes=1, gemv=grouped))
    assert not torch.equal(y1, y_default)
    assert torch.equal(
        ql.layers.Q4_1Linear.forward(lin, x32), ql.linear(x32, data, "q4_1", lin.bias, int8_passes=1)
    )
    ql.layers.use_int8_gemm(lin, 0)
    assert torch.equal(
        ql.layers.Q4_1Linear.forward(lin, x1), ql.linear(x1, data, "q4_1", lin.bias, int8_passes=0)
    )
    assert lin._kernel_packed.gemv is None and lin._kernel_packed.data is data
    ql.layers.use_int8_gemm(lin, None)
    assert torch.equal(ql.layers.Q4_1Linear.forward(lin, x1), y_default)
    assert torch.equal(lin._kernel_packed.gemv, grouped)
    odd = _linear(k=576, n=100)
    y = ql.layers.Q4_1Linear.forward(odd, x1)
    assert odd._kernel_packed.gemv is None
    assert torch.equal(y, ql.linear(x1, odd._kernel_packed.data, "q4_1", odd.bias, int8_passes=0))


def test_compiled_layer_runs_on_the_gemv_layout(ql) -> None:
    """Under torch.compile (Inductor) the layout is a constant of the graph beside the GGML blocks:
    a compiled decode row gives the eager layer's numbers."""
    lin = _linear(k=576, n=192)
    ql.layers.use_int8_gemm(lin, 2)
    x = _randn(1, 576, seed=7)
    eager = ql.layers.Q4_1Linear.forward(lin, x)  # packs, as the compile path asks
    assert lin._kernel_packed.gemv is not None
    compiled = torch.compile(lambda t: ql.layers.Q4_1Linear.forward(lin, t), dynamic=False)
    with torch.no_grad():
        assert torch.equal(compiled(x), eager)


# ---------------------------------------------------------------------------------------------
# Sibling linears on one input in one call, and the graph pass that batches them


def _siblings(ql, ns: tuple[int, ...] = (576, 192, 192), k: int = 576) -> tuple[list, list]:
    """A layer's q, k and v shapes by default: packed weights and their GEMV layouts."""
    packed = [ql.quantize(_randn(n, k, seed=20 + i, scale=0.05), "q4_1") for i, n in enumerate(ns)]
    return packed, [ql.gemv_layout(p) for p in packed]


@pytest.mark.parametrize("rows", [1, 3, 5, 8, 9], ids=lambda r: f"rows{r}")
def test_linear_many_gives_each_weights_own_call_bitwise(ql, isa: str, rows: int) -> None:
    """One call for several weights on one input is, output for output, what each weight's own call
    gives: on the batched path (decode rows, every weight in the GEMV layout, int8 passes), on the
    GEMM above 8 rows, with float32 arithmetic, for bfloat16 input, with and without bias, and with
    a weight without the layout among them (each weight's own path then)."""
    packed, grouped = _siblings(ql)
    bias = [None, _randn(192, seed=5), None]
    for dtype in DTYPES:
        x = _randn(rows, 576, seed=rows, scale=2.0).to(dtype)
        for passes in (None, 0, 1, 2):
            for layouts in (grouped, [grouped[0], None, grouped[2]]):
                own = [
                    ql.linear(x, p, "q4_1", b, int8_passes=passes, gemv=g)
                    for p, b, g in zip(packed, bias, layouts, strict=True)
                ]
                many = ql.linear_many(x, packed, layouts, bias, int8_passes=passes)
                assert len(many) == 3
                for one, batched in zip(own, many, strict=True):
                    assert batched.dtype == dtype and torch.equal(batched, one), (dtype, passes)


def test_linear_many_bad_calls_name_the_problem(ql) -> None:
    packed, grouped = _siblings(ql, ns=(32, 16))
    with pytest.raises(RuntimeError, match=r"one bias and one gemv entry .* for each packed weight"):
        ql.ops.linear_q4_1_many(torch.ones(1, 576), packed, [None], grouped, -1)
    other = ql.quantize(torch.ones(16, 64), "q4_1")
    with pytest.raises(
        RuntimeError, match=r"last dimension \(576\) must be in_features of the packed weight \(64\)"
    ):
        ql.linear_many(torch.ones(1, 576), [packed[0], other], [grouped[0], None])
    with pytest.raises(RuntimeError, match="int8_passes must be"):
        ql.linear_many(torch.ones(1, 576), packed, grouped, int8_passes=3)


def _three_projections(ql) -> tuple[list[nn.Linear], list[nn.Linear]]:
    """q, k, v of one input and an out projection of another, as Q4_1 layers packed eagerly."""
    torch.manual_seed(0)
    qkv = [nn.Linear(576, n, bias=False) for n in (576, 192, 192)]
    out = [nn.Linear(192, 576, bias=False)]
    with torch.no_grad():
        for lin in qkv + out:
            ql.layers.Q4_1Linear.forward(lin, torch.ones(1, lin.in_features))  # packs
    return qkv, out


def test_graph_pass_batches_sibling_linears_into_one_call(ql) -> None:
    """Under torch.compile with the kernel's graph pass the three projections of one input become
    one `linear_q4_1_many` call and the projection of another input stays its own; the compiled
    outputs are bitwise the eager layers'. Without the pass nothing is batched."""
    qkv, (out,) = _three_projections(ql)

    def forward(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v = (ql.layers.Q4_1Linear.forward(lin, x) for lin in qkv)
        return q, k, v, ql.layers.Q4_1Linear.forward(out, k + v)

    x = _randn(1, 576, seed=3)
    with torch.no_grad():
        eager = forward(x)
        (graph_pass,) = ql.graph_passes()
        torch._dynamo.reset()
        options = {"post_grad_custom_post_pass": graph_pass, "fx_graph_cache": False}
        compiled = torch.compile(forward, dynamic=False, options=options)(x)
        assert graph_pass.batched == [3]
        for got, want in zip(compiled, eager, strict=True):
            assert torch.equal(got, want)
        torch._dynamo.reset()
        unbatched = ql.graph_passes()[0]
        torch.compile(forward, dynamic=False, options={"fx_graph_cache": False})(x)
        assert unbatched.batched == []  # a pass not given to the compile never ran


def test_layer_option_keeps_pytorchs_numbers(ql) -> None:
    """`use_int8_gemm(module, 0)`: the layer's prefill is F.linear on the dequantized weight
    (ATen's matmul, the same rounding); by default it is two int8 passes, 1 one pass: neither is."""
    lin = _linear(k=576, n=96)
    x = _randn(32, 576)
    y_default = ql.layers.Q4_1Linear.forward(lin, x)
    packed = lin._kernel_packed.data
    w = ql.dequantize(packed, "q4_1")
    _assert_close_to_float64(y_default, x, w, lin.bias, (packed, "q4_1", 2))
    ql.layers.use_int8_gemm(lin, 0)
    y_exact = ql.layers.Q4_1Linear.forward(lin, x)
    torch.testing.assert_close(y_exact, nn.functional.linear(x, w, lin.bias))
    assert not torch.allclose(y_default, y_exact, rtol=1e-7, atol=1e-7)
    ql.layers.use_int8_gemm(lin, 1)
    y_one = ql.layers.Q4_1Linear.forward(lin, x)
    _assert_close_to_float64(y_one, x, w, lin.bias, (packed, "q4_1", 1))
    assert (y_one - y_exact).abs().max() > 10 * (y_default - y_exact).abs().max()
    ql.layers.use_int8_gemm(lin, 2)
    assert torch.equal(ql.layers.Q4_1Linear.forward(lin, x), y_default)
    ql.layers.use_int8_gemm(lin, None)  # the default: 2 passes for float32, 1 for bfloat16
    assert torch.equal(ql.layers.Q4_1Linear.forward(lin, x), y_default)
    x16 = x.to(torch.bfloat16)
    one = ql.linear(x16, packed, "q4_1", lin.bias, int8_passes=1)
    assert torch.equal(ql.layers.Q4_1Linear.forward(lin, x16), one)
    with pytest.raises(ValueError, match="int8 passes must be 0, 1, 2 or None, got 3"):
        ql.layers.use_int8_gemm(lin, 3)


def test_forced_isa_from_the_environment(hub: dict) -> None:
    """KERNEL_EXPLORER_ISA picks the path at load, in a fresh process, as a user would force it."""
    from isa_paths import runnable_isas

    forced = runnable_isas()[-1]  # the portable path: every CPU runs it
    code = (
        "import torch; from pathlib import Path; from kernels import get_local_kernel\n"
        f"ql = get_local_kernel(Path({str(bundled_repo_path('quantized_linear'))!r}))\n"
        "p = ql.quantize(torch.ones(3, 64), 'q4_1')\n"
        "print(ql.isa(), ql.linear(torch.ones(1, 64), p, 'q4_1')[0, 0].item())"
    )
    env = {**os.environ, "KERNEL_EXPLORER_ISA": forced}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [forced, "64.0"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_vnni_and_maddubs_variants_compute_the_same_numbers(ql, fmt: str) -> None:
    """Where a path carries both a VNNI variant and AVX2's vpmaddubsw code (avx512: AVX512-VNNI;
    avx2: AVX-VNNI), both take the same integer dot products per block (VNNI through the
    activations offset by 128 and the weights' sums, maddubs through |w| and the activations
    carrying w's sign for Q8_0) and scale them in the same float32 order: bitwise-equal outputs.
    Shapes off the tiles (rows off 3 and 4, columns off 8 and 16), activations with outliers
    that use the whole int8 range, one and two passes."""
    packed = ql.quantize(_randn(203, 160, scale=0.05), fmt)
    x = _randn(37, 160, seed=4, scale=3.0)
    x[5, 7], x[11, 40], x[30, 100] = 90.0, -75.0, 1e-3  # a block's maximum far from the rest
    before = ql.isa()
    compared = []
    try:
        for isa in ql.isa_paths():
            ql.set_isa(isa)
            auto = ql.set_int8_dot("auto")
            y = {p: ql.linear(x, packed, fmt, int8_passes=p) for p in (1, 2)}
            maddubs = ql.set_int8_dot("maddubs")
            if maddubs == auto:
                continue
            assert (auto, maddubs) == ("vpdpbusd-zmm" if isa == "avx512" else "vpdpbusd-ymm", "vpmaddubsw")
            for p in (1, 2):
                assert torch.equal(ql.linear(x, packed, fmt, int8_passes=p), y[p]), (isa, p)
            compared.append(isa)
    finally:
        ql.set_int8_dot("auto")
        ql.set_isa(before)
    cpu = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "avx_vnni" in cpu.split() and "avx2" in ql.isa_paths():
        assert "avx2" in compared  # this CPU has AVX-VNNI: the avx2 path must have taken it
    if not compared:
        pytest.skip("no path has a VNNI variant this CPU runs")


def test_set_int8_dot_refuses_other_kinds(ql) -> None:
    with pytest.raises(RuntimeError, match=r"expected 'auto' .* or 'maddubs'"):
        ql.set_int8_dot("vnni")


def test_no_vnni_from_the_environment_in_a_fresh_process(hub: dict) -> None:
    """KERNEL_EXPLORER_NO_VNNI=1 starts a process on AVX2's maddubs code on the avx512 and avx2
    paths (AVX512-VNNI and AVX-VNNI where the CPU has them otherwise), and both agree bitwise
    (on a CPU without VNNI both runs take maddubs and the test only checks they agree)."""
    from isa_paths import runnable_isas

    paths = [isa for isa in ("avx512", "avx2") if isa in runnable_isas()]
    if not paths:
        pytest.skip("this CPU has no AVX-512 or AVX2 path")
    code = (
        "import torch; from pathlib import Path; from kernels import get_local_kernel\n"
        f"ql = get_local_kernel(Path({str(bundled_repo_path('quantized_linear'))!r}))\n"
        "g = torch.Generator().manual_seed(0)\n"
        "x, w = torch.randn(40, 96, generator=g), torch.randn(33, 96, generator=g)\n"
        f"for isa in {paths!r}:\n"
        "    ql.set_isa(isa); print(isa, ql.int8_dot())\n"
        "    for f in ('q8_0', 'q4_1'):\n"
        "        p = ql.quantize(w, f)\n"
        "        for n in (1, 2): torch.save(ql.linear(x, p, f, int8_passes=n), f'{isa}-{f}-{n}.pt')\n"
    )
    outputs, dots = {}, {}
    for no_vnni in ("", "1"):
        env = {k: v for k, v in os.environ.items() if k != "KERNEL_EXPLORER_NO_VNNI"}
        if no_vnni:
            env["KERNEL_EXPLORER_NO_VNNI"] = no_vnni
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run(
                [sys.executable, "-c", code], env=env, cwd=tmp, check=True, capture_output=True
            )
            dots[no_vnni] = dict(line.split() for line in out.stdout.decode().splitlines())
            outputs[no_vnni] = {f.name: torch.load(f) for f in Path(tmp).glob("*.pt")}
    assert set(dots["1"].values()) == {"vpmaddubsw"}
    assert len(outputs[""]) == 4 * len(paths)
    for name, y in outputs[""].items():
        assert torch.equal(outputs["1"][name], y), name


# ---------------------------------------------------------------------------------------------
# Packing


@pytest.mark.parametrize("fmt", FORMATS)
def test_packing_is_ggmls_reference_quantizer(ql, fmt: str) -> None:
    """Byte for byte what the `gguf` package's bit-exact port of ggml's quantizer writes."""
    gguf = pytest.importorskip("gguf")
    w = _randn(33, 96, scale=0.05)
    w[3, :32] = 0.25  # a constant block (d = 0)
    qtype = getattr(gguf.GGMLQuantizationType, fmt.upper())
    expected = gguf.quants.quantize(w.numpy(), qtype)
    assert torch.equal(ql.quantize(w, fmt), torch.from_numpy(expected))
    assert torch.equal(
        ql.dequantize(ql.quantize(w, fmt), fmt), torch.from_numpy(gguf.quants.dequantize(expected, qtype))
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_pack_dequantize_round_trips(ql, isa: str, fmt: str) -> None:
    packed = ql.quantize(_randn(129, 96, scale=3.0), fmt)
    w = ql.dequantize(packed, fmt)
    assert w.dtype == torch.float32 and w.shape == (129, 96)
    assert torch.equal(ql.quantize(w, fmt), packed)  # a dequantized weight packs to the same blocks
    assert torch.equal(ql.dequantize(ql.quantize(w, fmt), fmt), w)  # and gives back the same floats
    assert packed.shape == (129, 96 // 32 * ql.BLOCK_BYTES[fmt]) and packed.dtype == torch.uint8


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantization_error_is_within_half_a_step(ql, fmt: str) -> None:
    """On float weights the packing is lossy: about half a quantization step per block (ggml
    rounds with the exact scale, then stores it as float16)."""
    for dtype in (torch.float32, torch.bfloat16):
        w = _randn(64, 128).to(dtype)
        blocks = w.float().reshape(64, 4, 32)
        err = (ql.dequantize(ql.quantize(w, fmt), fmt).reshape(64, 4, 32) - blocks).abs().amax(-1)
        step = blocks.abs().amax(-1) / 127 if fmt == "q8_0" else (blocks.amax(-1) - blocks.amin(-1)) / 15
        # half a step, plus float16's rounding of the scale (times q, up to 127) and of the min
        assert (err <= 0.6 * step + 2.0**-10 * blocks.abs().amax(-1)).all()


@pytest.mark.slow
def test_default_model_weights_pack_to_the_checkpoint_exactly(ql) -> None:
    """Every Linear of SmolLM2 (its GGUF's Q4_1 blocks; the Q8_0 tied lm_head) dequantizes back to
    the very floats PyTorch runs, and the blocks are the file's own where Transformers did not
    reorder the rows (it permutes q_proj / k_proj rows for its rotary layout)."""
    gguf = pytest.importorskip("gguf")
    from kernel_explorer.loading import default_model_gguf, load_default_model

    model, _ = load_default_model(progress=False)
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert len(linears) == 211
    blocks = {t.name: t for t in gguf.GGUFReader(default_model_gguf()).tensors}
    same_rows = {"mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output"}  # fmt: skip
    compared = 0
    for name, module in linears.items():
        fmt = "q8_0" if name == "lm_head" else "q4_1"
        packed = ql.quantize(module.weight, fmt)
        assert torch.equal(ql.dequantize(packed, fmt), module.weight), name
        parts = name.split(".")
        key = ".".join(parts[-2:])
        if key in same_rows:
            raw = blocks[f"blk.{parts[2]}.{same_rows[key]}.weight"].data
            assert torch.equal(packed.flatten(), torch.from_numpy(raw.reshape(-1).copy())), name
            compared += 1
    raw = blocks["token_embd.weight"].data
    assert torch.equal(
        ql.quantize(linears["lm_head"].weight, "q8_0").flatten(), torch.from_numpy(raw.reshape(-1).copy())
    )
    assert compared == 150


# ---------------------------------------------------------------------------------------------
# Layers


def _linear(k: int = 64, n: int = 24, bias: bool = True, dtype: torch.dtype = torch.float32) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(k, n, bias=bias).to(dtype)


@pytest.mark.parametrize("layer", ["Q8_0Linear", "Q4_1Linear"])
def test_layer_packs_once_keeps_it_off_the_state_dict_and_repacks_on_change(ql, layer: str) -> None:
    cls = getattr(ql.layers, layer)
    fmt = "q8_0" if layer.startswith("Q8") else "q4_1"
    lin = _linear()
    x = _randn(3, 64)
    with torch.inference_mode():
        y = cls.forward(lin, x)
    packed = lin._kernel_packed
    assert "_kernel_packed" not in lin.state_dict() and all(
        "_kernel" not in n for n, _ in lin.named_buffers()
    )
    assert torch.equal(y, ql.linear(x, packed.data, fmt, lin.bias))
    cls.forward(lin, x)
    assert lin._kernel_packed is packed  # unchanged weight: no repack
    with torch.no_grad():
        lin.weight.mul_(2)  # in place: same pointer, new version
    y2 = cls.forward(lin, x)
    assert lin._kernel_packed is not packed
    _assert_close_to_float64(y2, x, ql.dequantize(lin._kernel_packed.data, fmt), lin.bias)
    lin.weight = nn.Parameter(torch.zeros(24, 64))  # a new tensor
    assert torch.equal(cls.forward(lin, x), lin.bias.expand(3, 24))
    del lin._kernel_packed  # what switching off does: the packed copy goes with the attribute
    assert not hasattr(lin, "_kernel_packed")


def test_layer_with_bfloat16_weights_and_no_bias(ql) -> None:
    lin = _linear(bias=False, dtype=torch.bfloat16)
    x = _randn(2, 64).to(torch.bfloat16)
    y = ql.layers.Q4_1Linear.forward(lin, x)
    assert y.dtype == torch.bfloat16
    _assert_close_to_float64(y, x, ql.dequantize(lin._kernel_packed.data, "q4_1"), None)


def test_layer_whose_weight_is_an_inference_tensor(ql) -> None:
    with torch.inference_mode():
        lin = _linear()  # made under inference mode: its weight has no version counter
    x = _randn(2, 64)
    y = ql.layers.Q8_0Linear.forward(lin, x)
    _assert_close_to_float64(y, x, ql.dequantize(lin._kernel_packed.data, "q8_0"), lin.bias)


def test_layers_kernelize_into_a_linear_subclass(ql) -> None:
    """kernels accepts the layers for nn.Linear's forward (its validation of the class and the
    signature) and switches exactly the instances of the named class."""
    from kernels import Mode, kernelize, replace_kernel_forward_from_hub, use_kernel_mapping

    from kernel_explorer._backend.repositories import local_layer_repository

    class NamedLinear(nn.Linear):
        pass

    replace_kernel_forward_from_hub(NamedLinear, "QuantizedLinearTest")
    model = nn.Sequential(NamedLinear(64, 32), nn.ReLU(), nn.Linear(32, 8))
    x = _randn(5, 64)
    with torch.inference_mode():
        eager = model(x)
        repo = local_layer_repository(bundled_repo_path("quantized_linear"), "Q8_0Linear")
        with use_kernel_mapping({"QuantizedLinearTest": {"cpu": repo}}, inherit_mapping=False):
            kernelize(model, mode=Mode.INFERENCE, device="cpu")
        kernel = model(x)
    assert "forward" in vars(model[0]) and "forward" not in vars(model[2])
    assert hasattr(model[0], "_kernel_packed") and not hasattr(model[2], "_kernel_packed")
    torch.testing.assert_close(kernel, eager, atol=0.05, rtol=0.05)  # Q8_0 of a float weight: lossy


# ---------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    ("weight", "match"),
    [
        (torch.ones(4, 64, dtype=torch.float64), r"cannot pack a torch.float64 weight.*PyTorch"),
        (torch.ones(4, 48), r"in_features=48 is not a positive multiple of the block size 32"),
        (torch.ones(4, 0), r"in_features=0"),
        (torch.ones(64), r"must be 2-D"),
    ],
)
def test_unpackable_weights_raise_one_line_value_errors(ql, weight: torch.Tensor, match: str) -> None:
    assert ql.pack_error(weight) is not None and "\n" not in ql.pack_error(weight)
    for fmt in FORMATS:
        with pytest.raises(ValueError, match=match):
            ql.quantize(weight, fmt)
    lin = _linear()
    lin.weight = nn.Parameter(weight, requires_grad=False)
    with pytest.raises(ValueError, match=match):
        ql.layers.Q4_1Linear.forward(lin, torch.ones(2, weight.shape[-1]))
    assert not hasattr(lin, "_kernel_packed")


def test_bad_calls_name_the_problem(ql) -> None:
    packed = ql.quantize(torch.ones(4, 64), "q4_1")
    with pytest.raises(
        RuntimeError, match=r"last dimension \(32\) must be in_features of the packed weight \(64\)"
    ):
        ql.linear(torch.ones(2, 32), packed, "q4_1")
    with pytest.raises(RuntimeError, match="bias of shape"):
        ql.linear(torch.ones(2, 64), packed, "q4_1", torch.ones(5))
    with pytest.raises(RuntimeError, match="whole blocks of 34 bytes"):
        ql.linear(torch.ones(2, 64), packed, "q8_0")  # a Q4_1 weight given as Q8_0
    with pytest.raises(RuntimeError, match="contiguous 2-D uint8"):
        ql.ops.linear_q4_1(torch.ones(2, 64), packed.float(), None)
    with pytest.raises(TypeError, match="float32, bfloat16 and float16 inputs"):
        ql.linear(torch.ones(2, 64, dtype=torch.float64), packed, "q4_1")
    with pytest.raises(ValueError, match="unknown format 'q4_0'"):
        ql.quantize(torch.ones(4, 64), "q4_0")


def test_backward_is_refused_with_a_reason(ql) -> None:
    packed = ql.quantize(torch.ones(4, 64), "q8_0")
    x = torch.ones(2, 64, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"linear_q8_0.*not implemented"):
        ql.linear(x, packed, "q8_0").sum().backward()
    assert ql.layers.Q8_0Linear.has_backward is False


# ---------------------------------------------------------------------------------------------
# Fake registrations


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck_passes_for_every_op(ql, dtype: torch.dtype) -> None:
    """PyTorch's custom-op checks: schema, fake kernel against the real one, AOT tracing."""
    w = _randn(7, 64).to(dtype)
    for fmt in FORMATS:
        packed = ql.quantize(w, fmt)
        cases = [
            (f"quantize_{fmt}", (w,)),
            (f"dequantize_{fmt}", (packed,)),
            (f"linear_{fmt}", (_randn(3, 64).to(dtype), packed, None)),
            (f"linear_{fmt}", (_randn(2, 20, 64).to(dtype), packed, _randn(7).to(dtype))),
        ]
        w16 = _randn(16, 64).to(dtype)
        p16 = ql.quantize(w16, fmt)
        cases += [
            (f"gemv_layout_{fmt}", (p16,)),
            (f"linear_{fmt}", (_randn(2, 64).to(dtype), p16, None, -1, ql.gemv_layout(p16, fmt))),
        ]
        if fmt == "q4_1":
            siblings = [ql.quantize(_randn(n, 64, seed=n), fmt) for n in (16, 32)]
            layouts = [ql.gemv_layout(p) for p in siblings]
            x = _randn(1, 64).to(dtype)
            cases += [
                ("linear_q4_1_many", (x, siblings, [None, _randn(32).to(dtype)], layouts, -1)),
                (
                    "linear_q4_1_many",
                    (_randn(2, 20, 64).to(dtype), siblings, [None, None], [None, layouts[1]], 1),
                ),
            ]
        for name, args in cases:
            result = torch.library.opcheck(getattr(ql.ops, name), args)
            assert set(result.values()) == {"SUCCESS"}, (name, result)


def test_packed_attribute_name_is_the_contract(ql) -> None:
    assert ql.layers.PACKED_ATTR == "_kernel_packed"
