"""What every explorer of one model shares, in one object per model.

Two explorers of the same model (a cell that makes a second one, the magics' `Explorer.of`) must
agree on what runs: they hear the same switch events, route the same function copies and offer
the rows an `extend` added. That state lives in one `ModelSwitching` per model, found through a
weak registry (the only module-level table the switching code keeps): it goes with the model.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn
    from torch.utils.hooks import RemovableHandle


@dataclass(eq=False)
class ModelSwitching:
    """One model's shared switching state."""

    observers: list[Callable[[], None]] = field(default_factory=list)  # switch events (events.py)
    errors: list[BaseException] = field(default_factory=list)  # observers' exceptions, kept
    route_hooks: dict[int, tuple[RemovableHandle, RemovableHandle]] = field(default_factory=dict)
    added_mappings: dict[str, list[tuple[dict[str, Any], str]]] = field(default_factory=dict)
    probes: dict[tuple[Any, ...], Any] = field(default_factory=dict)  # (candidate, ..., key) -> verdict
    explorer: weakref.ref[Any] | None = None  # the latest explorer made for the model
    #: the experts implementation (per sub-config) the model had when its first explorer came
    experts_original: dict[str, Any] | None = None
    #: (capture kwargs, key, model_trial.References): the whole-model trial's reference runs
    references: tuple[Any, Any, Any] | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: how many times what the model's instances run has changed: counted under the switchboard's
    #: lock by every switch, fallback and rescan, so a measurement holding that lock reads in one
    #: integer whether anything changed since it last looked (layer_comparison.py)
    changes: int = 0


_registry: weakref.WeakKeyDictionary[nn.Module, ModelSwitching] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def of(model: nn.Module) -> ModelSwitching:
    """The shared switching state of `model` (made on first use)."""
    with _registry_lock:
        found = _registry.get(model)
        if found is None:
            found = _registry[model] = ModelSwitching()
        return found
