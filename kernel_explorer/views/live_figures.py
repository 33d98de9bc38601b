"""The live dashboard's four figures and the points of their traces (what `LivePlots` draws on).

Built once per dashboard: one look for every plot (`_layout`), one copy of plotly.js for the four
(the first is `live_plot.carrier`), markers with intervals where a log axis makes bars meaningless,
and a note in each empty plot that says what it shows and when it fills.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from kernel_explorer.views.live_plot import LivePlot, carrier
from kernel_explorer.views.plot_style import (
    CATEGORY_AXIS,
    ERROR_AXIS,
    MAX_TICKS,
    SPEEDUP_AXIS,
    UNSURE_COLOUR,
    empty_note,
    log_ticks,
)


def padded(low: float, high: float) -> tuple[float, float]:
    """[low, high] widened to the 1-2-5 values around it: a plot's points then lie between two
    labelled ticks (0.27x and 1.5x drawn with only 0.5x and 1x labelled read as nothing near either)."""
    import math

    low, high = max(min(low, high), 1e-30), max(high, low, 1e-30)
    first, last = math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1
    steps = [m * 10.0**e for e in range(first, last + 1) for m in (1, 2, 5)]
    return max(v for v in steps if v <= low * 1.0001), min(v for v in steps if v >= high / 1.0001)


#: the per-pair plot's axis spans the points within this reach of their quartiles, in decades: three
#: interquartile ranges, and at least a factor 2 (0.30 decades) either way however tight the bulk.
#: A pair timed while the machine stalled (0.01x, 100x) lies far beyond it: a handful of them set
#: the axis to 0.01x-100x+ in a long Run and squeezed every other point into one line
BULK_IQRS, BULK_MIN_REACH = 3.0, 0.30


def bulk_span(values: Sequence[float]) -> tuple[float, float] | None:
    """(low, high) of the bulk of `values` (speedups, > 0) on a log axis: the smallest and largest
    of those within `BULK_IQRS` interquartile ranges of the quartiles (at least `BULK_MIN_REACH`
    decades); None when there is no value. Quartiles, not the extremes, so a few stalled pairs move
    it not at all; the fences rather than a fixed quantile, so a short run with one stall among 20
    pairs leaves that stall out as well, and a bulk that really is wide stays whole."""
    import numpy as np

    logs = np.log10(np.clip(np.asarray(values, dtype=float), 1e-30, None))
    if not len(logs):
        return None
    first, third = np.percentile(logs, [25, 75])
    reach = max(BULK_IQRS * (third - first), BULK_MIN_REACH)
    inside = logs[(logs >= first - reach) & (logs <= third + reach)]
    return float(10.0 ** inside.min()), float(10.0 ** inside.max())


#: a per-pair trace with fewer points than this has no bulk of its own (one of its two pairs may be a
#: stall): its candidate's median and interval keep it in view (`plots.LivePlots._fit`)
BULK_MIN_POINTS = 8


def traces_span(traces: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """(low, high) spanning the bulk of each trace (`bulk_span` of each candidate's points on its
    own), the union of them; None when no trace has a point. Per trace, not pooled: a compare's two
    candidates at 0.88x and 0.27x made one wide interquartile range of the pooled points, and the
    axis grew to 0.01x-20x with the stalled pairs drawn as ordinary points. A trace of fewer than
    `BULK_MIN_POINTS` points counts only where no trace has that many (the start of a run)."""
    full = [values for values in traces if len(values) >= BULK_MIN_POINTS]
    spans = [bulk_span(values) for values in full] if full else [bulk_span([v for t in traces for v in t])]
    found = [span for span in spans if span is not None]
    if not found:
        return None
    return min(low for low, _ in found), max(high for _, high in found)


def log_range(low: float, high: float) -> list[float]:
    """A log axis' range (plotly takes log10 units) from `low` to `high`, with a little room so a
    marker at either end is drawn whole."""
    import math

    return [math.log10(low) - 0.04, math.log10(high) + 0.04]


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


#: pixels: every plot is this high; its legend stands at its right (`plots.legend_margin` widens the
#: right margin to the longest entry), so the legend never pushes into the x-axis title however many
#: entries it has (under the plot, 9 entries took 5 rows and the title ran over the tick labels)
HEIGHT, TOP_MARGIN, BOTTOM_MARGIN = 320, 40, 50

#: what each plot shows and when it fills, in its middle until its first point (two short lines: one
#: line of 80 characters was wider than a plot with the file browser open)
LATENCY_NOTE = "each timed pair's speedup, per candidate<br>fills while a Run or a compare times a layer"
SPEEDUP_NOTE = "each candidate's median speedup, 95% interval<br>after a layer's first pairs"
THROUGHPUT_NOTE = "tokens/s of one forward over the prompt<br>each cycle of a Run (a compare measures none)"
DIVERGENCE_NOTE = "each candidate's largest error against float64<br>after a layer's first comparison"
THROUGHPUT_TITLE = "Model throughput (one forward over the prompt)"


def _layout(title: str, note: str, **extra: Any) -> dict[str, Any]:
    """One look for every live plot: width follows the cell, transparent so the theme shows through.

    The title sits at the top left and the legend at the right of the plot, grouped by layer, so
    neither runs into the other or into an axis however many candidates there are, and there is no
    toolbar over either (`live_plot.CONFIG`). Axes stay hidden until the first point: an empty plot
    shows its note (what it shows and when it fills), not a scale of nothing.
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
            "orientation": "v",
            "x": 1.0,
            "xanchor": "left",
            "xref": "paper",
            "y": 1.0,
            "yanchor": "top",
            "yref": "paper",
            "traceorder": "grouped",
            "tracegroupgap": 4,
            "font": {"size": 10},
        },
        # a layer's candidates beside each other at its place on a category axis
        "scattermode": "group",
        "scattergap": 0.5,
        "annotations": [empty_note(note)],
        **extra,
    }
    for axis in ("xaxis", "yaxis"):
        layout[axis] = {**layout.get(axis, {}), "visible": False}
    return layout


def latency_layout() -> dict[str, Any]:
    # the 1x line comes with the axes (`plots.LivePlots._fit`): on an empty plot it struck the note
    return _layout(
        "Speedup per pair (PyTorch time / time of what runs now)",
        LATENCY_NOTE,
        xaxis={"title": {"text": "seconds into the run"}, "rangemode": "tozero"},
        yaxis=speedup_axis(),
        scattermode="overlay",
    )


def throughput_trace() -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": [],
        "y": [],
        "mode": "lines+markers",
        "name": "model",
        "line": {"color": UNSURE_COLOUR},
        "marker": {"color": UNSURE_COLOUR},
        "hovertemplate": "%{y:.1f} tokens/s at %{x:.0f} s<extra></extra>",
        "showlegend": False,
    }


def pytorch_error_trace() -> dict[str, Any]:
    # markers: a bar on a log axis starts at the axis' bottom, so 2e-6 against 4e-6 looked like 1 to 30
    return {
        "type": "scatter",
        "x": [],
        "y": [],
        "mode": "markers",
        "name": "PyTorch vs float64",
        "offsetgroup": "pytorch",
        "marker": {"size": 10, "symbol": "diamond-open", "color": UNSURE_COLOUR},
        "hovertext": [],
        "hovertemplate": "%{x}: %{hovertext}<extra></extra>",
    }


def live_figures() -> tuple[LivePlot, LivePlot, LivePlot, LivePlot]:
    """(speedup per pair, median speedup per candidate, throughput, divergence), empty."""
    latency = carrier([], latency_layout())  # the first: it brings plotly.js for all
    speedup = LivePlot(
        [],  # a trace per candidate, as they come (`plots.LivePlots`)
        _layout(
            "Median speedup per candidate with its 95% interval",
            SPEEDUP_NOTE,
            xaxis=dict(CATEGORY_AXIS),
            yaxis=speedup_axis(),
        ),
    )
    throughput = LivePlot(
        [throughput_trace()],
        _layout(
            THROUGHPUT_TITLE,
            THROUGHPUT_NOTE,
            xaxis={"title": {"text": "seconds into the run"}, "rangemode": "tozero"},
            # a linear axis too: plotly chose 7 labels (0, 5, ... 30) in the plot's 200 px
            yaxis={"title": {"text": "tokens/s"}, "rangemode": "tozero", "nticks": MAX_TICKS},
            scattermode="overlay",
        ),
    )
    divergence = LivePlot(
        [pytorch_error_trace()],  # and a trace per candidate, as they come
        _layout(
            "Largest error against a float64 run (lower is more accurate)",
            DIVERGENCE_NOTE,
            xaxis=dict(CATEGORY_AXIS),
            yaxis=error_axis(),
        ),
    )
    return latency, speedup, throughput, divergence
