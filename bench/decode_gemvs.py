"""A decoded token's Q4_1 GEMVs of SmolLM2 in model order: the float GEMV, the int8 GEMV on GGML's
row-major blocks and on the GEMV layout, one pass and two, side by side in one run.

The default model's 210 decoder Linears (q, k, v, o, gate, up, down of 30 layers) with their own
packed weights, one activation row each, called in the model's order as a decode step calls them:
so the weights stream from L3 or memory as they do in decode, not from L2 as a kernel timed alone
on one weight. Each round times every case once (interleaved); medians with their intervals, per
thread count, and the bytes per second the packed weights stream at.

    python bench/decode_gemvs.py [--rounds 30] [--threads 1 2]

`KERNEL_EXPLORER_ISA=avx2` runs the avx2 path (bench/isa_env.py).
"""

from __future__ import annotations

import argparse
import time

import isa_env  # first: the AVX2 emulation, set before torch is imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    import torch
    from compiled_decode import kernel_model
    from kernels import get_local_kernel
    from torch import nn

    from kernel_explorer.build.bundled import bundled_repo_path
    from kernel_explorer.loading import load_default_model
    from kernel_explorer.measure.stats import median_interval

    ql = get_local_kernel(bundled_repo_path("quantized_linear"))
    model, tokenizer = load_default_model(progress=False)
    kernel_model(model, tokenizer)
    layers = [m for n, m in model.named_modules() if isinstance(m, nn.Linear) and "lm_head" not in n]
    weights = [(m._kernel_packed.data, ql.gemv_layout(m._kernel_packed.data), m.in_features) for m in layers]
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

    def token(passes: int, grouped: bool) -> float:
        t0 = time.perf_counter()
        for packed, layout, k in weights:
            ql.linear(xs[k], packed, "q4_1", int8_passes=passes, gemv=layout if grouped else None)
        return time.perf_counter() - t0

    with torch.no_grad():
        for threads in args.threads:
            torch.set_num_threads(threads)
            times: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(3):
                for case in cases.values():
                    token(*case)
            for r in range(args.rounds):
                names = list(cases)[r % len(cases) :] + list(cases)[: r % len(cases)]
                for name in names:
                    times[name].append(token(*cases[name]))
            print(f"\n{threads} thread(s): ms per token, median [interval]")
            for name, ts in times.items():
                iv = median_interval([t * 1e3 for t in ts])
                print(
                    f"  {name:40} {iv.median:6.2f} [{iv.low:5.2f}, {iv.high:5.2f}]   "
                    f"{total / iv.median / 1e6:5.1f} GB/s"
                )


if __name__ == "__main__":
    main()
