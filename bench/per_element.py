"""Per-element cost of each kernel on one core, data in L2: the compute side of a cell, free of the
memory roof and steady on a shared machine (the minimum over many calls, where a median moves
with the neighbours). Prints ns per output element for each ISA path given, with a tensor copy for
scale. On one core, a memory-bound op must stay under (bytes per element) / (copy GB/s per core).

    python bench/per_element.py                      # AVX-512 (this CPU's best) and AVX2, 1 thread
    python bench/per_element.py --isas avx2 portable --elements 65536
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from threads import use_threads


def best_of(fn: Callable[[], object], reps: int = 400) -> float:
    for _ in range(5):
        fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def cases(hub: dict, dtype: torch.dtype, n: int) -> dict[str, tuple[Callable[[], object], int]]:
    """name -> (the out= call, output elements), every op on about n elements of dtype."""
    act, rms, rot = hub["activation"], hub["rmsnorm"], hub["rotary"]
    x = (torch.randn(n) * 3).to(dtype)
    out = torch.empty_like(x)
    gated = (torch.randn(max(1, n // 2048), 4096) * 3).to(dtype)
    gated_out = torch.empty(gated.shape[0], 2048, dtype=dtype)
    rows = torch.randn(max(1, n // 4096), 4096).to(dtype)
    weight = torch.randn(4096).to(dtype)
    rows_out = torch.empty_like(rows)
    q = torch.randn(1, 4, max(1, n // 512), 128).to(dtype)
    cos = torch.randn(1, q.shape[2], 128).to(dtype)
    q_out = (torch.empty_like(q), torch.empty_like(q))
    table: dict[str, tuple[Callable[[], object], int]] = {"copy": (lambda: out.copy_(x), n)}
    for op in ["silu", "gelu", "gelu_tanh", "gelu_new", "gelu_fast", "gelu_quick"]:
        fn = getattr(act, op)
        table[op] = ((lambda fn=fn: fn(x, out=out)), n)
    table["silu_and_mul"] = (lambda: act.silu_and_mul(gated, out=gated_out), gated_out.numel())
    table["rmsnorm"] = (lambda: rms.rms_norm(rows, weight, 1e-6, out=rows_out), rows.numel())
    table["rotary"] = (lambda: rot.apply_rotary(q, q, cos, cos, out=q_out), 2 * q.numel())
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--elements", type=int, default=32768)
    parser.add_argument("--isas", nargs="+", default=None)
    args = parser.parse_args()
    print(use_threads(args.threads))

    from kernels import get_local_kernel

    from kernel_explorer.build.builder import build_hub

    hub = {b.name: get_local_kernel(b.repo_path) for b in build_hub(progress=False)}
    isas = args.isas or [hub["activation"].isa(), "avx2"]
    print(f"ns per output element, best of 400 calls, {args.threads} thread(s), {args.elements} elements")
    print(f"{'dtype':<9}{'op':<13}" + "".join(f"{isa:>12}" for isa in isas))
    for dtype in (torch.float32, torch.bfloat16):
        for name, (fn, n) in cases(hub, dtype, args.elements).items():
            cells = []
            for isa in isas:
                for module in hub.values():
                    module.set_isa(isa)
                cells.append(f"{best_of(fn) / n * 1e9:>12.3f}")
            print(f"{str(dtype)[6:]:<9}{name:<13}" + "".join(cells), flush=True)


if __name__ == "__main__":
    main()
