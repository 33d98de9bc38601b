"""What allocating a large output costs a kernel: the allocating form against out=, interleaved,
with `torch.empty(...).fill_` of the same size for scale. `--no-thp` turns transparent huge pages
off for this process (prctl PR_SET_THP_DISABLE), as on a machine where THP is `never`: then every
fresh output faults in 4 KiB pages.

    python bench/large_outputs.py [--no-thp] [--threads N]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics

import torch
from kernel_ops import INTERMEDIATE, interleaved
from threads import use_threads

PR_SET_THP_DISABLE = 41


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-thp", action="store_true")
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.no_thp:
        assert ctypes.CDLL(None).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0, "prctl failed"
    print(use_threads(args.threads))

    from kernels import get_local_kernel

    from kernel_explorer.build.builder import build_hub

    hub = {b.name: get_local_kernel(b.repo_path) for b in build_hub(progress=False)}
    act, rms = hub["activation"], hub["rmsnorm"]
    thp = "off for this process" if args.no_thp else "as the system has it"
    print(f"kernel ISA {act.isa()}, {torch.get_num_threads()} threads, THP {thp}; medians [p25, p75] in ms")
    gated = torch.randn(2048, 2 * INTERMEDIATE) * 3
    gated_out = torch.empty(2048, INTERMEDIATE)
    rows, weight = torch.randn(2048, 4096), torch.ones(4096)
    rows_out = torch.empty_like(rows)
    cells = {
        "silu_and_mul float32 2048": (
            lambda: act.silu_and_mul(gated),
            lambda: act.silu_and_mul(gated, out=gated_out),
            lambda: torch.empty(2048, INTERMEDIATE).fill_(1.0),
        ),
        "rms_norm float32 2048": (
            lambda: rms.rms_norm(rows, weight, 1e-6),
            lambda: rms.rms_norm(rows, weight, 1e-6, out=rows_out),
            lambda: torch.empty(2048, 4096).fill_(1.0),
        ),
    }
    for name, fns in cells.items():
        with torch.inference_mode():
            times = interleaved(list(fns), rounds=41)
        parts = []
        for label, t in zip(("allocating", "out=", "torch.empty+fill_"), times, strict=True):
            q = statistics.quantiles(t, n=4)
            parts.append(f"{label} {statistics.median(t) * 1e3:.2f} [{q[0] * 1e3:.2f}, {q[2] * 1e3:.2f}]")
        print(f"{name}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
