"""A measurement's summary: the typed table every view renders, whose cells format themselves once.

A kind of measurement (`measure/kinds/`) turns its records into one `Summary`: named columns and
rows of cells. A cell that carries uncertainty is an `IntervalCell` (a median, its 95% interval and
a unit) and writes its own text; a verdict is a `Verdict` (or a `VerdictCell`, which also says why
a comparison was not measurable). The magic, the CLI, the report, the dashboard and `to_pandas`
all read the same `Summary`, in one of its forms: `text()` (a fixed-width table), `lines()` (one
line per row), `html()` (the report's table) and `to_pandas()` (the data). So a number has one
source and one text: nothing outside this module writes `Nx [lo, hi]`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from kernel_explorer.measure.verdict import Verdict, describe

if TYPE_CHECKING:
    import pandas as pd

#: how a number's unit is written: a ratio ("x"), bytes (scaled to KB/MB/GB), seconds, a share of
#: a whole ("share": 0.031 reads 3.1%), or plain
Unit = Literal["x", "bytes", "s", "share", ""]

_BYTE_STEPS = ((1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B"))


def format_number(value: float | None, unit: Unit = "") -> str:
    """One number as a reader sees it: `3.21x`, `12.4 MB`, `850 us`, `3.1%`, `0.31`; "-" for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "share":
        return f"{value:.1%}"
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
    return f"{format_number(median, unit)} {format_range(low, high, unit)}"


def format_range(low: float, high: float, unit: Unit = "x") -> str:
    """Bounds alone, `[3.10, 3.35]`: what another run may give beside a run's own interval."""
    if unit == "x":
        return f"[{low:.2f}, {high:.2f}]"
    return f"[{format_number(low, unit)}, {format_number(high, unit)}]"


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
    samples: str = "pairs"  # what the interval is taken over, for its caveat ("repeats" for memory)

    def text(self) -> str:
        return self.bounds() + self.caveat()

    def bounds(self) -> str:
        """The median and its bounds alone (`format_interval`)."""
        return format_interval(self.median, self.low, self.high, self.unit)

    def caveat(self) -> str:
        """The coverage note, ` (only 75% sure: too few pairs)`, below 95% coverage; else ""."""
        if self.confidence >= 0.95 - 1e-9:
            return ""
        return f" (only {self.confidence:.0%} sure: too few {self.samples})"

    def number(self) -> float | None:
        return self.median


@dataclass(frozen=True)
class RangeCell:
    """Bounds without a median of their own (a run's interval widened by the noise floor)."""

    low: float
    high: float
    unit: Unit = "x"

    def text(self) -> str:
        return format_range(self.low, self.high, self.unit)

    def number(self) -> float | None:
        return None


@dataclass(frozen=True)
class VerdictCell:
    """A verdict with the counts that explain it: "not measurable here" says how many pairs stalled."""

    verdict: Verdict
    stalled: int = 0
    pairs: int = 0

    def text(self) -> str:
        return describe(self.verdict, stalled=self.stalled, pairs=self.pairs)

    def number(self) -> float | None:
        return None


@dataclass(frozen=True)
class NumberCell:
    """A single number with its unit (a count of bytes, a share, seconds): no interval to give."""

    value: float | None
    unit: Unit = ""

    def text(self) -> str:
        return format_number(self.value, self.unit)

    def number(self) -> float | None:
        return self.value


ColumnKind = Literal["text", "number", "interval", "range", "verdict"]


@dataclass(frozen=True)
class Column:
    """One column of a summary: its key in the rows, the header a person reads, what its cells are.

    `line` is how the cell reads in its row's one line (`lines()`): a template with `{}` for the
    cell's text, or None to leave it to the tables. Parts are joined with "; ", except a template
    that starts with a space or a comma, which continues the part before it (" over {} instances").
    `what` marks the columns that name the row (layer, measure): its line starts with them.
    `names` are the pandas columns the cell's values take (default: the key, and for an interval
    `key_low`, `key_high`, `key_confidence`; for a range `key_low`, `key_high`).
    """

    key: str
    title: str
    kind: ColumnKind = "text"
    line: str | None = "{}"
    what: bool = False
    names: tuple[str, ...] = ()

    def frame_names(self) -> tuple[str, ...]:
        """The pandas columns of this column, in the order `flatten` gives its values."""
        if self.names:
            return self.names
        if self.kind == "interval":
            return (self.key, f"{self.key}_low", f"{self.key}_high", f"{self.key}_confidence")
        if self.kind == "range":
            return (f"{self.key}_low", f"{self.key}_high")
        return (self.key,)


@dataclass(frozen=True)
class Summary:
    """What one kind of measurement concluded: a titled table of cells, one row per thing measured.

    Rows map a column's key to a cell (`IntervalCell`, `NumberCell`, a `Verdict`, a str, a number or
    None). `extra` holds per-row values that are data, not display (raw medians, counts, the
    machine) and go to `to_pandas` only. `notes` are lines every form shows under the table (what
    an interval means, a warning); `about` is a paragraph on what the columns mean, for the report.
    """

    kind: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[Mapping[str, object], ...] = ()
    notes: tuple[str, ...] = ()
    extra: tuple[Mapping[str, object], ...] = field(default=())
    about: str = ""

    def __len__(self) -> int:
        return len(self.rows)

    def cell_text(self, row: Mapping[str, object], key: str) -> str:
        """A cell as it is read: a cell's own text, a verdict's words, a number's short form, "-"."""
        return text_of(row.get(key))

    def select(self, key: str, *values: object) -> Summary:
        """The rows whose `key` holds one of `values` (a run's rows: `select("run_id", "run-3")`)."""
        kept = [i for i, row in enumerate(self.rows) if row.get(key) in values]
        extra = tuple(self.extra[i] for i in kept if i < len(self.extra))
        return replace(self, rows=tuple(self.rows[i] for i in kept), extra=extra)

    def text(self) -> str:
        """A fixed-width table, headers first, numbers right-aligned, the notes under it."""
        if not self.rows:
            return f"{self.title}: nothing measured yet"
        cells = [[self.cell_text(row, c.key) for c in self.columns] for row in self.rows]
        widths = [max(len(c.title), *(len(r[i]) for r in cells)) for i, c in enumerate(self.columns)]
        align = [c.kind in ("number", "interval", "range") for c in self.columns]

        def line(values: Sequence[str]) -> str:
            return "  ".join(
                v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, align, strict=True)
            ).rstrip()

        out = [self.title, line([c.title for c in self.columns])]
        out += [line(r) for r in cells]
        out += list(self.notes)
        return "\n".join(out)

    def lines(self) -> list[tuple[str, str]]:
        """Each row as (what it is, one line of what was found): `("SiLU", "1.10x [1.05, 1.15]
        faster; bitwise equal; 14 pairs over 2 instances, noise floor 3.1%")`. What the CLI
        prints and `%kernels` answers. An interval's caveat (too few pairs for 95%) closes the part
        it starts, after the verdict that continues it."""
        found = []
        for row in self.rows:
            what = "".join(_filled(c, self.cell_text(row, c.key)) for c in self.columns if c.what)
            parts: list[list[str]] = []  # each part: its text, then an interval's caveat for its end
            for column in self.columns:
                value = row.get(column.key)
                if column.what or column.line is None or value is None:
                    continue
                caveat = value.caveat() if isinstance(value, IntervalCell) else ""
                shown = (
                    value.bounds()
                    if isinstance(value, IntervalCell) and caveat
                    else self.cell_text(row, column.key)
                )
                text = _filled(column, shown)
                if not text:
                    continue
                if column.line.startswith((" ", ",")) and parts:
                    parts[-1][0] += text
                    parts[-1][1] = parts[-1][1] or caveat  # one caveat for a part, said once
                else:
                    parts.append([text.lstrip(" ,"), caveat])
            found.append((what.strip(), "; ".join(text + caveat for text, caveat in parts)))
        return found

    def html(self) -> str:
        """The table as HTML (the report's): cells escaped, a verdict cell classed by its verdict
        (`faster`, `slower`, else `unsure`) so a stylesheet colours it; numbers (intervals, ranges,
        counts) classed `num` (right-aligned, never wrapped), text columns with a long cell classed
        `prose` (wrapped between words only); the notes under it."""
        import html

        texts = [
            ["" if row.get(c.key) is None else self.cell_text(row, c.key) for c in self.columns]
            for row in self.rows
        ]
        kinds = [
            "num"
            if c.kind in ("number", "interval", "range")
            else "prose"
            if c.kind == "text" and any(len(r[i]) > PROSE_CHARS for r in texts)
            else ""
            for i, c in enumerate(self.columns)
        ]
        head = "".join(
            f"<th{_css(kind)}>{html.escape(c.title, quote=False)}</th>"
            for c, kind in zip(self.columns, kinds, strict=True)
        )
        body = []
        for row, shown in zip(self.rows, texts, strict=True):
            cells = []
            for column, kind, text in zip(self.columns, kinds, shown, strict=True):
                css = verdict_class(row.get(column.key)) if column.kind == "verdict" else kind
                cells.append(f"<td{_css(css)}>{html.escape(text, quote=False)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        notes = "".join(f"<p>{html.escape(note, quote=False)}</p>" for note in self.notes)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{notes}"

    def _repr_html_(self) -> str:
        """In a notebook: the title, the table with each cell's own text (`2.80x [2.60, 3.00]`, never
        a raw float or a cut sentence), no cell wrapped, scrolling sideways where it is too wide."""
        import html

        if not self.rows:
            return f"<p>{html.escape(self.text())}</p>"
        style = (
            "<style>.kx-summary td, .kx-summary th { white-space: nowrap; text-align: left; "
            "padding: 2px 10px 2px 0; } .kx-summary p { margin: 2px 0; opacity: 0.8; }</style>"
        )
        return (
            f"<div class='kx-summary' style='overflow-x:auto'>{style}"
            f"<div><b>{html.escape(self.title)}</b></div>{self.html()}</div>"
        )

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        """In IPython's terminal (and `print`-less cells there): the fixed-width table."""
        printer.text(self.text())  # type: ignore[attr-defined]

    def to_pandas(self) -> pd.DataFrame:
        """One row per summary row, every column present: an interval cell becomes `key`,
        `key_low`, `key_high` and `key_confidence` (or the column's `names`), a number cell its
        number, a verdict stays a `Verdict`, a missing cell None; `extra` is joined."""
        import pandas as pd

        names = [name for c in self.columns for name in c.frame_names()]
        records = []
        for index, row in enumerate(self.rows):
            flat: dict[str, object] = {}
            for column in self.columns:
                values = flatten(column, row.get(column.key))
                flat.update(zip(column.frame_names(), values, strict=True))
            if index < len(self.extra):
                flat.update({k: v for k, v in self.extra[index].items() if k not in flat})
            records.append(flat)
        return pd.DataFrame.from_records(records, columns=None if records else names)


#: a text column with a cell longer than this wraps (between words) in the report's table
PROSE_CHARS = 40


def _css(name: str) -> str:
    """` class='name'`, or nothing for no class."""
    return f" class='{name}'" if name else ""


def _filled(column: Column, text: str) -> str:
    """A cell's text in its column's line template ("" for an empty cell)."""
    if column.line is None or text in ("", "-"):
        return ""
    return column.line.format(text)


def columns_in_use(
    columns: Sequence[Column], rows: Sequence[Mapping[str, object]], optional: Collection[str]
) -> tuple[Column, ...]:
    """`columns`, less those named `optional` that no row fills (a `kernel` column for a run that
    compared one candidate, a `mode` column for one in inference only)."""
    return tuple(c for c in columns if c.key not in optional or any(r.get(c.key) is not None for r in rows))


def text_of(value: object) -> str:
    """How any cell value is read in a table."""
    if isinstance(value, Cell):
        return value.text()
    if isinstance(value, Verdict):
        return value.value
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format_number(value)
    return str(value)


def verdict_class(value: object) -> str:
    """The CSS class of a verdict cell: its colour says faster, slower, or neither."""
    verdict = value.verdict if isinstance(value, VerdictCell) else value
    return verdict.value if isinstance(verdict, Verdict) and verdict.decided else "unsure"


def flatten(column: Column, value: object) -> tuple[object, ...]:
    """A cell as the values of its column's pandas columns (what `to_pandas` writes), None when empty."""
    width = len(column.frame_names())
    if value is None:
        return (None,) * width
    if isinstance(value, IntervalCell):
        return (value.median, value.low, value.high, value.confidence)[:width]
    if isinstance(value, RangeCell):
        return (value.low, value.high)[:width]
    if isinstance(value, VerdictCell):
        found: tuple[object, ...] = (value.verdict,)
    elif isinstance(value, Cell):
        found = (value.number(),)
    else:
        found = (value,)
    # a single number in an interval's column (a count with nothing to spread) leaves its bounds empty
    return found + (None,) * (width - len(found))
