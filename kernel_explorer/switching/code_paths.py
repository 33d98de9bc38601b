"""A kernel's code paths as candidates: "bundled@avx2" is the bundled kernel with its AVX2 path pinned.

A repository built for several instruction sets (the bundled ones: avx512bf16, avx512, avx2,
portable) runs one path per process, chosen by timing them at first use, and reports it through
`isa()`, `isa_paths()` and `isa_reason()`. Which path is fastest on a host is a kernel author's
question the Hub's tools do not answer, so a candidate word may name a path ("bundled@avx2") and
the explorer compares them like any two candidates, on the model's real inputs.

The path belongs to the loaded kernel module, not to one layer: while a `@path` candidate is on,
the module runs that path for every layer it serves (the inventory says so on each of them), and
`reset_isa()` gives the measured choice back when the last holder goes. Two holders asking one
module for different paths cannot both be right, so the second is refused with who holds it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kernel_explorer.errors import KernelSwitchError


@dataclass
class _Pin:
    module: Any
    path: str
    holders: dict[Hashable, str] = field(default_factory=dict)  # holder -> its candidate's label


_lock = threading.Lock()
_pins: dict[int, _Pin] = {}  # id(kernel module) -> its pin; modules stay loaded for the process


def code_paths(module: Any) -> tuple[str, ...]:
    """The code paths `module` runs on this CPU, widest first; () for a kernel that names none."""
    paths = getattr(module, "isa_paths", None)
    return tuple(str(p) for p in paths()) if callable(paths) else ()


def pin(module: Any, path: str, holder: Hashable, label: str) -> None:
    """Run `path` in `module` until `holder` lets go (`unpin`); `label` names the holder's candidate
    in a refusal. Raises `KernelSwitchError` (one line, what to do) for a path `module` does not run
    here, or one another holder has pinned differently."""
    known = code_paths(module)
    if path not in known:
        if not known:
            raise KernelSwitchError(
                f"the kernel names no code paths (it has no isa_paths()); use it without '@{path}'"
            )
        raise KernelSwitchError(f"no code path {path!r} on this CPU; its paths here: {', '.join(known)}")
    with _lock:
        current = _pins.get(id(module))
        if current is not None and current.path != path and set(current.holders) - {holder}:
            others = ", ".join(sorted(set(v for k, v in current.holders.items() if k != holder)))
            raise KernelSwitchError(
                f"the kernel runs one code path at a time, and {others} holds it at {current.path}: "
                "switch that off first"
            )
        if current is None or current.path != path:
            try:
                module.set_isa(path)
            except Exception as error:  # a stranger's code: one line, and nothing pinned
                raise KernelSwitchError(f"set_isa({path!r}) failed: {str(error).splitlines()[0]}") from error
            current = _pins[id(module)] = _Pin(module, path)
        current.holders[holder] = label


def unpin(holder: Hashable) -> None:
    """`holder` lets go of its pin; a module nobody pins any more goes back to its measured path."""
    with _lock:
        for key, current in list(_pins.items()):
            if current.holders.pop(holder, None) is not None and not current.holders:
                del _pins[key]
                reset = getattr(current.module, "reset_isa", None)
                if callable(reset):
                    reset()


@contextlib.contextmanager
def pinned(module: Any, path: str | None, holder: Hashable, label: str) -> Iterator[None]:
    """`path` pinned for the block (nothing when `path` is None): a probe's trial of `repo@path`.

    A path the module does not run raises (the trial's verdict); a module another holder pins to
    another path runs as it is (the paths compute the same; switching on says whose pin it is)."""
    if path is None or module is None:
        yield
        return
    try:
        pin(module, path, holder, label)
    except KernelSwitchError:
        if path not in code_paths(module):
            raise
        yield
        return
    try:
        yield
    finally:
        unpin(holder)


def running_path(module: Any) -> tuple[str, str]:
    """(the path `module` runs now, why) or ("", "") for a kernel that names no paths."""
    isa = getattr(module, "isa", None)
    if not callable(isa):
        return "", ""
    try:
        path = str(isa())
    except Exception as error:  # a forced path this CPU lacks: the repository's one line
        return "?", str(error).splitlines()[0]
    reason = getattr(module, "isa_reason", None)
    why = str(reason()) if callable(reason) else ""
    with _lock:
        current = _pins.get(id(module))
        holders = sorted(set(current.holders.values())) if current is not None else []
    if holders:
        why = f"{path}: pinned while {', '.join(holders)} is on"
    return path, why
