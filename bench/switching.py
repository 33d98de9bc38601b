"""Switching and inventory cost on SmolLM2 (121 kernel instances), side by side with kernels' kernelize.

Kernels are loaded once before timing (a first switch loads them); then each round times:
- the switchboard turning all 121 instances on, and back off (reset);
- `kernels.kernelize` on the whole model with the bundled mapping, and undoing it by hand
  (the reference: what a user without the explorer would run);
- the inventory without Hub queries.
Medians over the rounds, with the spread (min-max). Once, before the rounds: the first inventory,
which tries every ready candidate on the model (one capture of the default prompt, then one trial
call per candidate on a copy of an instance: switching/probe.py) and loads the kernels.

    python bench/switching.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _row(label: str, samples: list[float], target: float | None = None) -> str:
    median = statistics.median(samples)
    verdict = "" if target is None else ("  ok" if median < target else f"  SHORT (target < {target:g} ms)")
    return f"  {label:<44} median {median:8.2f} ms   [{min(samples):.2f} - {max(samples):.2f}]{verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    import torch
    from kernels import Mode, kernelize, use_kernel_mapping
    from transformers.models.llama import modeling_llama

    from kernel_explorer.build.bundled import bundled_mapping
    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import load_default_model
    from kernel_explorer.views.dashboard import Dashboard

    model, _ = load_default_model(progress=False)
    explorer = Explorer(model)
    instances = sum(len(g) for g in explorer._switchboard.groups.values())
    mapping = bundled_mapping()

    first_inventory = _timed(explorer.inventory)  # capture + a trial per ready candidate (cached after)
    with explorer.using():  # loads the kernels once
        pass

    def switch_all_on() -> None:
        for name in explorer.layers:
            explorer.on(name)

    def kernelize_all() -> None:
        with use_kernel_mapping(mapping, inherit_mapping=False):
            kernelize(model, mode=Mode.INFERENCE, device="cpu")

    def undo_kernelize() -> None:
        for module in model.modules():
            module.__dict__.pop("forward", None)
        vars(modeling_llama.apply_rotary_pos_emb).pop("forward", None)

    dashboards: list[float] = []
    for _ in range(5):  # the widgets, the layer table state, the hardware panel, the plots
        start = time.perf_counter()
        dashboard = Dashboard(explorer)
        dashboard._repr_mimebundle_()
        dashboards.append((time.perf_counter() - start) * 1e3)
        dashboard.close()

    timings: dict[str, list[float]] = {k: [] for k in ("on", "off", "kernelize", "undo", "inventory")}
    for _ in range(args.rounds):  # interleaved, so drift hits every row alike
        timings["on"].append(_timed(switch_all_on))
        assert sum(r.is_kernel for r in explorer.running()) == instances
        timings["off"].append(_timed(explorer.reset))
        timings["kernelize"].append(_timed(kernelize_all))
        timings["undo"].append(_timed(undo_kernelize))
        timings["inventory"].append(_timed(explorer.inventory))

    print(f"SmolLM2-135M: {instances} kernel instances, torch {torch.__version__}, {args.rounds} rounds")
    print(_row(f"switchboard: all {instances} on", timings["on"], target=50))
    print(_row("switchboard: all off (reset)", timings["off"]))
    print(_row(f"kernels.kernelize, whole model ({instances})", timings["kernelize"]))
    print(_row("undo kernelize by hand", timings["undo"]))
    print(_row("inventory, no Hub queries", timings["inventory"], target=100))
    print(f"  {'first inventory (capture + every probe), once':<44} {first_inventory:8.2f} ms")
    print(_row("dashboard built and rendered (Python side)", dashboards, target=2000))
    ratio = statistics.median(a / b for a, b in zip(timings["on"], timings["kernelize"], strict=True))
    print(f"  switchboard on / kernelize: median ratio {ratio:.2f}x")


if __name__ == "__main__":
    main()
