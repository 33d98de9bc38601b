"""Where the model's time goes: each kernel layer name's share of a forward, and what no kernel covers.

One forward (prefill at a chosen length, and one decode step against the prompt's KV cache) runs
with forward hooks that time every module of interest *exclusively*: a hooked module's clock pauses
while a hooked child runs, so every second lands in exactly one category. Categories: each kernel
layer name (module kinds, and function kinds such as rotary, hooked on the function layer), the
attention computation proper (an attention module's time minus its projections and its function
layers), Linear (matmul), embedding, and the rest (the forward's time no hook claimed). Shares
add to 100% (within rounding: each category's median is taken separately). The hooks cost a few
microseconds per call; plain forwards interleaved with the hooked ones measure that cost, kept in
each record (`hook_overhead`), so a distorted profile is seen, not assumed.

What the shares say with the measured speedups (Amdahl) is the breakdown kind's summary
(`measure/kinds/breakdown.py`), which also holds the record class and the category names.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer.inspect.layer_groups import ATTENTION
from kernel_explorer.measure.capture import run_model
from kernel_explorer.measure.kinds.breakdown import EMBEDDING, LINEAR, REST, TimeShare
from kernel_explorer.measure.model_comparison import all_pytorch
from kernel_explorer.measure.records import Record

if TYPE_CHECKING:
    from torch import nn

    from kernel_explorer.measure.switches import Switches

# the attention computation is the attention row's category (ATTENTION), so its share and its
# measured speedup meet in the inventory's Amdahl columns


def _timed_modules(board: Switches) -> list[tuple[nn.Module, str]]:
    """(module, category) for every module the breakdown times.

    Each door says which modules time its layer (a function layer is hooked on its process-wide
    object, the one the model's code calls; a holder's own copy is reached through it).
    """
    from torch import nn

    found: dict[int, tuple[nn.Module, str]] = {}
    for door in board.doors.values():
        for module, category in door.timed_modules():
            found[id(module)] = (module, category)
    for module in board.model.modules():
        if id(module) in found:
            continue
        if isinstance(module, nn.Linear):
            found[id(module)] = (module, LINEAR)
        elif isinstance(module, nn.Embedding):
            found[id(module)] = (module, EMBEDDING)
        elif type(module).__name__.endswith("Attention"):
            found[id(module)] = (module, ATTENTION)
    return list(found.values())


class _ExclusiveClock:
    """Per-category exclusive seconds from nested pre/post forward hooks (one thread)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[tuple[str, float]] = []

    def enter(self, category: str) -> None:
        now = time.perf_counter()
        if self._stack:
            parent, since = self._stack[-1]
            self.seconds[parent] += now - since
        self._stack.append((category, now))

    def leave(self) -> None:
        now = time.perf_counter()
        category, since = self._stack.pop()
        self.seconds[category] += now - since
        if self._stack:
            parent, _ = self._stack[-1]
            self._stack[-1] = (parent, now)


def profile_forward(board: Switches, kwargs: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """(total seconds, exclusive seconds per category) of one forward, under the switchboard lock."""
    clock = _ExclusiveClock()
    with board.lock:
        handles = []
        for module, category in _timed_modules(board):
            handles.append(module.register_forward_pre_hook(lambda *_, c=category: clock.enter(c)))
            handles.append(module.register_forward_hook(lambda *_: clock.leave(), always_call=True))
        try:
            start = time.perf_counter()
            run_model(board.model, kwargs)
            total = time.perf_counter() - start
        finally:
            for handle in handles:
                handle.remove()
    shares = dict(clock.seconds)
    shares[REST] = max(0.0, total - sum(shares.values()))
    return total, shares


def time_breakdown(
    board: Switches, *, run_id: str, vocab_size: int, tokens: int = 512, repeats: int = 2
) -> Iterator[Record]:
    """Prefill of `tokens` tokens and one decode step: one `TimeShare` record per category and phase.

    Profiled with every layer on PyTorch (the switch state comes back after), since Amdahl's
    predictions start from PyTorch's shares. Each phase is profiled `repeats` times (after a
    warm-up) and the per-category medians kept, so one preempted call does not move a share.
    """
    with all_pytorch(board):
        yield from _breakdown(board, run_id=run_id, vocab_size=vocab_size, tokens=tokens, repeats=repeats)


def _breakdown(
    board: Switches, *, run_id: str, vocab_size: int, tokens: int, repeats: int
) -> Iterator[Record]:
    import copy

    import torch

    ids = torch.randint(0, vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    prefill: dict[str, Any] = {"input_ids": ids}
    try:
        cache = getattr(run_model(board.model, {**prefill, "use_cache": True}), "past_key_values", None)
    except Exception:  # a model without a KV cache: prefill only (this forward also warms up)
        run_model(board.model, prefill)
        cache = None
    phases: list[tuple[str, Any]] = [("prefill", lambda: prefill)]
    if cache is not None:  # each step appends to the cache: every run gets its own copy of the prompt's
        step = {"input_ids": ids[:, -1:], "use_cache": True}
        phases.append(("decode", lambda: {**step, "past_key_values": copy.deepcopy(cache)}))
    for phase, make_inputs in phases:
        hooked, plain = [], []
        for index in range(repeats):  # plain and hooked interleaved: the hooks' own cost is measured
            if index or repeats == 1:  # one plain forward fewer than hooked ones (a prefill is ~1 s)
                kwargs = make_inputs()
                with board.lock:
                    start = time.perf_counter()
                    run_model(board.model, kwargs)
                    plain.append(time.perf_counter() - start)
            hooked.append(profile_forward(board, make_inputs()))
        total = statistics.median(t for t, _ in hooked)
        overhead = total / statistics.median(plain) - 1.0
        names = dict.fromkeys(name for _, shares in hooked for name in shares)
        for name in names:
            seconds = statistics.median(shares.get(name, 0.0) for _, shares in hooked)
            count = tokens if phase == "prefill" else 1
            yield Record(run_id, TimeShare(phase, count, name, seconds, seconds / total, overhead))
