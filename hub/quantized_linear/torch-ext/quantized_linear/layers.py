"""Layers for `kernelize`: forwards for `nn.Linear` (uses its `weight` and `bias`; no `__init__`,
as `kernels` requires) that run the weight as Q8_0 or Q4_1 blocks.

The weight is packed on the first forward and kept on the module as the plain attribute
`_kernel_packed` (a `PackedWeight`): not a parameter or buffer, so never in the state dict, and
deleting the attribute releases it. It is packed again when the weight changes (another tensor,
or the same one written in place: its data pointer or `_version` moves). A weight that cannot be
packed raises ValueError with a one-line reason (`pack_error`).

Prefill (more than 8 rows) takes the int8 GEMM: a different numeric path from PyTorch's (the
activations are quantized to int8 per block of 32, and by default float32 ones' residual too).
Decode (up to 8 rows) takes the int8 GEMV, two passes for float32 activations, on a weight of
out_features a multiple of 16, which keeps its blocks regrouped for it (`PackedWeight.gemv`,
`gemv_layout`: 16 output rows per instruction; decode reads only that copy, prefill only the GGML
blocks, and the module holds both: twice the packed bytes); other weights take the float GEMV.
(Q8_0 took the float GEMV until 2026-12-07: 1.05 ms for SmolLM2's 30 MB lm_head on the Zen 4 host.)
`use_int8_gemm(module, 1)` takes one int8 pass for both (GGML's, faster, less accurate),
`use_int8_gemm(module, 2)` two everywhere, `use_int8_gemm(module, 0)` float32 arithmetic (and no
GEMV layout) for a module that needs PyTorch's numbers; the choice is the plain instance attribute
`_kernel_int8_passes`, read on every forward.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from . import gemv_layout, pack_error, quantize
from ._ops import ops

#: the attribute a packed weight is kept under on the module
PACKED_ATTR = "_kernel_packed"
#: weights of out_features a multiple of this also keep the GEMV layout (`gemv_layout`), unless
#: float32 arithmetic is asked for (`use_int8_gemm(module, 0)`)
GEMV_GROUP = 16
#: the attribute that sets one module's int8 passes (absent: -1, the default: see use_int8_gemm)
INT8_GEMM_ATTR = "_kernel_int8_passes"


def use_int8_gemm(module: nn.Module, passes: int | None) -> None:
    """`module`'s int8 passes: 2 (activations and their residual), 1 (GGML's int8 activations),
    both for prefill's GEMM and decode's GEMV; 0 / False (float32: dequantize and matmul,
    PyTorch's numbers, and the float GEMV); or None (the default: 2 for float32 inputs, 1 for
    bfloat16 / float16 ones, except decode's rows on a weight without the GEMV layout: the float
    GEMV)."""
    if passes is not None and int(passes) not in (0, 1, 2):
        raise ValueError(f"quantized-linear: int8 passes must be 0, 1, 2 or None, got {passes!r}")
    object.__setattr__(module, INT8_GEMM_ATTR, -1 if passes is None else int(passes))


class PackedWeight(NamedTuple):
    """A module's packed weight and the weight it was packed from (to tell when it is stale)."""

    format: str
    data_ptr: int  # of the float weight packed
    version: int | None  # its `_version` (None for an inference tensor, which has none)
    dtype: torch.dtype
    shape: torch.Size
    data: torch.Tensor  # uint8 GGML blocks
    gemv: torch.Tensor | None = None  # the same blocks in the GEMV layout (decode reads these)

    @property
    def nbytes(self) -> int:
        """The bytes one pass over the weight reads (either layout: the same blocks)."""
        return self.data.numel()


def _version(weight: torch.Tensor) -> int | None:
    # An inference tensor (a weight made under torch.inference_mode) has no version counter; it
    # cannot be written outside inference mode, so its data pointer identifies it.
    return None if weight.is_inference() else weight._version


def packed_weight(module: nn.Module, format: str) -> PackedWeight:
    """The module's weight packed as `format`, packing it now if it is missing or stale.

    Runs on every forward (211 times per decoded token of SmolLM2): the check is kept to a few
    attribute reads.
    """
    weight = module.weight
    cached = module.__dict__.get(PACKED_ATTR)
    int8 = module.__dict__.get(INT8_GEMM_ATTR, -1)
    grouped = int8 != 0 and weight.shape[0] % GEMV_GROUP == 0
    if (
        cached is not None
        and cached.data_ptr == weight.data_ptr()
        and cached.version == _version(weight)
        and cached.format == format
        and cached.shape == weight.shape
        and cached.dtype == weight.dtype
    ):
        if (cached.gemv is not None) == grouped:
            return cached
        packed = cached._replace(gemv=gemv_layout(cached.data, format) if grouped else None)
    else:
        reason = pack_error(weight)
        if reason is not None:
            raise ValueError(reason)
        with torch.no_grad():
            data = quantize(weight, format)
        packed = PackedWeight(
            format,
            weight.data_ptr(),
            _version(weight),
            weight.dtype,
            weight.shape,
            data,
            gemv_layout(data, format) if grouped else None,
        )
    object.__setattr__(module, PACKED_ATTR, packed)
    return packed


def traced_packed_weight(module: nn.Module, format: str) -> PackedWeight:
    """The packed weight as torch.compile traces a forward: the one an eager forward packed before.

    `packed_weight`'s staleness check reads `data_ptr()` and `_version`, which Dynamo cannot trace
    (a graph break in each of the 211 Linear calls of a decode step). Under compile the packed
    tensor becomes a constant of the graph, guarded by identity: run one eager forward first (it
    packs), and compile again after changing the weight (the graph keeps the old packed copy).
    """
    packed = getattr(module, PACKED_ATTR, None)  # not __dict__.get: Dynamo guards getattr, not that
    if packed is None or packed.format != format:
        raise RuntimeError(
            f"quantized-linear: the weight is not packed as {format} yet; run one forward eagerly "
            "before torch.compile traces this layer (packing reads Python state Dynamo cannot trace)"
        )
    return packed


def _traced_int8_passes(module: nn.Module) -> int:
    """The module's int8 passes as torch.compile traces a forward. Dynamo guards an attribute read
    with getattr (a graph built for one pass is rebuilt for two), but not one read from the
    module's `__dict__`, which eager forwards use (no `nn.Module.__getattr__` on every call)."""
    return getattr(module, INT8_GEMM_ATTR, -1)


class Q8_0Linear(nn.Module):
    """nn.Linear with its weight as Q8_0 blocks (fp16 scale per 32 weights, int8 values)."""

    has_backward = False
    can_torch_compile = True  # traced with the weight packed before (see traced_packed_weight)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        # the op straight away (its C++ checks the input): a decode step makes 211 of these calls
        if torch.compiler.is_compiling():
            packed = traced_packed_weight(self, "q8_0")
            return ops.linear_q8_0(input, packed.data, self.bias, _traced_int8_passes(self), packed.gemv)
        packed, int8 = packed_weight(self, "q8_0"), self.__dict__.get(INT8_GEMM_ATTR, -1)
        return ops.linear_q8_0(input, packed.data, self.bias, int8, packed.gemv)


class Q4_1Linear(nn.Module):
    """nn.Linear with its weight as Q4_1 blocks (fp16 scale and min per 32 weights, 4-bit values)."""

    has_backward = False
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            packed, int8 = traced_packed_weight(self, "q4_1"), _traced_int8_passes(self)
        else:
            packed, int8 = packed_weight(self, "q4_1"), self.__dict__.get(INT8_GEMM_ATTR, -1)
        return ops.linear_q4_1(input, packed.data, self.bias, int8, packed.gemv)
