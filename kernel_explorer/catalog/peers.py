"""Peers: local kernel-builder repositories (sources or builds) offered next to the bundled kernels.

A peer is anyone's repository in kernel-builder's format, say a Hub kernel's CPU backend checked
out locally: `builder.build_path` builds it (or takes a built one as it is), and it becomes
candidates of source "peer" in the catalog, so `compare(..., candidates=["bundled", "peer"])`
measures PyTorch, the bundled kernel and the peer in one run.

A peer is taken as the Hub would serve it:
- which class serves which layer: when its build.toml names the Hub repository it is
  (`[general.hub] repo-id`), the mappings that name that repository (Transformers' default
  mapping, what is registered with `kernels`) say it, per device and mode: Transformers maps
  `MegaBlocksMoeMLP` on cpu to megablocks' `CPUMegaBlocksMoeMLP`. Otherwise a class whose name is
  one of the model's kernel layer names (case aside) serves that layer.
- a peer's Python is a stranger's code: the explorer imports it in the trial worker
  (`switching/isolation.py`), never in its own process; one that fails to import (megablocks
  imports `triton`; any exception; a crash) is still listed: its classes are read from its source
  without running it, and its candidates' trials say what its code needs.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kernel_explorer._backend.mappings import iter_mapping, iter_registered_mapping, transformers_mapping
from kernel_explorer._backend.repositories import hub_coordinates, local_layer_repository
from kernel_explorer.errors import KernelExplorerError


def layer_classes(repo_path: Path, variant: str | None = None) -> list[str]:
    """The class names in a built repository's layers module, imported in this process.

    When its Python fails to import (a dependency this machine lacks, or any exception its code
    raises), they are read from `layers.py` without running it, so the peer is still listed and its
    candidates' trials say why it cannot run. The explorer asks the trial worker instead
    (`switching.isolation.peer_classes`): there a peer that crashes at import crashes the worker.
    """
    try:
        found = imported_classes(repo_path)
    except Exception:  # a stranger's code may raise anything at import
        return classes_in_source(repo_path, variant)
    if isinstance(found, KernelExplorerError):
        raise found
    return found


def imported_classes(repo_path: Path) -> list[str] | KernelExplorerError:
    """The module classes of the repository's `layers`, loaded through `kernels` (the error to
    raise, returned, when it has no `layers`: a worker sends it back as it is)."""
    from kernels import get_local_kernel
    from torch import nn

    module = get_local_kernel(Path(repo_path))
    layers = getattr(module, "layers", None)
    if layers is None:
        return KernelExplorerError(f"{repo_path}: the kernel has no `layers` module, so no layer can use it")
    return sorted(n for n, v in vars(layers).items() if isinstance(v, type) and issubclass(v, nn.Module))


def classes_in_source(repo_path: Path, variant: str | None) -> list[str]:
    folders = [repo_path / "build" / variant] if variant else sorted((repo_path / "build").glob("*"))
    for folder in folders:
        source = folder / "layers.py"
        if source.is_file():
            tree = ast.parse(source.read_text())
            return sorted(node.name for node in tree.body if isinstance(node, ast.ClassDef))
    return []


def _hub_entries(repo_id: str, classes: set[str]) -> dict[str, dict[str, dict[Any, str]]]:
    """{layer: {device: {mode: class}}} from every mapping that names Hub repository `repo_id`,
    for the classes this peer has."""
    found: dict[str, dict[str, dict[Any, str]]] = {}
    entries = [*iter_mapping(transformers_mapping()), *iter_registered_mapping()]
    for entry in entries:
        repository = entry.repository
        coordinates = hub_coordinates(repository)
        if coordinates is None or coordinates.repo_id != repo_id or repository.layer_name not in classes:
            continue
        modes = found.setdefault(entry.layer_name, {}).setdefault(entry.device, {})
        modes.setdefault(entry.mode, repository.layer_name)
    return found


def peer_mapping(
    path: str | Path,
    layer_names: Iterable[str] = (),
    *,
    layers: dict[str, str] | None = None,
    progress: bool = False,
    read_classes: Callable[[Path, str | None], list[str]] = layer_classes,
) -> dict[str, dict[str, Any]]:
    """The kernels mapping of the repository at `path`, built for this CPU.

    `layers` maps layer names to the repository's classes explicitly; otherwise the Hub's mappings
    for its `[general.hub] repo-id` decide, then every class whose name matches one of
    `layer_names` (case-insensitive) serves that layer on the cpu. `read_classes` lists the
    repository's classes (the explorer's imports it in the trial worker, not here).
    """
    from kernel_explorer.build.builder import build_path
    from kernel_explorer.build.repo_format import read_plan

    built = build_path(path, progress=progress)
    source = Path(path).expanduser().resolve()
    repo_id = read_plan(source).hub_repo_id if (source / "build.toml").is_file() else None
    names = read_classes(built.repo_path, built.variant)
    if layers is not None:
        return {layer: {"cpu": local_layer_repository(built.repo_path, c)} for layer, c in layers.items()}
    mapping: dict[str, dict[str, Any]] = {}
    wanted = set(layer_names)
    for layer, devices in (_hub_entries(repo_id, set(names)) if repo_id else {}).items():
        if layer in wanted and "cpu" in devices:
            mapping[layer] = {
                "cpu": {
                    mode: local_layer_repository(built.repo_path, c) for mode, c in devices["cpu"].items()
                }
            }
    classes = {name.lower(): name for name in names}
    for layer in layer_names:
        if layer not in mapping and layer.lower() in classes:
            mapping[layer] = {"cpu": local_layer_repository(built.repo_path, classes[layer.lower()])}
    if not mapping:
        via = f" nor a mapping of its Hub repository {repo_id}" if repo_id else ""
        raise KernelExplorerError(
            f"{path}: none of its layer classes ({', '.join(names) or 'none'}) is one of the model's "
            f"kernel layers ({', '.join(layer_names)}){via}; pass layers={{'RMSNorm': 'ItsClass'}}"
        )
    return mapping
