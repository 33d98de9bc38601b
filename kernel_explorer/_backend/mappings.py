"""Kernel mappings as flat entries, from the three places they live: a user's dict, the mapping
registered with `kernels` (`register_kernel_mapping`, `use_kernel_mapping`), Transformers' defaults."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.internals import internal

if TYPE_CHECKING:
    from kernels import Mode


@dataclass(frozen=True)
class MappingEntry:
    """One repository of a mapping: for which layer name, device (and properties) and mode."""

    layer_name: str
    device: str
    properties: str | None  # e.g. "capability 121-121" for a CUDA/ROCm range; None for any
    mode: Mode
    repository: Any
    #: the mapping's own device key (a `kernels.Device` with CUDA/ROCm properties), None: the type
    device_key: Any = field(default=None, compare=False)


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
                key = None if isinstance(device_key, str) else device_key
                yield MappingEntry(str(layer_name), device, properties, mode, repository, key)


def _interval_nodes(node: Any) -> Iterator[Any]:
    if node is None:
        return
    yield from _interval_nodes(node.left)
    yield node
    yield from _interval_nodes(node.right)


def _flat_repos(device_repos: Any) -> dict[Any, Any]:
    """The mode -> repository dict of a device kind without capabilities (CPU, XPU, MPS, ...).

    kernels 0.17 exposes it as the `repos` property; 0.18 replaced that by
    `repos_for_device(index)`, whose CUDA/ROCm forms ask the GPU. Both keep the dict in `_repos`.
    """
    repos = device_repos.__dict__.get("_repos")
    if repos is None:
        repos = getattr(device_repos, "repos", None)
    return dict(repos or {})


def iter_registered_mapping() -> Iterator[MappingEntry]:
    """Entries registered with `kernels` (`register_kernel_mapping`, an enclosing `use_kernel_mapping`)."""
    _KERNEL_MAPPING = internal("kernels.layer.globals", "_KERNEL_MAPPING")

    for layer_name, per_device in _KERNEL_MAPPING.get().items():
        for device, device_repos in per_device.items():
            tree = getattr(device_repos, "repos_by_capability", None)
            if tree is None:
                ranges = [(None, _flat_repos(device_repos))]
            else:
                ranges = [
                    (f"capability {node.start}-{node.end}" if node.end < sys.maxsize else None, node.data)
                    for node in _interval_nodes(tree.root)
                ]
            for properties, by_mode in ranges:
                for mode, repository in by_mode.items():
                    yield MappingEntry(str(layer_name), device, properties, mode, repository)


def transformers_mapping() -> dict[str, Any]:
    """Transformers' default mapping (what `use_kernels=True` registers); empty without support."""
    try:
        from transformers.integrations.hub_kernels import get_kernel_mapping_transformers
    except ImportError:  # Transformers without kernels support: no default mapping
        return {}
    return get_kernel_mapping_transformers()
