"""The attention row at the lengths a user captures: the kernel through the explorer's door against
SDPA and eager, and where the time goes (the kernel, or Transformers' glue around it).

The explorer's attention row times the function the model calls (`ALL_ATTENTION_FUNCTIONS[name]`)
on one attention module's captured inputs: (query, key, value, mask) and the keywords SmolLM2's
decoder passes (position_ids among them). For the bundled flash_attn repository loaded through
Transformers' Hub string, that function is Transformers' `flash_attention_forward`, which calls the
kernel's `flash_attn_func` after its own Python: kwargs processing, the PEFT dtype check and, for a
batch of one with position_ids, `_is_packed_sequence` (six small ATen ops on the position ids).
PyTorch's side is `sdpa_attention_forward`. Timed here, interleaved, on SmolLM2's own inputs
captured from a prompt of each length:

- ``through the door``: the function the explorer's attention door registers for the bundled
  kernel (`Explorer.on("attention")`): its `attention_forward` inside the door's fallback guard,
  with no flash glue (the row's kernel side),
- ``sdpa``: Transformers' `sdpa_attention_forward` (what the row's PyTorch side runs),
- ``eager``: the model's own `eager_attention_forward`, with the causal mask the model gives it,
- ``flash glue``: Transformers' `flash_attention_forward` with the bundled kernel (the door's path
  for a repository without `attention_forward`, and the row's before it registered that directly),
- ``flash glue, no position_ids``: the same without the position_ids keyword,
- ``direct``: the repository's `attention_forward` (Transformers' attention-interface signature,
  registered with SDPA's mask: no flash glue),
- ``op``: `torch.ops.<id>.fwd` alone on the transposed views, and ``F.sdpa``: ATen's SDPA alone.

Ratios are per interleaved round, sdpa's time (then eager's) over each side's: above 1 the side is
faster; medians with 95% intervals. Errors are the largest absolute difference from a float64 SDPA
on the same inputs (the model's dtype cast up).

    python bench/attention_glue.py                          # 1 thread, CPU time, 16, 128, 512 tokens
    python bench/attention_glue.py --threads 2 --clock wall --tokens 16 128 512
    KERNEL_EXPLORER_ISA=avx2 python bench/attention_glue.py  # an AVX2 host, emulated (bench/isa_env.py)
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import isa_env  # first: the AVX2 emulation (KERNEL_EXPLORER_ISA=avx2), set before torch is imported
from threads import use_threads

TEXT = (
    "The history of computing is a story of abstraction: each generation of engineers built tools "
    "that hid the details of the machine below. "
)


def capture(into: list, sdpa, module, *a, **k):
    """Keeps the first attention call's module and inputs, answers with sdpa."""
    if not into:
        into.append((module, a, k))
    return sdpa(module, *a, **k)


DOOR, SDPA, EAGER = "through the door", "sdpa (Transformers)", "eager (Transformers)"


def candidates(fa, door_fn, sdpa, flash, module, a: tuple, k: dict) -> dict:
    """name -> a call of one side on the captured inputs (a, k) of `module`."""
    import sys

    import torch.nn.functional as F

    from kernel_explorer._backend.attention_interface import causal_mask

    q, key, v = a[:3]
    no_pos = {x: y for x, y in k.items() if x != "position_ids"}
    qt, kt, vt = (x.transpose(1, 2) for x in (q, key, v))
    eager = sys.modules[type(module).__module__].eager_attention_forward
    masked = (*a[:3], causal_mask(q, key) if a[3] is None else a[3], *a[4:])  # as the model gives eager
    return {
        DOOR: lambda: door_fn(module, *a, **k),
        SDPA: lambda: sdpa(module, *a, **k),
        EAGER: lambda: eager(module, *masked, **k),
        "flash glue + kernel": lambda: flash(module, *a, **k),
        "flash glue, no position_ids": lambda: flash(module, *a, **no_pos),
        "direct attention_forward": lambda: fa.attention_forward(module, *a, **k),
        "op alone": lambda: fa.ops.fwd(qt, kt, vt, None, None, None, module.scaling, True),
        "F.sdpa alone": lambda: F.scaled_dot_product_attention(
            q, key, v, is_causal=True, enable_gqa=True, scale=module.scaling
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="cpu")
    parser.add_argument("--tokens", type=int, nargs="+", default=[16, 128, 512])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--rounds", type=int, default=400, help="interleaved rounds per cell")
    args = parser.parse_args()
    if args.clock == "cpu" and args.threads != 1:
        parser.error("--clock cpu sums every thread's CPU time: use it with --threads 1")

    import torch
    import torch.nn.functional as F
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    import kernel_explorer as kx
    from kernel_explorer._backend import attention_interface as interface
    from kernel_explorer.build.builder import build_repo
    from kernel_explorer.measure.stats import median_interval, speedup_interval

    threads = use_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    model, tokenizer = kx.load_default_model(progress=False)
    explorer = kx.Explorer(model, include_transformers=False)
    path = build_repo("flash_attn", progress=False).repo_path
    alias = interface.local_alias(path)
    fa = interface.load_local(path)
    AttentionInterface.register("kx_direct", fa.attention_forward)
    AttentionMaskInterface.register("kx_direct", sdpa_mask)
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    print(
        f"torch {torch.__version__}, {threads}, {args.clock} clock, "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"
    )
    print(isa_env.describe(fa.isa()))
    for line in fa.isa_choices():
        print(f"  {line}")
    header = (
        f"{'tokens':>6} {'dtype':9} {'what':28} {'median us [95%]':>26}  {'sdpa / it [95%]':>20}  "
        f"{'eager / it [95%]':>20}"
    )
    print(f"{header}  error vs float64")
    for dtype in (getattr(torch, d) for d in args.dtypes):
        model = model.to(dtype)
        for n in args.tokens:
            captured: list = []
            ALL_ATTENTION_FUNCTIONS["sdpa"] = functools.partial(capture, captured, sdpa)
            ids = tokenizer(TEXT * (n // 20 + 1), return_tensors="pt").input_ids[:, :n]
            try:
                with torch.no_grad():
                    model(ids)
            finally:
                ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa
            module, a, k = captured[0]
            q, key, v = a[:3]
            (now, *_) = explorer.on("attention", candidate="bundled")  # the door's own registration
            door_fn = ALL_ATTENTION_FUNCTIONS[model.config._attn_implementation]
            if n == args.tokens[0]:
                print(f"{dtype}: the door runs {now.candidate} through {now.through}")
                print(f"  code path {now.code_path.why}")
            interface.set_implementation(model, alias)  # flash_attention_forward reads it at every call
            flash = ALL_ATTENTION_FUNCTIONS[alias]
            cands = candidates(fa, door_fn, sdpa, flash, module, a, k)
            exact = F.scaled_dot_product_attention(
                q.double(), key.double(), v.double(), is_causal=True, enable_gqa=True, scale=module.scaling
            ).transpose(1, 2)
            errors = {
                name: (cands[name]()[0].double() - exact).abs().max().item()
                for name in (DOOR, SDPA, EAGER, "flash glue + kernel", "direct attention_forward")
            }
            times = {name: [] for name in cands}
            items = list(cands.items())
            with torch.no_grad():
                for fn in cands.values():
                    fn(), fn()
                for r in range(args.rounds):
                    for name, fn in items if r % 2 else items[::-1]:
                        t0 = clock()
                        fn()
                        times[name].append(clock() - t0)
            explorer.reset()  # the door's switch and the glue's alias: the model back on sdpa
            interface.set_implementation(model, "sdpa")

            def ratio(base: list[float], ts: list[float]) -> str:
                sp = speedup_interval([b / t for b, t in zip(base, ts, strict=True)])
                return f"{sp.median:6.2f}x [{sp.low:.2f}, {sp.high:.2f}]"

            for name, ts in times.items():
                iv = median_interval([t * 1e6 for t in ts])
                err = f"{errors[name]:.2e}" if name in errors else ""
                print(
                    f"{n:>6} {str(dtype)[6:]:9} {name:28} {iv.median:9.1f} [{iv.low:7.1f}, {iv.high:7.1f}]  "
                    f"{ratio(times[SDPA], ts):>20}  {ratio(times[EAGER], ts):>20}  {err}",
                    flush=True,
                )
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
