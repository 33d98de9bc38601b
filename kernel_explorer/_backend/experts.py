"""Transformers' experts interface: how a MoE model's experts modules choose their implementation.

A class decorated with `use_experts_implementation` (Qwen3-MoE, Mixtral, GPT-OSS, ...) dispatches
each forward through an `ExpertsInterface` by its config's `_experts_implementation`: "eager" (the
class's own loop), "batched_mm", "grouped_mm" (Transformers' PyTorch code), or a Hub kernel
("deepgemm" and "deepgemm_megamoe" from kernels-community/deep-gemm, "sonicmoe" from
kernels-community/sonic-moe) that Transformers loads lazily at the first call. A model switches
them all with `set_experts_implementation(name)`; `deepgemm_megamoe` is a load-time choice it
refuses to switch to or from at run time. This module is the explorer's only way in: which modules
are experts modules, what each runs now, the function an implementation is for one module, where
a Hub implementation comes from and why Transformers would not load it here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from kernel_explorer._backend.internals import internal

if TYPE_CHECKING:
    from torch import nn
    from transformers import PreTrainedConfig, PreTrainedModel

#: Transformers' PyTorch implementations: always there, no kernel to load
BUILTIN: tuple[str, ...] = ("grouped_mm", "batched_mm", "eager")
#: Hub implementations -> Transformers' kernel name (its `_HUB_KERNEL_MAPPING` key)
HUB: dict[str, str] = {"deepgemm": "deep-gemm", "sonicmoe": "sonic-moe", "deepgemm_megamoe": "deep-gemm"}
#: switched only at load time (`from_pretrained(..., experts_implementation=...)`): Transformers
#: refuses `set_experts_implementation` to or from it
LOAD_TIME_ONLY: frozenset[str] = frozenset({"deepgemm_megamoe"})


def has_experts_interface(model: nn.Module) -> bool:
    """Whether the model's Transformers can switch experts implementations at run time."""
    return callable(getattr(model, "set_experts_implementation", None)) and callable(
        getattr(model, "get_experts_implementation", None)
    )


@functools.cache
def _dispatching_code() -> Any:
    """The code object of the forward `use_experts_implementation` gives a class (one per release)."""
    from torch import nn
    from transformers.integrations.moe import use_experts_implementation

    class Probe(nn.Module):
        def forward(self, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
            return hidden_states

    return use_experts_implementation(Probe).forward.__code__


def _closure(cls: type) -> dict[str, Any] | None:
    """The decorator's closure of `cls.forward` ({"experts_interface", "original_forward"}), or None
    when `cls` does not dispatch through the experts interface."""
    forward = getattr(cls, "forward", None)
    if forward is None or getattr(forward, "__code__", None) is not _dispatching_code():
        return None
    cells = forward.__closure__ or ()
    return {name: cell.cell_contents for name, cell in zip(forward.__code__.co_freevars, cells, strict=True)}


def is_experts_module(module: nn.Module) -> bool:
    return _closure(type(module)) is not None and hasattr(module, "config")


def experts_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(path, module) of every experts module of the model that dispatches through the interface."""
    return [(path, module) for path, module in model.named_modules() if is_experts_module(module)]


def model_implementation(model: nn.Module) -> dict[str, str | None]:
    """The model's implementation per (sub)config, as `set_experts_implementation` takes it back."""
    return dict(cast("PreTrainedModel", model).get_experts_implementation())


def set_implementation(model: nn.Module, implementation: str | dict[str, str | None]) -> None:
    """Switch every experts module of the model (a dict: per sub-config, as read by
    `model_implementation`). Raises Transformers' own error for a name it refuses."""
    cast("PreTrainedModel", model).set_experts_implementation(implementation)


def module_implementation(module: nn.Module) -> str:
    """What the experts module dispatches to now (its config's `_experts_implementation`)."""
    return str(cast("PreTrainedConfig", module.config)._experts_implementation)


def valid_names(module: nn.Module) -> list[str]:
    """The implementations the module's interface knows, with "eager" (its class's own loop)."""
    closure = _closure(type(module)) or {}
    interface = closure.get("experts_interface")
    return ["eager", *(interface.valid_keys() if interface is not None else [])]


def function(module: nn.Module, name: str) -> Callable[..., Any]:
    """The function `name` runs for `module` (called as `function(module, *args)`), whatever the
    model's config says now: what a trial and a measurement call on captured inputs."""
    closure = _closure(type(module))
    if closure is None:
        raise TypeError(f"{type(module).__name__} does not dispatch through Transformers' experts interface")
    eager = closure["original_forward"]
    if name == "eager":
        return eager
    return closure["experts_interface"].get_interface(name, eager)


def wrap_registered(
    module: nn.Module, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> None:
    """Replace the function registered as `name` in the interface `module`'s class dispatches
    through by `wrap(function)` (the explorer's fallback guard); a no-op for "eager" and names not
    registered there. The interface is process-wide, as Transformers' attention interface is."""
    closure = _closure(type(module))
    interface = None if closure is None else closure["experts_interface"]
    if interface is None or name == "eager" or name not in interface:
        return
    interface[name] = wrap(interface[name])


def hub_repository(name: str) -> str:
    """`kernels-community/deep-gemm (version 2)`: where Transformers loads Hub implementation `name`
    from (its own table, so a moved repository follows the installed release)."""
    table = internal("transformers.integrations.hub_kernels", "_HUB_KERNEL_MAPPING")
    found = table.get(HUB.get(name, ""), {})
    repo = found.get("repo_id", f"(Transformers names no repository for {name})")
    if found.get("revision"):
        return f"{repo} (revision {found['revision']})"
    return f"{repo} (version {found.get('version', 1)})"


def hub_refusal(name: str) -> str | None:
    """Why Transformers would not load Hub implementation `name` on this machine (its own check's
    message: no CUDA, an older GPU, a missing toolkit), or None when its check passes. Never
    contacts the Hub."""
    checks = {
        "deep-gemm": ("transformers.integrations.deepgemm", "is_deepgemm_loadable"),
        "sonic-moe": ("transformers.integrations.sonicmoe", "is_sonicmoe_loadable"),
    }
    where = checks.get(HUB.get(name, ""))
    if where is None:
        return f"Transformers has no loadability check for {name}"
    import importlib

    try:
        check = getattr(importlib.import_module(where[0]), where[1])
        check(raise_error=True)
    except Exception as error:  # its ImportError says what this machine lacks
        return (str(error).strip().splitlines() or [type(error).__name__])[0]
    return None
