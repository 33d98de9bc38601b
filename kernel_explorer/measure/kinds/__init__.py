"""The kinds of measurement, one module each, found by the registry below.

May import: _backend, build, catalog, errors, inspect, numerics

A module here defines `KIND = Kind(...)` (see `kind.py`); `kinds()` imports every module (or
folder) of this folder once and returns them by name; `value_types()` is every record class by its
kind name, the union that reading a JSONL log and the public re-exports derive from. Where to add a
kind: a module here, and its tests. A kind whose records are built by measurements elsewhere in
`measure/` is a folder: its records in `records.py`, which those measurements import, and `KIND`
in its `__init__.py`, whose plan imports them (one module would import itself in a circle).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable

from kernel_explorer.measure.kinds.kind import (
    Kind,
    LayerRequest,
    Measurement,
    RecordSource,
    RecordValues,
    records_of,
)

__all__ = [
    "Kind",
    "LayerRequest",
    "Measurement",
    "RecordSource",
    "RecordValues",
    "kind",
    "kinds",
    "kinds_in_run",
    "measured_by_compare",
    "plan_for",
    "records_of",
    "value_types",
]


@functools.cache
def kinds() -> dict[str, Kind]:
    """Every kind of measurement, by name, in the order its views show them (`Kind.order`, then name)."""
    found: dict[str, Kind] = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name == "kind" or module.name.startswith("_"):
            continue
        declared = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if not isinstance(declared, Kind):  # also a kind asked for while its own module loads
            raise RuntimeError(f"measure/kinds/{module.name} defines no KIND = Kind(...) (yet)")
        if declared.name in found:
            raise RuntimeError(f"two kinds of measurement are named {declared.name!r}")
        found[declared.name] = declared
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


def kind(name: str) -> Kind:
    """One kind by name; an unknown name is one line listing the known ones."""
    from kernel_explorer.errors import KernelExplorerError

    known = kinds()
    if name not in known:
        raise KernelExplorerError(f"No measurement named {name!r}; known measurements: {', '.join(known)}.")
    return known[name]


def plan_for(name: str) -> Callable[[LayerRequest], list[Measurement]]:
    """The plan of kind `name`, what `Explorer.compare(measure=name)` runs; a kind compare does not
    start (the whole model's, a breakdown) is one line saying what does, and what compare measures."""
    from kernel_explorer.errors import KernelExplorerError

    found = kind(name)
    if found.plan is None:
        raise KernelExplorerError(
            f"compare does not measure {name!r}: {found.how or 'nothing'} does; "
            f"compare measures one of: {', '.join(measured_by_compare())}."
        )
    return found.plan


def measured_by_compare() -> list[str]:
    """The kinds `Explorer.compare(measure=...)` starts (those with a plan): `--measure`'s choices."""
    return [name for name, found in kinds().items() if found.plan is not None]


def kinds_in_run(source: RecordSource, run_id: str) -> list[Kind]:
    """The kinds with a record in run `run_id`, in registry order: what a run's answer shows."""
    return [found for found in kinds().values() if records_of(source, *found.records, run_id=run_id)]


@functools.cache
def value_types() -> dict[str, type[RecordValues]]:
    """Every record class of every kind, by its kind name (what a JSONL line's "kind" names)."""
    return {cls.kind: cls for found in kinds().values() for cls in found.records}
