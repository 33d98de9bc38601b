"""The live dashboard's four figures and the points of their traces (what `LivePlots` draws on).

Built once per dashboard: one look for every plot (`_layout`), one copy of plotly.js for the four
(`shared_plotly.py`), markers with intervals where a log axis makes bars meaningless.
"""

from __future__ import annotations

from typing import Any

from kernel_explorer.views.plot_style import (
    CATEGORY_AXIS,
    ERROR_AXIS,
    SPEEDUP_AXIS,
    empty_note,
    one_x_line,
)
from kernel_explorer.views.shared_plotly import figure_classes

MAX_DRAWN = 3000  # points per per-pair trace; beyond, each point is the median of consecutive pairs


class Series:
    """The points of one trace, kept here: the figure is assigned all of them once per batch."""

    def __init__(self) -> None:
        self.x: list[float] = []
        self.y: list[float] = []
        self.text: list[str] = []

    def drawn(self) -> tuple[list[float], list[float], list[str], int]:
        """The points to draw and how many pairs each stands for (1: every pair as it is)."""
        n = len(self.x)
        step = -(-n // MAX_DRAWN)  # ceil: consecutive pairs per point
        if step <= 1:
            return self.x, self.y, self.text, 1
        x, y, text = [], [], []
        for start in range(0, n, step):
            ys = sorted(self.y[start : start + step])
            x.append(self.x[start])
            y.append(ys[len(ys) // 2])
            text.append(f"median of {len(ys)} pairs: {y[-1]:.2f}x")
        return x, y, text, step


HEIGHT, TOP_MARGIN, LEGEND_ROW = 320, 62, 18  # pixels: a plot, the title and a legend row above it


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    """One look for every live plot: width follows the page, transparent so the theme shows through."""
    return {
        # at the top of the figure, not in the middle of its top margin: the legend's rows grow
        # that margin (plots._fit_legend), and a centred title sat among them
        "title": {
            "text": title,
            "font": {"size": 13},
            "y": 1.0,
            "yref": "container",
            "yanchor": "top",
            "pad": {"t": 8},
        },
        "height": HEIGHT,
        "autosize": True,
        "margin": {"t": TOP_MARGIN, "b": 45, "l": 60, "r": 40},  # the title, then the legend, above
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        # above the plot, right-aligned: below it the legend ran into the axis title and, growing
        # with every layer, squeezed the plot
        "legend": {
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.0,
            "xanchor": "right",
            "x": 1.0,
            "font": {"size": 11},
        },
        "annotations": [empty_note()],
        **extra,
    }


def live_figures() -> tuple[Any, Any, Any, Any]:
    """(speedup per pair, median speedup per layer, throughput, divergence), empty."""
    import plotly.graph_objects as go

    # one copy of plotly.js for the four (shared_plotly.py): the latency figure carries it
    carrier, light = figure_classes()
    latency = carrier(
        layout=_layout(
            "Speedup per pair (PyTorch time / time of what runs now)",
            xaxis={"title": {"text": "seconds into the run"}, "rangemode": "tozero"},
            yaxis=SPEEDUP_AXIS,
            shapes=[one_x_line()],
        )
    )
    speedup = light(
        [
            # a marker with its interval, not a bar: on a log axis a bar's length means nothing
            go.Scatter(
                x=[],
                y=[],
                mode="markers+text",
                name="median speedup",
                text=[],
                textposition="middle right",
                cliponaxis=False,  # the last layer's "3.86x" beyond the axis' end stays whole
                marker={"size": 9},
                error_y={"type": "data", "symmetric": False, "array": [], "arrayminus": []},
                hovertemplate="%{x}: %{y:.2f}x<br>%{customdata}<extra></extra>",
            )
        ],
        layout=_layout(
            "Median speedup per layer with its 95% interval",
            xaxis=CATEGORY_AXIS,
            yaxis=SPEEDUP_AXIS,
            shapes=[one_x_line()],
        ),
    )
    throughput = light(
        [
            go.Scatter(
                x=[],
                y=[],
                mode="lines+markers",
                name="model",
                hovertemplate="%{y:.1f} tokens/s<extra></extra>",
            )
        ],
        layout=_layout(
            "Model throughput (one forward over the prompt)",
            xaxis={"title": {"text": "seconds into the run"}, "rangemode": "tozero"},
            yaxis={"title": {"text": "tokens/s"}, "rangemode": "tozero"},
        ),
    )
    divergence = light(
        [
            # markers: a bar on a log axis starts at the axis' bottom, so 2e-6 against 4e-6
            # looked like 1 to 30
            go.Scatter(
                x=[],
                y=[],
                mode="markers",
                name=name,
                marker={"size": 10, "symbol": symbol},
                hovertemplate="%{x}: %{hovertext}<extra></extra>",
            )
            for name, symbol in (("kernel vs float64", "circle"), ("PyTorch vs float64", "diamond-open"))
        ],
        layout=_layout(
            "Largest error against a float64 run (lower is more accurate)",
            xaxis=CATEGORY_AXIS,
            yaxis=ERROR_AXIS,
        ),
    )
    return latency, speedup, throughput, divergence
