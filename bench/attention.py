"""The bundled CPU attention (hub/flash_attn) against ATen SDPA, side by side in one run.

SmolLM2-135M's attention shapes (9 query heads, 3 KV heads, head_dim 64, batch 1): causal prefill
at 512 and 2048 tokens and one decode step (1 query token against 512 and 2048 cached tokens), in
float32 and bfloat16. SDPA runs as Transformers' sdpa path calls it (`is_causal` for prefill, not
for a one-token query, `enable_gqa=True`, (batch, heads, seq, dim) tensors); the kernel runs as
Transformers' flash-attention wrapper calls it (`flash_attn_func` on the transposed views,
`causal=True`, bottom-right aligned). The two run in interleaved pairs (alternating which goes
first); each cell reports medians with 95% intervals, the median per-pair speedup with its
interval (kernel_explorer.measure.stats), prefill GFLOP/s, and the issue's target. The anchor is
this machine's float32 matmul GFLOP/s (1024^3), measured in the same run. Every SIMD code path
this CPU runs gets its own rows (`--isa` picks some), after the path each case's dispatch chose
by measurement (per dtype, prefill or decode) and why (hub/common/csrc/kx_choice.h).

    python bench/attention.py                      # 2 threads, both dtypes, every path
    python bench/attention.py --threads 1 --dtypes float32
    python bench/attention.py --threads 1 --clock cpu   # CPU time: the code's cost on a loaded machine

On a machine shared with other work, wall time includes the time the process waits for a core
(a 100 ms call spans many scheduler slices); with one thread, `--clock cpu` (process CPU time)
measures what the code itself costs, so the ratio is the code's, not the scheduler's.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from threads import use_threads

from kernel_explorer.measure.stats import median_interval, speedup_interval

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64
# (case, query tokens, key tokens): targets from issue 18, per dtype
CASES = [("prefill", 512, 512), ("prefill", 2048, 2048), ("decode", 1, 512), ("decode", 1, 2048)]
TARGETS = {
    ("prefill", 512): {"float32": 1.3, "bfloat16": 1.3},
    ("prefill", 2048): {"float32": 1.0, "bfloat16": 1.5},
    ("decode", 512): {"float32": 1.5, "bfloat16": 5.0},
    ("decode", 2048): {"float32": 1.5, "bfloat16": 5.0},
}


CLOCK = time.perf_counter


def _pairs(a: Callable[[], object], b: Callable[[], object], seconds: float) -> tuple[list, list]:
    """Interleaved timings (seconds) of a and b, alternating which runs first, for about `seconds`."""
    a(), b()
    ta: list[float] = []
    tb: list[float] = []
    start = time.perf_counter()
    i = 0
    while (time.perf_counter() - start < seconds or i < 15) and i < 2000:
        for fn, out in ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta)):
            t0 = CLOCK()
            fn()
            out.append(CLOCK() - t0)
        i += 1
    return ta, tb


def matmul_gflops(seconds: float) -> str:
    x, y = torch.randn(1024, 1024), torch.randn(1024, 1024)
    times, _ = _pairs(lambda: x @ y, lambda: None, seconds)
    iv = median_interval([2 * 1024**3 / t / 1e9 for t in times])
    return f"{iv.median:.1f} GFLOP/s [{iv.low:.1f}, {iv.high:.1f}]"


def _error(out: torch.Tensor, exact: torch.Tensor) -> float:
    return (out.double() - exact).abs().max().item()


def run_case(fa, kind: str, lq: int, lk: int, dtype: torch.dtype, seconds: float) -> str:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, lq, HEAD_DIM, generator=gen).to(dtype)
    k = torch.randn(1, KV_HEADS, lk, HEAD_DIM, generator=gen).to(dtype)
    v = torch.randn(1, KV_HEADS, lk, HEAD_DIM, generator=gen).to(dtype)
    causal = kind == "prefill"
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    def kernel():
        return fa.flash_attn_func(qt, kt, vt, causal=True)

    exact = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), is_causal=causal, enable_gqa=True
    )
    err_s, err_k = _error(sdpa(), exact), _error(kernel().transpose(1, 2), exact)
    ts, tk = _pairs(sdpa, kernel, seconds)
    s_iv, k_iv = median_interval([t * 1e3 for t in ts]), median_interval([t * 1e3 for t in tk])
    speed = speedup_interval([a / b for a, b in zip(ts, tk, strict=True)])
    target = TARGETS[(kind, lk)][str(dtype).removeprefix("torch.")]
    flops = 4 * HEADS * HEAD_DIM * (lq * (lq + 1) // 2 if causal else lq * lk)
    rate = f"{flops / k_iv.median / 1e6:7.1f} vs {flops / s_iv.median / 1e6:5.1f}" if causal else " " * 16
    met = "met" if speed.median >= target else "NOT MET"
    unit, scale = ("ms", 1.0) if causal else ("us", 1e3)
    return (
        f"{kind:8s} {lq:5d}x{lk:<5d} {str(dtype)[6:]:9s} "
        f"{s_iv.median * scale:8.3f} [{s_iv.low * scale:.3f}, {s_iv.high * scale:.3f}] {unit}  "
        f"{k_iv.median * scale:8.3f} [{k_iv.low * scale:.3f}, {k_iv.high * scale:.3f}] {unit}  "
        f"{speed}  n={speed.n:<4d} {rate}  >= {target}x {met:7s}  err {err_k:.1e} vs {err_s:.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0, help="per cell, both implementations")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument(
        "--isa", nargs="+", help="code paths to time (default: every SIMD path this CPU runs)"
    )
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="cpu: process CPU time")
    args = parser.parse_args()
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu sums every thread's CPU time: use it with --threads 1")
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    threads = use_threads(args.threads)

    from kernels import get_local_kernel

    from kernel_explorer.build.builder import build_repo

    fa = get_local_kernel(build_repo("flash_attn", progress=False).repo_path)
    # each dtype, prefill and decode, has its own choice: "attention prefill bfloat16: avx512bf16: ..."
    chosen = {line.split(": ")[0]: line.split(": ")[1] for line in fa.isa_choices()}
    paths = args.isa or [p for p in fa.isa_paths() if p != "portable"] or ["portable"]
    print(
        f"torch {torch.__version__}, {threads}, "
        f"kernel paths {', '.join(fa.isa_paths())}, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs, {args.clock} clock"
    )
    print(f"dispatch: {fa.isa_reason()}")
    for line in fa.isa_choices():
        print(f"  {line}")
    print(f"anchor: float32 matmul 1024^3: {matmul_gflops(args.seconds)}")
    print(
        "path        case     q x k       dtype     SDPA median [95%]          kernel median [95%]        "
        "speedup [95%]       pairs GFLOP/s k vs SDPA  target       error vs float64 (kernel vs SDPA)"
    )
    for isa in paths:
        fa.set_isa(isa)
        for dtype in (getattr(torch, d) for d in args.dtypes):
            for kind, lq, lk in CASES:
                key = f"attention {'decode' if lq == 1 else 'prefill'} {str(dtype)[6:]}"
                mark = "*" if isa == chosen.get(key) else " "
                print(f"{isa + mark:<12}" + run_case(fa, kind, lq, lk, dtype, args.seconds), flush=True)
    fa.reset_isa()
    print("* the path dispatch chose for that dtype, prefill or decode")


if __name__ == "__main__":
    main()
