"""Live plots: latency and divergence per layer, model throughput, fed by ResultLog records in batches.

Records arrive on the measurement thread; they are buffered and drawn every `interval` seconds in
one `batch_update`, so the browser gets one message per batch instead of one per sample.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from typing import Any

from kernel_explorer.measure.stats import speedup_interval
from kernel_explorer.records import LayerDivergence, LayerLatency, ModelThroughput, Record
from kernel_explorer.results import ResultLog


def _one_x_line() -> dict[str, Any]:
    """A dotted line at 1x across the plot: above it the kernel is faster, below it slower."""
    return {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "yref": "y",
        "y0": 1,
        "y1": 1,
        "line": {"dash": "dot", "color": "#6e7781"},
    }


def _layout(title: str, *, width: int, **extra: Any) -> dict[str, Any]:
    """One look for every live plot: the same height and margins, its own title and width."""
    return {"title": title, "height": 300, "width": width, "margin": {"t": 40, "b": 40}, **extra}


class LivePlots:
    """Three FigureWidgets (latency, throughput, divergence) that follow a ResultLog."""

    def __init__(self, log: ResultLog, *, interval: float = 0.3) -> None:
        import pandas  # noqa: F401 - plotly imports it lazily; import it here, not in the flush thread
        import plotly.graph_objects as go

        self.log = log
        self.interval = interval
        self.latency = go.FigureWidget(
            layout=_layout(
                "Speedup per pair (PyTorch time / time of what runs now)",
                width=600,
                xaxis_title="seconds into the run",
                yaxis_title="speedup (x, log scale)",
                yaxis_type="log",
                shapes=[_one_x_line()],
            )
        )
        self.speedup = go.FigureWidget(
            [
                go.Bar(
                    x=[],
                    y=[],
                    name="median speedup",
                    text=[],
                    textposition="outside",
                    error_y={"type": "data", "symmetric": False, "array": [], "arrayminus": []},
                    hovertemplate="%{x}: %{y:.2f}x<br>%{customdata}<extra></extra>",
                )
            ],
            layout=_layout(
                "Median speedup per layer, 95% interval (pairs on a kernel)",
                width=420,
                yaxis_title="speedup (x, log scale)",
                yaxis_type="log",
                shapes=[_one_x_line()],
            ),
        )
        self._speedups: dict[str, list[float]] = defaultdict(list)
        self.throughput = go.FigureWidget(
            [go.Scatter(x=[], y=[], mode="lines+markers", name="model")],
            layout=_layout("Model tokens/s (one forward)", width=480, xaxis_title="seconds"),
        )
        self.divergence = go.FigureWidget(
            [go.Bar(x=[], y=[], name="kernel vs float64"), go.Bar(x=[], y=[], name="PyTorch vs float64")],
            layout=_layout("Max abs error vs float64 (hover: max ULP)", width=480, yaxis_type="log"),
        )
        self._pending: list[Record] = []
        self._lock = threading.Lock()
        self._start: float | None = None
        self._worst: dict[str, dict[str, float]] = defaultdict(dict)
        self._unsubscribe = log.subscribe(self._on_record)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flush_loop, name="kernel-explorer-plots", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._unsubscribe()

    def _on_record(self, record: Record) -> None:
        with self._lock:
            self._pending.append(record)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush()

    def flush(self) -> None:
        """Draw the buffered records now (one batch)."""
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch:
            return
        if self._start is None:
            self._start = batch[0].time
        figures = (self.latency, self.speedup, self.throughput, self.divergence)
        with contextlib.ExitStack() as stack:
            for figure in figures:
                stack.enter_context(figure.batch_update())
            for record in batch:
                self._draw(record)
            self._draw_speedup_bars()

    def _draw_speedup_bars(self) -> None:
        layers = [name for name, values in self._speedups.items() if values]
        intervals = [speedup_interval(self._speedups[name]) for name in layers]
        bars = self.speedup.data[0]
        bars.x, bars.y = layers, [i.median for i in intervals]
        bars.error_y.array = [i.high - i.median for i in intervals]
        bars.error_y.arrayminus = [i.median - i.low for i in intervals]
        bars.text = [f"{i.median:.2f}x" for i in intervals]
        bars.customdata = [
            f"95% interval {i.low:.2f}x to {i.high:.2f}x, {i.n} pairs"
            + (f" (only {i.confidence:.0%} sure)" if i.too_few else "")
            for i in intervals
        ]
        bars.marker.color = [
            "#1a7f37" if i.low > 1 else "#cf222e" if i.high < 1 else "#6e7781" for i in intervals
        ]

    def _trace(self, layer: str) -> Any:
        for trace in self.latency.data:
            if trace.name == layer:
                return trace
        self.latency.add_scatter(x=[], y=[], mode="markers", name=layer, marker={"symbol": []})
        return self.latency.data[-1]

    def _draw(self, record: Record) -> None:
        seconds = record.time - (self._start or record.time)
        values = record.values
        if isinstance(values, LayerLatency) and record.layer:
            trace = self._trace(record.layer)
            trace.x = (*trace.x, seconds)
            trace.y = (*trace.y, values.speedup)
            trace.marker.symbol = (
                *(trace.marker.symbol or ()),
                "circle" if values.kernel_on else "circle-open",
            )
            if values.kernel_on:
                self._speedups[record.layer].append(values.speedup)
        elif isinstance(values, ModelThroughput):
            line = self.throughput.data[0]
            line.x = (*line.x, seconds)
            line.y = (*line.y, values.tokens_s)
        elif isinstance(values, LayerDivergence) and record.layer:
            worst = self._worst[record.layer]
            measured = {
                "kernel_err64": values.kernel_err64,
                "pytorch_err64": values.pytorch_err64,
                "max_ulp": values.max_ulp,
                "max_abs": values.max_abs,
            }
            for key, value in measured.items():
                if value is not None:
                    worst[key] = max(worst.get(key, 0.0), float(value))
            layers = list(self._worst)
            kernel, pytorch = self.divergence.data
            kernel.x = pytorch.x = layers
            kernel.y = [max(self._worst[n].get("kernel_err64", 0.0), 1e-30) for n in layers]
            pytorch.y = [max(self._worst[n].get("pytorch_err64", 0.0), 1e-30) for n in layers]
            kernel.hovertext = [
                f"vs PyTorch: max abs {self._worst[n].get('max_abs', 0.0):.2e}, "
                f"max ULP {int(self._worst[n].get('max_ulp', 0))}"
                for n in layers
            ]

    def points(self) -> int:
        """Latency points drawn so far (what the browser test waits for)."""
        return sum(len(trace.x) for trace in self.latency.data)


def static_html(log: ResultLog) -> str:
    """The same figures as static HTML (plotly.js from the page's first figure), for non-live viewers."""
    from kernel_explorer.report import figures

    parts = [
        fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
        for i, fig in enumerate(figures(log))
    ]
    return "\n".join(parts)
