"""`kernels benchmark <built repo>`: attention at SmolLM2's shape (9 query, 3 KV heads of 64): one
token against a 512-token cache (decode) and a causal 512-token prefill.

The ops have no out= form, so each workload sets `self.out` to the call's result; `verify_*` returns
PyTorch's scaled_dot_product_attention on the same inputs, which the runner compares with `self.out`.
"""

import torch
import torch.nn.functional as F
from kernels.benchmark import Benchmark

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """SDPA on (batch, seqlen, heads, head_dim) tensors; causal only with seqlen_q == seqlen_k here."""
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal, enable_gqa=True
    )
    return out.transpose(1, 2)


class FlashAttnBenchmark(Benchmark):
    seed = 0

    def _inputs(self, queries: int, keys: int, dtype: torch.dtype) -> None:
        self.q = torch.randn(1, queries, HEADS, HEAD_DIM, dtype=dtype, device=self.device)
        self.k = torch.randn(1, keys, KV_HEADS, HEAD_DIM, dtype=dtype, device=self.device)
        self.v = torch.randn(1, keys, KV_HEADS, HEAD_DIM, dtype=dtype, device=self.device)
        self.causal = queries == keys

    def _run(self) -> None:
        self.out = self.kernel.flash_attn_func(self.q, self.k, self.v, causal=self.causal)

    def _reference(self) -> torch.Tensor:
        return reference(self.q, self.k, self.v, self.causal)

    def setup_decode_fp32(self) -> None:
        self._inputs(1, 512, torch.float32)

    def benchmark_decode_fp32(self) -> None:
        self._run()

    def verify_decode_fp32(self) -> torch.Tensor:
        return self._reference()

    def setup_prefill_fp32(self) -> None:
        self._inputs(512, 512, torch.float32)

    def benchmark_prefill_fp32(self) -> None:
        self._run()

    def verify_prefill_fp32(self) -> torch.Tensor:
        return self._reference()

    def setup_prefill_bf16(self) -> None:
        self._inputs(512, 512, torch.bfloat16)

    def benchmark_prefill_bf16(self) -> None:
        self._run()

    def verify_prefill_bf16(self) -> torch.Tensor:
        return self._reference()
