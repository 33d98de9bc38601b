"""Which code path a kernel runs here, and why, read from what the kernel itself reports.

A repository built for several instruction sets (the bundled ones: avx512bf16, avx512, avx2,
portable) chooses among the paths this CPU runs by timing them at first use
(hub/common/csrc/kx_choice.h) and reports the choice through `isa()`, `isa_paths()`,
`isa_reason()` and, op by op, `isa_choices()`. Any kernel module with those functions is read the
same way. Reading never builds and never pins: a path pinned by a `@path` candidate is the
switching's to say (`switching.code_paths`), and it hands the pin's holders in. Loading a bundled
repository here costs its first `isa()` its measurement (about 0.1 s); later ones read the cached
choice.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel_explorer.build.bundled import BUNDLED_REPOS, bundled_repo_path
from kernel_explorer.inspect.hardware import KernelPath


@dataclass(frozen=True)
class RunningPath:
    """The code path a kernel runs now, why, and whether a `@path` candidate pins it."""

    path: str = ""  # "" for a kernel that names no paths (or PyTorch)
    why: str = ""
    pinned: bool = False


def first_line(error: BaseException) -> str:
    """An error raised by a kernel's own code, as one line."""
    return (str(error).splitlines() or [type(error).__name__])[0]


def code_paths(module: Any) -> tuple[str, ...]:
    """The code paths `module` runs on this CPU, widest first; () for a kernel that names none (or
    whose `isa_paths()` raises)."""
    paths = getattr(module, "isa_paths", None)
    if not callable(paths):
        return ()
    try:
        found: Any = paths()  # the kernel's own op: any iterable of names
        return tuple(str(p) for p in found)
    except Exception:
        return ()


def model_dtype(model: Any) -> str:
    """ "float32" for a model whose floating-point weights are float32: the dtype its ops run at."""
    dtypes = (p.dtype for p in model.parameters() if p.is_floating_point())
    return str(next(dtypes, "")).removeprefix("torch.")


def _words(name: str) -> frozenset[str]:
    """`NewGELU` -> {new, gelu}; `rms_norm` -> {rms, norm}: an op's name and a layer's, comparable."""
    return frozenset(w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name))


def _op_path(module: Any, layer: str, dtype: str) -> RunningPath | None:
    """The path the op(s) serving `layer` at `dtype` run, from `isa_choices()` where the kernel
    chooses op by op ("silu float32: avx512: ..."): its `isa()` is only the path most ops run.
    Matched by name (`Silu` ~ silu, `NewGELU` ~ gelu_new, attention ~ its prefill and decode ops)."""
    choices = getattr(module, "isa_choices", None)
    if not (layer and dtype and callable(choices)):
        return None
    try:
        given: Any = choices()
        lines = [str(line) for line in given]
    except Exception:
        return None
    mine = _words(layer)
    found: list[tuple[frozenset[str], str, str]] = []  # (op words, path, line)
    for line in lines:
        head, _, rest = line.partition(": ")
        *op, last = head.split() or [""]
        if last == dtype and op and rest:
            found.append((_words("_".join(op)), rest.split()[0].rstrip(":"), line))
    same = [f for f in found if f[0] == mine] or [f for f in found if f[0] <= mine or mine <= f[0]]
    if not same:
        return None
    paths = list(dict.fromkeys(path for _, path, _ in same))
    return RunningPath(paths[0] if len(paths) == 1 else "/".join(paths), "; ".join(line for *_, line in same))


def reported_path(
    module: Any, layer: str = "", dtype: str = "", *, holders: Callable[[Any], Sequence[str]] | None = None
) -> RunningPath:
    """What `module` runs now for `layer` at `dtype` (the op's own choice where the kernel chooses op
    by op, else `isa()`); an empty `RunningPath` for a kernel that names no paths. `holders(module)`
    names the candidates that pin its path, if any (the switching's pins)."""
    isa = getattr(module, "isa", None)
    if not callable(isa):
        return RunningPath()
    try:
        path = str(isa())
    except Exception as error:  # a forced path this CPU lacks: the repository's one line
        return RunningPath("?", first_line(error))
    pinned_by = list(holders(module)) if holders is not None else []
    if pinned_by:
        return RunningPath(path, f"{path}: pinned while {', '.join(pinned_by)} is on", pinned=True)
    own = _op_path(module, layer, dtype)
    if own is not None:
        return own
    reason = getattr(module, "isa_reason", None)
    try:
        why = str(reason()) if callable(reason) else ""
    except Exception as error:
        why = f"{path}: its reason could not be read ({first_line(error)})"
    return RunningPath(path, why)


def kernel_path(
    repo: str, module: Any, *, holders: Callable[[Any], Sequence[str]] | None = None
) -> KernelPath | None:
    """What `module` (a loaded kernel) says about its code path, or None when it says nothing."""
    now = reported_path(module, holders=holders)  # the inventory's words, pins included
    if not now.path:
        return None
    if now.path == "?":  # a forced path this CPU lacks: the repository's one-line reason
        return KernelPath(repo, "?", (), now.why)
    return KernelPath(
        repo, now.path, code_paths(module), now.why or f"{now.path}: the path the kernel reports"
    )


def bundled_kernel_paths(*, holders: Callable[[Any], Sequence[str]] | None = None) -> tuple[KernelPath, ...]:
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
        if module is not None and (info := kernel_path(repo, module, holders=holders)) is not None:
            found.append(info)
    return tuple(found)
