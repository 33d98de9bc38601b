"""`kernels benchmark <built repo>`: SmolLM2's MLP up projection (576 -> 1536) with Q8_0 and Q4_1
weights, one token (the GEMV path) and a 512-token prefill (the GEMM path).

The op has no out= form, so each workload sets `self.out` to the call's result; `verify_*` returns
eager PyTorch's F.linear with the weight the packed blocks stand for (dequantized here in PyTorch,
GGML's formulas), which the runner compares with `self.out`.
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


class QuantizedLinearBenchmark(Benchmark):
    seed = 0

    def _inputs(self, tokens: int, format: str) -> None:
        weight = torch.randn(OUT_FEATURES, IN_FEATURES, device=self.device) * IN_FEATURES**-0.5
        self.format = format
        self.packed = self.kernel.quantize(weight, format)
        self.x = torch.randn(tokens, IN_FEATURES, device=self.device)

    def _run(self) -> None:
        self.out = self.kernel.linear(self.x, self.packed, self.format)

    def _reference(self) -> torch.Tensor:
        return F.linear(self.x, dequantize(self.packed, self.format))

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
