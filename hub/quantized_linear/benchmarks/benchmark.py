"""`kernels benchmark <built repo>`: SmolLM2's MLP up projection (576 -> 1536) with Q8_0 and Q4_1
weights, one token (the GEMV path) and a 512-token prefill (the int8 GEMM's two passes, the
default; `_int8x1` one pass; `_dequant` the dequantize-and-matmul path).

The op has no out= form, so each workload sets `self.out` to the call's result. `verify_*` returns
eager PyTorch's F.linear with the weight the packed blocks stand for (dequantized here in PyTorch,
GGML's formulas), which the runner compares with `self.out`; for one int8 pass it first rounds the
activations to the kernel's int8 grid (per block of 32: round(x * 127 / max|x|), times
max|x| / 127) and, for Q4_1, gives the weights' centre m + 8 d the exact activations, as the
kernel does: one pass is a different numeric path from F.linear on the float activations (about
0.5% RMS of the output apart), and this is its reference. Two passes are within 2e-5 RMS of F.linear.
"""

import torch
import torch.nn.functional as F
from kernels.benchmark import Benchmark

IN_FEATURES, OUT_FEATURES, BLOCK = 576, 1536, 32


def dequantize(packed: torch.Tensor, format: str) -> torch.Tensor:
    """The float32 weight of GGML blocks: Q8_0 w = d*q; Q4_1 w = d*q + m (low nibbles q[0..15])."""
    out = packed.shape[0]
    if format == "q8_0":
        blocks = packed.reshape(out, -1, 34)
        d = blocks[..., :2].contiguous().view(torch.float16).float()
        q = blocks[..., 2:].contiguous().view(torch.int8).float()
        return (d * q).reshape(out, -1)
    blocks = packed.reshape(out, -1, 20)
    d = blocks[..., 0:2].contiguous().view(torch.float16).float()
    m = blocks[..., 2:4].contiguous().view(torch.float16).float()
    nibbles = blocks[..., 4:]
    q = torch.cat((nibbles & 0x0F, nibbles >> 4), dim=-1).float()
    return (d * q + m).reshape(out, -1)


def q4_1_centres(packed: torch.Tensor) -> torch.Tensor:
    """Per weight, its Q4_1 block's m + 8 d (what the int8 GEMM multiplies by the exact x)."""
    blocks = packed.reshape(packed.shape[0], -1, 20)
    d = blocks[..., 0:2].contiguous().view(torch.float16).float()
    m = blocks[..., 2:4].contiguous().view(torch.float16).float()
    return (m + 8 * d).expand(-1, -1, BLOCK).reshape(packed.shape[0], -1)


def int8_grid(x: torch.Tensor) -> torch.Tensor:
    """x rounded per block of 32 to the int8 activations' grid the kernel quantizes it to."""
    blocks = x.reshape(*x.shape[:-1], -1, BLOCK)
    amax = blocks.abs().amax(-1, keepdim=True)
    inv = torch.where(amax > 0, 127 / amax, torch.zeros_like(amax))
    return (torch.round(blocks * inv) * (amax / 127)).reshape(x.shape)


class QuantizedLinearBenchmark(Benchmark):
    seed = 0

    def _inputs(self, tokens: int, format: str) -> None:
        weight = torch.randn(OUT_FEATURES, IN_FEATURES, device=self.device) * IN_FEATURES**-0.5
        self.format = format
        self.packed = self.kernel.quantize(weight, format)
        self.x = torch.randn(tokens, IN_FEATURES, device=self.device)

    def _run(self, int8_passes: int | None = None) -> None:
        self.out = self.kernel.linear(self.x, self.packed, self.format, int8_passes=int8_passes)

    def _reference(self) -> torch.Tensor:
        return F.linear(self.x, dequantize(self.packed, self.format))

    def _int8_reference(self) -> torch.Tensor:
        w = dequantize(self.packed, self.format)
        if self.format == "q8_0":
            return F.linear(int8_grid(self.x), w)
        centre = q4_1_centres(self.packed)
        return F.linear(int8_grid(self.x), w - centre) + F.linear(self.x, centre)

    def setup_decode_q8_0(self) -> None:
        self._inputs(1, "q8_0")

    def benchmark_decode_q8_0(self) -> None:
        self._run()

    def verify_decode_q8_0(self) -> torch.Tensor:
        return self._reference()

    def setup_prefill_q8_0(self) -> None:
        self._inputs(512, "q8_0")

    def benchmark_prefill_q8_0(self) -> None:
        self._run()

    def verify_prefill_q8_0(self) -> torch.Tensor:
        return self._reference()

    def setup_prefill_q8_0_int8x1(self) -> None:
        self._inputs(512, "q8_0")

    def benchmark_prefill_q8_0_int8x1(self) -> None:
        self._run(int8_passes=1)

    def verify_prefill_q8_0_int8x1(self) -> torch.Tensor:
        return self._int8_reference()

    def setup_prefill_q8_0_dequant(self) -> None:
        self._inputs(512, "q8_0")

    def benchmark_prefill_q8_0_dequant(self) -> None:
        self._run(int8_passes=0)

    def verify_prefill_q8_0_dequant(self) -> torch.Tensor:
        return self._reference()

    def setup_decode_q4_1(self) -> None:
        self._inputs(1, "q4_1")

    def benchmark_decode_q4_1(self) -> None:
        self._run()

    def verify_decode_q4_1(self) -> torch.Tensor:
        return self._reference()

    def setup_prefill_q4_1(self) -> None:
        self._inputs(512, "q4_1")

    def benchmark_prefill_q4_1(self) -> None:
        self._run()

    def verify_prefill_q4_1(self) -> torch.Tensor:
        return self._reference()

    def setup_prefill_q4_1_int8x1(self) -> None:
        self._inputs(512, "q4_1")

    def benchmark_prefill_q4_1_int8x1(self) -> None:
        self._run(int8_passes=1)

    def verify_prefill_q4_1_int8x1(self) -> torch.Tensor:
        return self._int8_reference()

    def setup_prefill_q4_1_dequant(self) -> None:
        self._inputs(512, "q4_1")

    def benchmark_prefill_q4_1_dequant(self) -> None:
        self._run(int8_passes=0)

    def verify_prefill_q4_1_dequant(self) -> torch.Tensor:
        return self._reference()
