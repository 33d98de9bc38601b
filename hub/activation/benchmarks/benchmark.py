"""`kernels benchmark <built repo>`: SiLU-and-mul at SmolLM2's MLP width (2 x 1536) and GELU-tanh.

Each workload writes into `self.out` (the out= form) and `verify_*` returns eager PyTorch's result,
which the runner compares with `self.out`.
"""

import torch
import torch.nn.functional as F
from kernels.benchmark import Benchmark

WIDTH = 1536


class SiluAndMulBenchmark(Benchmark):
    seed = 0

    def _inputs(self, tokens: int, dtype: torch.dtype) -> None:
        self.x = torch.randn(tokens, 2 * WIDTH, dtype=dtype, device=self.device)
        self.out = torch.empty(tokens, WIDTH, dtype=dtype, device=self.device)

    def _reference(self) -> torch.Tensor:
        return F.silu(self.x[..., :WIDTH]) * self.x[..., WIDTH:]

    def setup_decode_fp32(self) -> None:
        self._inputs(1, torch.float32)

    def benchmark_decode_fp32(self) -> None:
        self.kernel.silu_and_mul(self.x, out=self.out)

    def verify_decode_fp32(self) -> torch.Tensor:
        return self._reference()

    def setup_prefill_fp32(self) -> None:
        self._inputs(512, torch.float32)

    def benchmark_prefill_fp32(self) -> None:
        self.kernel.silu_and_mul(self.x, out=self.out)

    def verify_prefill_fp32(self) -> torch.Tensor:
        return self._reference()

    def setup_prefill_bf16(self) -> None:
        self._inputs(512, torch.bfloat16)

    def benchmark_prefill_bf16(self) -> None:
        self.kernel.silu_and_mul(self.x, out=self.out)

    def verify_prefill_bf16(self) -> torch.Tensor:
        return self._reference()


class GeluTanhBenchmark(Benchmark):
    seed = 0

    def setup(self) -> None:
        self.x = torch.randn(512, WIDTH, device=self.device)
        self.out = torch.empty_like(self.x)

    def benchmark_prefill_fp32(self) -> None:
        self.kernel.gelu_tanh(self.x, out=self.out)

    def verify_prefill_fp32(self) -> torch.Tensor:
        return F.gelu(self.x, approximate="tanh")
