"""Does each bundled op's measured dispatch run the fastest code path, cell by cell?

Each op at each dtype chooses its path (and its form, where it has several: a 16-bit activation's
table lookup or formula) by timing its own small workload at first use; quantized_linear keeps one
choice for all its ops (hub/common/csrc/kx_choice.h). This times every candidate (SIMD path this CPU
runs, times form) on each cell of bench/kernel_ops.py's grid (Llama-7B-sized LLM shapes), plus the
attention and quantized-linear cells, interleaved on the same inputs, and reports the fastest, the
chosen candidate's time against it (median of per-round ratios, 95% interval) and a verdict: "ok"
where the chosen one is the fastest, its interval reaches 1.0x, or the dispatch's own measurement
found the two level (its interval reached 1.0x: a difference it cannot resolve). It also measures what the
choice costs: every op of every repository chosen in a fresh process with an empty cache.

    python bench/isa_choice.py --threads 1              # one thread: process CPU time (default)
    python bench/isa_choice.py --threads 2 --tokens 1 512   # wall clock
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch
from kernel_ops import choice_key, choices, interleaved, make_case
from threads import use_threads

from kernel_explorer.measure.stats import median_interval, speedup_interval

OPS = {  # bench/kernel_ops.py's op -> its repository
    "rmsnorm": "rmsnorm",
    "silu": "activation",
    "silu_and_mul": "activation",
    "gelu": "activation",
    "gelu_tanh": "activation",
    "gelu_new": "activation",
    "gelu_fast": "activation",
    "gelu_quick": "activation",
    "rotary": "rotary",
}


def choice_cost(paths: dict[str, str]) -> str:
    """Seconds choosing every op of each repository takes in a fresh process with an empty cache."""
    code = (
        "import sys, time; from pathlib import Path; from kernels import get_local_kernel\n"
        "for name, path in zip(sys.argv[1::2], sys.argv[2::2]):\n"
        "    m = get_local_kernel(Path(path)); t = time.perf_counter()\n"
        "    m.isa_choices() if hasattr(m, 'isa_choices') else m.isa()\n"
        "    print(f'{name} {time.perf_counter() - t:.3f}')"
    )
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "KERNEL_EXPLORER_CACHE": cache}
        env.pop("KERNEL_EXPLORER_ISA", None)
        args = [a for name, path in paths.items() for a in (name, path)]
        out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    costs = {line.split()[0]: float(line.split()[1]) for line in out.stdout.splitlines()}
    listed = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in costs.items())
    return f"{sum(costs.values()) * 1e3:.0f} ms in all ({listed})"


def extra_cells(hub: dict) -> list[tuple[str, str, str, str, object]]:
    """(repo, label, dtype, op key, call) for attention prefill/decode and the quantized GEMM/GEMV."""
    gen = torch.Generator().manual_seed(0)
    cells = []
    fa, ql = hub["flash_attn"], hub["quantized_linear"]
    for dtype in (torch.float32, torch.bfloat16):
        for lq, lk in ((512, 512), (1, 512)):
            q = torch.randn(1, lq, 9, 64, generator=gen).to(dtype)
            k, v = (torch.randn(1, lk, 3, 64, generator=gen).to(dtype) for _ in range(2))
            cells.append(
                (
                    "flash_attn",
                    f"attention {lq}x{lk}",
                    str(dtype)[6:],
                    f"attention {'decode' if lq == 1 else 'prefill'} {str(dtype)[6:]}",
                    lambda q=q, k=k, v=v: fa.flash_attn_func(q, k, v, causal=True),
                )
            )
    packed = ql.quantize(torch.randn(1536, 576, generator=gen) * 0.05, "q4_1")
    for rows in (1, 512):
        x = torch.randn(rows, 576, generator=gen)
        cells.append(
            (
                "quantized_linear",
                f"q4_1 1536x576 {rows} rows",
                "float32",
                "quantized_linear",
                lambda x=x: ql.ops.linear_q4_1(x, packed),
            )
        )
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 32, 512, 2048])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads; 1: timed in process CPU time")
    args = parser.parse_args()
    print(use_threads(args.threads))

    from kernels import get_local_kernel

    from kernel_explorer.build.builder import build_hub

    built = {b.repo_path.name: b.repo_path for b in build_hub(progress=False)}
    hub = {name: get_local_kernel(path) for name, path in built.items()}
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f}, "
        f"{'process CPU time' if clock is time.process_time else 'wall clock'}"
    )
    print(f"cost of the choice, first use on a machine: {choice_cost({n: str(p) for n, p in built.items()})}")
    for name, module in hub.items():
        print(f"  {name}: {module.isa_reason()}")
    chosen = {name: choices(module) for name, module in hub.items()}
    own_lines = {
        name: (
            {line.split(": ")[0]: line for line in module.isa_choices()}
            if hasattr(module, "isa_choices")
            else {name: module.isa_reason()}
        )
        for name, module in hub.items()
    }
    paths = [p for p in hub["rmsnorm"].isa_paths() if p != "portable"]
    print(f"\npaths timed: {', '.join(paths)}; ratio: chosen candidate's time / fastest's, median [95%]\n")
    print(f"{'cell':<34}{'dtype':<10}{'chosen':<20}{'fastest':<20}{'ratio':<22}verdict   medians us")
    cells = []
    compiled: dict = {}
    for op, repo in OPS.items():
        for dtype_name in args.dtypes:
            for tokens in args.tokens:
                case, _ = make_case(op, tokens, getattr(torch, dtype_name), hub, compiled)
                key = choice_key(op, dtype_name, tokens, chosen[repo])
                cells.append((repo, f"{op} {tokens} tokens", dtype_name, key, case.kernel))
    cells += extra_cells(hub)
    misses = 0
    for repo, label, dtype_name, key, call in cells:
        module = hub[repo]
        mine = chosen[repo].get(key, module.isa())
        forms = [" lookup", " formula"] if len(mine.split()) > 1 else [""]
        candidates = [p + f for p in paths for f in forms]

        def on(candidate: str, module=module, call=call):
            return lambda: (module.set_isa(candidate), call())

        with torch.inference_mode():
            times = interleaved([on(c) for c in candidates], clock=clock)
        module.reset_isa()
        medians = [median_interval(t).median for t in times]
        fastest = candidates[medians.index(min(medians))]
        ratio = speedup_interval(
            [
                a / b
                for a, b in zip(times[candidates.index(mine)], times[candidates.index(fastest)], strict=True)
            ]
        )
        # ok: the fastest here, level with it here, or level with it in the dispatch's own measurement
        # (its choice cannot tell apart what its interval does not: "level with avx512 (1.00x [0.99, 1.01])")
        own = own_lines[repo].get(key, "")
        if key.endswith(" large") and f": as {key[: -len(' large')]}" in own:  # a size class following its op
            own = own_lines[repo].get(key[: -len(" large")], "")
        ok = fastest == mine or ratio.low <= 1.0 or f"level with {fastest} (" in own
        misses += not ok
        by_path = "  ".join(
            f"{c.replace(' ', ':')} {m * 1e6:.1f}" for c, m in zip(candidates, medians, strict=True)
        )
        print(
            f"{label:<34}{dtype_name:<10}{mine:<20}{fastest:<20}"
            f"{ratio.median:.2f}x [{ratio.low:.2f}, {ratio.high:.2f}]    "
            f"{'ok' if ok else 'SLOWER':<10}{by_path}",
            flush=True,
        )
    print(
        f"\ncells where the chosen candidate is measurably slower than the fastest: {misses} of {len(cells)}"
    )


if __name__ == "__main__":
    main()
