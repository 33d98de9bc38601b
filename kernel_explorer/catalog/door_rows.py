"""The inventory's rows for the doors Transformers opens besides layers and attention.

Transformers 5.25 (and partly 5.22) reaches Hub kernels in ways no layer row shows: function
kernels with a fallback chain (`function_chains`), flash-attention names that become Hub
repositories (`flash_names`), quantization methods that load their kernels from the Hub
(`quantization_kernels`), and `KernelConfig` keys that fuse modules (`kernel_config`). None of them
is switched by the explorer; each row (`door_row.DoorRow`) says what runs here and why, so a user
who asked for one of them sees what they got. A door the installed Transformers lacks gives no row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kernel_explorer.catalog.door_row import DoorRow, HubLink
from kernel_explorer.catalog.flash_names import attention_name_rows
from kernel_explorer.catalog.function_chains import function_chain_rows
from kernel_explorer.catalog.kernel_config import kernel_config_rows
from kernel_explorer.catalog.quantization_kernels import quantization_rows

if TYPE_CHECKING:
    from torch import nn


def door_rows(
    model: nn.Module,
    device: str,
    *,
    hub_links: Mapping[str, HubLink] | None = None,
    kernel_config: Any | None = None,
) -> tuple[DoorRow, ...]:
    """Every door row of `model` on `device` (its layer rows' Hub state in `hub_links`)."""
    rows = [*function_chain_rows(model, device, hub_links or {})]
    rows += attention_name_rows(model, device)
    rows += quantization_rows(model, device)
    if kernel_config is not None:
        rows += kernel_config_rows(kernel_config, model, device)
    return tuple(rows)
