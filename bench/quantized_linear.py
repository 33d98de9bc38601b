"""The bundled quantized-linear kernels against PyTorch's F.linear on SmolLM2's Linear shapes,
measured side by side in one run.

For each shape, format and row count (1 row: decode, the int8 GEMV; 512 rows: prefill, the int8
GEMM) six calls run interleaved on the same inputs: with float32 activations the kernel (two int8
passes: the default), its one-pass form (int8_passes=1, GGML's), its float32 form (int8_passes=0:
the float GEMV for 1 row, the dequantize-and-matmul path for 512, PyTorch's numbers) and F.linear,
then with bfloat16 activations the kernel and F.linear (on a bfloat16 copy of the dequantized
weight).
Each cell reports medians with 95% intervals and the median of per-round ratios with its interval
(kernel_explorer.measure.stats). The GEMV's effective bandwidth counts the packed bytes it reads,
against this machine's copy bandwidth (bench/kernel_ops.copy_bandwidth, measured before and after
the table: the host is shared and drifts). The int8 GEMM's rate (2 M N K / time) is set against
the int8 dot-product peak of its path's instruction (`int8_dot()`: vpdpbusd zmm or ymm, or
vpmaddubsw), measured by bench/int8_peak.c on one core and multiplied by the threads; a Q8_0 row
under vpmaddubsw also against the peak of Q8_0's own sequence (two multiplies per group: half).

    python bench/quantized_linear.py                  # torch's threads, both formats
    python bench/quantized_linear.py --threads 1 --formats q4_1
    KERNEL_EXPLORER_ISA=avx2 python bench/quantized_linear.py
    python bench/quantized_linear.py --threads 1 --clock cpu   # the code's cost on a loaded machine
    python bench/quantized_linear.py --int8-dot maddubs   # AVX2's vpmaddubsw on a VNNI machine
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import isa_env  # noqa: F401  (first: the AVX2 emulation, set before torch is imported)
import torch
import torch.nn.functional as F
from kernel_ops import copy_bandwidth, interleaved
from threads import use_threads

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


PEAK_KIND = {"vpdpbusd-zmm": "vnni", "vpdpbusd-ymm": "avxvnni", "vpmaddubsw": "maddubs"}


def int8_peak(kind: str | None) -> float | None:
    """GOP/s of one core running an int8 GEMM inner sequence (bench/int8_peak.c's `kind`), or None."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if kind is None or cc is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "int8_peak"
        subprocess.run([cc, "-O2", "-o", str(exe), str(Path(__file__).with_name("int8_peak.c"))], check=True)
        return float(subprocess.run([str(exe), kind], capture_output=True, text=True, check=True).stdout)


def _copies(t: torch.Tensor, cold: bool) -> list[torch.Tensor]:
    """`t` alone, or enough copies of it that a round through them leaves no cache holding one."""
    count = max(1, -(-COLD_BYTES // (t.numel() * t.element_size()))) if cold else 1
    return [t] + [t.clone() for _ in range(count - 1)]


def _calls(ql, fmt: str, x: torch.Tensor, packed: torch.Tensor, wd: torch.Tensor, cold: bool) -> list:
    """Kernel (2 int8 passes, 1, dequantize), F.linear, then kernel and F.linear on bfloat16, each
    call on the next weight copy."""
    x16 = x.to(torch.bfloat16)

    def rotating(fn, weights: list[torch.Tensor], xin: torch.Tensor):
        turn = [0]

        def call():
            turn[0] = (turn[0] + 1) % len(weights)
            return fn(xin, weights[turn[0]])

        return call

    op = getattr(ql.ops, f"linear_{fmt}")  # what the layers call (ql.linear adds Python checks)
    kernel = lambda a, p: op(a, p, None)  # noqa: E731
    one_pass = lambda a, p: op(a, p, None, 1)  # noqa: E731
    dequant = lambda a, p: op(a, p, None, 0)  # noqa: E731
    packs = _copies(packed, cold)
    return [
        rotating(kernel, packs, x),
        rotating(one_pass, packs, x),
        rotating(dequant, packs, x),
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
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="cpu: process CPU time")
    parser.add_argument("--int8-dot", choices=["auto", "maddubs"], default="auto",
                        help="maddubs: AVX2's vpmaddubsw even where the path has VNNI")  # fmt: skip
    args = parser.parse_args()
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu sums every thread's CPU time: use it with --threads 1")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(use_threads(args.threads))

    from kernels import get_local_kernel

    from kernel_explorer.build.builder import build_repo

    ql = get_local_kernel(build_repo("quantized_linear", progress=False).repo_path)
    dot = ql.set_int8_dot(args.int8_dot)
    roof = copy_bandwidth()
    threads = torch.get_num_threads()
    print(
        f"torch {torch.__version__}, {threads} threads, kernel ISA {ql.isa()} of {', '.join(ql.isa_paths())},"
        f" {args.clock} clock, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"why: {ql.isa_reason()}")
    peak = int8_peak(PEAK_KIND.get(dot))
    peak_q8 = int8_peak("maddubs_q8") if dot == "vpmaddubsw" else None
    if peak is not None:
        print(
            f"int8 GEMM dot product {dot} (--int8-dot {args.int8_dot}); its peak (bench/int8_peak.c "
            f"{PEAK_KIND[dot]}): {peak:.0f} GOP/s per core, x{threads} threads"
            + (f"; Q8_0's sequence (maddubs_q8): {peak_q8:.0f}" if peak_q8 else "")
        )
    print(f"copy bandwidth (256 MiB, read+write) before: {roof:.1f} GB/s")
    print("times in us: median [95% interval]; ratios: PyTorch time / kernel time per round, median [95%]")
    print(
        "int8x2: the int8 GEMM (prefill) or GEMV (decode), 2 passes; int8x1: 1 pass; dequant: int8_passes=0 "
        "(the float GEMV for 1 row)"
    )
    print(
        "last columns: GEMV bandwidth (packed bytes / time, % of copy) or the int8 GEMM's int8 GOP/s "
        "(both passes' products counted), % of peak (Q8_0 under vpmaddubsw: / % of its sequence's)\n"
    )
    header = f"{'shape':<14}{'in':>5}{'out':>6} {'fmt':<5}{'rows':>5}  "
    header += f"{'int8x2 fp32 us':<27}{'int8x1 fp32 us':<27}{'dequant fp32 us':<27}{'F.linear fp32 us':<27}"
    header += f"{'x int8x2':<22}{'x int8x1':<22}{'x dequant':<22}"
    header += f"{'kernel bf16 us':<27}{'F.linear bf16 us':<27}{'x bf16':<22}rate"
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
                    kf, of, df, tf, kb, tb = interleaved(fns, clock=clock)
                line = f"{name:<14}{k:>5}{n:>6} {fmt:<5}{rows:>5}  "
                line += "".join(f"{_interval_str(t):<27}" for t in (kf, of, df, tf))
                line += f"{_ratio_str(tf, kf):<22}{_ratio_str(tf, of):<22}{_ratio_str(tf, df):<22}"
                line += f"{_interval_str(kb):<27}{_interval_str(tb):<27}{_ratio_str(tb, kb):<22}"
                if rows == 1:
                    line += _bandwidth_str(packed.numel(), kf, roof)
                elif rows > 8:
                    for times, passes in ((kf, 2), (of, 1)):
                        gops = 2 * rows * n * k * passes / median_interval(times).median / 1e9
                        pct = f" {100 * gops / (peak * threads):3.0f}%" if peak else ""
                        if peak_q8 and fmt == "q8_0":
                            pct += f" / {100 * gops / (peak_q8 * threads):3.0f}%"
                        line += f"x{passes} {gops:5.0f} GOP/s{pct}  "
                print(line, flush=True)
    after = copy_bandwidth()
    print(
        f"\ncopy bandwidth after: {after:.1f} GB/s (before: {roof:.1f}; the % column uses the before figure)"
    )


if __name__ == "__main__":
    main()
