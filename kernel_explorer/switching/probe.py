"""Probe before trust: try a candidate on a copy of one instance, with that instance's real inputs.

A build that loads is not a kernel that runs: flash-attn2's CPU build registers only `varlen_fwd`
for the CPU (its `fwd` has no CPU kernel) and refuses float32; megablocks' package imports
`triton`; a layer may repack its module's weights on first use. None of that shows in metadata, so
before a candidate is called usable for this model, its door loads it, runs it once on a copy of
one instance (never the model's own module) with a slice of the inputs the model really gives that
instance, and records the verdict: runs here, cannot run here (with the reason), or unverified
(nothing to try it on). The guard watches the copy, so what the kernel does to a module is known
before it touches the model.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.platform import ops_without_kernel
from kernel_explorer.catalog.probe_verdict import (
    CANNOT_RUN,
    OK,
    SIDE_EFFECTS,
    UNVERIFIED,
    WRONG,
    ProbeVerdict,
)
from kernel_explorer.numerics.divergence import divergence, float64_reference, wrong_bound

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer._backend.mappings import MappingEntry
    from kernel_explorer.switching.door import DoorHost

__all__ = [
    "CANNOT_RUN",
    "OK",
    "SIDE_EFFECTS",
    "UNVERIFIED",
    "WRONG",
    "ProbeVerdict",
    "cached",
    "explain",
    "kernel_package",
    "settled",
    "trial_verdict",
    "try_layer",
    "wrong_values",
]


def cached(host: DoorHost, candidate: Any, layer: str, mode: Any) -> ProbeVerdict | None:
    """`candidate`'s verdict on the host's model when it was tried there (by any explorer of the
    model), also kept in this host's catalog, which the inventory and the default choice read."""
    from kernel_explorer.switching import model_state

    verdict = model_state.of(host.model).probes.get((candidate, layer, mode, *verdict_key(host)))
    if verdict is not None:
        host.catalog.record_probe(candidate, mode, verdict)
    else:  # a verdict of another dtype or capture length is stale: tried again at the next use
        host.catalog.forget_probe(candidate, mode)
    return verdict


def settled(
    host: DoorHost, candidate: Any, layer: str, mode: Any, trial: Callable[[], ProbeVerdict]
) -> ProbeVerdict:
    """The cached verdict, else `trial()`'s, cached for every explorer of the model and kept in the
    catalog. An unverified one is not cached: tried again once there are inputs to try it on."""
    from kernel_explorer.switching import model_state

    verdict = cached(host, candidate, layer, mode)
    if verdict is None:
        key = verdict_key(host)  # before the trial: what it runs on is this dtype and length
        verdict = trial()
        if verdict.outcome != UNVERIFIED:
            model_state.of(host.model).probes[(candidate, layer, mode, *key)] = verdict
        host.catalog.record_probe(candidate, mode, verdict)
    return verdict


def try_layer(
    trial: nn.Module,
    original: nn.Module,
    entry: MappingEntry,
    mode: Mode,
    samples: list[tuple[tuple[Any, ...], dict[str, Any]] | None],
    *,
    where: str,
    code_path: str | None = None,
    label: str = "",
) -> ProbeVerdict:
    """The trial of one layer candidate: `entry` loaded onto `trial` (a copy of the instance) by
    kernelize's own step, called on each of `samples` (the capture's length, then a longer one:
    `switching/trial_inputs.py`) with the checks of `trial_checks` around each call, judged against
    `original`'s PyTorch forward and its float64 run. The one trial function: the door runs it here,
    the worker (`switching/isolation.py`) runs it in its own process first for a stranger's
    candidate. A kernel that only raises past the capture's length stays usable (the fallback
    answers such a call); its wrong values and side effects there still count."""
    from kernel_explorer._backend.hub import hub_session
    from kernel_explorer._backend.layer_forwards import (
        class_forward,
        installed_forward,
        kernelize_each,
        runs_class_forward,
    )
    from kernel_explorer.switching.code_paths import pinned
    from kernel_explorer.switching.guard import ModuleGuard
    from kernel_explorer.switching.trial_checks import checked_call, preserved_session

    with preserved_session() as at_load, hub_session():
        [(_, error, _)] = list(kernelize_each([trial], entry, mode))
    if error is not None:
        return ProbeVerdict(CANNOT_RUN, explain(error))
    loaded = [f"{found} when loaded" for found in at_load]
    forward = installed_forward(trial)
    if forward is None or runs_class_forward(trial):  # kernelize keeps PyTorch in this mode: nothing to try
        return ProbeVerdict(SIDE_EFFECTS, "; ".join(loaded)) if loaded else ProbeVerdict(OK)
    if not samples or samples[0] is None:
        return ProbeVerdict(UNVERIFIED, "no inputs of this layer to try it on (capture() first)")
    guard = ModuleGuard(trial)
    verdict = ProbeVerdict(OK)
    for index, (args, kwargs) in enumerate(s for s in samples if s is not None):
        try:
            with pinned(kernel_package(forward), code_path, ("probe", id(trial)), label):
                checked = checked_call(forward, class_forward(original), args, kwargs, memory=index == 0)
        except Exception as failure:
            if index:  # raising past the capture's length: the fallback answers such a call
                return verdict
            return ProbeVerdict(CANNOT_RUN, explain(failure, kernel_package(forward)))
        reference = None
        with contextlib.suppress(Exception):  # a layer that cannot run in float64: judged against PyTorch
            reference = float64_reference(original, args, kwargs)
        verdict = trial_verdict(
            checked.output,
            checked.expected,
            guard.summary(),
            guard.kept_bytes,
            guard.in_place,
            reference=reference,
            where=describe_call(where, args, kwargs),
            side_effects=[*loaded, *checked.side_effects],
            mismatch=checked.mismatch,
        )
        if verdict.outcome != OK:
            return verdict
    return verdict


def kernel_package(forward: Any) -> Any | None:
    """The loaded kernel package a (bound) layer forward comes from, for naming what its build lacks."""
    from kernel_explorer._backend.layer_forwards import bound_function, kernel_id_of, kernel_module

    return kernel_module(kernel_id_of(bound_function(forward)))


def verdict_key(host: DoorHost) -> tuple[Any, ...]:
    """What a verdict holds for: the model's `signature` and the capture's length bucket (a longer
    `capture()`, or the model converted to another dtype, tries every candidate again)."""
    from kernel_explorer.switching.trial_inputs import length_bucket

    tokens = getattr(host, "trial_tokens", None)
    return (signature(host.model), length_bucket(tokens() if tokens is not None else None))


def missing_module_hint(error: BaseException) -> str | None:
    """`its Python code needs `triton` (pip install triton)` for an import failure, else None."""
    name = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if name is None:
        found = re.search(r"No module named '([^']+)'", str(error))
        name = found.group(1) if found else None
    if not name:
        return None
    top = name.split(".")[0]
    return f"its Python code needs `{top}` (pip install {top})"


def explain(error: BaseException, kernel_module: Any | None = None) -> str:
    """One line for a kernel's error, with what the build lacks when the dispatcher said so."""
    hint = missing_module_hint(error)
    if hint is not None:
        return hint
    first = (str(error).strip().splitlines() or [""])[0] or _where(error)
    if isinstance(error, NotImplementedError) and ". " in first:  # the dispatcher's first sentence says it
        first = first.split(". ")[0] + "."
    text = f"{type(error).__name__}: {first}" if first else type(error).__name__
    missing = ops_without_kernel(kernel_module, "CPU") if kernel_module is not None else []
    if missing:  # what the build lacks, visible without calling it
        names = ", ".join(f"`{op}`" for op in missing[:4])
        if isinstance(error, NotImplementedError):
            text = f"its CPU build has no {names} ({text})"
        else:
            text = f"{text}; its CPU build has no {names}"
    return text[:300]


def trial_verdict(
    output: Any,
    expected: Any,
    changes: str = "",
    kept: int = 0,
    in_place: bool = False,
    *,
    reference: Any = None,
    where: str = "",
    side_effects: Sequence[str] = (),
    mismatch: Sequence[str] = (),
) -> ProbeVerdict:
    """The verdict of a trial call that returned: cannot run here when its output's shape, dtype or
    device is not PyTorch's (`mismatch`, from `trial_checks.output_changes`), wrong results here
    when its values are far from PyTorch's (`wrong_values`, against `reference`, the float64 run;
    `where` names the instance and inputs), side effects here when the checks around the call found
    any (`side_effects`, one phrase each), else runs here."""
    got, want = first_shape(output), first_shape(expected)
    if got != want:
        return ProbeVerdict(CANNOT_RUN, f"it returns shape {got} where PyTorch returns {want}")
    if mismatch:
        return ProbeVerdict(CANNOT_RUN, "; ".join(mismatch))
    off = wrong_values(first_tensor(output), first_tensor(expected), first_tensor(reference))
    effects = "; ".join(dict.fromkeys(side_effects))
    if off:
        also = f"; it also {effects}" if effects else ""
        return ProbeVerdict(WRONG, f"{off}{f', on {where}' if where else ''}{also}", changes, kept, in_place)
    if effects:
        return ProbeVerdict(SIDE_EFFECTS, effects, changes, kept, in_place)
    return ProbeVerdict(OK, "", changes, kept, in_place)


def wrong_values(kernel: Any, pytorch: Any, reference: Any = None) -> str:
    """How far off `kernel`'s output is, in one phrase, when it is beyond `wrong_bound`; "" when not.

    Both outputs are measured against `reference` (the original forward in float64), so the bound
    scales with PyTorch's own error there; without a reference (a layer that cannot run in float64)
    the kernel is measured against PyTorch's output, with PyTorch's error taken as zero.
    """
    import torch

    if kernel is None or pytorch is None or kernel.shape != pytorch.shape or not kernel.is_floating_point():
        return ""
    if kernel.numel() == 0:
        return ""
    finite = torch.isfinite(pytorch)
    bad = int((finite & ~torch.isfinite(kernel)).sum())
    if bad:
        return f"{bad} of {kernel.numel()} values are NaN or infinite where PyTorch's are finite"
    usable = (
        reference is not None and reference.shape == kernel.shape and bool(torch.isfinite(reference).all())
    )
    found = divergence(kernel, pytorch, reference if usable else None)
    if usable:
        err, own, scale = found["kernel_err64"], found["pytorch_err64"], found["reference_max_abs"]
        against = "float64"
    else:
        err, own = found["max_abs"], 0.0
        scale = pytorch.detach().double().abs().max().item()
        against = "PyTorch (no float64 run)"
    bound = wrong_bound(own, scale, kernel.dtype)
    if not err > bound:
        return ""
    return (
        f"off by {err:.3g} against {against} ({err / scale if scale else float('inf'):.2g} of the "
        f"output's largest value {scale:.3g}) where PyTorch is off by {own:.2g} (wrong past {bound:.2g})"
    )


def describe_call(path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """`model.layers.0.mlp.act_fn with inputs (1, 7, 128) float32`: where a trial ran."""
    import torch

    shapes = [
        f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
        for value in (*args, *kwargs.values())
        if isinstance(value, torch.Tensor)
    ][:3]
    return f"{path} with inputs {', '.join(shapes)}" if shapes else path


def first_tensor(value: Any) -> Any:
    """The first tensor of an output (a tensor, or a tuple/list whose first leaf is one), or None."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value:
        return first_tensor(value[0])
    return None


def _where(error: BaseException) -> str:
    """For an error without a message (a bare StopIteration): the function that raised it."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    where = "/".join(last.filename.replace("\\", "/").split("/")[-2:])
    return f"raised in {last.name} ({where}:{last.lineno})"


def first_shape(value: Any) -> tuple[int, ...] | None:
    import torch

    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if isinstance(value, (tuple, list)) and value:
        return first_shape(value[0])
    return None


def signature(model: Any) -> tuple[Any, ...]:
    """What makes a verdict hold for a model: its class, dtypes, device and attention shape."""
    config = getattr(model, "config", None)
    first = next(model.parameters(), None)  # read on every switch: one parameter, not all of them
    where = (None, None) if first is None else (str(first.dtype), first.device.type)
    heads = tuple(
        getattr(config, key, None) for key in ("num_attention_heads", "num_key_value_heads", "head_dim")
    )
    return (type(model).__qualname__, *where, heads)
