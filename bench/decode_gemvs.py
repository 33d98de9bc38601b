"""A decoded token's Q4_1 GEMVs of SmolLM2 in model order: the float GEMV, the int8 GEMV on GGML's
row-major blocks and on the GEMV layout, one pass and two, side by side in one run, each against a
plain read of memory timed in the same rounds.

The default model's 210 decoder Linears (q, k, v, o, gate, up, down of 30 layers) with their own
packed weights, one activation row each, called in the model's order as a decode step calls them:
so the weights stream from L3 or memory as they do in decode, not from L2 as a kernel timed alone
on one weight. `--shapes smollm2-1.7b`: the 168 decoder Linears of SmolLM2-1.7B's shapes (24
layers, 2048 wide, MLP 8192, no GQA), random weights quantized once per shape and copied per layer
(1.0 GB a token: memory, never cache). Each round times every case once (interleaved) and a read of
256 MB (a float32 sum: what these cores stream without computing); medians with their intervals,
per thread count, the bytes per second the packed weights stream at, and each case's share of the
read's rate in the same round.

    python bench/decode_gemvs.py [--rounds 30] [--threads 1 2] [--shapes smollm2-1.7b]

`KERNEL_EXPLORER_ISA=avx2` runs the avx2 path (bench/isa_env.py).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import isa_env  # first: the AVX2 emulation, set before torch is imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shapes", choices=["smollm2-135m", "smollm2-1.7b"], default="smollm2-135m")
    args = parser.parse_args()

    import torch
    from compiled_decode import kernel_model
    from kernels import get_local_kernel
    from torch import nn

    from kernel_explorer.build.bundled import bundled_repo_path
    from kernel_explorer.loading import load_default_model
    from kernel_explorer.measure.stats import median_interval

    ql = get_local_kernel(bundled_repo_path("quantized_linear"))
    if args.shapes == "smollm2-135m":
        model, tokenizer = load_default_model(progress=False)
        kernel_model(model, tokenizer)
        layers = [m for n, m in model.named_modules() if isinstance(m, nn.Linear) and "lm_head" not in n]
        weights = [
            (m._kernel_packed.data, ql.gemv_layout(m._kernel_packed.data), m.in_features) for m in layers
        ]
    else:
        weights = _large_weights(ql)
    total = sum(w.numel() for w, _, _ in weights)
    print(f"{len(weights)} Q4_1 weights, {total / 1e6:.1f} MB; {isa_env.describe(ql.isa())}")
    xs = {k: torch.randn(1, k) for k in {k for _, _, k in weights}}
    cases = {
        "float GEMV (default without the layout)": (0, False),
        "int8, GGML blocks, 1 pass": (1, False),
        "int8, GGML blocks, 2 passes": (2, False),
        "int8, GEMV layout, 1 pass": (1, True),
        "int8, GEMV layout, 2 passes (default)": (2, True),
    }

    plain = torch.ones(64 * 2**20)

    def read() -> float:
        t0 = time.perf_counter()
        plain.sum()
        return time.perf_counter() - t0

    def token(passes: int, grouped: bool) -> float:
        t0 = time.perf_counter()
        for packed, layout, k in weights:
            ql.linear(xs[k], packed, "q4_1", int8_passes=passes, gemv=layout if grouped else None)
        return time.perf_counter() - t0

    with torch.no_grad():
        for threads in args.threads:
            torch.set_num_threads(threads)
            times: dict[str, list[float]] = {name: [] for name in cases}
            reads: list[float] = []  # GB/s of the plain read, per round
            for _ in range(3):
                for case in cases.values():
                    token(*case)
            for r in range(args.rounds):
                names = list(cases)[r % len(cases) :] + list(cases)[: r % len(cases)]
                reads.append(plain.nbytes / read() / 1e9)
                for name in names:
                    times[name].append(token(*cases[name]))
            rate = median_interval(reads)
            print(
                f"\n{threads} thread(s): ms per token, median [interval]; a plain read streams "
                f"{rate.median:.1f} GB/s [{rate.low:.1f}, {rate.high:.1f}] in the same rounds"
            )
            for name, ts in times.items():
                iv = median_interval([t * 1e3 for t in ts])
                share = median_interval([total / t / 1e9 / gbs for t, gbs in zip(ts, reads, strict=True)])
                print(
                    f"  {name:40} {iv.median:6.2f} [{iv.low:5.2f}, {iv.high:5.2f}]   "
                    f"{total / iv.median / 1e6:5.1f} GB/s, {share.median:4.0%} of the read "
                    f"[{share.low:.0%}, {share.high:.0%}]"
                )


def _large_weights(ql: Any) -> list[tuple[Any, Any, int]]:
    """SmolLM2-1.7B's decoder Linears in model order (q, k, v, o, gate, up, down of 24 layers): one
    random weight quantized per shape, a copy of it per layer (so each layer streams its own)."""
    import torch

    h, f = 2048, 8192
    shapes = [(h, h), (h, h), (h, h), (h, h), (f, h), (f, h), (h, f)]
    generator = torch.Generator().manual_seed(0)
    packed = {s: ql.quantize(torch.randn(*s, generator=generator) * 0.02, "q4_1") for s in set(shapes)}
    weights = []
    for _ in range(24):
        for n, k in shapes:
            copy = packed[n, k].clone()
            weights.append((copy, ql.gemv_layout(copy), k))
    return weights


if __name__ == "__main__":
    main()
