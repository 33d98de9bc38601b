"""Rows for the flash-attention names Transformers turns into Hub repositories.

`attn_implementation="flash_attention_2"` runs the pip package `flash-attn` where it is installed;
without it Transformers loads `kernels-community/flash-attn2` at a fixed major version instead, and
says so in one warning (users who asked for the package got the Hub kernel). Each row says what the
name becomes here (the package, or which repository at which revision) and whether that can run on
this device; when the model's attention already runs one of those repositories, the row says which
name it came from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_explorer._backend import attention_interface
from kernel_explorer._backend.flash_names import FlashName, flash_names, supports_flash
from kernel_explorer.catalog.door_row import ATTENTION_NAME, DoorRow

if TYPE_CHECKING:
    from torch import nn


def name_row(found: FlashName, device: str, *, supported: bool, running: str) -> DoorRow:
    """The row of one name: the package, or the repository and revision it becomes, and why."""
    if found.package_available:
        why = f"the pip package {found.package} is installed for this device: the name stays the package"
        return DoorRow(ATTENTION_NAME, found.name, f"pip package {found.package}", why)
    target = f"{found.repository}@{found.revision}" if found.revision else found.repository
    reasons = [f"the pip package {found.package} is not installed, so Transformers loads the Hub repository"]
    if running == found.repository or running.startswith(found.repository + "@"):
        reasons.append(f"the model's attention runs {running} now: the name became it")
    elif not supported:
        reasons.append("this model does not support flash attention: Transformers refuses the name")
    elif found.devices and device not in found.devices:
        reasons.append(f"no build for {device}: Transformers lists builds for {', '.join(found.devices)}")
    return DoorRow(ATTENTION_NAME, found.name, target, "; ".join(reasons), found.repository, found.revision)


def attention_name_rows(model: nn.Module, device: str) -> list[DoorRow]:
    """One row per flash-attention name, for a model with Transformers' attention interface."""
    if not attention_interface.has_attention_interface(model):
        return []
    running = attention_interface.implementation(model)
    supported = supports_flash(model)
    return [name_row(found, device, supported=supported, running=running) for found in flash_names()]
