"""Which door serves a layer group found in the model (attention is found by its own door)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_explorer.switching.function_door import FunctionDoor
from kernel_explorer.switching.module_door import ExtensionDoor, ModuleDoor

if TYPE_CHECKING:
    from kernel_explorer.inspect.layer_groups import LayerGroup
    from kernel_explorer.switching.door import Door


def door_class(group: LayerGroup) -> type[Door]:
    """The door class for `group`: a function layer, a class the user named, or a marked class."""
    if group.kind == "function":
        return FunctionDoor
    return ExtensionDoor if group.added else ModuleDoor
