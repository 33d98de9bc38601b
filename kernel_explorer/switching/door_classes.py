"""Every door the switchboard asks to find its rows in a model, in the order their rows are listed.

Each door class says which rows it serves (`Door.discover`): a layer group the model's marks make
(a marked class, a class `extend` named, a function layer) or its model-wide row (attention, MoE
experts). A new door is one more class here; the board needs nothing more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_explorer.switching.attention_door import AttentionDoor
from kernel_explorer.switching.experts_door import ExpertsDoor
from kernel_explorer.switching.function_door import FunctionDoor
from kernel_explorer.switching.module_door import ExtensionDoor, ModuleDoor

if TYPE_CHECKING:
    from kernel_explorer.switching.door import Door

DOORS: tuple[type[Door], ...] = (ModuleDoor, ExtensionDoor, FunctionDoor, AttentionDoor, ExpertsDoor)
