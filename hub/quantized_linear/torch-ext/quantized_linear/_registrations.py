"""Fake (meta) kernels of the quantized-linear ops, registered through torch.library.

With them, torch.compile and opcheck get shapes and dtypes without running the CPU kernel. The
ops have no backward (the layers say `has_backward = False`); their autograd kernel is PyTorch's
C++ not-implemented one, registered in torch-ext/torch_binding.cpp, so a backward through them fails
with the op's name instead of leaving an output silently without a gradient path.

Imported once per process per build (see the rmsnorm repository's _registrations.py for why).
"""

from __future__ import annotations

import torch

from ._ops import add_op_namespace_prefix

_BLOCK = 32
_BLOCK_BYTES = {"q8_0": 34, "q4_1": 20}


def _packed_shape(packed: torch.Tensor, format: str) -> tuple[int, int]:
    nbytes = _BLOCK_BYTES[format]
    torch._check(
        packed.dim() == 2 and packed.dtype == torch.uint8,
        lambda: f"the packed weight must be a 2-D uint8 tensor from quantize_{format}",
    )
    torch._check(
        packed.shape[1] % nbytes == 0, lambda: f"a {format} packed row holds whole blocks of {nbytes} bytes"
    )
    return packed.shape[0], packed.shape[1] // nbytes * _BLOCK


def _linear_out(
    x: torch.Tensor, packed: torch.Tensor, format: str, gemv: torch.Tensor | None
) -> torch.Tensor:
    n, k = _packed_shape(packed, format)
    torch._check(x.shape[-1] == k, lambda: "the input's last dimension must be in_features")
    torch._check(
        gemv is None or gemv.shape == packed.shape,
        lambda: f"gemv must be gemv_layout_{format} of the packed weight",
    )
    return x.new_empty((*x.shape[:-1], n))


def _register(format: str) -> None:
    nbytes = _BLOCK_BYTES[format]

    @torch.library.register_fake(add_op_namespace_prefix(f"quantize_{format}"))
    def _quantize_fake(weight: torch.Tensor) -> torch.Tensor:
        torch._check(weight.dim() == 2, lambda: "the weight must be 2-D (out_features, in_features)")
        torch._check(weight.shape[1] % _BLOCK == 0, lambda: f"in_features must be a multiple of {_BLOCK}")
        return weight.new_empty((weight.shape[0], weight.shape[1] // _BLOCK * nbytes), dtype=torch.uint8)

    @torch.library.register_fake(add_op_namespace_prefix(f"dequantize_{format}"))
    def _dequantize_fake(packed: torch.Tensor) -> torch.Tensor:
        n, k = _packed_shape(packed, format)
        return packed.new_empty((n, k), dtype=torch.float32)

    @torch.library.register_fake(add_op_namespace_prefix(f"gemv_layout_{format}"))
    def _gemv_layout_fake(packed: torch.Tensor) -> torch.Tensor:
        n, _ = _packed_shape(packed, format)
        torch._check(n % 16 == 0, lambda: "the GEMV layout takes out_features in groups of 16")
        return torch.empty_like(packed)

    @torch.library.register_fake(add_op_namespace_prefix(f"linear_{format}"))
    def _linear_fake(
        x: torch.Tensor,
        packed: torch.Tensor,
        bias: torch.Tensor | None = None,
        int8_passes: int = -1,
        gemv: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return _linear_out(x, packed, format, gemv)


@torch.library.register_fake(add_op_namespace_prefix("linear_q4_1_many"))
def _linear_many_fake(
    x: torch.Tensor,
    packed: list[torch.Tensor],
    bias: list[torch.Tensor | None],
    gemv: list[torch.Tensor | None],
    int8_passes: int = -1,
) -> list[torch.Tensor]:
    torch._check(
        len(packed) > 0 and len(bias) == len(packed) and len(gemv) == len(packed),
        lambda: "give one bias and one gemv entry (None where there is none) for each packed weight",
    )
    return [_linear_out(x, p, "q4_1", g) for p, g in zip(packed, gemv, strict=True)]


for _format in _BLOCK_BYTES:
    _register(_format)
