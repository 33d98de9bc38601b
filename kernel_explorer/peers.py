"""Peers: local kernel-builder repositories (sources or builds) offered next to the bundled kernels.

A peer is anyone's repository in kernel-builder's format, say a Hub kernel's CPU backend checked
out locally: `builder.build_path` builds it (or takes a built one as it is), and each layer class
in its `layers` module whose name is one of the model's kernel layer names (case aside) becomes a
candidate of source "peer" in the catalog, so `compare(..., candidates=["bundled", "peer"])`
measures PyTorch, the bundled kernel and the peer in one run.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kernel_explorer._backend.repositories import local_layer_repository
from kernel_explorer.errors import KernelExplorerError


def layer_classes(repo_path: Path) -> list[str]:
    """The class names in a built repository's layers module (loaded through `kernels`)."""
    from kernels import get_local_kernel
    from torch import nn

    module = get_local_kernel(repo_path)
    layers = getattr(module, "layers", None)
    if layers is None:
        raise KernelExplorerError(f"{repo_path}: the kernel has no `layers` module, so no layer can use it")
    return sorted(n for n, v in vars(layers).items() if isinstance(v, type) and issubclass(v, nn.Module))


def peer_mapping(
    path: str | Path,
    layer_names: Iterable[str] = (),
    *,
    layers: dict[str, str] | None = None,
    progress: bool = False,
) -> dict[str, dict[str, Any]]:
    """`{layer_name: {"cpu": LocalLayerRepository}}` for the repository at `path`, built for this CPU.

    `layers` maps layer names to the repository's classes explicitly; otherwise every class whose
    name matches one of `layer_names` (case-insensitive) serves that layer.
    """
    from kernel_explorer.builder import build_path

    built = build_path(path, progress=progress)
    if layers is None:
        classes = {name.lower(): name for name in layer_classes(built.repo_path)}
        layers = {layer: classes[layer.lower()] for layer in layer_names if layer.lower() in classes}
        if not layers:
            raise KernelExplorerError(
                f"{path}: none of its layer classes ({', '.join(classes.values()) or 'none'}) is one of the "
                f"model's kernel layers ({', '.join(layer_names)}); pass layers={{'RMSNorm': 'ItsClass'}}"
            )
    return {layer: {"cpu": local_layer_repository(built.repo_path, cls)} for layer, cls in layers.items()}
