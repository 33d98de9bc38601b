"""The conventions every plot shares (the live dashboard and the HTML report): verdict colours and
the dotted 1x line of a log speedup axis. Plain data, no plotly import."""

from __future__ import annotations

from typing import Any

FASTER_COLOUR, SLOWER_COLOUR, UNSURE_COLOUR = "#1a7f37", "#cf222e", "#6e7781"

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _decade(exponent: int) -> str:
    """10⁻⁶: a decade as a reader writes it (plotly's own labels would be bare digits, '5' for 0.5)."""
    return "1" if exponent == 0 else "10" + str(exponent).translate(_SUPERSCRIPT)


def _plain(value: float) -> str:
    """0.5, 2, 20: a 1-2-5 tick in full, never one digit standing for a fraction."""
    return f"{value:g}"


def _minor(exponents: range, skip: tuple[int, ...]) -> dict[str, Any]:
    """Unlabelled minor ticks at 2..9 of each decade (those not labelled already)."""
    values = [m * 10.0**e for e in exponents for m in range(2, 10) if m not in skip]
    return {"tickvals": values, "ticks": "outside", "ticklen": 3, "showgrid": False}


#: a log speedup axis: 1-2-5 ticks labelled in full with their "x" (0.5x, 1x, 2x), the other
#: mantissas as unlabelled minor ticks. (1x stays in range through the 1x line, a shape on the
#: axis; `autorangeoptions.include` stopped the live plots from widening beyond it.)
_SPEEDUP_EXPONENTS = range(-3, 4)
SPEEDUP_AXIS: dict[str, Any] = {
    "type": "log",
    "title": {"text": "speedup (x, log scale)"},
    "tickvals": [m * 10.0**e for e in _SPEEDUP_EXPONENTS for m in (1, 2, 5)],
    "ticktext": [f"{_plain(m * 10.0**e)}x" for e in _SPEEDUP_EXPONENTS for m in (1, 2, 5)],
    "minor": _minor(_SPEEDUP_EXPONENTS, skip=(2, 5)),
}

#: the error plots' y axis: the error is in the layer output's own units, so no SI prefix ("100n");
#: decades labelled (10⁻⁶), the rest unlabelled minor ticks
_ERROR_EXPONENTS = range(-31, 4)  # a zero error is drawn at 1e-30
ERROR_AXIS: dict[str, Any] = {
    "type": "log",
    "title": {"text": "max abs error (output's units, log scale)"},
    "tickvals": [10.0**e for e in _ERROR_EXPONENTS],
    "ticktext": [_decade(e) for e in _ERROR_EXPONENTS],
    "minor": _minor(_ERROR_EXPONENTS, skip=()),
}

#: a layer name axis: categories, so an empty plot shows no 0-6 number line
CATEGORY_AXIS: dict[str, Any] = {"type": "category"}

#: a plot before its first point: this note in its middle, and no negative range on a count or time
EMPTY_NOTE = "no measurement yet: press Run, or measure from a cell"


def empty_note() -> dict[str, Any]:
    """The annotation an empty plot carries; `LivePlots` drops it with the first point."""
    return {
        "text": EMPTY_NOTE,
        "name": "kx-empty",
        "xref": "paper",
        "yref": "paper",
        "x": 0.5,
        "y": 0.5,
        "showarrow": False,
        "opacity": 0.7,
    }


#: hover of an error bar: the value with its unit, and which side it belongs to
ERROR_HOVER = "%{x}: max abs error %{y:.2e} (output's units)<extra>%{fullData.name}</extra>"


def one_x_line() -> dict[str, Any]:
    """A dotted line at 1x across the plot: above it the kernel is faster, below it slower."""
    return {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "yref": "y",
        "y0": 1,
        "y1": 1,
        "line": {"dash": "dot", "color": UNSURE_COLOUR},
    }


def verdict_colour(low: float, high: float, floor: float = 0.0) -> str:
    """Green when the interval clears 1x (and the floor), red when it lies below, grey otherwise:
    the colour of `stats.speed_verdict`'s answer (the one place a verdict is decided)."""
    from kernel_explorer.records import Interval, Verdict, speed_verdict

    verdict = speed_verdict(Interval((low * high) ** 0.5, low, high, 0, 0.0), floor)
    return {Verdict.FASTER: FASTER_COLOUR, Verdict.SLOWER: SLOWER_COLOUR}.get(verdict, UNSURE_COLOUR)


#: at most this many labelled ticks on a log axis: 16 labels (0.002x ... 2000x) in a plot 110 px
#: high overlapped
MAX_TICKS = 6


def log_ticks(low: float, high: float, *, unit: str = "x", decades_only: bool = False) -> dict[str, Any]:
    """Tick values and labels for a log axis spanning [low, high]: 1-2-5 steps while they fit in
    `MAX_TICKS`, then decades, then every second (third...) decade; never more than `MAX_TICKS`.

    The labels are written in full ("0.5x", "2x") with `unit`, or as powers of ten when `unit` is ""
    (an error in the output's own units: "10⁻⁶").
    """
    import math

    low, high = max(min(low, high), 1e-30), max(high, low, 1e-30)
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    values: list[float] = []
    if not decades_only:
        values = [m * 10.0**e for e in range(first, last + 1) for m in (1, 2, 5)]
        values = [v for v in values if low <= v * 1.0001 and v <= high * 1.0001]
    if decades_only or len(values) > MAX_TICKS or len(values) < 2:
        exponents = list(range(first, last + 1))
        every = max(1, math.ceil(len(exponents) / MAX_TICKS))
        values = [10.0**e for e in exponents if e % every == 0]
        inside = [v for v in values if low <= v * 1.0001 and v <= high * 1.0001]
        if decades_only and len(inside) < 2:  # less than a decade shown: one label read nothing
            steps = [m * 10.0**e for e in range(first, last + 1) for m in (2, 5)]
            values = sorted(values + [v for v in steps if low <= v * 1.0001 and v <= high * 1.0001])
            values = values[:MAX_TICKS]

    def label(value: float) -> str:
        if unit:
            return f"{_plain(value)}{unit}"
        exponent = math.floor(math.log10(value) + 1e-9)
        mantissa = round(value / 10.0**exponent)
        return _decade(exponent) if mantissa == 1 else f"{mantissa}·{_decade(exponent)}"

    text = [label(v) for v in values]
    return {"tickmode": "array", "tickvals": values, "ticktext": text}
