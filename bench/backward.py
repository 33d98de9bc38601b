"""Backward of the fused kernels against eager PyTorch's autograd backward, side by side in one run.

RMSNorm (LlamaRMSNorm, weight requiring grad) and SiLU-and-mul (`silu(x[..., :d]) * x[..., d:]`)
at LLM shapes: the forward graph is built once and its backward replayed (`retain_graph=True`),
interleaved A B A B on the same inputs and the same output gradient, so each cell is the median
of per-round ratios eager / kernel, with the 10th-90th percentile range of those ratios. Also the
forward+backward pair (a fresh forward every round, as training runs it). Target: >= 1.5x eager's
backward at 512 and 2048 tokens.

    python bench/backward.py                        # float32 and bfloat16, 512 and 2048 tokens
    python bench/backward.py --isa avx2 --tokens 512
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch
from kernel_ops import HIDDEN, INTERMEDIATE, interleaved  # the same shapes and clock as kernel_ops.py
from transformers.models.llama.modeling_llama import LlamaRMSNorm

TARGET = 1.5


def _cases(
    op: str, tokens: int, dtype: torch.dtype, hub: dict
) -> tuple[Callable, Callable, Callable, Callable]:
    """(eager backward, kernel backward, eager forward+backward, kernel forward+backward)."""
    gen = torch.Generator().manual_seed(0)
    if op == "rmsnorm":
        x = torch.randn(tokens, HIDDEN, generator=gen).to(dtype).requires_grad_()
        norm = LlamaRMSNorm(HIDDEN, eps=1e-6).to(dtype)
        norm.weight.data = torch.randn(HIDDEN, generator=gen).to(dtype)
        leaves = (x, norm.weight)

        def eager_fwd() -> torch.Tensor:
            return norm(x)

        def kernel_fwd() -> torch.Tensor:
            return hub["rmsnorm"].rms_norm(x, norm.weight, 1e-6)

        grad = torch.randn(tokens, HIDDEN, generator=gen).to(dtype)
    else:
        x = (torch.randn(tokens, 2 * INTERMEDIATE, generator=gen) * 3).to(dtype).requires_grad_()
        leaves = (x,)

        def eager_fwd() -> torch.Tensor:
            return torch.nn.functional.silu(x[..., :INTERMEDIATE]) * x[..., INTERMEDIATE:]

        def kernel_fwd() -> torch.Tensor:
            return hub["activation"].silu_and_mul(x)

        grad = torch.randn(tokens, INTERMEDIATE, generator=gen).to(dtype)
    y_eager, y_kernel = eager_fwd(), kernel_fwd()

    def backward_of(y: torch.Tensor) -> Callable[[], object]:
        return lambda: torch.autograd.grad(y, leaves, grad, retain_graph=True)

    def step(fwd: Callable[[], torch.Tensor]) -> Callable[[], object]:
        return lambda: torch.autograd.grad(fwd(), leaves, grad)

    return backward_of(y_eager), backward_of(y_kernel), step(eager_fwd), step(kernel_fwd)


def _ratio(eager: list[float], kernel: list[float]) -> tuple[float, float, float]:
    ratios = sorted(e / k for e, k in zip(eager, kernel, strict=True))
    deciles = statistics.quantiles(ratios, n=10)
    return statistics.median(ratios), deciles[0], deciles[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument(
        "--ops", nargs="+", default=["rmsnorm", "silu_and_mul"], choices=["rmsnorm", "silu_and_mul"]
    )
    parser.add_argument("--isa", help="force a code path (avx512bf16, avx512, avx2, portable)")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    from kernels import get_local_kernel

    from kernel_explorer.build.builder import build_hub

    hub = {b.name: get_local_kernel(b.repo_path) for b in build_hub(progress=False)}
    if args.isa:
        for module in hub.values():
            module.set_isa(args.isa)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, kernel ISA {hub['rmsnorm'].isa()}")
    print(f"hidden {HIDDEN}, intermediate {INTERMEDIATE}; {args.rounds} interleaved rounds per cell")
    print("ratio = median of per-round eager / kernel, [10th-90th percentile]\n")
    header = (
        f"{'op':<13}{'dtype':<10}{'tokens':>6}  {'eager bwd us':>12}{'kernel bwd us':>14}"
        f"  {'bwd x eager':<22}{'fwd+bwd x eager':<22}"
    )
    print(header)
    print("-" * len(header))
    short = []
    for op in args.ops:
        for dtype_name in args.dtypes:
            for tokens in args.tokens:
                eager_bwd, kernel_bwd, eager_step, kernel_step = _cases(
                    op, tokens, getattr(torch, dtype_name), hub
                )
                t_eb, t_kb, t_es, t_ks = interleaved(
                    [eager_bwd, kernel_bwd, eager_step, kernel_step], args.rounds
                )
                bwd, step = _ratio(t_eb, t_kb), _ratio(t_es, t_ks)
                note = "" if bwd[0] >= TARGET else f"SHORT: < {TARGET}x"
                if note:
                    short.append(f"{op} {dtype_name} {tokens}")
                print(
                    f"{op:<13}{dtype_name:<10}{tokens:>6}  {statistics.median(t_eb) * 1e6:>12.0f}"
                    f"{statistics.median(t_kb) * 1e6:>14.0f}"
                    f"  {f'{bwd[0]:.2f}x [{bwd[1]:.2f}-{bwd[2]:.2f}]':<22}"
                    f"{f'{step[0]:.2f}x [{step[1]:.2f}-{step[2]:.2f}]':<22}{note}",
                    flush=True,
                )
    print(
        f"\ncells short of {TARGET}x on the backward: {len(short)}"
        + (f" ({', '.join(short)})" if short else "")
    )


if __name__ == "__main__":
    main()
