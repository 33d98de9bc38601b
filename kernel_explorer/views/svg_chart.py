"""The report's charts as inline SVG: one row per thing measured, a log value axis across.

A report must open offline, read at any width and stay small. plotly.js alone is 4.8 MB, so the
report's own figures are drawn here as plain SVG (a few KB each, no script): rows on the left
(a layer and its run, one per line, so category labels never collide), one log axis along the
bottom whose range comes from the data (every mark inside it, 1x always shown on a speedup axis)
and 3-6 labelled ticks that are thinned until their labels cannot overlap at the chart's width.
Colours come from CSS classes (`kx-faster`, `kx-slower`, ...), so the page's light and dark
schemes both apply. `<title>` on each mark is its hover text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: the chart's drawing width in SVG units; the SVG scales to the page below it (viewBox)
WIDTH = 860
#: approximate advance of one character of the chart's 12 px sans-serif font (an upper bound for
#: digits and lowercase: labels are measured with it before the browser draws them)
CHAR_PX = 7.0
MIN_TICKS, MAX_TICKS = 3, 6
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")

#: tick mantissas per decade, coarse to fine: the coarsest set giving at least MIN_TICKS labels wins
_MANTISSAS = (
    (1.0, 2.0, 5.0),
    (1.0, 2.0, 3.0, 5.0),
    (1.0, 1.5, 2.0, 3.0, 5.0, 7.0),
    (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0),
    tuple(float(m) for m in range(1, 10)),
    tuple(m / 2 for m in range(2, 20)),
    tuple(round(1.0 + i / 10, 1) for i in range(90)),
    tuple(round(1.0 + i / 50, 2) for i in range(450)),
)


@dataclass(frozen=True)
class Point:
    """A median (`value`) with an optional 95% interval (`low`, `high`), drawn as a dot and a bar.

    `css`: the mark's colour class (`kx-faster`, `kx-slower`, `kx-unsure`, `kx-kernel`, `kx-pytorch`);
    `hollow`: an open mark (the last cycle beside the whole run, PyTorch beside the kernel);
    `label`: text written right of the mark ("3.81x"); `hover`: its `<title>`.
    """

    value: float
    low: float | None = None
    high: float | None = None
    css: str = "kx-unsure"
    hollow: bool = False
    label: str = ""
    hover: str = ""
    shape: str = "circle"  # or "diamond"

    def extent(self) -> tuple[float, ...]:
        return tuple(v for v in (self.value, self.low, self.high) if v is not None)


@dataclass(frozen=True)
class Box:
    """A distribution drawn from its statistics (no samples in the file): quartiles, median, and
    whiskers to the furthest sample within 1.5 IQR (in log space); `beyond` counts the samples
    past the whiskers, which are not drawn (the label says how many)."""

    q1: float
    median: float
    q3: float
    low: float
    high: float
    css: str = "kx-unsure"
    label: str = ""
    hover: str = ""

    def extent(self) -> tuple[float, ...]:
        return (self.low, self.q1, self.median, self.q3, self.high)


@dataclass(frozen=True)
class Row:
    """One line of the chart: its name on the left and its marks (drawn side by side, a little
    apart when there are several)."""

    label: str
    marks: tuple[Point | Box, ...]


@dataclass(frozen=True)
class Chart:
    """A titled chart of rows on one log axis. `scope` says what the numbers cover (a whole run, a
    run's last cycle): it is printed under the title. `unit` "x" labels ticks `2x` and always shows
    1x with a dotted line; "" labels them as powers of ten (`3·10⁻⁶`)."""

    title: str
    scope: str
    axis_title: str
    rows: tuple[Row, ...]
    unit: str = "x"
    legend: tuple[tuple[str, str], ...] = ()  # (mark class, words) for a line under the scope
    name: str = ""  # an id for tests and the page's anchors
    extras: tuple[str, ...] = field(default=())  # lines under the chart (what is not drawn, and why)

    def extent(self) -> tuple[float, float]:
        """The smallest and largest value any mark reaches (with 1x on a speedup axis)."""
        values = [v for row in self.rows for mark in row.marks for v in mark.extent() if v > 0]
        if self.unit == "x":
            values.append(1.0)
        if not values:
            return (1.0, 1.0)
        return (min(values), max(values))


@dataclass(frozen=True)
class Axis:
    """A log axis: its range (`low`, `high`, the values at its two ends) and its labelled ticks."""

    low: float
    high: float
    ticks: tuple[tuple[float, str], ...]

    def fraction(self, value: float) -> float:
        """Where `value` lies along the axis, 0 at `low` and 1 at `high`."""
        return (math.log10(value) - math.log10(self.low)) / (math.log10(self.high) - math.log10(self.low))


def tick_label(value: float, unit: str) -> str:
    """`0.5x`, `2x`, `1000x` on a speedup axis; `10⁻⁶` and `2.5·10⁻⁶` on an error axis."""
    if unit:
        return f"{value:g}{unit}"
    exponent = math.floor(math.log10(value) + 1e-9)
    mantissa = round(value / 10.0**exponent, 2)
    decade = "10" + str(exponent).translate(_SUPERSCRIPT) if exponent else "1"
    return decade if mantissa == 1 else f"{mantissa:g}·{decade}"


def log_axis(low: float, high: float, unit: str = "x") -> Axis:
    """An axis whose labelled ticks bracket [low, high]: the first tick at or below `low`, the last
    at or above `high`, 3-6 of them at round values (decades, every k-th decade when there are
    many, else 1-2-5 steps, else finer), the range their span and a little more."""
    low, high = max(min(low, high), 1e-300), max(low, high, 1e-300)
    if high / low < 1.02:  # one value: a range around it
        low, high = low / 1.1, high * 1.1
    ticks = bracketing_ticks(low, high)
    a, b = math.log10(ticks[0]), math.log10(ticks[-1])
    pad = 0.03 * (b - a)
    return Axis(10.0 ** (a - pad), 10.0 ** (b + pad), tuple((v, tick_label(v, unit)) for v in ticks))


def bracketing_ticks(low: float, high: float) -> list[float]:
    """Round values from the last at or below `low` to the first at or above `high`: of the series
    that give MIN_TICKS to MAX_TICKS of them, the one spanning least (the coarsest on a tie); the
    finest series' thinned to MAX_TICKS when none does."""
    first, last = math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1
    series: list[list[float]] = []
    for every in range(1, 8):  # decades, every k-th decade
        series.append([10.0**e for e in range(first - every, last + every + 1) if e % every == 0])
    for mantissas in _MANTISSAS:
        series.append(sorted({round(m * 10.0**e, 12) for e in range(first, last + 1) for m in mantissas}))
    fitting = []
    for index, values in enumerate(series):
        found = _bracket(values, low, high)
        if MIN_TICKS <= len(found) <= MAX_TICKS:
            fitting.append((round(math.log10(found[-1] / found[0]), 6), index, found))
    if fitting:
        return min(fitting)[2]
    fallback = _bracket(series[-1], low, high)
    every = math.ceil(len(fallback) / MAX_TICKS)
    thinned = fallback[::every]
    if thinned[-1] < high:
        thinned.append(fallback[-1])
    return thinned


def _bracket(values: Sequence[float], low: float, high: float) -> list[float]:
    """`values` from the last at or below `low` to the first at or above `high` (1e-9 relative slack)."""
    below = [v for v in values if v <= low * (1 + 1e-9)]
    above = [v for v in values if v >= high * (1 - 1e-9)]
    if not below or not above:
        return []
    return [v for v in values if below[-1] <= v <= above[0]]


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _text_px(text: str) -> float:
    """The estimated width of `text`: capitals and the widest lowercase letters count wider (a row
    label of "RMSNorm"s drawn at `CHAR_PX` each ran past its column's left edge)."""
    wide = sum(1 for c in text if c.isupper() or c in "mwMW@%")
    return len(text) * CHAR_PX + wide * 2.0


#: the most of a chart's width its row labels take; a longer label wraps at its " · " parts
LABEL_SHARE = 0.42
LINE_H = 14


def label_lines(label: str, max_px: float) -> list[str]:
    """`label` in lines of at most `max_px` (estimated), broken between its " · " parts (layer, mode,
    candidate, run); a single part too long for a line keeps its end (the run and digest tell rows
    apart) behind an ellipsis. The whole label stays the row's `<title>`."""
    lines: list[str] = []
    for part in label.split(" · "):
        if _text_px(part) > max_px:
            while part and _text_px("…" + part) > max_px:
                part = part[1:]
            part = "…" + part
        joined = f"{lines[-1]} · {part}" if lines else part
        if lines and _text_px(joined) <= max_px:
            lines[-1] = joined
        else:
            lines.append(part)
    return lines or [""]


def _thin(
    ticks: Sequence[tuple[float, str]], x: Callable[[float], float], gap: float = 10.0
) -> list[tuple[float, str]]:
    """The ticks whose labels (centred on their tick) keep `gap` px from the label kept before."""
    kept: list[tuple[float, str]] = []
    right = -math.inf
    for value, label in ticks:
        half = _text_px(label) / 2
        if x(value) - half >= right + gap:
            kept.append((value, label))
            right = x(value) + half
    return kept


def render(chart: Chart, width: int = WIDTH) -> str:
    """The chart as an `<svg>` element (scales down with the page, never up past `width`)."""
    axis = log_axis(*chart.extent(), unit=chart.unit)
    lines = [label_lines(r.label, width * LABEL_SHARE) for r in chart.rows]
    most_lines = max((len(found) for found in lines), default=1)
    row_h = max(36 if any(len(r.marks) > 1 for r in chart.rows) else 24, LINE_H * most_lines + 10)
    left = max((_text_px(line) for found in lines for line in found), default=40) + 16
    # room for the value written right of a mark at the axis' end ("5000 pairs, 1704 beyond" was
    # cut at the chart's edge): the longest, up to 30% of the width (past it, it goes left)
    values = [_text_px(mark.label) for r in chart.rows for mark in r.marks if mark.label]
    right = min(max(96.0, max(values, default=0.0) + 16), width * 0.3)
    top = 14
    plot_w = width - left - right
    plot_h = row_h * len(chart.rows)
    height = top + plot_h + 44

    def x(value: float) -> float:
        return left + plot_w * axis.fraction(value)

    out = [
        f"<svg class='kx-chart' data-chart='{_esc(chart.name)}' viewBox='0 0 {width} {height}' "
        f"width='100%' style='max-width:{width}px' role='img' aria-label='{_esc(chart.title)}' "
        f"xmlns='http://www.w3.org/2000/svg'>",
        f"<rect class='kx-plot-area' x='{left:.1f}' y='{top}' width='{plot_w:.1f}' height='{plot_h}'/>",
    ]
    ticks = _thin(axis.ticks, x)
    for value, label in ticks:
        px = x(value)
        out.append(f"<line class='kx-grid' x1='{px:.1f}' x2='{px:.1f}' y1='{top}' y2='{top + plot_h}'/>")
        out.append(
            f"<text class='kx-tick' x='{px:.1f}' y='{top + plot_h + 16}' text-anchor='middle' "
            f"data-value='{value:g}'>{_esc(label)}</text>"
        )
    if chart.unit == "x":
        px = x(1.0)
        out.append(f"<line class='kx-one' x1='{px:.1f}' x2='{px:.1f}' y1='{top}' y2='{top + plot_h}'/>")
    out.append(
        f"<text class='kx-axis-title' x='{left + plot_w / 2:.1f}' y='{height - 6}' "
        f"text-anchor='middle'>{_esc(chart.axis_title)}</text>"
    )
    for index, (row, found) in enumerate(zip(chart.rows, lines, strict=True)):
        middle = top + row_h * index + row_h / 2
        first = middle + 4 - LINE_H * (len(found) - 1) / 2
        spans = "".join(
            f"<tspan x='{left - 8:.1f}' y='{first + LINE_H * i:.1f}'>{_esc(line)}</tspan>"
            for i, line in enumerate(found)
        )
        out.append(
            f"<text class='kx-row' x='{left - 8:.1f}' y='{first:.1f}' text-anchor='end'>"
            f"<title>{_esc(row.label)}</title>{spans}</text>"
        )
        offsets = (
            [0.0]
            if len(row.marks) < 2
            else [(i - (len(row.marks) - 1) / 2) * 14 for i in range(len(row.marks))]
        )
        for mark, offset in zip(row.marks, offsets, strict=True):
            out.append(_mark(mark, middle + offset, x, left, width))
    out.append("</svg>")
    return "".join(out)


def _mark(mark: Point | Box, y: float, x: Callable[[float], float], left: float, width: float) -> str:
    """One mark at height `y`, wrapped in a group whose `<title>` is its hover text."""
    value = mark.median if isinstance(mark, Box) else mark.value
    parts = [f"<g class='kx-mark {mark.css}' data-value='{value:g}'>"]
    if mark.hover:
        parts.append(f"<title>{_esc(mark.hover)}</title>")
    if isinstance(mark, Box):
        lo, q1, q2, q3, hi = (x(v) for v in mark.extent())
        parts += [
            f"<line class='kx-whisker' x1='{lo:.1f}' x2='{q1:.1f}' y1='{y:.1f}' y2='{y:.1f}'/>",
            f"<line class='kx-whisker' x1='{q3:.1f}' x2='{hi:.1f}' y1='{y:.1f}' y2='{y:.1f}'/>",
            f"<line class='kx-whisker' x1='{lo:.1f}' x2='{lo:.1f}' y1='{y - 4:.1f}' y2='{y + 4:.1f}'/>",
            f"<line class='kx-whisker' x1='{hi:.1f}' x2='{hi:.1f}' y1='{y - 4:.1f}' y2='{y + 4:.1f}'/>",
            f"<rect class='kx-box' x='{q1:.1f}' y='{y - 6:.1f}' width='{max(q3 - q1, 1.0):.1f}' "
            "height='12'/>",
            f"<line class='kx-median' x1='{q2:.1f}' x2='{q2:.1f}' y1='{y - 6:.1f}' y2='{y + 6:.1f}'/>",
        ]
        end = hi
    else:
        centre = x(mark.value)
        if mark.low is not None and mark.high is not None:
            lo, hi = x(mark.low), x(mark.high)
            parts += [
                f"<line class='kx-interval' x1='{lo:.1f}' x2='{hi:.1f}' y1='{y:.1f}' y2='{y:.1f}'/>",
                f"<line class='kx-interval' x1='{lo:.1f}' x2='{lo:.1f}' y1='{y - 3:.1f}' y2='{y + 3:.1f}'/>",
                f"<line class='kx-interval' x1='{hi:.1f}' x2='{hi:.1f}' y1='{y - 3:.1f}' y2='{y + 3:.1f}'/>",
            ]
            end = max(hi, centre + 5)
        else:
            end = centre + 5
        fill = " kx-hollow" if mark.hollow else ""
        if mark.shape == "diamond":
            parts.append(f"<path class='kx-dot{fill}' d='M{centre:.1f},{y - 6:.1f} l6,6 l-6,6 l-6,-6 z'/>")
        else:
            parts.append(f"<circle class='kx-dot{fill}' cx='{centre:.1f}' cy='{y:.1f}' r='4.5'/>")
    if mark.label:  # right of the mark, or left of it where the chart's edge would cut it
        lowest = mark.low
        start = (
            x(lowest) - 6
            if lowest is not None
            else x(mark.median if isinstance(mark, Box) else mark.value) - 11
        )
        size = _text_px(mark.label)
        if end + 6 + size > width and start - size >= left:
            place = f"x='{start:.1f}' text-anchor='end'"
        else:
            place = f"x='{end + 6:.1f}'"
        parts.append(f"<text class='kx-value' {place} y='{y + 4:.1f}'>{_esc(mark.label)}</text>")
    parts.append("</g>")
    return "".join(parts)


#: the charts' colours and lines, for the page's light and dark schemes (the report's stylesheet)
CSS = """
.kx-figure { margin: 0.5em 0 1.8em; }
.kx-figure h3 { margin: 0 0 0.1em; font-size: 15px; }
.kx-figure .kx-scope { margin: 0 0 0.3em; color: var(--muted); font-size: 13px; }
.kx-figure .kx-legend { margin: 0 0 0.3em; font-size: 13px; }
.kx-legend span { margin-right: 1.2em; white-space: nowrap; }
.kx-chart { display: block; font: 12px system-ui, sans-serif; }
.kx-chart text { fill: var(--fg); }
.kx-chart .kx-tick, .kx-chart .kx-axis-title { fill: var(--muted); }
.kx-plot-area { fill: none; stroke: var(--rule); }
.kx-grid { stroke: var(--grid); }
.kx-one { stroke: var(--muted); stroke-dasharray: 2 3; }
.kx-interval, .kx-whisker { stroke: currentColor; stroke-width: 1.6; }
.kx-box { fill: none; stroke: currentColor; stroke-width: 1.6; }
.kx-median { stroke: currentColor; stroke-width: 2.4; }
.kx-dot { fill: currentColor; stroke: currentColor; stroke-width: 1.6; }
.kx-dot.kx-hollow { fill: var(--bg); }
.kx-mark.kx-faster { color: var(--faster); } .kx-mark.kx-slower { color: var(--slower); }
.kx-mark.kx-unsure { color: var(--unsure); } .kx-mark.kx-kernel { color: var(--kernel); }
.kx-mark.kx-pytorch { color: var(--pytorch); }
.kx-legend .kx-faster { color: var(--faster); } .kx-legend .kx-slower { color: var(--slower); }
.kx-legend .kx-unsure { color: var(--unsure); } .kx-legend .kx-kernel { color: var(--kernel); }
.kx-legend .kx-pytorch { color: var(--pytorch); }
.kx-swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; border-radius: 2px; }
.kx-chart .kx-share-text { font-size: 11px; }
"""


def figure_html(chart: Chart) -> str:
    """The chart with its title, its scope (what the numbers cover), its legend and notes."""
    legend = "".join(f"<span class='{css}'>{_esc(words)}</span>" for css, words in chart.legend)
    return (
        f"<figure class='kx-figure' id='{_esc(chart.name)}'><h3>{_esc(chart.title)}</h3>"
        f"<p class='kx-scope'>{_esc(chart.scope)}</p>"
        + (f"<p class='kx-legend'>{legend}</p>" if legend else "")
        + render(chart)
        + "".join(f"<p class='kx-scope'>{_esc(line)}</p>" for line in chart.extras)
        + "</figure>"
    )


@dataclass(frozen=True)
class Share:
    """One part of a whole: its percent, colour (a CSS colour), name and hover text."""

    percent: float
    colour: str
    name: str
    hover: str = ""


@dataclass(frozen=True)
class SharesChart:
    """Rows that are each a whole (100%) split into its parts, on a linear 0-100% axis."""

    title: str
    scope: str
    axis_title: str
    rows: tuple[tuple[str, tuple[Share, ...]], ...]
    name: str = ""


def render_shares(chart: SharesChart, width: int = WIDTH) -> str:
    """The chart as an `<svg>`: a stacked bar per row, a part's percent written inside it where it
    fits, ticks every 20%."""
    row_h, top = 44, 10
    left = max((_text_px(label) for label, _ in chart.rows), default=40) + 16
    plot_w = width - left - 24
    plot_h = row_h * len(chart.rows)
    height = top + plot_h + 44
    out = [
        f"<svg class='kx-chart' data-chart='{_esc(chart.name)}' viewBox='0 0 {width} {height}' "
        f"width='100%' style='max-width:{width}px' role='img' aria-label='{_esc(chart.title)}' "
        f"xmlns='http://www.w3.org/2000/svg'>",
        f"<rect class='kx-plot-area' x='{left:.1f}' y='{top}' width='{plot_w:.1f}' height='{plot_h}'/>",
    ]
    for percent in range(0, 101, 20):
        px = left + plot_w * percent / 100
        out.append(f"<line class='kx-grid' x1='{px:.1f}' x2='{px:.1f}' y1='{top}' y2='{top + plot_h}'/>")
        out.append(
            f"<text class='kx-tick' x='{px:.1f}' y='{top + plot_h + 16}' text-anchor='middle' "
            f"data-value='{percent}'>{percent}%</text>"
        )
    out.append(
        f"<text class='kx-axis-title' x='{left + plot_w / 2:.1f}' y='{height - 6}' "
        f"text-anchor='middle'>{_esc(chart.axis_title)}</text>"
    )
    for index, (label, shares) in enumerate(chart.rows):
        y = top + row_h * index + 8
        out.append(
            f"<text class='kx-row' x='{left - 8:.1f}' y='{y + 18:.1f}' text-anchor='end'>{_esc(label)}</text>"
        )
        start = 0.0
        for share in shares:
            x0, w = left + plot_w * start / 100, plot_w * share.percent / 100
            start += share.percent
            if w <= 0:
                continue
            out.append(
                f"<g class='kx-mark kx-share' data-value='{share.percent:.3g}'>"
                f"<title>{_esc(share.hover)}</title>"
                f"<rect class='kx-box-share' x='{x0:.1f}' y='{y:.1f}' width='{w:.1f}' height='{row_h - 16}' "
                f"style='fill:{_esc(share.colour)}'/>"
            )
            text = f"{share.percent:.0f}%"
            if w >= _text_px(text) + 6:
                out.append(
                    f"<text class='kx-share-text' x='{x0 + w / 2:.1f}' y='{y + 18:.1f}' "
                    f"text-anchor='middle' style='fill:{_ink(share.colour)}'>{text}</text>"
                )
            out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _ink(colour: str) -> str:
    """Dark text on a light `colour` (#rrggbb), white on a dark one."""
    if not (colour.startswith("#") and len(colour) == 7):
        return "#ffffff"
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return "#1f2328" if 0.299 * red + 0.587 * green + 0.114 * blue > 150 else "#ffffff"


def shares_html(chart: SharesChart) -> str:
    """The shares chart with its title, scope and a legend of its parts' colours."""
    parts = dict.fromkeys((s.name, s.colour) for _, shares in chart.rows for s in shares)
    legend = "".join(
        f"<span><i class='kx-swatch' style='background:{_esc(colour)}'></i>{_esc(name)}</span>"
        for name, colour in parts
    )
    return (
        f"<figure class='kx-figure' id='{_esc(chart.name)}'><h3>{_esc(chart.title)}</h3>"
        f"<p class='kx-scope'>{_esc(chart.scope)}</p><p class='kx-legend'>{legend}</p>"
        + render_shares(chart)
        + "</figure>"
    )
