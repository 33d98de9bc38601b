"""Where a decoded token's time goes: compiled + kernels under torch.profiler, llama.cpp by its own
timers, in the run that measures them.

compiled + kernels (a `StaticDecoder`'s steady decode steps, profiled over `steps` steps after a
warm-up; the same steps unprofiled give the step time the shares are scaled to):

- quantized GEMVs: the quantized_linear ops (`linear_q4_1`, `linear_q8_0`), whole calls,
- attention: the flash_attn op (`fwd`),
- other kernels: every other op or Inductor kernel inside the compiled region, outermost only
  (RMSNorm, SiLU, rotary, the cache's index_copy, Inductor's fused C++ kernels: those are named
  only when `torch._inductor.config.cpp.enable_kernel_profile` was set before compiling, which the
  bench does; without it their time reads as dispatch),
- graph dispatch and guards: the compiled region's wall time less the kernels in it (Inductor's
  Python wrapper calling each kernel, the custom ops' Python bindings, Dynamo's entry, the guards
  a steady step still evaluates),
- Python around the graph: the step's wall time less the compiled region (the greedy loop,
  argmax, the position tensor, Transformers' code outside the graph if it broke).

The profiler adds a few microseconds per recorded op: the shares are those of the profiled steps,
and the absolute milliseconds are those shares of the unprofiled step (both step times printed).

llama.cpp: `llama_perf_context` reads its own time in `llama_decode` (graph build and compute) per
token; the rest of a step, measured around `Llama.eval` and reading the logits, is the Python
binding. ggml does not time its ops in a release build, so the GEMVs' share there is not known.

    from decode_breakdown import torch_step_breakdown, llama_step_breakdown, gemv_replay
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

CATEGORIES = (
    "quantized GEMVs",
    "attention",
    "other kernels",
    "graph dispatch and guards",
    "Python around the graph",
)


@dataclass
class StepBreakdown:
    """One side's decode step: milliseconds per category (scaled to the unprofiled step)."""

    side: str
    step_ms: float  # unprofiled, per step
    profiled_ms: float  # per step under the profiler (what the shares were read from)
    shares: dict[str, float] = field(default_factory=dict)  # fractions of the profiled step
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        head = f"  {self.side}: {self.step_ms:.2f} ms a token"
        if self.profiled_ms:
            head += f" ({self.profiled_ms:.2f} ms profiled)"
        out = [head]
        for name, share in self.shares.items():
            out.append(f"    {name:28} {share * self.step_ms:7.2f} ms  {share:6.1%}")
        out += [f"    {note}" for note in self.notes]
        return out


def _category(name: str) -> str:
    if "quantized_linear" in name and ("linear_q4_1" in name or "linear_q8_0" in name):
        return "quantized GEMVs"
    if "flash_attn" in name and name.endswith("::fwd"):
        return "attention"
    return "other kernels"


def _outermost(events: list[Any]) -> list[Any]:
    """Events not inside another of `events` (one thread: intervals nest or are disjoint)."""
    events = sorted(events, key=lambda e: (e.time_range.start, -e.time_range.end))
    out: list[Any] = []
    end = -1.0
    for e in events:
        if e.time_range.start >= end:
            out.append(e)
            end = e.time_range.end
    return out


def torch_step_breakdown(
    decoder: Any,
    first: Any,
    start: int,
    steps: int = 16,
    repeats: int = 3,
    *,
    side: str = "compiled + kernels",
) -> StepBreakdown:
    """A compiled kernel side's decode step (see the module docstring), named `side`: `steps` steps
    after the token `first` at cache position `start`, the unprofiled time the median of `repeats` runs."""
    import statistics

    from torch.profiler import ProfilerActivity, profile

    decoder.decode(first, start, steps + 1)  # warm
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        decoder.decode(first, start, steps + 1)
        walls.append((time.perf_counter() - t0) / steps)
    step_s = statistics.median(walls)

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        decoder.decode(first, start, steps + 1)
        profiled_s = (time.perf_counter() - t0) / steps
    events = list(prof.events())
    regions = _outermost([e for e in events if e.name.startswith("Torch-Compiled Region")])
    inside: dict[str, float] = {c: 0.0 for c in CATEGORIES}
    region_us = sum(r.time_range.end - r.time_range.start for r in regions)
    kernel_events = []
    for r in regions:
        lo, hi = r.time_range.start, r.time_range.end
        kernel_events += [
            e
            for e in events
            if e is not r
            and e.thread == r.thread
            and lo <= e.time_range.start
            and e.time_range.end <= hi
            and not e.name.startswith(("Torch-Compiled Region", "## Call CompiledFxGraph", "TorchDynamo"))
        ]
    others: dict[str, float] = {}
    for e in _outermost(kernel_events):
        took = e.time_range.end - e.time_range.start
        inside[_category(e.name)] += took
        if _category(e.name) == "other kernels":
            others[e.name] = others.get(e.name, 0.0) + took
    kernels_us = sum(inside[c] for c in CATEGORIES[:3])
    total_us = profiled_s * steps * 1e6
    inside["graph dispatch and guards"] = max(region_us - kernels_us, 0.0)
    inside["Python around the graph"] = max(total_us - region_us, 0.0)
    shares = {c: inside[c] / total_us for c in CATEGORIES}
    breakdown = StepBreakdown(side, step_s * 1e3, profiled_s * 1e3, shares)
    named = sum(1 for e in kernel_events if e.name.startswith("graph_") or "cpp_fused" in e.name)
    breakdown.notes.append(
        f"{len(regions) / steps:.0f} compiled region(s) a step; {len(_outermost(kernel_events)) / steps:.0f} "
        f"kernel calls a step ({named / steps:.0f} Inductor kernels named)"
    )
    top = sorted(others.items(), key=lambda kv: -kv[1])[:4]
    breakdown.notes.append(
        "other kernels, the largest: "
        + ", ".join(f"{name.split('::')[-1][:48]} {took / total_us:.1%}" for name, took in top)
    )
    return breakdown


def llama_step_breakdown(llm: Any, prompt: list[int], steps: int = 32) -> StepBreakdown:
    """llama.cpp's decode step: its own time in llama_decode against the wall time of the step
    through llama-cpp-python (`Llama.eval` of one token and the argmax of its logits)."""
    import llama_cpp
    import numpy as np

    def last() -> int:
        return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))))

    llm.reset()
    llm.eval(prompt)
    token = last()
    ctx = llm._ctx.ctx
    llama_cpp.llama_perf_context_reset(ctx)
    t0 = time.perf_counter()
    for _ in range(steps):
        llm.eval([token])
        token = last()
    wall = (time.perf_counter() - t0) / steps
    perf = llama_cpp.llama_perf_context(ctx)
    n = max(int(perf.n_eval), 1)
    decode_ms = perf.t_eval_ms / n
    breakdown = StepBreakdown("llama.cpp", wall * 1e3, 0.0)
    breakdown.shares = {
        "llama_decode (graph build + compute)": decode_ms / (wall * 1e3),
        "Python binding around it": max(wall * 1e3 - decode_ms, 0.0) / (wall * 1e3),
    }
    breakdown.notes.append(
        f"{perf.n_eval} tokens timed by llama_perf_context (t_eval {perf.t_eval_ms:.1f} ms)"
    )
    return breakdown


def gemv_replay(model: Any, rounds: int = 5) -> tuple[float, int]:
    """The decode step's quantized GEMVs alone, in model order, one activation row each (what the
    step streams, without anything between them): (ms a token, best of `rounds`; packed bytes)."""
    import torch
    from kernels import get_local_kernel
    from torch import nn

    from kernel_explorer.build.bundled import bundled_repo_path

    ql = get_local_kernel(bundled_repo_path("quantized_linear"))
    calls = []
    total = 0
    for module in model.modules():
        packed = getattr(module, "_kernel_packed", None)
        if packed is None or not isinstance(module, nn.Linear):
            continue
        x = torch.randn(1, module.in_features)
        calls.append((x, packed.data, packed.format, packed.gemv))
        total += packed.nbytes
    best = float("inf")
    with torch.no_grad():
        for _ in range(rounds + 1):
            t0 = time.perf_counter()
            for x, data, fmt, gemv in calls:
                ql.linear(x, data, fmt, gemv=gemv)
            best = min(best, time.perf_counter() - t0)
    return best * 1e3, total
