"""Per-call time of the bundled kernels on tiny shapes: Python autograd registration against C++.

The bundled rmsnorm, activation and rotary repositories registered their backward with Python's
`torch.library.register_autograd`, which runs Python on every call of the op (about 9 us), with
or without grad; they now register a C++ `torch::autograd::Function` for the Autograd key. On a
decode step's shapes (one token) that overhead is most of the call. This loads both builds in one
process (their op namespaces differ, as in bench/builder_format.py) and, for each case and mode,
times blocks of `--calls` calls of the package function (what the layers call), old, new and
eager PyTorch interleaved per round. Modes: `no_grad` (under torch.no_grad(), as generate()
runs), `grad` (grad enabled, inputs require grad: a forward that records the graph) and
`fwd+bwd` (that forward and the backward of its sum). Each line prints the per-call medians in
microseconds with their 95% intervals, and the median per-round ratio old/new (> 1: new faster).

    python bench/call_overhead.py OLD_HUB NEW_HUB [--rounds 40] [--calls 200]

OLD_HUB and NEW_HUB are folders holding the built activation, rmsnorm and rotary repositories.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from builder_format import load_hub

from kernel_explorer.measure.stats import median_interval, speedup_interval

# SmolLM2-135M: hidden 576, MLP 1536, 9 query heads and 3 KV heads of 64.
HIDDEN, MLP, HEADS, KV_HEADS, HEAD_DIM = 576, 1536, 9, 3, 64
MODES = ("no_grad", "grad", "fwd+bwd")


def _rms_eager(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotary_eager(q, k, cos, sin, dim):
    cos, sin = cos.unsqueeze(dim), sin.unsqueeze(dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def cases() -> dict[str, tuple[Callable, Callable[[], tuple]]]:
    """name -> (call(module_or_None, *inputs), make inputs); module None is eager PyTorch."""

    def rms(shape):
        return (
            lambda m, x, w: m.rms_norm(x, w, 1e-5) if m else _rms_eager(x, w, 1e-5),
            lambda: (torch.randn(shape), torch.randn(shape[-1])),
        )

    pos = torch.randn(1, 1, HEAD_DIM)
    cos, sin = pos.cos(), pos.sin()  # from the position embedding: no gradient wanted
    return {
        "rms_norm (1, 64)": rms((1, 64)),
        f"rms_norm (1, {HIDDEN})": rms((1, HIDDEN)),
        f"silu (1, {MLP})": (lambda m, x: m.silu(x) if m else F.silu(x), lambda: (torch.randn(1, MLP),)),
        f"silu_and_mul (1, {2 * MLP})": (
            lambda m, x: m.silu_and_mul(x) if m else F.silu(x[..., :MLP]) * x[..., MLP:],
            lambda: (torch.randn(1, 2 * MLP),),
        ),
        f"rotary q (1, {HEADS}, 1, {HEAD_DIM})": (
            lambda m, q, k: (m.apply_rotary if m else _rotary_eager)(q, k, cos, sin, 1),
            lambda: (torch.randn(1, HEADS, 1, HEAD_DIM), torch.randn(1, KV_HEADS, 1, HEAD_DIM)),
        ),
    }


def runner(call: Callable, module, inputs: tuple, mode: str, calls: int) -> Callable[[], None]:
    """A block of `calls` calls in `mode`."""
    if mode == "no_grad":

        def run() -> None:
            with torch.no_grad():
                for _ in range(calls):
                    call(module, *inputs)

        return run
    leaves = tuple(t.detach().requires_grad_() for t in inputs)
    if mode == "grad":

        def run() -> None:
            for _ in range(calls):
                call(module, *leaves)

        return run

    def run() -> None:
        for _ in range(calls):
            out = call(module, *leaves)
            out = out if isinstance(out, tuple) else (out,)
            torch.autograd.backward([o.sum() for o in out])

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one-token shapes run on the calling thread anyway
    old, new = load_hub(args.old), load_hub(args.new)
    repo = {"rms_norm": "rmsnorm", "silu": "activation", "silu_and_mul": "activation", "rotary": "rotary"}
    print(f"# per-call us, median [95% interval], {args.rounds} rounds of {args.calls} calls, one thread")
    print("# ISA paths (old, new):", {name: (old[name].isa(), new[name].isa()) for name in old})
    print("# the machine was shared and loaded (other engineers compiling): absolute times are noisy")
    print(f"# {'case':<30} {'mode':<8} {'old us':>22} {'new us':>22} {'eager us':>22}  old/new")
    for name, (call, make) in cases().items():
        r = repo[name.split()[0]]
        for mode in MODES:
            inputs = make()
            fns = [runner(call, m, inputs, mode, args.calls) for m in (old[r], new[r], None)]
            for fn in fns:
                fn()
            times: list[list[float]] = [[], [], []]
            for i in range(args.rounds):
                for j in (i % 3, (i + 1) % 3, (i + 2) % 3):
                    t0 = time.perf_counter()
                    fns[j]()
                    times[j].append((time.perf_counter() - t0) / args.calls * 1e6)
            cells = []
            for t in times:
                iv = median_interval(t)
                cells.append(f"{iv.median:6.2f} [{iv.low:6.2f}, {iv.high:6.2f}]")
            ratio = speedup_interval([a / b for a, b in zip(times[0], times[1], strict=True)])
            print(f"{name:<32} {mode:<8} {cells[0]:>22} {cells[1]:>22} {cells[2]:>22}  {ratio}")


if __name__ == "__main__":
    main()
