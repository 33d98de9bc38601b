"""The conventions every plot shares (the live dashboard and the HTML report): verdict colours and
the dotted 1x line of a log speedup axis. Plain data, no plotly import."""

from __future__ import annotations

from typing import Any

FASTER_COLOUR, SLOWER_COLOUR, UNSURE_COLOUR = "#1a7f37", "#cf222e", "#6e7781"

#: the error plots' y axis: the error is in the layer output's own units, so no SI prefix ("100n")
ERROR_AXIS: dict[str, Any] = {
    "type": "log",
    "title": {"text": "max abs error (output's units, log scale)"},
    "exponentformat": "power",
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
    """Green when the interval clears 1x (and the floor), red when it lies below, grey otherwise."""
    if low > 1 + floor:
        return FASTER_COLOUR
    if high < 1 / (1 + floor):
        return SLOWER_COLOUR
    return UNSURE_COLOUR
