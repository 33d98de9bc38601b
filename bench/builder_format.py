"""The bundled kernels built the new way (kernel-builder's format) against a build from before, side by side.

Issue 17 converted the bundled repositories to kernel-builder's format (a `[kernel.*]` section per
instruction set, `torch_binding.cpp` with `registration.h`). This checks their speed did not move:
both builds are loaded in one process (their op namespaces differ), and for each op, dtype and
shape of bench/kernel_ops.py the two kernels (out= form, the one layers use) run interleaved on the
same inputs. Each cell prints the median per-round ratio old/new (> 1: new faster) with its 95%
interval; the last line is the geometric mean of the cells' medians.

    python bench/builder_format.py OLD_HUB NEW_HUB [--tokens 1 512] [--ops rmsnorm silu_and_mul]

OLD_HUB and NEW_HUB are folders holding built repositories (`<cache>/hub`), e.g. one built by the
previous commit's `kernel-explorer build-hub` with KERNEL_EXPLORER_CACHE set elsewhere.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_ops import interleaved, make_case

from kernel_explorer.measure.stats import speedup_interval


def load_hub(folder: Path) -> dict:
    from kernels import get_local_kernel

    return {name: get_local_kernel(folder / name) for name in ("activation", "rmsnorm", "rotary")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 32, 512, 2048])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ops = ["rmsnorm", "silu_and_mul", "gelu_tanh", "silu", "rotary"]
    parser.add_argument("--ops", nargs="+", default=ops)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    torch.set_grad_enabled(False)  # the out= forms (what layers use at inference) refuse autograd
    old, new = load_hub(args.old), load_hub(args.new)
    isas = {name: (old[name].isa(), new[name].isa()) for name in old}
    print(f"# threads {torch.get_num_threads()}, ISA paths (old, new): {isas}; machine shared and loaded")
    print(f"# {'op':<13} {'dtype':<9} {'tokens':>6}  old/new median [95% interval]   old us   new us")
    medians = []
    for op in args.ops:
        for dtype_name in args.dtypes:
            dtype = getattr(torch, dtype_name)
            for tokens in args.tokens:
                old_case, _ = make_case(op, tokens, dtype, old, {})
                new_case, _ = make_case(op, tokens, dtype, new, {})
                t_old, t_new = interleaved([old_case.kernel_out, new_case.kernel_out], rounds=args.rounds)
                found = speedup_interval([a / b for a, b in zip(t_old, t_new, strict=True)])
                medians.append(found.median)
                us_old = sorted(t_old)[len(t_old) // 2] * 1e6
                us_new = sorted(t_new)[len(t_new) // 2] * 1e6
                print(
                    f"{op:<15} {dtype_name:<9} {tokens:>6}  {found.median:5.3f} "
                    f"[{found.low:5.3f}, {found.high:5.3f}]  {us_old:8.1f} {us_new:8.1f}"
                )
    geomean = math.exp(sum(math.log(m) for m in medians) / len(medians))
    print(f"# geometric mean of old/new over {len(medians)} cells: {geomean:.3f} (> 1: new is faster)")


if __name__ == "__main__":
    main()
