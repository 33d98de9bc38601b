"""What a repository object of `kernels` points at, and building one to load.

`LayerRepository` keeps its Hub coordinates in private attributes and `LocalLayerRepository` its
folder; these readers are the only places that look at them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class HubCoordinates:
    """The Hub side of a repository object: id, version or revision, and its trust opt-in."""

    repo_id: str
    version: int | None
    revision: str | None
    trust_remote_code: bool | tuple[str, ...]
    locked: bool = False  # a `LockedLayerRepository`: `revision` is the commit its lock pins


def hub_coordinates(repository: Any) -> HubCoordinates | None:
    """Hub coordinates of a `LayerRepository`-like object (locked ones by commit), None for local ones."""
    repo_id = getattr(repository, "_repo_id", None)
    if repo_id is None:
        return None
    trust = getattr(repository, "_trust_remote_code", False)
    trust = tuple(trust) if isinstance(trust, list) else bool(trust)
    revision = getattr(repository, "_revision", None)
    locks, dep = getattr(repository, "kernel_locks", None), getattr(repository, "kernel_dep", None)
    locked = locks is not None and dep is not None
    if locks is not None and dep is not None:
        revision = str(locks[dep].commit)  # a str in 0.17, an Oid in 0.19
    return HubCoordinates(str(repo_id), getattr(repository, "_version", None), revision, trust, locked)


def local_path(repository: Any) -> Path | None:
    """The folder of a `LocalLayerRepository`, or None for other repository objects."""
    path = getattr(repository, "_repo_path", None)
    return None if path is None else Path(path)


def local_layer_repository(path: Path, layer_name: str) -> Any:
    """A `LocalLayerRepository` (its `repo_path` must be a `Path`, not a str)."""
    from kernels import LocalLayerRepository

    return LocalLayerRepository(repo_path=Path(path), layer_name=layer_name)


def hub_layer_repository(
    repo_id: str, layer_name: str, *, version: int | None, revision: str | None, trust: bool | list[str]
) -> Any:
    """A `LayerRepository` by version when there is one, else by revision."""
    from kernels import LayerRepository

    if version is not None:
        return LayerRepository(repo_id, layer_name=layer_name, version=version, trust_remote_code=trust)
    return LayerRepository(repo_id, layer_name=layer_name, revision=revision, trust_remote_code=trust)
