"""Which code path each bundled CPU kernel runs here, and why, for the hardware panel.

A bundled repository carries one code path per instruction set and chooses among those this CPU
runs by timing them at first use (hub/common/csrc/kx_choice.h); it reports the choice through
`isa()`, `isa_paths()` and `isa_reason()`. Any kernel module with those functions can be read the
same way (`kernel_path`). Loading a repository here never builds it; its first `isa()` on a
machine costs its measurement (about 0.1 s), later ones read the cached choice.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from kernel_explorer.build.bundled import BUNDLED_REPOS, bundled_repo_path
from kernel_explorer.inspect.hardware import KernelPath
from kernel_explorer.switching.code_paths import code_paths, running_path


def kernel_path(repo: str, module: Any) -> KernelPath | None:
    """What `module` (a loaded kernel) says about its code path, or None when it says nothing."""
    now = running_path(module)  # the inventory's words, pins included
    if not now.path:
        return None
    if now.path == "?":  # a forced path this CPU lacks: the repository's one-line reason
        return KernelPath(repo, "?", (), now.why)
    return KernelPath(
        repo, now.path, code_paths(module), now.why or f"{now.path}: the path the kernel reports"
    )


def bundled_kernel_paths() -> tuple[KernelPath, ...]:
    """The path of every bundled repository that is built (the others are left out)."""
    from kernels import get_local_kernel

    found = []
    for repo in BUNDLED_REPOS:
        path = bundled_repo_path(repo)
        if not (path / "build").is_dir():
            continue
        module = None
        with contextlib.suppress(Exception):  # a broken build: the catalog says why, not this row
            module = get_local_kernel(Path(path))
        if module is not None and (info := kernel_path(repo, module)) is not None:
            found.append(info)
    return tuple(found)
