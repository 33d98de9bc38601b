"""What the thread a kernel is called from costs: the bundled SiLU from the main thread and a worker.

The runner releases the starting thread's idle OpenMP pool before a worker-thread run
(kernel_explorer/measure/openmp.py). This prints the kernel's time per call on SmolLM2's SiLU shape
for a 15-token prompt, (15, 1536) float32, in the states that matter: the main thread alone, a
worker while the main thread keeps its pool (what background runs measured before), the same worker
after the main thread released its pool (what they measure now), and the main thread while a
worker's pool is alive. Each figure is the median of blocks of calls with its 95% interval
(measure/stats.py); F.silu, single-threaded at this size, is the control.

    python bench/thread_pools.py [--blocks 200]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable
from typing import Any


def _per_call(fn: Callable[[], Any], blocks: int, repeat: int = 20) -> str:
    from kernel_explorer.measure.stats import median_interval

    for _ in range(50):
        fn()
    seconds = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        seconds.append((time.perf_counter() - start) / repeat * 1e6)
    found = median_interval(seconds)
    return f"{found.median:6.1f} us [{found.low:.1f}, {found.high:.1f}]"


def _on_worker(fn: Callable[[], str]) -> str:
    out: list[str] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=200)
    args = parser.parse_args()

    import torch
    from kernels import get_local_kernel

    from kernel_explorer.build.bundled import bundled_repo_path
    from kernel_explorer.measure.openmp import release_thread_pool

    silu = get_local_kernel(bundled_repo_path("activation")).layers.Silu()
    x = torch.randn(15, 1536)
    kernel = lambda: _per_call(lambda: silu(x), args.blocks)  # noqa: E731
    eager = lambda: _per_call(lambda: torch.nn.functional.silu(x), args.blocks)  # noqa: E731
    big = torch.ones(512, 512)
    big @ big  # the main thread opens a parallel region, as loading a model does
    print(
        f"bundled SiLU, (15, 1536) float32, torch threads {torch.get_num_threads()}, load {os.getloadavg()}"
    )
    print(f"  main thread                               kernel {kernel()}  F.silu {eager()}")
    print(
        f"  worker, main thread's pool alive          kernel {_on_worker(kernel)}  F.silu {_on_worker(eager)}"
    )
    release_thread_pool()
    print(f"  worker, main thread's pool released (now) kernel {_on_worker(kernel)}")
    alive, go = threading.Event(), threading.Event()

    def keep_a_pool() -> None:
        silu(x)
        go.set()
        alive.wait()

    holder = threading.Thread(target=keep_a_pool)
    holder.start()
    go.wait()
    print(f"  main thread, a worker's pool alive        kernel {kernel()}")
    alive.set()
    holder.join()


if __name__ == "__main__":
    main()
