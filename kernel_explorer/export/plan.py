"""What is switched on now, read from the switchboard as plain data an exported module can be written from.

The switchboard knows, per instance, the candidate and mode switched on; the model's forwards say
what really runs (a kernel that raised, or declined an instance, left PyTorch there). Each door
says its own part (`Door.export()`, `switching/exported.py`): the instances that run a kernel now,
grouped by layer, candidate and mode, and in words what a `kernels` mapping cannot express for it
(a choice for some instances, or a second candidate in one layer) and what the export does about
it, so nobody ships something else than they think. The plan gathers the parts, whatever the door.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kernel_explorer.switching.exported import (
    AttentionPlan,
    DoorExport,
    ExpertsPlan,
    Extension,
    LayerChoice,
    LayerPlan,
    Repository,
)

if TYPE_CHECKING:
    from kernel_explorer.switching.board import Switchboard

__all__ = [
    "AttentionPlan",
    "ExpertsPlan",
    "ExportPlan",
    "Extension",
    "LayerChoice",
    "LayerPlan",
    "Repository",
    "export_plan",
]


@dataclass(frozen=True)
class ExportPlan:
    """Everything an exported module applies, and the notes it must say aloud."""

    model_class: str
    device: str
    dtype: str
    layers: tuple[LayerPlan, ...]
    extensions: tuple[Extension, ...]
    attention: AttentionPlan | None
    notes: tuple[str, ...] = field(default=())
    experts: ExpertsPlan | None = None  # None: the model has no MoE experts interface


def _modes_note(layers: tuple[LayerPlan, ...]) -> tuple[str, ...]:
    """The note for layers switched in different modes (a mapping kernelizes in one)."""
    modes = Counter(c.mode for plan in layers for c in plan.choices)
    if len(modes) <= 1:
        return ()
    return (
        "layers ran in different modes (" + ", ".join(sorted(modes)) + "): the export kernelizes in the "
        "most common one, then each instance of another mode alone",
    )


def export_plan(board: Switchboard) -> ExportPlan:
    """The plan of what runs now on `board`'s model (read under the switchboard's lock)."""
    with board.lock:
        parts: list[DoorExport] = [door.export() for door in board.doors.values()]
    layers = tuple(plan for part in parts for plan in part.layers)
    model = board.model
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    return ExportPlan(
        model_class=f"{type(model).__module__}.{type(model).__qualname__}",
        device=board.device,
        dtype="float32" if dtype is None else str(dtype).removeprefix("torch."),
        layers=layers,
        extensions=tuple(e for part in parts for e in part.extensions),
        attention=next((part.attention for part in parts if part.attention is not None), None),
        notes=tuple(note for part in parts for note in part.notes) + _modes_note(layers),
        experts=next((part.experts for part in parts if part.experts is not None), None),
    )
