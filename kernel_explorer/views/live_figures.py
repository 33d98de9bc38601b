"""The live dashboard's four figures and the points of their traces (what `LivePlots` draws on).

Built once per dashboard: one look for every plot (`_layout`), one copy of plotly.js for the four
(the first is `live_plot.carrier`), markers with intervals where a log axis makes bars meaningless.
"""

from __future__ import annotations

from array import array
from typing import Any

from kernel_explorer.views.live_plot import LivePlot, carrier
from kernel_explorer.views.plot_style import (
    CATEGORY_AXIS,
    ERROR_AXIS,
    MAX_TICKS,
    SPEEDUP_AXIS,
    empty_note,
    log_ticks,
    one_x_line,
)


def speedup_axis(low: float = 0.5, high: float = 2.0) -> dict[str, Any]:
    """The live plots' speedup axis: the shared look, at most `MAX_TICKS` labels for [low, high]."""
    axis = {key: value for key, value in SPEEDUP_AXIS.items() if key != "minor"}
    return {**axis, **log_ticks(min(low, 1.0), max(high, 1.0))}


def error_axis(low: float = 1e-8, high: float = 1e-4) -> dict[str, Any]:
    """The error plot's axis: decades as powers of ten, at most `MAX_TICKS` of them."""
    axis = {key: value for key, value in ERROR_AXIS.items() if key != "minor"}
    return {**axis, **log_ticks(low, high, unit="", decades_only=True)}


#: points per per-pair trace in the browser and in Python's copy of the figure: past it, each point
#: becomes the median of 2, 4, 8... consecutive pairs (folded again each time the budget fills)
MAX_DRAWN = 500


class Series:
    """Every pair of one trace (8 bytes each), and the points drawn of them: a fixed budget.

    Each point is the exact median of `step` consecutive pairs (`step` 1 until the trace holds
    `budget` points, then doubled each time it fills again), so the figure never holds more than
    `budget` points and a redraw sends only the points completed since the last one.
    """

    def __init__(self, budget: int = MAX_DRAWN) -> None:
        self.budget = budget
        self.x = array("d")
        self.y = array("d")
        self.step = 1
        self.drawn = 0  # points already handed to the figure

    def add(self, x: float, y: float) -> None:
        self.x.append(x)
        self.y.append(y)

    def __len__(self) -> int:
        return len(self.y)

    def points(self, first: int, last: int) -> tuple[list[float], list[float]]:
        """Points `first` to `last` (exclusive) at the current step: the middle pair's time and the
        median speedup of each run of `step` pairs."""
        import numpy as np

        if last <= first:
            return [], []
        step = self.step
        ys = np.frombuffer(self.y, dtype=float)[first * step : last * step].reshape(-1, step)
        xs = np.frombuffer(self.x, dtype=float)[first * step + step // 2 : last * step : step]
        return [round(float(v), 3) for v in xs], [float(f"{v:.5g}") for v in np.median(ys, axis=1)]

    def new_points(self) -> tuple[list[float], list[float], bool]:
        """(x, y, whole): the points completed since the last call; `whole` when the budget filled
        and the step doubled, so the points are the whole trace again (at most budget / 2)."""
        complete = len(self.y) // self.step
        if complete > self.budget:
            while len(self.y) // self.step > self.budget // 2:
                self.step *= 2
            self.drawn = len(self.y) // self.step
            return (*self.points(0, self.drawn), True)
        x, y = self.points(self.drawn, complete)
        self.drawn = complete
        return x, y, False


#: pixels; a legend row is drawn 28 px high at font size 11 (20 left the per-pair plot's x-axis
#: title over its tick labels once the legend took three rows)
HEIGHT, TOP_MARGIN, BOTTOM_MARGIN, LEGEND_ROW = 320, 40, 50, 28


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    """One look for every live plot: width follows the cell, transparent so the theme shows through.

    The title sits at the top left and the legend under the plot (its rows add to the bottom
    margin, `plots.LivePlots`), so neither can run into the other however many layers there are,
    and there is no toolbar over either (`live_plot.CONFIG`). Axes stay hidden until the first
    point: an empty plot shows its note, not a scale of nothing.
    """
    layout = {
        "title": {
            "text": title,
            "font": {"size": 13},
            "x": 0.0,
            "xanchor": "left",
            "xref": "container",
            "y": 1.0,
            "yanchor": "top",
            "yref": "container",
            "pad": {"t": 8, "l": 10},
        },
        "height": HEIGHT,
        "autosize": True,
        "margin": {"t": TOP_MARGIN, "b": BOTTOM_MARGIN, "l": 60, "r": 30},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "showlegend": True,
        "legend": {
            "orientation": "h",
            "yref": "container",
            "y": 0.0,
            "yanchor": "bottom",
            "x": 0.0,
            "xanchor": "left",
            "font": {"size": 11},
        },
        "annotations": [empty_note()],
        **extra,
    }
    for axis in ("xaxis", "yaxis"):
        layout[axis] = {**layout.get(axis, {}), "visible": False}
    return layout


def latency_layout() -> dict[str, Any]:
    return _layout(
        "Speedup per pair (PyTorch time / time of what runs now)",
        xaxis={"title": {"text": "seconds into the run"}, "rangemode": "tozero"},
        yaxis=speedup_axis(),
        shapes=[one_x_line()],
    )


def speedup_trace() -> dict[str, Any]:
    # a marker with its interval, not a bar: on a log axis a bar's length means nothing
    return {
        "type": "scatter",
        "x": [],
        "y": [],
        "mode": "markers+text",
        "name": "median speedup",
        "text": [],
        "textposition": "middle right",
        "cliponaxis": False,  # the last layer's "3.86x" beyond the axis' end stays whole
        "marker": {"size": 9},
        "error_y": {"type": "data", "symmetric": False, "array": [], "arrayminus": []},
        "customdata": [],
        "hovertemplate": "%{x}: %{y:.2f}x<br>%{customdata}<extra></extra>",
        "showlegend": False,
    }


def throughput_trace() -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": [],
        "y": [],
        "mode": "lines+markers",
        "name": "model",
        "hovertemplate": "%{y:.1f} tokens/s<extra></extra>",
        "showlegend": False,
    }


def divergence_traces() -> list[dict[str, Any]]:
    # markers: a bar on a log axis starts at the axis' bottom, so 2e-6 against 4e-6 looked like 1 to 30
    return [
        {
            "type": "scatter",
            "x": [],
            "y": [],
            "mode": "markers",
            "name": name,
            "marker": {"size": 10, "symbol": symbol},
            "hovertext": [],
            "hovertemplate": "%{x}: %{hovertext}<extra></extra>",
        }
        for name, symbol in (("kernel vs float64", "circle"), ("PyTorch vs float64", "diamond-open"))
    ]


def live_figures() -> tuple[LivePlot, LivePlot, LivePlot, LivePlot]:
    """(speedup per pair, median speedup per layer, throughput, divergence), empty."""
    latency = carrier([], latency_layout())  # the first: it brings plotly.js for all
    speedup = LivePlot(
        [speedup_trace()],
        _layout(
            "Median speedup per layer with its 95% interval",
            xaxis=dict(CATEGORY_AXIS),
            yaxis=speedup_axis(),
            shapes=[one_x_line()],
        ),
    )
    throughput = LivePlot(
        [throughput_trace()],
        _layout(
            "Model throughput (one forward over the prompt)",
            xaxis={"title": {"text": "seconds into the run"}, "rangemode": "tozero"},
            # a linear axis too: plotly chose 7 labels (0, 5, ... 30) in the plot's 200 px
            yaxis={"title": {"text": "tokens/s"}, "rangemode": "tozero", "nticks": MAX_TICKS},
        ),
    )
    divergence = LivePlot(
        divergence_traces(),
        _layout(
            "Largest error against a float64 run (lower is more accurate)",
            xaxis=dict(CATEGORY_AXIS),
            yaxis=error_axis(),
        ),
    )
    return latency, speedup, throughput, divergence
