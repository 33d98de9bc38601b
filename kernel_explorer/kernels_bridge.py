"""Every use of a `kernels` internal, in one place.

The explorer loads and swaps kernels only through `kernels`, and sometimes needs a piece that
`kernels` keeps private: the per-layer step of `kernelize`, the registered mapping, the mode
priority table. They are read here and nowhere else, so an upgrade of `kernels` (pinned to 0.17.x)
breaks one small module, not the whole explorer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import MethodType
from typing import TYPE_CHECKING, Any

from kernel_explorer.errors import KernelExplorerError

if TYPE_CHECKING:
    from kernels import Mode
    from torch import nn

MODE_NAMES: tuple[str, ...] = ("inference", "training", "inference+torch.compile", "training+torch.compile")


def parse_mode(mode: str | Mode) -> Mode:
    """`Mode` from the names a user types ("inference", "training", "torch.compile", ...)."""
    from kernels import Mode

    if isinstance(mode, Mode):
        return mode
    key = str(mode).strip().lower().replace(" ", "")
    aliases = {
        "inference": Mode.INFERENCE,
        "training": Mode.TRAINING,
        "torch.compile": Mode.INFERENCE | Mode.TORCH_COMPILE,
        "compile": Mode.INFERENCE | Mode.TORCH_COMPILE,
        "inference+torch.compile": Mode.INFERENCE | Mode.TORCH_COMPILE,
        "training+torch.compile": Mode.TRAINING | Mode.TORCH_COMPILE,
    }
    if key not in aliases:
        raise KernelExplorerError(
            f"Unknown mode {mode!r}. Use one of: {', '.join(MODE_NAMES)} (or 'torch.compile')."
        )
    return aliases[key]


def mode_name(mode: Mode) -> str:
    """Readable name of a `Mode`, as used in tables ("fallback" for a plain mapping entry)."""
    from kernels import Mode

    if mode == Mode.FALLBACK:
        return "any mode"
    parts = [
        name for name, flag in (("inference", Mode.INFERENCE), ("training", Mode.TRAINING)) if flag in mode
    ]
    if Mode.TORCH_COMPILE in mode:
        parts.append("torch.compile")
    return "+".join(parts)


def mode_priority(mode: Mode) -> list[Mode]:
    """The registered modes `kernelize` would accept for `mode`, most preferred first."""
    from kernels.layer.repos import _MODE_FALLBACK_PRIORITY

    return list(_MODE_FALLBACK_PRIORITY[mode])


@dataclass(frozen=True)
class MappingEntry:
    """One repository of a mapping: for which layer name, device (and properties) and mode."""

    layer_name: str
    device: str
    properties: str | None  # e.g. "capability 121-121" for a CUDA/ROCm range; None for any
    mode: Mode
    repository: Any


def _device_of(key: Any) -> tuple[str, str | None]:
    if isinstance(key, str):
        return key, None
    props = getattr(key, "properties", None)
    if props is None:
        return key.type, None
    return key.type, f"capability {props.min_capability}-{props.max_capability}"


def iter_mapping(mapping: dict[str, dict[Any, Any]]) -> Iterator[MappingEntry]:
    """Entries of a mapping in the dict form `use_kernel_mapping` takes."""
    from kernels import Mode

    for layer_name, per_device in mapping.items():
        for device_key, repos in per_device.items():
            device, properties = _device_of(device_key)
            by_mode = repos if isinstance(repos, dict) else {Mode.FALLBACK: repos}
            for mode, repository in by_mode.items():
                yield MappingEntry(str(layer_name), device, properties, mode, repository)


def _interval_nodes(node: Any) -> Iterator[Any]:
    if node is None:
        return
    yield from _interval_nodes(node.left)
    yield node
    yield from _interval_nodes(node.right)


def iter_registered_mapping() -> Iterator[MappingEntry]:
    """Entries registered with `kernels` (`register_kernel_mapping`, an enclosing `use_kernel_mapping`)."""
    from kernels.layer.globals import _KERNEL_MAPPING

    for layer_name, per_device in _KERNEL_MAPPING.get().items():
        for device, device_repos in per_device.items():
            tree = getattr(device_repos, "repos_by_capability", None)
            if tree is None:
                ranges = [(None, device_repos.repos or {})]
            else:
                ranges = [
                    (f"capability {node.start}-{node.end}" if node.end < sys.maxsize else None, node.data)
                    for node in _interval_nodes(tree.root)
                ]
            for properties, by_mode in ranges:
                for mode, repository in by_mode.items():
                    yield MappingEntry(str(layer_name), device, properties, mode, repository)


def kernelize_each(
    modules: list[nn.Module], entry: MappingEntry, mode: Mode
) -> Iterator[tuple[nn.Module, Exception | None]]:
    """Run `kernelize`'s per-layer step on each module, with exactly one candidate mapped.

    `kernelize` itself walks every submodule and would reset layers of other names to their class
    forward; the per-layer step it calls touches only the module it is given. Loading errors are
    yielded (no `CANNOT_LOAD` fallback), so the caller can show the reason; the mapping context is
    entered once for all modules, which keeps switching 100+ instances within milliseconds.
    """
    from kernels import Device, KernelizeFallback, use_kernel_mapping
    from kernels.layer.layer import kernelize_layer

    mapping = {entry.layer_name: {entry.device: {entry.mode: entry.repository}}}
    device = Device(type=entry.device)
    with use_kernel_mapping(mapping, inherit_mapping=False):
        for module in modules:
            try:
                kernelize_layer(module, mode=mode, device_type=device, use_fallback=KernelizeFallback.DEFAULT)
            except Exception as error:
                yield module, error
            else:
                yield module, None


@dataclass(frozen=True)
class KernelOrigin:
    """Where a loaded kernel came from: its metadata id, build variant and repository."""

    kernel_id: str
    variant: str
    repository: str  # Hub repo id, or the local repository folder


def kernel_origin(function: Any) -> KernelOrigin | None:
    """The loaded kernel a layer forward belongs to, or None for code that is not a kernel."""
    from pathlib import Path

    from kernels.importer import _loaded_kernels

    package = getattr(function, "__module__", "") or ""
    kernel_id = package.split(".", 1)[0]
    for variant_path, loaded in list(_loaded_kernels.items()):
        if loaded.metadata.id == kernel_id:
            path = Path(variant_path)
            repo = loaded.repo_info.repo_id if loaded.repo_info else str(path.parent.parent)
            return KernelOrigin(kernel_id, path.name, repo)
    return None


def bound_function(forward: Any) -> Any:
    """The plain function behind a bound forward (`MethodType`), or the object itself."""
    return forward.__func__ if isinstance(forward, MethodType) else forward
