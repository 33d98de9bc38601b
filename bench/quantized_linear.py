"""The bundled quantized-linear kernels against PyTorch's F.linear on SmolLM2's Linear shapes,
measured side by side in one run.

For each shape, format and row count (1 row: decode, the GEMV path; 512 rows: prefill, the GEMM
path) four calls run interleaved on the same inputs: the kernel and F.linear with float32
activations, then both with bfloat16 activations (F.linear on a bfloat16 copy of the dequantized
weight). Each cell reports medians with 95% intervals and the median of per-round ratios with its
interval (kernel_explorer.measure.stats). The GEMV's effective bandwidth counts the packed bytes it
reads, against this machine's copy bandwidth (bench/kernel_ops.copy_bandwidth, measured before and
after the table: the host is shared and drifts).

    python bench/quantized_linear.py                  # torch's threads, both formats
    python bench/quantized_linear.py --threads 1 --formats q4_1
    KERNEL_EXPLORER_ISA=avx2 python bench/quantized_linear.py
"""

from __future__ import annotations

import argparse
import os

import isa_env  # noqa: F401  (first: the AVX2 emulation, set before torch is imported)
import torch
import torch.nn.functional as F
from kernel_ops import copy_bandwidth, interleaved

from kernel_explorer.measure.stats import median_interval, speedup_interval

# SmolLM2-135M's Linear shapes (in_features, out_features) and the format its GGUF file stores them in
SHAPES: list[tuple[str, int, int, str]] = [
    ("q_proj,o_proj", 576, 576, "q4_1"),
    ("k_proj,v_proj", 576, 192, "q4_1"),
    ("gate,up_proj", 576, 1536, "q4_1"),
    ("down_proj", 1536, 576, "q4_1"),
    ("lm_head", 576, 49152, "q8_0"),
]


def _interval_str(seconds: list[float]) -> str:
    iv = median_interval(seconds)
    return f"{iv.median * 1e6:9.1f} [{iv.low * 1e6:.1f}, {iv.high * 1e6:.1f}]"


def _ratio_str(baseline: list[float], kernel: list[float]) -> str:
    iv = speedup_interval([b / k for b, k in zip(baseline, kernel, strict=True)])
    return f"{iv.median:5.2f}x [{iv.low:.2f}, {iv.high:.2f}]"


def _bandwidth_str(nbytes: int, seconds: list[float], roof: float) -> str:
    iv = median_interval(seconds)
    gbs = [nbytes / t / 1e9 for t in (iv.median, iv.high, iv.low)]
    pct = [100 * g / roof for g in gbs]
    return f"{gbs[0]:5.1f} GB/s {pct[0]:4.0f}% [{pct[1]:.0f}, {pct[2]:.0f}]"


COLD_BYTES = 256 << 20  # well past the last-level cache of the machines here (32 MiB)


def _copies(t: torch.Tensor, cold: bool) -> list[torch.Tensor]:
    """`t` alone, or enough copies of it that a round through them leaves no cache holding one."""
    count = max(1, -(-COLD_BYTES // (t.numel() * t.element_size()))) if cold else 1
    return [t] + [t.clone() for _ in range(count - 1)]


def _calls(ql, fmt: str, x: torch.Tensor, packed: torch.Tensor, wd: torch.Tensor, cold: bool) -> list:
    """Kernel and F.linear, float32 and bfloat16 activations, each call on the next weight copy."""
    x16 = x.to(torch.bfloat16)

    def rotating(fn, weights: list[torch.Tensor], xin: torch.Tensor):
        turn = [0]

        def call():
            turn[0] = (turn[0] + 1) % len(weights)
            return fn(xin, weights[turn[0]])

        return call

    op = getattr(ql.ops, f"linear_{fmt}")  # what the layers call (ql.linear adds Python checks)
    kernel = lambda a, p: op(a, p, None)  # noqa: E731
    packs = _copies(packed, cold)
    return [
        rotating(kernel, packs, x),
        rotating(F.linear, _copies(wd, cold), x),
        rotating(kernel, packs, x16),
        rotating(F.linear, _copies(wd.to(torch.bfloat16), cold), x16),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", default=["model", "q8_0", "q4_1"],
                        help="'model' is the format SmolLM2's file uses for the shape")  # fmt: skip
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 512])
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from kernels import get_local_kernel

    from kernel_explorer.builder import build_repo

    ql = get_local_kernel(build_repo("quantized_linear", progress=False).repo_path)
    roof = copy_bandwidth()
    forced = os.environ.get("KERNEL_EXPLORER_ISA")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, kernel ISA {ql.isa()}"
        + (f" (forced by KERNEL_EXPLORER_ISA={forced})" if forced else " (this CPU's best)")
    )
    print(f"copy bandwidth (256 MiB, read+write) before: {roof:.1f} GB/s")
    print("times in us: median [95% interval]; ratios: PyTorch time / kernel time per round, median [95%]")
    print("GEMV bandwidth: packed weight bytes / kernel time (fp32 activations), % of copy bandwidth\n")
    header = f"{'shape':<14}{'in':>5}{'out':>6} {'fmt':<5}{'rows':>5}  "
    for dtype in ("fp32", "bf16"):
        header += f"{'kernel ' + dtype + ' us':<27}{'F.linear ' + dtype + ' us':<27}{'x ' + dtype:<22}"
    header += "GEMV bandwidth"
    print(header)
    print("-" * len(header))
    gen = torch.Generator().manual_seed(0)
    for name, k, n, model_format in SHAPES:
        formats = list(dict.fromkeys(model_format if f == "model" else f for f in args.formats))
        for fmt in formats:
            w = torch.randn(n, k, generator=gen) * 0.05
            packed = ql.quantize(w, fmt)
            wd = ql.dequantize(packed, fmt)
            for rows in args.rows:
                x = torch.randn(rows, k, generator=gen)
                # Decode reads every weight from memory (SmolLM2's weights exceed the caches), so
                # each call takes the next of enough copies that none is still cached when it
                # comes round again; prefill's GEMM is compute-bound and reuses one copy.
                fns = _calls(ql, fmt, x, packed, wd, cold=rows <= 8)
                with torch.inference_mode():
                    kf, tf, kb, tb = interleaved(fns)
                line = f"{name:<14}{k:>5}{n:>6} {fmt:<5}{rows:>5}  "
                for kernel, torch_times in ((kf, tf), (kb, tb)):
                    line += f"{_interval_str(kernel):<27}{_interval_str(torch_times):<27}"
                    line += f"{_ratio_str(torch_times, kernel):<22}"
                if rows == 1:
                    line += _bandwidth_str(packed.numel(), kf, roof)
                print(line, flush=True)
    after = copy_bandwidth()
    print(
        f"\ncopy bandwidth after: {after:.1f} GB/s (before: {roof:.1f}; the % column uses the before figure)"
    )


if __name__ == "__main__":
    main()
