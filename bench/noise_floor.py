"""How steady this machine is: the floor under any repeatability figure.

A speedup repeats only as well as both of its times do. This script times plain work, with no
kernel and no allocation, to show how much the machine alone moves them:

1. Copies that fit in L2, fit in L3, and go to DRAM: window medians within one process.
2. PyTorch's own RMSNorm op sequence (LlamaRMSNorm, bf16, 512 x 4096: upcast, square, mean,
   rsqrt, scale, downcast, weight) replayed on preallocated buffers, so the allocator plays no
   part: window medians within one process, then the median of each of five fresh processes.
3. The same module called as users call it, with the default allocator: minor page faults per
   call, window by window. In some heap layouts glibc hands eager's freed temporaries back to the
   kernel, and every call then faults them in again.

Spread is the largest distance from the median, as in `bench/engine_check.py`'s repeatability check.

    python bench/noise_floor.py
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from engine_check import REPEAT_TOLERANCE, relative_spread  # the same yardstick as the repeatability check

WINDOWS = 10
CALLS_PER_WINDOW = 51
WARMUP_CALLS = 5


def _window_medians(fn: Callable[[], object], windows: int = WINDOWS) -> list[float]:
    """Median seconds per call in each window of back-to-back calls."""
    for _ in range(WARMUP_CALLS):
        fn()
    medians = []
    for _ in range(windows):
        times = []
        for _ in range(CALLS_PER_WINDOW):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return medians


def _spread_verdict(values: list[float]) -> str:
    spread = relative_spread(values)
    verdict = "within" if spread <= REPEAT_TOLERANCE else "OUTSIDE"
    return f"spread {spread:.1%} ({verdict} +-{REPEAT_TOLERANCE:.0%})"


def copies() -> None:
    import torch

    print("1. torch copy_ between preallocated fp32 buffers, GB/s per window (read + write)")
    for mib in (0.5, 8, 256):
        n = int(mib * 2**20) // 4
        source, target = torch.ones(n), torch.empty(n)
        repeat = max(1, int(32 / mib))

        def copy(source: torch.Tensor = source, target: torch.Tensor = target, repeat: int = repeat) -> None:
            for _ in range(repeat):
                target.copy_(source)

        rates = [2 * mib * 2**20 * repeat / seconds / 1e9 for seconds in _window_medians(copy)]
        print(f"   {mib:>5g} MiB: {' '.join(f'{r:.0f}' for r in rates)}   {_spread_verdict(rates)}")


def _eager_rmsnorm_replay() -> Callable[[], None]:
    """LlamaRMSNorm's bf16 forward, op for op, writing into buffers allocated once."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(512, 4096, generator=generator).to(torch.bfloat16)
    weight = torch.ones(4096, dtype=torch.bfloat16)
    upcast, squared, scaled = (torch.empty(512, 4096) for _ in range(3))
    variance = torch.empty(512, 1)
    downcast, out = (torch.empty(512, 4096, dtype=torch.bfloat16) for _ in range(2))

    def replay() -> None:
        upcast.copy_(x)
        torch.pow(upcast, 2, out=squared)
        torch.mean(squared, -1, keepdim=True, out=variance)
        variance.add_(1e-5).rsqrt_()
        torch.mul(upcast, variance, out=scaled)
        downcast.copy_(scaled)
        torch.mul(weight, downcast, out=out)

    return replay


def replay_in_one_process() -> None:
    times = [s * 1e6 for s in _window_medians(_eager_rmsnorm_replay())]
    print("2. PyTorch's RMSNorm ops (bf16 512x4096) on preallocated buffers, us per call")
    print(f"   one process, {WINDOWS} windows: {' '.join(f'{t:.0f}' for t in times)}")
    print(f"   {_spread_verdict(times)}")


def replay_across_processes(processes: int = 5) -> None:
    medians = []
    for _ in range(processes):
        result = subprocess.run(
            [sys.executable, __file__, "--replay-median"], capture_output=True, text=True, check=True
        )
        medians.append(float(result.stdout))
    print(f"   {processes} fresh processes, median each: {' '.join(f'{m:.0f}' for m in medians)}")
    print(f"   {_spread_verdict(medians)}")


def faults_per_call() -> None:
    import torch
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(4096, eps=1e-5).to(torch.bfloat16)
    x = torch.randn(512, 4096, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    print("3. LlamaRMSNorm bf16 512x4096 as called, default allocator: us per call / page faults per call")
    windows = []
    with torch.no_grad():
        for window in range(WINDOWS):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            (seconds,) = _window_medians(lambda: norm(x), windows=1)
            faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / (
                WARMUP_CALLS + CALLS_PER_WINDOW
            )
            windows.append(f"{seconds * 1e6:.0f}/{faults:.0f}")
            # Whatever else a session allocates moves the heap's top; a few sizes stand in for that.
            _ = torch.empty((window % 3 + 1) * 2**20)
    print(f"   {' '.join(windows)}")


def main() -> None:
    if sys.argv[1:] == ["--replay-median"]:
        print(statistics.median(_window_medians(_eager_rmsnorm_replay(), windows=5)) * 1e6)
        return
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    copies()
    replay_in_one_process()
    replay_across_processes()
    faults_per_call()


if __name__ == "__main__":
    main()
