"""Bundled CPU kernels against eager PyTorch and torch.compile, measured side by side in one run.

For each op, dtype and LLM shape the three implementations (and the kernel's out= form) run
interleaved on the same inputs; each cell reports medians and the median of per-round ratios.
Effective bandwidth is compared with this machine's copy bandwidth, measured by this script.

    python bench/kernel_ops.py                 # the full grid (a few minutes)
    python bench/kernel_ops.py --tokens 1 512 --dtypes bfloat16 --ops rmsnorm silu_and_mul
    python bench/kernel_ops.py --threads 1 --clock cpu   # one thread's CPU time: a loaded machine
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import isa_env  # first: sets the AVX2 emulation before torch is imported
import torch
import torch.nn.functional as F
import transformers.activations as A
from threads import use_threads
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from kernel_explorer.measure.stats import speedup_interval

HIDDEN, INTERMEDIATE, HEADS, HEAD_DIM = 4096, 11008, 32, 128
TARGET_SECONDS = 0.25  # per implementation per cell


@dataclass
class Case:
    """One op at one shape: the eager callable, the kernel (allocating and out=), bytes moved."""

    eager: Callable[[], object]
    kernel: Callable[[], object]
    kernel_out: Callable[[], object]
    nbytes: int
    memory_bound: bool = True


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def make_case(op: str, tokens: int, dtype: torch.dtype, hub: dict, compiled: dict) -> tuple[Case, Callable]:
    gen = torch.Generator().manual_seed(0)
    act = hub["activation"]
    if op == "rmsnorm":
        x = torch.randn(tokens, HIDDEN, generator=gen).to(dtype)
        norm = LlamaRMSNorm(HIDDEN, eps=1e-6).to(dtype)
        out = torch.empty_like(x)
        eager = lambda: norm(x)  # noqa: E731
        case = Case(
            eager,
            lambda: hub["rmsnorm"].rms_norm(x, norm.weight, 1e-6),
            lambda: hub["rmsnorm"].rms_norm(x, norm.weight, 1e-6, out=out),
            _nbytes(x, out, norm.weight),
        )
        compiled_fn = compiled.setdefault(op, torch.compile(LlamaRMSNorm.forward))
        return case, lambda: compiled_fn(norm, x)
    if op == "rotary":
        q = torch.randn(1, HEADS, tokens, HEAD_DIM, generator=gen).to(dtype)
        k = torch.randn(1, HEADS, tokens, HEAD_DIM, generator=gen).to(dtype)
        cos = torch.randn(1, tokens, HEAD_DIM, generator=gen).to(dtype)
        sin = torch.randn(1, tokens, HEAD_DIM, generator=gen).to(dtype)
        fn = hub["rotary"].apply_rotary
        outs = (torch.empty_like(q), torch.empty_like(k))
        case = Case(
            lambda: apply_rotary_pos_emb(q, k, cos, sin),
            lambda: fn(q, k, cos, sin),
            lambda: fn(q, k, cos, sin, out=outs),
            2 * _nbytes(q, k) + _nbytes(cos, sin),
        )
        compiled_fn = compiled.setdefault(op, torch.compile(apply_rotary_pos_emb))
        return case, lambda: compiled_fn(q, k, cos, sin)
    width = 2 * INTERMEDIATE if op == "silu_and_mul" else INTERMEDIATE
    x = torch.randn(tokens, width, generator=gen).to(dtype) * 3
    refs: dict[str, Callable] = {
        "silu": F.silu,
        "silu_and_mul": lambda t: F.silu(t[..., :INTERMEDIATE]) * t[..., INTERMEDIATE:],
        "gelu": F.gelu,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "gelu_new": A.NewGELUActivation(),
        "gelu_fast": A.FastGELUActivation(),
        "gelu_quick": A.QuickGELUActivation(),
    }
    ref = refs[op]
    fn = getattr(act, op)
    out = torch.empty(tokens, INTERMEDIATE, dtype=dtype)
    case = Case(lambda: ref(x), lambda: fn(x), lambda: fn(x, out=out), _nbytes(x, out))
    compiled_fn = compiled.setdefault(op, torch.compile(ref))
    return case, lambda: compiled_fn(x)


def interleaved(
    fns: list[Callable[[], object]], rounds: int | None = None, clock: Callable[[], float] = time.perf_counter
) -> list[list[float]]:
    """Times each fn once per round, rotating the order; returns seconds per fn per round.

    `clock=time.process_time` (with one torch thread) counts the process's CPU time: on a loaded,
    shared machine the code's cost without the waits for a core."""
    for fn in fns:  # warm up (and trigger compilation)
        fn()
        fn()
    if rounds is None:
        start = time.perf_counter()
        for fn in fns:
            fn()
        per_round = time.perf_counter() - start
        rounds = int(min(200, max(7, TARGET_SECONDS * len(fns) / max(per_round, 1e-9))))
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = list(range(len(fns)))
        order = order[r % len(fns) :] + order[: r % len(fns)]
        for i in order:
            t0 = clock()
            fns[i]()
            times[i].append(clock() - t0)
    return times


# bench op -> the op's name in its repository's isa_choices() ("silu bfloat16: avx512bf16 formula: ...")
CHOICE_NAMES = {"rmsnorm": "rms_norm"}
LARGE_FROM = 4 * 2**20  # elements: a 16-bit activation's own size class ("gelu bfloat16 large")


def choice_key(op: str, dtype_name: str, tokens: int, known: dict[str, str]) -> str:
    """The name of the choice a cell's kernel call runs under."""
    key = f"{CHOICE_NAMES.get(op, op)} {dtype_name}"
    large = f"{key} large"
    return large if large in known and tokens * INTERMEDIATE >= LARGE_FROM else key


def choices(module) -> dict[str, str]:
    """{op at dtype: the candidate it runs} ("silu bfloat16": "avx512bf16 formula"), every op of the
    repository chosen first; {} for a repository with one choice for all its ops."""
    if not hasattr(module, "isa_choices"):
        return {}
    return {line.split(": ")[0]: line.split(": ")[1].split(" (")[0] for line in module.isa_choices()}


def copy_bandwidth() -> float:
    """GB/s of a large tensor copy (read + write) with torch's threads: the memory roof here."""
    src = torch.ones(64 * 2**20)  # 256 MiB
    dst = torch.empty_like(src)
    (times,) = interleaved([lambda: dst.copy_(src)], rounds=15)
    return 2 * _nbytes(src) / statistics.median(times) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 32, 512, 2048])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ops = [
        "rmsnorm",
        "silu",
        "silu_and_mul",
        "gelu",
        "gelu_tanh",
        "gelu_new",
        "gelu_fast",
        "gelu_quick",
        "rotary",
    ]
    parser.add_argument("--ops", nargs="+", default=ops, choices=ops)
    parser.add_argument(
        "--pin",
        help="every op on one candidate, e.g. 'avx512bf16 lookup' (set_isa), not each op's own choice",
    )
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: process CPU time (needs --threads 1): a loaded machine's waits for a core do not count",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads (default: torch's). On a shared 2-core guest, 1 thread keeps a preempted "
        "worker from stalling every parallel op's join for a scheduler slice (about 8-12 ms)",
    )
    args = parser.parse_args()
    print(use_threads(args.threads))
    if args.clock == "cpu" and torch.get_num_threads() != 1:
        parser.error("--clock cpu measures one thread's work: add --threads 1")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    from kernels import get_local_kernel

    from kernel_explorer.build.builder import build_hub

    hub = {b.name: get_local_kernel(b.repo_path) for b in build_hub(progress=False)}
    if args.pin:  # every op on one candidate: the dispatch before per-op choice was "<widest> lookup"
        for module in hub.values():
            try:
                module.set_isa(args.pin)
            except RuntimeError:  # a repository without forms takes the path alone
                module.set_isa(args.pin.split()[0])
    roof = copy_bandwidth()
    threads = torch.get_num_threads()
    print(
        f"torch {torch.__version__}, {threads} threads, load {os.getloadavg()[0]:.1f}, "
        f"{'process CPU time' if args.clock == 'cpu' else 'wall clock'}; "
        f"{isa_env.describe(hub['activation'].isa())}; each cell's path: the path column"
    )
    paths = {name: choices(module) for name, module in hub.items()}
    print(f"copy bandwidth (256 MiB, read+write): {roof:.1f} GB/s")
    # what a call costs before any work: the floor under the one-token cells
    one = torch.ones(1)
    with torch.inference_mode():
        calls = [lambda: F.silu(one), lambda: hub["activation"].silu(one)]
        t_eager, t_kernel = interleaved(calls, rounds=200)
    print(
        f"fixed cost of a call (silu of 1 element): eager {statistics.median(t_eager) * 1e6:.2f} us, "
        f"kernel {statistics.median(t_kernel) * 1e6:.2f} us\n"
    )
    header = (
        f"{'op':<13}{'dtype':<10}{'tokens':>6}  {'eager us':>9}{'compile us':>11}"
        f"{'kernel us':>10}{'out= us':>9}"
        f"  {'x eager [95%]':>20}{'x compile':>10}{'out x eager':>12}{'GB/s':>7}{'% copy':>7}"
        f"  {'path':<19}notes"
    )
    print(header)
    print("-" * len(header))
    compiled: dict[str, Callable] = {}
    vs_eager, short = [], []
    for op in args.ops:
        for dtype_name in args.dtypes:
            dtype = getattr(torch, dtype_name)
            compiled.clear()  # one compiled function per op and dtype; new shapes recompile as usual
            for tokens in args.tokens:
                case, compiled_call = make_case(op, tokens, dtype, hub, compiled)
                with torch.inference_mode():
                    t_eager, t_comp, t_kern, t_out = interleaved(
                        [case.eager, compiled_call, case.kernel, case.kernel_out], clock=clock
                    )
                repo = "rmsnorm" if op == "rmsnorm" else "rotary" if op == "rotary" else "activation"
                path = paths[repo].get(choice_key(op, dtype_name, tokens, paths[repo]), hub[repo].isa())
                med = [statistics.median(t) * 1e6 for t in (t_eager, t_comp, t_kern, t_out)]
                r_eager_i = speedup_interval([e / k for e, k in zip(t_eager, t_kern, strict=True)])
                r_eager = r_eager_i.median
                r_comp = statistics.median(c / k for c, k in zip(t_comp, t_kern, strict=True))
                r_out = statistics.median(e / k for e, k in zip(t_eager, t_out, strict=True))
                gbs = case.nbytes / (med[3] * 1e-6) / 1e9
                notes = []
                if r_eager < 1.2:
                    notes.append("SHORT: < 1.2x eager")
                if r_comp < 1.0:
                    notes.append("SHORT: slower than compile")
                if tokens >= 512 and gbs < 0.6 * roof:
                    notes.append("SHORT: < 60% of copy bandwidth")
                if notes:
                    short.append(f"{op} {dtype_name} {tokens}: " + ", ".join(notes))
                vs_eager.append(r_eager)
                print(
                    f"{op:<13}{dtype_name:<10}{tokens:>6}  {med[0]:>9.1f}{med[1]:>11.1f}"
                    f"{med[2]:>10.1f}{med[3]:>9.1f}"
                    f"  {r_eager:>6.2f}x [{r_eager_i.low:.2f}, {r_eager_i.high:.2f}]"
                    f"{r_comp:>9.2f}x{r_out:>11.2f}x{gbs:>7.1f}{100 * gbs / roof:>6.0f}%  {path:<19}"
                    + "; ".join(notes),
                    flush=True,
                )
    geo = math.exp(sum(map(math.log, vs_eager)) / len(vs_eager))
    print(f"\ngeometric mean speedup over eager: {geo:.2f}x over {len(vs_eager)} cells")
    print(f"cells short of a target: {len(short)}")
    for line in short:
        print(f"  {line}")
    # the roof is itself a measurement: on a shared guest it moved 38.6-69.4 GB/s within minutes
    end_roof = copy_bandwidth()
    print(f"copy bandwidth again at the end: {end_roof:.1f} GB/s (start {roof:.1f})", end="")
    if abs(end_roof - roof) > 0.2 * min(roof, end_roof):
        print(": the roof moved more than 20% during the run, and the % copy column with it")
    else:
        print()


if __name__ == "__main__":
    main()
