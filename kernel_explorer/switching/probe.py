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

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.platform import ops_without_kernel
from kernel_explorer.catalog.probe_verdict import CANNOT_RUN, OK, UNVERIFIED, ProbeVerdict

if TYPE_CHECKING:
    from kernel_explorer.switching.door import DoorHost

__all__ = ["CANNOT_RUN", "OK", "UNVERIFIED", "ProbeVerdict", "cached", "explain", "settled", "trial_verdict"]


def cached(host: DoorHost, candidate: Any, layer: str, mode: Any) -> ProbeVerdict | None:
    """`candidate`'s verdict on the host's model when it was tried there (by any explorer of the
    model), also kept in this host's catalog, which the inventory and the default choice read."""
    from kernel_explorer.switching import model_state

    verdict = model_state.of(host.model).probes.get((candidate, layer, mode, signature(host.model)))
    if verdict is not None:
        host.catalog.record_probe(candidate, mode, verdict)
    return verdict


def settled(
    host: DoorHost, candidate: Any, layer: str, mode: Any, trial: Callable[[], ProbeVerdict]
) -> ProbeVerdict:
    """The cached verdict, else `trial()`'s, cached for every explorer of the model and kept in the
    catalog. An unverified one is not cached: tried again once there are inputs to try it on."""
    from kernel_explorer.switching import model_state

    verdict = cached(host, candidate, layer, mode)
    if verdict is None:
        verdict = trial()
        if verdict.outcome != UNVERIFIED:
            model_state.of(host.model).probes[(candidate, layer, mode, signature(host.model))] = verdict
        host.catalog.record_probe(candidate, mode, verdict)
    return verdict


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
    output: Any, expected: Any, changes: str = "", kept: int = 0, in_place: bool = False
) -> ProbeVerdict:
    """The verdict of a trial call that returned: it runs here unless its output's shape is not PyTorch's."""
    got, want = first_shape(output), first_shape(expected)
    if got != want:
        return ProbeVerdict(CANNOT_RUN, f"it returns shape {got} where PyTorch returns {want}")
    return ProbeVerdict(OK, "", changes, kept, in_place)


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
