"""A kernel's code paths as candidates: "bundled@avx2" is the bundled kernel with its AVX2 path pinned.

A repository built for several instruction sets (the bundled ones: avx512bf16, avx512, avx2,
portable) chooses among the paths this CPU runs by timing them at first use, and reports the choice
through `isa()`, `isa_paths()` and `isa_reason()`. Which path is fastest on a host is a kernel
author's question the Hub's tools do not answer, so a candidate word may name a path
("bundled@avx2") and the explorer compares them like any two candidates, on the model's real inputs.

The path belongs to the loaded kernel module, not to one layer: while a `@path` candidate is on,
the module runs that path for every op it serves (the inventory says so on each row), and when the
last holder lets go the module gets back what it ran before: its measured choice (`reset_isa()`),
or the path a user had set by hand (`set_isa()`). Two holders asking one module for different
paths cannot both be right, so the second is refused with who holds it. Every call into the module
is a stranger's code: what it raises comes back as one line.

A pin lasts while its owner (the model) lives: a notebook cell run again drops its model and
explorer without switching anything off, and a pin that outlived them would report "pinned while
... is on" to every later explorer and refuse their paths, with nothing left to switch off.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kernel_explorer.errors import KernelSwitchError
from kernel_explorer.inspect.kernel_paths import (
    RunningPath,
    code_paths,
    first_line,
    reported_path,
)


@dataclass
class _Pin:
    module: Any
    path: str
    before: str | None  # the path a user had set with set_isa() before the first pin; None: measured
    holders: dict[Hashable, str] = field(default_factory=dict)  # holder -> its candidate's label


_lock = threading.Lock()
_pins: dict[int, _Pin] = {}  # id(kernel module) -> its pin; a loaded kernel stays for the process
_owned: dict[int, set[Hashable]] = {}  # id(owner) -> the holders it pins with, until it is collected
_gone: list[int] = []  # owners collected since the last call: their pins are let go under the lock


def _owner_collected(key: int) -> None:
    """Runs from the garbage collector, possibly while this thread holds `_lock`: only queue."""
    _gone.append(key)


def _let_go_of_the_collected() -> None:
    """Release every holder of an owner the collector took (called under `_lock`)."""
    while _gone:
        for holder in _owned.pop(_gone.pop(), ()):
            _release(holder)


def check_path(module: Any, path: str) -> None:
    """Raise `KernelSwitchError` where `module` cannot run `path` (one line, what to do): before a
    switch, so that a path the kernel lacks leaves the model as it was."""
    if module is None:
        raise KernelSwitchError(
            f"the explorer cannot reach this kernel's module to pin a code path; use it without '@{path}'"
        )
    known = code_paths(module)
    if not known:
        raise KernelSwitchError(f"the kernel names no code paths (no isa_paths()); use it without '@{path}'")
    if path not in known:
        raise KernelSwitchError(f"no code path {path!r} on this CPU; its paths here: {', '.join(known)}")


def _set_by_hand(module: Any) -> str | None:
    """The path a user pinned with `set_isa()` (its reason says so), or None."""
    with contextlib.suppress(Exception):
        if "set by set_isa()" in str(module.isa_reason()):
            return str(module.isa())
    return None


def pin(module: Any, path: str, holder: Hashable, label: str, owner: Any = None) -> None:
    """Run `path` in `module` until `holder` lets go (`unpin`) or `owner` (the model) is collected; a
    holder that pins again moves its pin. `label` names the holder's candidate in a refusal. Raises
    `KernelSwitchError` (one line) for a module without that path here, one another holder pins to
    another path, or a failing switch."""
    check_path(module, path)
    with _lock:
        _let_go_of_the_collected()
        current = _pins.get(id(module))
        others = {k: v for k, v in current.holders.items() if k != holder} if current is not None else {}
        if current is not None and current.path != path and others:
            held = ", ".join(sorted(set(others.values())))
            raise KernelSwitchError(
                f"the kernel runs one code path at a time, and {held} holds it at {current.path}: "
                "switch that off first"
            )
        if current is None or current.path != path:
            before = current.before if current is not None else _set_by_hand(module)
            try:
                module.set_isa(path)
            except Exception as error:  # a stranger's code: one line, and nothing pinned
                raise KernelSwitchError(f"set_isa({path!r}) failed: {first_line(error)}") from error
            current = _pins[id(module)] = _Pin(module, path, before)
        _release(holder, keep=id(module))
        current.holders[holder] = label
        if owner is not None:
            if id(owner) not in _owned:  # one finalizer per owner, whatever it pins
                weakref.finalize(owner, _owner_collected, id(owner))
            _owned.setdefault(id(owner), set()).add(holder)


def unpin(holder: Hashable) -> None:
    """`holder` lets go of its pin; a module nobody pins any more runs what it ran before the first
    pin. A kernel that cannot go back says so in a warning (its layers are off by then)."""
    with _lock:
        _let_go_of_the_collected()
        _release(holder)


def _release(holder: Hashable, keep: int | None = None) -> None:
    """Drop `holder` from every pin but `keep`'s module; give back the modules left unheld."""
    for key, current in list(_pins.items()):
        if key == keep or current.holders.pop(holder, None) is None or current.holders:
            continue
        del _pins[key]
        try:
            if current.before is not None:
                current.module.set_isa(current.before)
            else:
                current.module.reset_isa()
        except Exception as error:
            warnings.warn(
                f"the kernel stays on code path {current.path}: giving back its own choice failed "
                f"({first_line(error)})",
                RuntimeWarning,
                stacklevel=3,
            )


@contextlib.contextmanager
def pinned(module: Any, path: str | None, holder: Hashable, label: str) -> Iterator[None]:
    """`path` pinned for the block (nothing when `path` is None): a probe's trial of `repo@path`.

    A path the module cannot run raises (the trial's verdict); a module another holder pins to
    another path runs as it is (the paths compute the same; switching on says whose pin it is)."""
    if path is None:
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


def holders(module: Any) -> list[str]:
    """The labels of the candidates that pin `module`'s code path now ([] when none does)."""
    with _lock:
        _let_go_of_the_collected()
        current = _pins.get(id(module))
        return sorted(set(current.holders.values())) if current is not None else []


def running_path(module: Any, layer: str = "", dtype: str = "") -> RunningPath:
    """What `module` runs now for `layer` at `dtype`, a pin included (`inspect.kernel_paths` reads
    the kernel; this says who pins it)."""
    return reported_path(module, layer, dtype, holders=holders)
