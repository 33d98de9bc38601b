"""CPU weight-only quantized linear layers: GGML's Q8_0 and Q4_1 blocks of 32 weights.

A weight is packed once (`quantize`) into a uint8 tensor of GGML blocks, byte for byte what a GGUF
file holds, and `linear` multiplies float32 / bfloat16 / float16 activations by it without ever
materialising the float weight: for a few rows (decode) a GEMV streaming the blocks once, and for
many rows (prefill) an int8 GEMM. The int8 paths (the GEMM, and the GEMV on Q4_1's GEMV layout or
where `int8_passes` asks for it) quantize the activations per block of 32 to int8 with
a float scale, as GGML's Q8 activations are, and take integer dot products (the GEMM: AVX512-VNNI,
AVX-VNNI where an AVX2 CPU has it, or AVX2's maddubs: `int8_dot()`; the GEMV: AVX2's maddubs on
both SIMD paths; every one gives the same results). That is a different numeric path from
PyTorch's, not a rounding difference: with `int8_passes=1` (GGML's way) each activation is rounded
to one of 255 levels of its block's largest value (error up to about 0.4% of that value; on SmolLM2
a logits KL of 1.9e-3 against PyTorch). `int8_passes=2`, the GEMM's default for float32
activations, quantizes the residual too and adds its products in the same sweep (x ~ d q + d_r q_r,
about 254 times less error, half the speed); bfloat16 and float16 activations default to one pass
there, whose error is of the order of their own rounding (and a second would lose to the 16-bit
GEMMs F.linear runs). The GEMV takes the same default where it is given the GEMV layout
(`gemv_layout`: there two passes were 1.4-1.9x the float GEMV on every path of the hosts measured,
`bench/decode_gemvs.py`) and float32 arithmetic on GGML's row-major blocks (where two passes were
no faster than it). `int8_passes=0` (`layers.use_int8_gemm(module, 0)`
for a layer) keeps float32 arithmetic for many rows too (the dequantize-and-matmul path), whose
results differ from F.linear on the dequantized weight in rounding order only. On a weight that is
the float dequantization of such blocks (a GGUF checkpoint), packing finds the same blocks again,
so the kernel runs the very same weights PyTorch runs.
"""

from __future__ import annotations

import torch

from ._ops import ops

#: the packed formats: Q8_0 (fp16 scale, int8 q: w = d*q) and Q4_1 (fp16 scale and min, 4-bit q: w = d*q + m)
FORMATS = ("q8_0", "q4_1")
#: weights per block, along in_features
BLOCK = 32
#: bytes per packed block
BLOCK_BYTES = {"q8_0": 34, "q4_1": 20}
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_format(format: str) -> None:
    if format not in FORMATS:
        raise ValueError(f"quantized-linear: unknown format {format!r}; use one of {', '.join(FORMATS)}")


def pack_error(weight: torch.Tensor) -> str | None:
    """Why `weight` cannot be packed (one line, for the user), or None when it can."""
    if weight.dim() != 2:
        shape = tuple(weight.shape)
        return f"quantized-linear: the weight must be 2-D (out_features, in_features), got shape {shape}"
    if not weight.is_cpu:
        where = weight.device
        return f"quantized-linear: packs CPU weights only, weight on {where}; keep this layer on PyTorch"
    if weight.dtype not in _DTYPES:
        return (
            f"quantized-linear: cannot pack a {weight.dtype} weight (float32, bfloat16 or float16 only); "
            "keep this layer on PyTorch"
        )
    if weight.shape[1] == 0 or weight.shape[1] % BLOCK:
        return (
            f"quantized-linear: in_features={weight.shape[1]} is not a positive multiple of the block size "
            f"{BLOCK}; keep this layer on PyTorch"
        )
    return None


def quantize(weight: torch.Tensor, format: str) -> torch.Tensor:
    """Pack a float weight (out, in) into `format` blocks: uint8 (out, in / 32 * BLOCK_BYTES[format])."""
    _check_format(format)
    reason = pack_error(weight)
    if reason is not None:
        raise ValueError(reason)
    return getattr(ops, f"quantize_{format}")(weight.detach())


def dequantize(packed: torch.Tensor, format: str) -> torch.Tensor:
    """The float32 weight (out, in) a packed one stands for (ggml's arithmetic, bit for bit)."""
    _check_format(format)
    return getattr(ops, f"dequantize_{format}")(packed)


def gemv_layout(packed: torch.Tensor, format: str = "q4_1") -> torch.Tensor:
    """A packed weight's blocks regrouped for decode (16 output rows read together; same shape and
    bytes, another order): what `linear(..., gemv=)` takes. out_features must be a multiple of 16."""
    _check_format(format)
    return getattr(ops, f"gemv_layout_{format}")(packed)


def _check_input(x: torch.Tensor) -> None:
    if not x.is_cpu:
        raise RuntimeError(
            f"quantized-linear: this is a CPU kernel, got a tensor on {x.device}; use PyTorch there"
        )
    if x.dtype not in _DTYPES:
        raise TypeError(
            f"quantized-linear: supports float32, bfloat16 and float16 inputs, got {x.dtype}; use PyTorch"
        )


def linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    format: str,
    bias: torch.Tensor | None = None,
    *,
    int8_passes: int | None = None,
    gemv: torch.Tensor | None = None,
) -> torch.Tensor:
    """x (..., in) @ W^T + bias -> (..., out) in x's dtype, W the packed weight.

    `int8_passes` 1 or 2 quantizes x per block of 32 to int8 (2: and its residual; see the module
    docstring): the int8 GEMV up to 8 rows, the int8 GEMM above; 0 keeps float32 arithmetic (the
    float GEMV, or dequantized panels and ATen's matmul); None: 2 for float32 x and 1 for 16-bit
    x, but the float GEMV up to 8 rows without `gemv`. `gemv`: `gemv_layout(packed, format)`,
    which the int8 GEMV (up to 8 rows) reads instead of `packed`: the same numbers up to rounding
    order, 16 output rows per instruction."""
    _check_format(format)
    _check_input(x)
    passes = -1 if int8_passes is None else int(int8_passes)
    return getattr(ops, f"linear_{format}")(x, packed, bias, passes, gemv)


def linear_many(
    x: torch.Tensor,
    packed: list[torch.Tensor],
    gemv: list[torch.Tensor | None],
    bias: list[torch.Tensor | None] | None = None,
    *,
    int8_passes: int | None = None,
) -> list[torch.Tensor]:
    """Several Q4_1 linears on one input: `[linear(x, p, "q4_1", b, gemv=g, int8_passes=...)]` for
    each weight, bitwise, in one call. Decode rows on weights that all have their GEMV layout share
    one quantization of x and one parallel region (a layer's q, k and v: one call's fixed costs
    instead of three); anything else runs each weight's own path. `graph_passes()` rewrites a
    compiled graph's sibling calls into this."""
    _check_input(x)
    if bias is None:
        bias = [None] * len(packed)
    passes = -1 if int8_passes is None else int(int8_passes)
    return list(ops.linear_q4_1_many(x, packed, bias, gemv, passes))


def isa() -> str:
    """The code path in use (avx512bf16, avx512, avx2 or portable): the fastest this CPU runs,
    timed once per machine at first use, unless KERNEL_EXPLORER_ISA or `set_isa` chose it."""
    return ops.isa()


def isa_reason() -> str:
    """Why `isa()` runs, in one line: the measured ratios against the other paths, or who forced it."""
    return ops.isa_reason()


def isa_paths() -> list[str]:
    """The code paths this build carries and this CPU runs, widest first."""
    return list(ops.isa_paths())


def set_isa(name: str) -> str:
    """Switch the code path (tests, benchmarks, comparing paths); one of `isa_paths()`."""
    return ops.set_isa(name)


def reset_isa() -> str:
    """Undo `set_isa`: back to the measured (or KERNEL_EXPLORER_ISA's) path; returns it."""
    return ops.reset_isa()


def int8_dot() -> str:
    """The int8 GEMM's dot-product instruction on the current path: vpdpbusd-zmm (AVX512-VNNI),
    vpdpbusd-ymm (AVX-VNNI, the avx2 path where the CPU has it), vpmaddubsw (AVX2) or scalar."""
    return ops.int8_dot()


def set_int8_dot(kind: str) -> str:
    """'maddubs' runs AVX2's vpmaddubsw code even where the path has a VNNI variant this CPU runs
    (to test and measure both on one machine; KERNEL_EXPLORER_NO_VNNI=1 starts so), 'auto' takes
    VNNI where the CPU has it; returns `int8_dot()`."""
    return ops.set_int8_dot(kind)


from . import _registrations, layers  # noqa: E402, F401  (fake kernels; layers use the functions above)


def graph_passes() -> list:
    """The Inductor graph passes this kernel offers for its own ops, for a caller's own compile
    (`torch.compile(..., options={"post_grad_custom_post_pass": graph_passes()})`): one,
    `SiblingLinears`, which batches Q4_1 linears on one input into `linear_many`'s op. Imported
    here, not with the package: Inductor is a heavy import an eager user never needs."""
    from ._graph_passes import SiblingLinears

    return [SiblingLinears()]


__all__ = [
    "BLOCK",
    "BLOCK_BYTES",
    "FORMATS",
    "dequantize",
    "gemv_layout",
    "graph_passes",
    "int8_dot",
    "isa",
    "isa_paths",
    "isa_reason",
    "layers",
    "linear",
    "linear_many",
    "pack_error",
    "quantize",
    "reset_isa",
    "set_int8_dot",
    "set_isa",
]
