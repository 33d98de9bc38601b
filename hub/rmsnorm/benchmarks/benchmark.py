"""`kernels benchmark <built repo>`: RMSNorm at SmolLM2's width (576), one token and a 512-token prefill.

Each workload writes into `self.out` (the out= form) and `verify_*` returns eager PyTorch's result
(Transformers' LlamaRMSNorm), which the runner compares with `self.out`.
"""

import torch
from kernels.benchmark import Benchmark

HIDDEN, EPS = 576, 1e-6


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return weight * h.to(x.dtype)


class RmsNormBenchmark(Benchmark):
    seed = 0

    def _inputs(self, tokens: int, dtype: torch.dtype) -> None:
        self.x = torch.randn(tokens, HIDDEN, dtype=dtype, device=self.device)
        self.weight = (1 + 0.1 * torch.randn(HIDDEN, device=self.device)).to(dtype)
        self.out = torch.empty_like(self.x)

    def setup_decode_fp32(self) -> None:
        self._inputs(1, torch.float32)

    def benchmark_decode_fp32(self) -> None:
        self.kernel.rms_norm(self.x, self.weight, EPS, out=self.out)

    def verify_decode_fp32(self) -> torch.Tensor:
        return reference(self.x, self.weight)

    def setup_prefill_fp32(self) -> None:
        self._inputs(512, torch.float32)

    def benchmark_prefill_fp32(self) -> None:
        self.kernel.rms_norm(self.x, self.weight, EPS, out=self.out)

    def verify_prefill_fp32(self) -> torch.Tensor:
        return reference(self.x, self.weight)

    def setup_prefill_bf16(self) -> None:
        self._inputs(512, torch.bfloat16)

    def benchmark_prefill_bf16(self) -> None:
        self.kernel.rms_norm(self.x, self.weight, EPS, out=self.out)

    def verify_prefill_bf16(self) -> torch.Tensor:
        return reference(self.x, self.weight)
