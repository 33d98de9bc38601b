"""The fallback of a model-wide door: an implementation registered with Transformers by name.

Attention and MoE experts switch the whole model through a registry Transformers keeps per
process (`ALL_ATTENTION_FUNCTIONS`, the experts interface): the explorer cannot put a wrapper on
one module's forward as the per-instance doors do, so it wraps the registered function once. The
wrapper answers an error in a module an explorer switched by sending that model back to its
original implementation (the door's `kernel_raised` path) and the call to the original's function;
any other module, or a door's own trial, sees the error as it is.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from torch import nn

    from kernel_explorer.switching.door import DoorHost


class GuardedDoor(Protocol):
    """What the wrapper needs from the door that switched a module."""

    host: DoorHost
    _trial: bool


class SwitchedModules:
    """Module -> (its door, the candidate it was switched to), both weakly; and the wrapper.

    `original(door, module)` gives the function that answers a failed call: the implementation the
    model came with (each door knows where Transformers keeps it).
    """

    def __init__(self, layer: str, original: Callable[[Any, nn.Module], Callable[..., Any]]) -> None:
        self.layer = layer
        self.original = original
        self.modules: weakref.WeakKeyDictionary[nn.Module, tuple[weakref.ref[Any], Any]] = (
            weakref.WeakKeyDictionary()
        )

    def __setitem__(self, module: nn.Module, value: tuple[weakref.ref[Any], Any]) -> None:
        self.modules[module] = value

    def pop(self, module: nn.Module, default: Any = None) -> Any:
        return self.modules.pop(module, default)

    def get(self, module: nn.Module) -> tuple[weakref.ref[Any], Any] | None:
        return self.modules.get(module)

    def guarded(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function` (a registered implementation) with the fallback; wrapped once."""
        if getattr(function, "kernel_explorer_guarded", False):
            return function

        @functools.wraps(function)  # `__wrapped__` is Transformers' own function
        def guarded(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            try:
                return function(module, *args, **kwargs)
            except Exception as error:
                found = self.modules.get(module)
                door = found[0]() if found is not None else None
                if found is None or door is None or door._trial:  # not an explorer's, or a trial:
                    raise  # the error is the verdict
                door.host.kernel_raised(self.layer, "*", found[1], error)
                return self.original(door, module)(module, *args, **kwargs)

        guarded.__dict__["kernel_explorer_guarded"] = True  # a function's own attribute
        return guarded
