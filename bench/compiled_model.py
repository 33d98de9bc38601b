"""SmolLM2 under torch.compile: compiled with every bundled kernel against compiled PyTorch.

Target (issue 21): at 512-token prefill, the model with kernels compiled is no slower than compiled
PyTorch (>= 1.0x). Each side is compiled once (the model with its kernels switched on in kernels'
torch.compile mode, and an all-PyTorch deep copy), warmed up, then timed in interleaved pairs with
the order alternating; an A/A run (compiled PyTorch against itself) gives the noise floor. Printed:
the median ratio (compiled PyTorch time over compiled-with-kernels time) with its 95% interval, the
floor and the verdict, from `Explorer.compare_model(mode="torch.compile")`. With `--training`, a
training step at 128 tokens (eager, kernels in training mode) is measured in the same run.

    python bench/compiled_model.py [--lengths 512] [--pairs 15] [--training]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--training", action="store_true", help="also a training step at 128 tokens")
    options = parser.parse_args()

    import torch

    import kernel_explorer as kx
    from kernel_explorer import Explorer
    from kernel_explorer._backend.layer_forwards import kernel_module

    model, tokenizer = kx.load_default_model(progress=False)
    explorer = Explorer(model, tokenizer=tokenizer, include_transformers=False)
    for name in explorer.layers:
        explorer.on(name, mode="torch.compile")
    running = explorer.running()
    ids = {now.kernel_id for now in running if now.is_kernel}
    isas = sorted({str(kernel_module(i).isa()) for i in ids if hasattr(kernel_module(i), "isa")})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, kernel ISA {', '.join(isas)}")
    print(f"SmolLM2-135M fp32, {sum(n.is_kernel for n in running)}/{len(running)} instances on kernels")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    start = time.perf_counter()
    handle = explorer.compare_model(mode="torch.compile", lengths=tuple(options.lengths), pairs=options.pairs)
    print(f"compiled prefill: {time.perf_counter() - start:.0f} s including two compilations per length")
    if options.training:
        explorer.compare_model(mode="training", lengths=(128,), pairs=options.pairs, name="training")
    print("ratio = median of per-pair PyTorch time / kernel time, [95% interval]; floor: A/A")
    print()
    columns = f"{'measure':18} {'tokens':>6} {'pytorch ms':>10} {'kernel ms':>10}"
    print(f"{columns}  {'ratio [95%]':21} floor  verdict")
    for verdict in [r.values for r in explorer.results.records("model_verdict")]:
        pairs = [
            r.values
            for r in explorer.results.records("model_pair")
            if r.values.measure == verdict.measure and r.values.tokens == verdict.tokens
        ]
        pytorch_ms = statistics.median(p.pytorch_s for p in pairs) * 1e3
        kernel_ms = statistics.median(p.kernel_s for p in pairs) * 1e3
        ratio = f"{verdict.speedup:.3f}x [{verdict.speedup_low:.3f}, {verdict.speedup_high:.3f}]"
        print(
            f"{verdict.measure:18} {verdict.tokens:>6} {pytorch_ms:>10.1f} {kernel_ms:>10.1f}  {ratio:21} "
            f"{verdict.noise_floor:5.1%}  {verdict.verdict}"
        )
        if verdict.measure == "compiled prefill" and verdict.tokens == 512:
            if verdict.verdict == "slower":
                met = "MISSED (slower beyond the interval and the floor)"
            elif verdict.speedup >= 1.0:
                met = "met (median >= 1.0x, not slower)"
            else:
                met = "not shown (median below 1.0x, but no difference we can detect at this floor)"
            print(f"  target >= 1.0x at 512 tokens: {met}")
    for agreement in [r.values for r in explorer.results.records("training_agreement")]:
        print(
            f"training step {agreement.tokens} tokens: |loss diff| {agreement.loss_abs_diff:.2e}, worst "
            f"gradient {agreement.worst_parameter} rel err {agreement.worst_rel_err:.2e}, "
            f"min cosine {agreement.min_cosine:.6f}"
        )
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; run {handle.run_id}")


if __name__ == "__main__":
    main()
