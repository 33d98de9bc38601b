"""The explorer's own view of the 1.7B model: `compare_model(compiled=True)` with every bundled kernel
and the Q4_1/Q8_0 Linears on, one row per measure, to hold against bench/decode_anchor.py
--model smollm2-1.7b-random (its compiled + kernels against compiled PyTorch ratios).

The model is bench/large_model.py's (SmolLM2-1.7B's shapes, random weights, from the cached Q4_1
GGUF). `compare_model(compiled=True)` deep-copies the model for its PyTorch side: ~6.8 GB of
float32 on top of the kernel model's ~2.1 GB of packed weights (the float pages of the kernel
model itself are mapped from the cache).

    python bench/compare_large.py [--pairs 3] [--decode-pairs 3] [--length 512] [--decode-tokens 64]
"""

from __future__ import annotations

import argparse
import os
import time

import isa_env  # first: the AVX2 emulation, set before torch is imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--decode-pairs", type=int, default=3)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--decode-tokens", type=int, default=64)
    args = parser.parse_args()

    import large_model
    from compiled_decode import kernel_model
    from quantized_model import TEXT

    from kernel_explorer.loading import load_default_model

    _, tokenizer = load_default_model(progress=False)
    model = large_model.load()
    explorer = kernel_model(model, tokenizer)
    ids = tokenizer(TEXT * 20, return_tensors="pt").input_ids[:, : args.prompt]
    from kernels import get_local_kernel

    from kernel_explorer.build.bundled import bundled_repo_path

    isa = get_local_kernel(bundled_repo_path("quantized_linear")).isa()
    print(f"{isa_env.describe(isa)}; load average before {os.getloadavg()}")
    t0 = time.perf_counter()
    handle = explorer.compare_model(
        inputs={"input_ids": ids},
        lengths=(args.length,),
        decode_tokens=args.decode_tokens,
        pairs=args.pairs,
        decode_pairs=args.decode_pairs,
        compiled=True,
    )
    handle.wait()
    took = time.perf_counter() - t0
    print(f"compare_model(compiled=True): {took:.0f} s; load average after {os.getloadavg()}")
    summary = explorer.results.model_summary()
    columns = ["measure", "tokens", "pairs", "speedup", "speedup_low", "speedup_high", "verdict"]
    print(summary[[c for c in columns if c in summary.columns]].to_string(index=False))
    agreement = explorer.results.to_pandas("model_agreement")
    if not agreement.empty:
        print(agreement.to_string(index=False))


if __name__ == "__main__":
    main()
