"""A project's kernel pins: `[tool.kernels.dependencies]` in pyproject.toml and `kernels lock`'s file.

`kernels lock <project>` writes `kernels.lock` (JSON of `KernelLocks`: each dependency's repo id and
version with the commit it resolved to); `kernels` then loads those commits for the project. The
inventory shows the pins, so a user sees which revision a project would run and whether it is locked.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from kernel_explorer.errors import KernelExplorerError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class KernelPin:
    """One kernel a project depends on: the version it asks for and the commit its lock holds."""

    repo_id: str
    requested: str  # "v1", a branch, ... as pyproject.toml asks ("" when only the lock names it)
    commit: str | None  # the locked revision; None: not locked

    @property
    def summary(self) -> str:
        asked = f" {self.requested}" if self.requested else ""
        locked = f" @ {self.commit[:7]}" if self.commit else " (not locked: `kernels lock <project>`)"
        return f"{self.repo_id}{asked}{locked}"


def _requested(value: object) -> str:
    return f"v{value}" if isinstance(value, int) else str(value)


def read_pins(project: str | Path) -> tuple[KernelPin, ...]:
    """The pins of the project folder `project` (empty when it declares and locks no kernel)."""
    from kernels._rust import KernelLocks

    root = Path(project).expanduser()
    if not root.is_dir():
        raise KernelExplorerError(f"project {root} is not a folder; give the folder with pyproject.toml")
    requested: dict[str, str] = {}
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise KernelExplorerError(f"{pyproject} is not valid TOML: {exc}") from None
        deps = data.get("tool", {}).get("kernels", {}).get("dependencies", {}) or {}
        requested = {repo: _requested(version) for repo, version in deps.items()}
    locked: dict[str, str] = {}
    lock_path = root / "kernels.lock"
    if lock_path.is_file():
        try:
            locks = KernelLocks.from_json(lock_path.read_text())
        except ValueError as exc:
            raise KernelExplorerError(
                f"{lock_path} is not a kernels lock file ({exc}); run `kernels lock`"
            ) from None
        locked = {dependency.repo_id: str(lock.commit) for dependency, lock in locks.items()}  # 0.19: an Oid
    return tuple(
        KernelPin(repo, requested.get(repo, ""), locked.get(repo)) for repo in sorted({*requested, *locked})
    )
