"""Rows for function kernels with Transformers' fallback chain: which link runs here, and why.

A function decorated with `use_kernel_func_from_hub_with_fallback` runs the first of: the Hub kernel
(when the explorer, or `kernelize`, switched its function layer to one), the original pip package's
function (when it imported and takes inputs on this device), the torch reference. Transformers warns
once when the reference runs; the row says which link runs and why the ones before it do not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kernel_explorer._backend.function_chains import FallbackChain, fallback_chain
from kernel_explorer._backend.function_layers import kernel_functions
from kernel_explorer.catalog.door_row import FUNCTION_CHAIN, DoorRow, HubLink

if TYPE_CHECKING:
    from torch import nn


def chains(model: nn.Module) -> dict[str, tuple[FallbackChain, int]]:
    """Each function layer with a fallback chain, by kernel layer name, with its holder count."""
    found: dict[str, FallbackChain] = {}
    counts: Counter[str] = Counter()
    for _, module in model.named_modules():
        for func in kernel_functions(module).values():
            chain = fallback_chain(func)
            if chain is None:
                continue
            name = str(getattr(func, "kernel_layer_name", chain.function))
            found.setdefault(name, chain)
            counts[name] += 1
    return {name: (chain, counts[name]) for name, chain in found.items()}


def _package_why_not(chain: FallbackChain, device: str) -> str:
    """Why the pip package's function does not run here ("" when it does)."""
    if chain.package_imported:
        if chain.package_devices is not None and device not in chain.package_devices:
            devices = ", ".join(chain.package_devices)
            return f"the pip package {chain.distribution} runs on {devices} only, not on {device}"
        return ""
    if chain.package_installed:
        return (
            f"the pip package {chain.distribution} is installed but {chain.package}'s {chain.function} "
            "did not import when the model's code was imported"
        )
    return f"the pip package {chain.distribution} is not installed"


def chain_row(name: str, chain: FallbackChain, instances: int, device: str, hub: HubLink) -> DoorRow:
    """The row of one function: the first link of its chain that runs here."""
    if hub.running:
        why = f"{hub.running} is switched on"
        return DoorRow(FUNCTION_CHAIN, name, "Hub kernel", why, instances=instances)
    hub_why = f"Hub kernel: {hub.why_not}" if hub.why_not else "Hub kernel: not switched on"
    package_why = _package_why_not(chain, device)
    if not package_why:
        runs = f"pip package {chain.distribution}"
        why = f"{hub_why}; {chain.package} imported"
        return DoorRow(FUNCTION_CHAIN, name, runs, why, instances=instances)
    runs = f"torch reference ({chain.reference})"
    return DoorRow(FUNCTION_CHAIN, name, runs, f"{hub_why}; {package_why}", instances=instances)


def function_chain_rows(model: nn.Module, device: str, hub_links: Mapping[str, HubLink]) -> list[DoorRow]:
    """One row per function of `model` with a fallback chain (none on a model without one)."""
    return [
        chain_row(name, chain, count, device, hub_links.get(name, HubLink()))
        for name, (chain, count) in chains(model).items()
    ]
