"""Layer comparison in training mode: forward+backward latency pairs and gradient divergence.

Each captured call (captured with autograd on, so the inputs that required grad in the model's own
forward are leaves that require grad here) runs forward and then the backward of one fixed upstream
gradient, through PyTorch's original forward and through what the instance runs now. Gradients are
taken with `torch.autograd.grad`, never accumulated into `.grad`, so the user's model keeps no trace.
The gradients of both sides (every input leaf and the layer's own weights) are compared with a float64
run of the original forward's backward, so a kernel whose backward is less accurate than PyTorch's
shows as such, and one that only rounds differently does not.

Instances run kernels in `kernels`' `Mode.TRAINING` for the comparison: those on PyTorch are switched
on, those switched on in a mode without training are switched again (same candidate) in training
mode, and only those are put back after. A kernel whose layer declares no backward is refused by
`kernelize`: the instance stays on PyTorch, the pairs are PyTorch against PyTorch, and the verdict's
notes say why.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.modes import parse_mode
from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.measure.capture import CapturedInputs
from kernel_explorer.measure.kinds.values.records import GradientDivergence
from kernel_explorer.measure.layer_comparison import (
    CALIBRATION_PAIRS,
    Call,
    calls_for,
    interleaved_series,
    layer_verdict,
)
from kernel_explorer.measure.provenance import provenance
from kernel_explorer.measure.records import TRAINING, Record
from kernel_explorer.measure.stats import (
    DEFAULT_BUDGET_S,
    DEFAULT_PRECISION,
    StallWatch,
    StopRule,
    check_sampling,
)
from kernel_explorer.measure.timing import Clock, interleaved_pair
from kernel_explorer.numerics.divergence import divergence, float64_everywhere, float64_shadow

if TYPE_CHECKING:
    import torch

    from kernel_explorer.measure.switches import Instances, Switches

Key = tuple[str, str]  # (layer name, instance path)


@contextlib.contextmanager
def kernels_in_mode(
    board: Switches, mode: str, keys: list[Key], *, switch_off_ones: bool = True
) -> Iterator[None]:
    """For the block, the instances `keys` run their kernels in `mode` ("training", "torch.compile").

    Instances on in a mode that lacks `mode` are switched again with the same candidate; with
    `switch_off_ones`, instances on PyTorch are switched on too. A kernel that refuses the mode leaves
    its instance on PyTorch with the reason (`board.running`). Only what this changed is put back after,
    also on errors and cancel; switches the user makes meanwhile stay.
    """
    wanted = parse_mode(mode)

    def change() -> None:
        state = board.snapshot()
        off: dict[str, list[str]] = {}
        again: dict[tuple[str, Any], list[str]] = {}
        for name, path in keys:
            held = state.get((name, path))
            if held is None:
                if switch_off_ones:
                    off.setdefault(name, []).append(path)
            elif held[1] & wanted != wanted:
                again.setdefault((name, held[0]), []).append(path)
        for name, paths in off.items():
            board.on(name, paths, mode=wanted)
        for (name, chosen), paths in again.items():
            board.on(name, paths, mode=wanted, candidate=chosen)

    with board.holding(change, keep_others=True):
        yield


@dataclasses.dataclass
class _Step:
    """One captured call made ready for forward+backward: leaves, their names, the upstream gradient."""

    path: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    leaves: list[torch.Tensor]  # input leaves, then the layer's own weights that require grad
    names: list[str]  # "input 0", "weight", ...
    grad_outs: list[torch.Tensor]  # one per floating output (rotary returns q and k)


def _prepare(board: Switches, name: str, call: Call, seed: int) -> _Step:
    """Leaves and a fixed (seeded) upstream gradient for one captured call."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    path, args, kwargs = call
    tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    if not any(t.requires_grad for t in tensors):  # a frozen model: differentiate the first float input
        first = next((t for t in tensors if t.is_floating_point()), None)
        args, kwargs = tree_map(
            lambda t: t.detach().requires_grad_(True) if t is first else t, (args, kwargs)
        )
    inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
    _, pytorch, _ = board.forwards(name, path)
    weights = [(n, p) for n, p in pytorch.__self__.named_parameters(recurse=False) if p.requires_grad]
    with torch.no_grad():
        outs = _outputs(pytorch(*args, **kwargs))
    if not outs or not (inputs or weights):
        raise KernelExplorerError(f"{name} at {path} has no differentiable input or output to compare.")
    generator = torch.Generator().manual_seed(seed)
    grad_outs = [torch.randn(o.shape, generator=generator).to(o.dtype) for o in outs]
    return _Step(
        path,
        args,
        kwargs,
        inputs + [p for _, p in weights],
        [f"input {i}" for i in range(len(inputs))] + [n for n, _ in weights],
        grad_outs,
    )


def _outputs(value: Any) -> list[torch.Tensor]:
    """The floating-point tensors of a forward's output, in order: what the backward starts from."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def forward_backward(fn: Callable[..., Any], step: _Step) -> Callable[[], tuple[torch.Tensor | None, ...]]:
    """A call of `fn` forward on the step's inputs and backward of its upstream gradient."""
    import torch

    def run() -> tuple[torch.Tensor | None, ...]:
        with torch.enable_grad():
            outs = _outputs(fn(*step.args, **step.kwargs))
            if len(outs) != len(step.grad_outs) or not all(o.requires_grad for o in outs):
                raise KernelExplorerError(
                    f"{step.path}: the forward's output carries no gradient (the kernel is not "
                    "differentiable); switch it off for training."
                )
            return torch.autograd.grad(outs, step.leaves, step.grad_outs, allow_unused=True)

    return run


def float64_gradients(target: Any, step: _Step) -> list[torch.Tensor | None]:
    """Gradients of the original (class) forward of `target`, run in float64, for the step's leaves."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    shadow = float64_shadow(target, grad=True)

    def to64(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        return t.detach().double().requires_grad_(t.requires_grad)

    args, kwargs = tree_map(to64, (step.args, step.kwargs))
    inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
    weights: list[torch.Tensor] = [
        p for n in step.names[len(inputs) :] if (p := shadow._parameters[n]) is not None
    ]
    with torch.enable_grad():
        with float64_everywhere():
            outs = _outputs(type(target).forward(shadow, *args, **kwargs))
        grad_outs = [g.double() for g in step.grad_outs]
        return list(torch.autograd.grad(outs, inputs + weights, grad_outs, allow_unused=True))


def _or_zeros(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """A gradient autograd left out (None) is zero: what the optimizer sees for that tensor."""
    import torch

    return torch.zeros_like(like) if grad is None else grad


def _pair(
    clock: Clock, board: Switches, name: str, step: _Step, repeats: dict[str, int], index: int, *, aa: bool
) -> tuple[float, float, bool, int]:
    """One interleaved forward+backward pair: (PyTorch s, other side s, kernel on, repeat), under the lock."""
    with board.lock:
        current, pytorch, on = board.forwards(name, step.path)
        run_pytorch = forward_backward(pytorch, step)
        run_other = forward_backward(pytorch if aa else current, step)
        if step.path not in repeats:
            repeats[step.path] = max(clock.calibrate(run_pytorch), clock.calibrate(run_other))
        t_pytorch, t_other = interleaved_pair(
            clock, run_pytorch, run_other, repeats[step.path], b_first=index % 2 == 1
        )
    return t_pytorch, t_other, on and not aa, repeats[step.path]


def compare_layer_training(
    board: Switches,
    captured: CapturedInputs,
    name: str,
    *,
    run_id: str,
    instances: Instances = None,
    pairs: int | None = None,
    precision: float = DEFAULT_PRECISION,
    budget_s: float = DEFAULT_BUDGET_S,
    calibration_pairs: int = CALIBRATION_PAIRS,
) -> Iterator[Record]:
    """Gradient divergence per instance, an A/A calibration, forward+backward pairs, then a verdict.

    `captured` must come from a capture with autograd on (`capture_inputs(..., grad=True)`). Pairs
    stop like `compare_layer`'s (`StopRule`); the last record is a `LayerVerdict` in mode "training".
    """
    check_sampling(pairs, precision, budget_s)
    calls = calls_for(captured, name, board.select(name, instances))
    clock = Clock(board.device)
    with kernels_in_mode(board, "training", [(name, path) for path, _, _ in calls]):
        refused = sorted({now.reason for now in board.running(name, [p for p, _, _ in calls]) if now.reason})
        origin = {path: provenance(board, name, path, args, kwargs) for path, args, kwargs in calls}
        steps = [_prepare(board, name, call, seed=index) for index, call in enumerate(calls)]
        found: list[GradientDivergence] = []
        for step in steps:
            with board.lock:
                current, pytorch, on = board.forwards(name, step.path)
                kernel_grads = forward_backward(current, step)()
                pytorch_grads = forward_backward(pytorch, step)()
            try:
                reference: list[Any] = float64_gradients(pytorch.__self__, step)
            except Exception:  # a layer that cannot run in float64: no reference
                reference = [None] * len(step.leaves)
            for label, leaf, k, p, r in zip(
                step.names, step.leaves, kernel_grads, pytorch_grads, reference, strict=True
            ):
                ref = None if r is None else _or_zeros(r, leaf.double())
                values = divergence(_or_zeros(k, leaf), _or_zeros(p, leaf), ref)
                record = GradientDivergence(**values, kernel_on=on, gradient=label)
                found.append(record)
                yield Record(run_id, record, name, step.path, provenance=origin[step.path])
        repeats: dict[str, int] = {}
        aa_ratios, samples, stopped_by = yield from interleaved_series(
            lambda step, index, aa: _pair(clock, board, name, step, repeats, index, aa=aa),
            steps,
            lambda step, values: Record(run_id, values, name, step.path, provenance=origin[step.path]),
            calibration_pairs=calibration_pairs,
            stop=StopRule(pairs, precision, budget_s),
            stalls=lambda step: StallWatch(),  # forward+backward: no copy of the forward's bytes bounds it
            mode=TRAINING,
        )
        verdict = layer_verdict(samples, aa_ratios, found, calls, False, stopped_by, mode=TRAINING)
        if refused:  # the instances a kernel refused for training ran PyTorch: say why
            verdict = dataclasses.replace(verdict, notes=(*verdict.notes, *refused))
        yield Record(run_id, verdict, name, provenance=origin[calls[0][0]])
