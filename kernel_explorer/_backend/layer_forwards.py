"""Swapping one layer's forward the way `kernelize` does, and telling which kernel a forward is."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import MethodType
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.internals import internal

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

    from kernel_explorer._backend.mappings import MappingEntry


def kernelize_each(
    modules: list[nn.Module], entry: MappingEntry, mode: Mode, *, device: Any = None
) -> Iterator[tuple[nn.Module, Exception | None, str]]:
    """Run `kernelize`'s per-layer step on each module, with exactly one candidate mapped.

    `kernelize` itself walks every submodule and would reset layers of other names to their class
    forward; the per-layer step it calls touches only the module it is given. Loading errors are
    yielded (no `CANNOT_LOAD` fallback), so the caller can show the reason; the mapping context is
    entered once for all modules, which keeps switching 100+ instances within milliseconds.

    Each module comes with why kernelize kept PyTorch for it ("" when it installed the kernel, or
    raised): `KernelizeFallback` falls back without a word for no device, no compatible mode or
    properties; `fallback_reason` names the flag and the cause. `device`: the `kernels.Device` to
    kernelize for (default: the entry's device type); the entry's own device key (with CUDA/ROCm
    properties, when the mapping had them) is what the mapping holds.
    """
    from kernels import Device, KernelizeFallback, use_kernel_mapping

    kernelize_layer = internal("kernels.layer.layer", "kernelize_layer")

    key = entry.device_key if entry.device_key is not None else entry.device
    mapping: Any = {entry.layer_name: {key: {entry.mode: entry.repository}}}  # kernels' mapping shape
    device = Device(type=entry.device) if device is None else device
    with use_kernel_mapping(mapping, inherit_mapping=False):
        for module in modules:
            try:
                kernelize_layer(module, mode=mode, device_type=device, use_fallback=KernelizeFallback.DEFAULT)
            except Exception as error:
                yield module, error, ""
            else:
                kept = runs_class_forward(module)
                yield module, None, fallback_reason(module, mode, device) if kept else ""


#: the flags under which kernelize keeps PyTorch without a word (in the order it checks them)
SILENT_FALLBACKS = ("NO_LAYER", "NO_DEVICE", "NO_COMPATIBLE_PROPERTIES", "NO_COMPATIBLE_MODE")


def fallback_reason(module: nn.Module, mode: Mode, device: Any) -> str:
    """Which `KernelizeFallback` flag kept `module` on PyTorch, and why, in one line.

    kernels says nothing for these; asking it again with that one flag removed makes it raise its
    own reason (before any load for the first three; the layer loaded already, memoized, for a mode
    the layer cannot run). Call inside the mapping context the module was kernelized under.
    """
    from kernels import KernelizeFallback

    from kernel_explorer._backend.modes import mode_name

    kernelize_layer = internal("kernels.layer.layer", "kernelize_layer")

    for name in SILENT_FALLBACKS:
        flag = getattr(KernelizeFallback, name)
        try:
            kernelize_layer(
                module, mode=mode, device_type=device, use_fallback=KernelizeFallback.DEFAULT & ~flag
            )
        except ValueError as error:
            said = str(error)
            break
        except Exception:  # not this flag's doing (kernels raised for another reason): keep asking
            continue
    else:
        return "kernels kept PyTorch (its mapping is disabled, or it gave no reason)"
    named = mode_name(mode)
    layer = getattr(type(module), "kernel_layer_name", type(module).__name__)
    if name == "NO_LAYER":
        why = f"no kernel is mapped for the layer name {layer!r}"
    elif name == "NO_DEVICE":
        why = f"no kernel is mapped for device {device.type}"
    elif name == "NO_COMPATIBLE_PROPERTIES":
        why = f"no kernel is mapped for this {device.type} device's properties (capability out of range)"
    elif "No repository" in said:
        why = f"no repository is mapped for mode {named}"
    else:  # the layer lacks what the mode needs (kernels 0.17 says only "does not support mode")
        from kernels import Mode

        compile_ = "torch.compile" in said or ("backward" not in said and Mode.TORCH_COMPILE in mode)
        backward = "backward" in said or ("torch.compile" not in said and Mode.TORCH_COMPILE not in mode)
        lacks = " or ".join(
            w for w, on in (("torch.compile support", compile_), ("backward", backward)) if on
        )
        why = f"the layer has no {lacks}, mode {named}"
    return f"kernels fell back ({name}): {why}"


@dataclass(frozen=True)
class KernelOrigin:
    """Where a loaded kernel came from: its metadata id, build variant and repository."""

    kernel_id: str
    variant: str
    repository: str  # Hub repo id, or the local repository folder


def kernel_id_of(function: Any) -> str:
    """The metadata id of the kernel package a function is defined in (its top-level module's
    name), or the top-level module of code that is not a kernel's."""
    return (getattr(function, "__module__", "") or "").split(".", 1)[0]


def _loaded_kernel(kernel_id: str) -> Any | None:
    from kernels import get_loaded_kernels

    return next((loaded for loaded in get_loaded_kernels() if loaded.metadata.id == kernel_id), None)


def kernel_origin(function: Any) -> KernelOrigin | None:
    """The loaded kernel a layer forward belongs to, or None for code that is not a kernel."""
    kernel_id = kernel_id_of(function)
    loaded = _loaded_kernel(kernel_id)
    if loaded is None:
        return None
    variant_dir = Path(loaded.module.__file__ or ".").parent
    repo = loaded.repo_info.repo_id if loaded.repo_info else str(variant_dir.parent.parent)
    return KernelOrigin(kernel_id, variant_dir.name, repo)


def bound_function(forward: Any) -> Any:
    """The plain function behind a bound forward (`MethodType`), or the object itself."""
    return forward.__func__ if isinstance(forward, MethodType) else forward


def model_device(model: nn.Module) -> str:
    """The device type `kernelize` would choose kernels for (ROCm told apart from CUDA)."""
    _find_device = internal("kernels.layer.kernelize", "_find_device")

    try:
        return _find_device(model).type
    except ValueError:  # no parameters: buffers tell, else the CPU
        for tensor in model.buffers():
            return tensor.device.type
        return "cpu"


def kernel_module(kernel_id: str) -> Any | None:
    """The loaded kernel module with metadata id `kernel_id`, or None."""
    loaded = _loaded_kernel(kernel_id)
    return loaded.module if loaded is not None else None


def check_layer_fits(repository: Any, cls: type[nn.Module]) -> None:
    """Load `repository`'s layer and check it can replace `cls`'s forward, as `kernelize` will.

    Raises `TypeError` with kernels' own reason (a different forward signature, extra members, a
    constructor) before anything is switched, so a bad repository is refused up front instead of
    falling back layer by layer at the first switch.
    """
    _validate_layer = internal("kernels.layer.layer", "_validate_layer")

    _validate_layer(check_cls=cls, cls=repository.load(), repo=repository)


def mark_layer_class(cls: type[nn.Module], layer_name: str) -> None:
    """Give `cls` a kernel layer name, through kernels' own `replace_kernel_forward_from_hub`."""
    from kernels import replace_kernel_forward_from_hub

    replace_kernel_forward_from_hub(cls, layer_name)


# -- how kernelize holds a kernel on an instance ---------------------------------------------------
# kernelize sets `forward` on the instance (`module.forward = MethodType(...)`); deleting that
# attribute brings the class's forward back. Everything that reads or undoes it goes through here.


def installed_forward(module: nn.Module) -> Any | None:
    """The forward set on the instance (a kernel's, or a wrapper of ours), or None: the class's."""
    return module.__dict__.get("forward")


def set_forward(module: nn.Module, forward: Any) -> None:
    """Install `forward` on the instance, where kernelize puts a kernel's."""
    module.forward = forward


def remove_forward(module: nn.Module) -> None:
    """Back to the class's own forward (no-op when none is installed).

    kernelize 0.18+ also records the repository in the instance's `_kernel_repo` (what
    `kernels.get_kernelized_layers` reads): it goes with the forward, so kernels' own word agrees.
    """
    module.__dict__.pop("forward", None)
    module.__dict__.pop("_kernel_repo", None)


def class_forward(module: nn.Module) -> Any:
    """The class's own (PyTorch) forward, bound to `module`."""
    return type(module).forward.__get__(module)


def runs_class_forward(module: nn.Module, forward: Any | None = None) -> bool:
    """Whether `forward` (default: the installed one) is the class's own forward, not a kernel's."""
    forward = installed_forward(module) if forward is None else forward
    return forward is None or bound_function(forward) is type(module).forward
