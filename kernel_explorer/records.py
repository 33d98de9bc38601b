"""Every record type a measurement yields, importable from one public place, with the `Verdict` they carry.

The value classes belong to the kinds of measurement (`measure/kinds/`); this module is their
public name, derived from the kinds' registry, so `from kernel_explorer.records import LayerVerdict`
keeps working whatever moves below it, and a new kind's records are here without an edit.
"""

from typing import Any

from kernel_explorer.measure.kinds import value_types

_REGISTERED = {cls.__name__: cls for cls in value_types().values()}
globals().update(_REGISTERED)

__all__ = sorted(["VALUE_TYPES", "Provenance", "Record", "RunEvent", "Values", "Verdict", *_REGISTERED])


def __getattr__(name: str) -> Any:
    """`VALUE_TYPES` and `Values`, the envelope's (`measure/records.py`), derived when asked."""
    from kernel_explorer.measure import records

    if name in ("VALUE_TYPES", "Values"):
        return getattr(records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
