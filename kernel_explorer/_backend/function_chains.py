"""Transformers' function kernels with a fallback chain (`use_kernel_func_from_hub_with_fallback`).

Transformers decorates a model's plain-PyTorch function (`torch_chunk_gated_delta_rule`,
`causal_conv1d_fn`, `selective_scan_fn`, ...) so that a call runs, in this order: a Hub kernel when
`kernelize` switched the function layer to one; else the function of an original pip package
(`fla`, `causal_conv1d`, `mamba_ssm`) when it imported at decoration time and, from 5.25 on, runs on
the inputs' device; else the torch reference. Which package, which function, whether it imported,
and the devices it runs on are kept only in the closure of the wrapper Transformers builds (and that
wrapper sits in the closure of kernels' function layer: `function_layers.wrapped_function`). This
module is the one reader of that closure; `CLOSURE` lists the names it relies on.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.function_layers import wrapped_function
from kernel_explorer._backend.internals import internal

if TYPE_CHECKING:
    from torch import nn

#: the closure names of Transformers' wrapper this module reads (5.22 and 5.25 both have them);
#: 5.25 adds `supported_devices` (read when present: the pip package runs on those devices only)
CLOSURE: tuple[str, ...] = ("func_name", "package", "is_new_implementation", "torch_function")
_DEVICES = "supported_devices"
_HUB_MODULE = "transformers.integrations.hub_kernels"


@dataclass(frozen=True)
class FallbackChain:
    """One function with Transformers' fallback chain, as it was decorated in this process."""

    function: str  # the kernel layer name (`chunk_gated_delta_rule`)
    package: str  # the pip package's import name (`fla`)
    distribution: str  # what `pip install` takes (`flash-linear-attention`)
    package_imported: bool  # the package's function was found when the model's code was imported
    package_devices: tuple[str, ...] | None  # devices the package's function gets inputs on (None: all)
    reference: str  # the torch reference's name (`torch_chunk_gated_delta_rule`)

    @property
    def package_installed(self) -> bool:
        """Whether the distribution is installed at all (it may be installed and still not import)."""
        try:
            importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True


def _closure(function: Any) -> dict[str, Any]:
    code = getattr(function, "__code__", None)
    cells = getattr(function, "__closure__", None) or ()
    if code is None:
        return {}
    values = {}
    for name, cell in zip(code.co_freevars, cells, strict=False):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    return values


def fallback_chain(func_module: nn.Module) -> FallbackChain | None:
    """The chain behind a function layer, or None for a function layer without one (rotary, ...)."""
    values = _closure(wrapped_function(func_module))
    if not all(name in values for name in CLOSURE):
        return None
    package = str(values["package"])
    devices = values.get(_DEVICES)
    return FallbackChain(
        function=str(values["func_name"]),
        package=package,
        distribution=distribution_of(package),
        package_imported=bool(values["is_new_implementation"]),
        package_devices=tuple(devices) if devices is not None else None,
        reference=getattr(values["torch_function"], "__name__", str(values["torch_function"])),
    )


def distribution_of(package: str) -> str:
    """The distribution that ships import name `package`, as Transformers names it in its warning."""
    names = internal(_HUB_MODULE, "_PACKAGE_TO_DISTRIBUTION")
    return str(names.get(package, package))


def decorator() -> Any:
    """Transformers' decorator itself (for a test to decorate a function of its own)."""
    return internal(_HUB_MODULE, "use_kernel_func_from_hub_with_fallback")
