"""`kernels benchmark <built repo>`: rotary embedding on SmolLM2's query and key heads (9 and 3 x 64).

Each workload writes into `self.out` (the query half of the out= pair) and `verify_*` returns
Transformers' eager `apply_rotary_pos_emb` for the query, which the runner compares with `self.out`.
"""

import torch
from kernels.benchmark import Benchmark

Q_HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryBenchmark(Benchmark):
    seed = 0

    def _inputs(self, tokens: int, dtype: torch.dtype) -> None:
        self.q = torch.randn(1, Q_HEADS, tokens, HEAD_DIM, dtype=dtype, device=self.device)
        self.k = torch.randn(1, KV_HEADS, tokens, HEAD_DIM, dtype=dtype, device=self.device)
        angles = torch.rand(1, tokens, HEAD_DIM // 2, device=self.device) * 6.28
        angles = torch.cat((angles, angles), dim=-1)
        self.cos, self.sin = angles.cos().to(dtype), angles.sin().to(dtype)
        self.out = torch.empty_like(self.q)
        self.k_out = torch.empty_like(self.k)

    def _run(self) -> None:
        self.kernel.apply_rotary(self.q, self.k, self.cos, self.sin, out=(self.out, self.k_out))

    def _reference(self) -> torch.Tensor:
        cos, sin = self.cos.unsqueeze(1), self.sin.unsqueeze(1)
        return (self.q * cos) + (rotate_half(self.q) * sin)

    def setup_decode_fp32(self) -> None:
        self._inputs(1, torch.float32)

    def benchmark_decode_fp32(self) -> None:
        self._run()

    def verify_decode_fp32(self) -> torch.Tensor:
        return self._reference()

    def setup_prefill_fp32(self) -> None:
        self._inputs(512, torch.float32)

    def benchmark_prefill_fp32(self) -> None:
        self._run()

    def verify_prefill_fp32(self) -> torch.Tensor:
        return self._reference()

    def setup_prefill_bf16(self) -> None:
        self._inputs(512, torch.bfloat16)

    def benchmark_prefill_bf16(self) -> None:
        self._run()

    def verify_prefill_bf16(self) -> torch.Tensor:
        return self._reference()
