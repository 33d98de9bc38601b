import pytest
import torch
import torch.nn.functional as F

BLOCK_BYTES = {"q8_0": 34, "q4_1": 20}


def dequantize(packed, format):
    """GGML's formulas in PyTorch: Q8_0 w = d*q; Q4_1 w = d*q + m, low nibbles q[0..15]."""
    blocks = packed.reshape(packed.shape[0], -1, BLOCK_BYTES[format])
    d = blocks[..., :2].contiguous().view(torch.float16).float()
    if format == "q8_0":
        q = blocks[..., 2:].contiguous().view(torch.int8).float()
        return (d * q).reshape(packed.shape[0], -1)
    m = blocks[..., 2:4].contiguous().view(torch.float16).float()
    q = torch.cat((blocks[..., 4:] & 0x0F, blocks[..., 4:] >> 4), dim=-1).float()
    return (d * q + m).reshape(packed.shape[0], -1)


def int8_reference(x, packed, format):
    """What one int8 pass computes (more than 8 rows), in float64: x rounded per block of 32 to
    its int8 grid (round(x * 127 / max|x|) * max|x| / 127) against the weights, except Q4_1's
    block centre m + 8 d, which meets the exact x."""
    w = dequantize(packed, format).double()
    blocks = x.float().reshape(x.shape[0], -1, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    # a true division, as the kernel's 127.f / amax: `127 / amax` is reciprocal(amax) * 127 in
    # PyTorch, a second rounding that moved an activation near a rounding tie to the next level
    inv = torch.where(amax > 0, torch.full_like(amax, 127.0) / amax, torch.zeros_like(amax))
    xq = (torch.round(blocks * inv).double() * (amax.double() / 127)).reshape(x.shape)
    if format == "q8_0":
        return xq @ w.T
    b = packed.reshape(packed.shape[0], -1, 20)
    d, m = (b[..., i : i + 2].contiguous().view(torch.float16).float() for i in (0, 2))
    centre = (m + 8 * d).expand(-1, -1, 32).reshape(w.shape).double()
    return xq @ (w - centre).T + x.double() @ centre.T


@pytest.mark.parametrize("format", ["q8_0", "q4_1"])
def test_packing_is_ggml_blocks(kernel, format):
    weight = torch.randn(24, 96)
    packed = kernel.quantize(weight, format)
    assert packed.dtype == torch.uint8 and packed.shape == (24, 96 // 32 * BLOCK_BYTES[format])
    torch.testing.assert_close(kernel.dequantize(packed, format), dequantize(packed, format), atol=0, rtol=0)
    step = 1 / 127 if format == "q8_0" else 1 / 15
    err = (dequantize(packed, format) - weight).abs().max()
    assert err <= weight.abs().max() * step * 2  # within a quantization step of the block's range


@pytest.mark.parametrize("passes", [None, 2, 1, 0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 70])
@pytest.mark.parametrize("format", ["q8_0", "q4_1"])
def test_linear_matches_eager_with_the_dequantized_weight(kernel, format, rows, dtype, passes):
    """int8_passes=0: F.linear on the dequantized weight; one int8 pass (the int8 GEMV up to 8
    rows, the int8 GEMM above): the same on the activations' int8 grid (`int8_reference`); two
    passes: F.linear within 1e-3. None (the default, no GEMV layout): the float GEMV up to 8 rows,
    above them two passes for float32, one for bfloat16."""
    weight, bias = torch.randn(40, 128) * 128**-0.5, torch.randn(40)
    packed = kernel.quantize(weight, format)
    x = torch.randn(rows, 128).to(dtype)
    y = kernel.linear(x, packed, format, bias, int8_passes=passes)
    assert y.shape == (rows, 40) and y.dtype == dtype
    if passes is None:  # what the default chooses
        passes = 0 if rows <= 8 else 2 if dtype == torch.float32 else 1
    if passes == 1:
        ref = int8_reference(x, packed, format) + bias.double()
    else:
        ref = F.linear(x.double(), dequantize(packed, format).double(), bias.double())
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    if passes == 2:
        tol = max(tol, 1e-3)
    torch.testing.assert_close(y.double(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("passes", [1, 2])
@pytest.mark.parametrize("rows", [1, 3, 5])
def test_gemv_layout_gives_the_int8_gemvs_numbers(kernel, rows, passes):
    """`gemv_layout` regroups a Q4_1 weight's blocks for decode: `linear(..., gemv=)` on it takes
    the int8 GEMV's integers and scales, in another float32 order."""
    weight, bias = torch.randn(48, 128) * 128**-0.5, torch.randn(48)
    packed = kernel.quantize(weight, "q4_1")
    grouped = kernel.gemv_layout(packed)
    assert grouped.shape == packed.shape
    x = torch.randn(rows, 128)
    ref = kernel.linear(x, packed, "q4_1", bias, int8_passes=passes)
    y = kernel.linear(x, packed, "q4_1", bias, int8_passes=passes, gemv=grouped)
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
    if passes == 1:
        torch.testing.assert_close(
            y.double(), int8_reference(x, packed, "q4_1") + bias.double(), atol=1e-5, rtol=1e-5
        )


def test_bad_inputs_say_what_to_do(kernel):
    with pytest.raises(ValueError, match="unknown format"):
        kernel.quantize(torch.randn(4, 32), "q5_0")
    with pytest.raises(ValueError, match="multiple of the block size"):
        kernel.quantize(torch.randn(4, 33), "q8_0")


def test_layer(kernel):
    layer = kernel.layers.Q8_0Linear()
    layer.weight = torch.nn.Parameter(torch.randn(16, 64) * 0.125)
    layer.bias = None
    x = torch.randn(2, 5, 64)  # 10 rows: the int8 GEMM
    packed = kernel.quantize(layer.weight.detach(), "q8_0")
    torch.testing.assert_close(layer(x), F.linear(x, dequantize(packed, "q8_0")), atol=1e-3, rtol=1e-3)
    kernel.layers.use_int8_gemm(layer, 1)  # one pass: GGML's int8 activations
    ref = int8_reference(x.reshape(10, 64), packed, "q8_0").float().reshape(2, 5, 16)
    torch.testing.assert_close(layer(x), ref, atol=1e-5, rtol=1e-5)
    kernel.layers.use_int8_gemm(layer, 0)  # PyTorch's numbers
    torch.testing.assert_close(layer(x), F.linear(x, dequantize(packed, "q8_0")), atol=1e-5, rtol=1e-5)
