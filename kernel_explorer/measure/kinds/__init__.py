"""The kinds of measurement, one module each, found by the registry below.

May import: measure (its shared modules), _backend, errors.

A module here defines `KIND = Kind(...)` (see `kind.py`); `kinds()` imports every module of this
folder once and returns them by name; `value_types()` is every record class by its kind name, the
union that reading a JSONL log and the public re-exports derive from. Where to add a kind: a
module here, and its tests.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from kernel_explorer.measure.kinds.kind import Kind, LayerRequest, RecordSource, RecordValues

__all__ = ["Kind", "LayerRequest", "RecordSource", "RecordValues", "kind", "kinds", "value_types"]


@functools.cache
def kinds() -> dict[str, Kind]:
    """Every kind of measurement, by name, in the order of its module's name."""
    found: dict[str, Kind] = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name == "kind" or module.name.startswith("_"):
            continue
        declared = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if isinstance(declared, Kind):
            if declared.name in found:
                raise RuntimeError(f"two kinds of measurement are named {declared.name!r}")
            found[declared.name] = declared
    return found


def kind(name: str) -> Kind:
    """One kind by name; an unknown name is one line listing the known ones."""
    from kernel_explorer.errors import KernelExplorerError

    known = kinds()
    if name not in known:
        raise KernelExplorerError(f"No measurement named {name!r}; measure one of: {', '.join(known)}.")
    return known[name]


@functools.cache
def value_types() -> dict[str, type[RecordValues]]:
    """Every record class of every kind, by its kind name (what a JSONL line's "kind" names)."""
    return {cls.kind: cls for found in kinds().values() for cls in found.records}
