"""A measurement's summary: the typed table every view renders, whose cells format themselves once.

A kind of measurement (`measure/kinds/`) turns its records into one `Summary`: named columns and
rows of cells. A cell that carries uncertainty is an `IntervalCell` (a median, its 95% interval and
a unit) and writes its own text; a verdict is a `Verdict`. The magic, the CLI, the report, the
dashboard and `to_pandas` all read the same `Summary`, so a number has one source and one text:
nothing outside this module writes `Nx [lo, hi]`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from kernel_explorer.measure.verdict import Verdict

if TYPE_CHECKING:
    import pandas as pd

#: how an interval's unit is written: a ratio ("x"), bytes (scaled to KB/MB/GB), seconds, or plain
Unit = Literal["x", "bytes", "s", ""]

_BYTE_STEPS = ((1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B"))


def format_number(value: float | None, unit: Unit = "") -> str:
    """One number as a reader sees it: `3.21x`, `12.4 MB`, `850 us`, `0.31`; "-" when there is none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "bytes":
        scale, name = next(((s, n) for s, n in _BYTE_STEPS if abs(value) >= s), (1.0, "B"))
        return f"{value / scale:.1f} {name}" if scale > 1 else f"{value:.0f} B"
    if unit == "s":
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value * 1e9:.3g} ns"
    return f"{value:.3g}"


def format_interval(median: float, low: float, high: float, unit: Unit = "x") -> str:
    """The one text of a median with its interval: `3.21x [3.10, 3.35]`, `12.4 MB [12.1, 12.6]`.

    The bounds are written in the median's scale (no unit of their own), so the eye compares digits.
    """
    if unit == "bytes":
        scale, name = next(((s, n) for s, n in _BYTE_STEPS if abs(median) >= s), (1.0, "B"))
        return f"{median / scale:.1f} {name} [{low / scale:.1f}, {high / scale:.1f}]"
    if unit == "x":
        return f"{median:.2f}x [{low:.2f}, {high:.2f}]"
    return f"{format_number(median, unit)} [{format_number(low, unit)}, {format_number(high, unit)}]"


@runtime_checkable
class Cell(Protocol):
    """A value that knows how a person reads it (`text`) and what a table or a plot stores (`number`)."""

    def text(self) -> str: ...

    def number(self) -> float | None: ...


@dataclass(frozen=True)
class IntervalCell:
    """A median with its 95% interval (from `measure/stats.py`) and the unit it is in."""

    median: float
    low: float
    high: float
    unit: Unit = "x"
    confidence: float = 0.95

    def text(self) -> str:
        shown = format_interval(self.median, self.low, self.high, self.unit)
        if self.confidence < 0.95 - 1e-9:
            shown += f" (only {self.confidence:.0%} sure: too few pairs)"
        return shown

    def number(self) -> float | None:
        return self.median


@dataclass(frozen=True)
class NumberCell:
    """A single number with its unit (a count of bytes, a share, seconds): no interval to give."""

    value: float | None
    unit: Unit = ""

    def text(self) -> str:
        return format_number(self.value, self.unit)

    def number(self) -> float | None:
        return self.value


ColumnKind = Literal["text", "number", "interval", "verdict"]


@dataclass(frozen=True)
class Column:
    """One column of a summary: its key in the rows, the header a person reads, what its cells are."""

    key: str
    title: str
    kind: ColumnKind = "text"


@dataclass(frozen=True)
class Summary:
    """What one kind of measurement concluded: a titled table of cells, one row per thing measured.

    Rows map a column's key to a cell (`IntervalCell`, `NumberCell`, a `Verdict`, a str, a number or
    None). `extra` holds per-row values that are data, not display (run ids, raw medians) and go to
    `to_pandas` only.
    """

    kind: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[Mapping[str, object], ...] = ()
    notes: tuple[str, ...] = ()
    extra: tuple[Mapping[str, object], ...] = field(default=())

    def __len__(self) -> int:
        return len(self.rows)

    def cell_text(self, row: Mapping[str, object], key: str) -> str:
        """A cell as it is read: a cell's own text, a verdict's words, a number's short form, "-"."""
        return text_of(row.get(key))

    def text(self) -> str:
        """A fixed-width table (the CLI's and the magic's), headers first, numbers right-aligned."""
        if not self.rows:
            return f"{self.title}: nothing measured yet"
        cells = [[self.cell_text(row, c.key) for c in self.columns] for row in self.rows]
        widths = [max(len(c.title), *(len(r[i]) for r in cells)) for i, c in enumerate(self.columns)]
        align = [c.kind in ("number", "interval") for c in self.columns]

        def line(values: Sequence[str]) -> str:
            return "  ".join(
                v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, align, strict=True)
            ).rstrip()

        out = [self.title, line([c.title for c in self.columns])]
        out += [line(r) for r in cells]
        out += list(self.notes)
        return "\n".join(out)

    def to_pandas(self) -> pd.DataFrame:
        """One row per summary row: an interval cell becomes `key`, `key_low`, `key_high` and
        `key_confidence`, a number cell its number, a verdict stays a `Verdict`; `extra` is joined."""
        import pandas as pd

        records = []
        for index, row in enumerate(self.rows):
            flat: dict[str, object] = {}
            for key, value in row.items():
                flat.update(flatten(key, value))
            if index < len(self.extra):
                flat.update({k: v for k, v in self.extra[index].items() if k not in flat})
            records.append(flat)
        return pd.DataFrame.from_records(records, columns=None if records else [c.key for c in self.columns])


def text_of(value: object) -> str:
    """How any cell value is read in a table."""
    if isinstance(value, Cell):
        return value.text()
    if isinstance(value, Verdict):
        return value.value
    if value is None:
        return "-"
    if isinstance(value, float):
        return format_number(value)
    return str(value)


def flatten(key: str, value: object) -> Iterable[tuple[str, object]]:
    """A cell as table columns (what `to_pandas` writes)."""
    if isinstance(value, IntervalCell):
        return [
            (key, value.median),
            (f"{key}_low", value.low),
            (f"{key}_high", value.high),
            (f"{key}_confidence", value.confidence),
        ]
    if isinstance(value, Cell):
        return [(key, value.number())]
    return [(key, value)]
