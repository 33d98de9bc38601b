"""The dashboard's "where the time goes" panel: a Profile button, the stacked-bar chart, one line.

Profiling runs `Explorer.breakdown` on the worker thread (all layers on PyTorch for the length of
it, the switches restored after), and the chart redraws when it ends. It also redraws after every
other run, because a newly measured kernel speedup changes Amdahl's prediction in the line under it.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from kernel_explorer.records import RunEvent
from kernel_explorer.views.breakdown_chart import breakdown_figure, covered_line

if TYPE_CHECKING:
    from kernel_explorer.explorer import Explorer, RunHandle
    from kernel_explorer.records import Record
    from kernel_explorer.views.live_plot import LivePlot

_EMPTY_NOTE = (
    "Profile one prefill and one decode step on PyTorch to see which share of the model's time "
    "each kernel layer can reach (Linear, the embedding and the rest have none unless you extend)."
)


class BreakdownPanel:
    """A Profile button, the breakdown chart (hidden until there is one) and the coverage line."""

    def __init__(self, explorer: Explorer, *, on_error: Any, guard: Any, tokens: int = 512) -> None:
        """`on_error` shows a message; `guard(action)` runs a click's action and shows its error
        (the dashboard's, so every button reports the same way)."""
        self.explorer = explorer
        self.tokens = tokens
        self.on_error = on_error
        self.handle: RunHandle | None = None
        self.button = widgets.Button(
            description="Profile time",
            icon="clock-o",
            tooltip=_EMPTY_NOTE,
            layout={"width": "auto", "min_width": "130px"},
        )
        self.button.add_class("kx-profile")
        self.line = widgets.HTML(value=html.escape(_EMPTY_NOTE))
        self.line.add_class("kx-breakdown-line")
        # made with the first breakdown: a FigureWidget carries plotly.js (5 MB) in its state, sent
        # to the browser (and stored by nbconvert) even while hidden
        self.chart: LivePlot | None = None
        self.chart_box = widgets.Box([], layout={"display": "none", "width": "100%"})
        self.widget = widgets.VBox([widgets.HBox([self.button, self.line]), self.chart_box])
        self.button.on_click(lambda _: guard(self.profile))
        self._unsubscribe = explorer.results.subscribe(self._on_record)
        # extend/retract change the kernel layers: the legend says when the breakdown predates them
        self._unsubscribe_switches = explorer.subscribe_switches(self._on_switch)
        self._layers = list(explorer.layers)
        self.redraw()

    def _on_switch(self) -> None:
        if list(self.explorer.layers) != self._layers:
            self._layers = list(self.explorer.layers)
            self.redraw()

    def profile(self) -> None:
        """Start a breakdown on the worker thread (a second click while one runs does nothing)."""
        if self.handle is not None and not self.handle.done:
            return
        self.handle = self.explorer.breakdown(tokens=self.tokens, background=True)
        self.button.disabled = True  # after the start: a refused start leaves the button usable
        self.line.value = html.escape(
            f"Profiling a {self.tokens}-token prefill and one decode step, every layer on PyTorch..."
        )

    def redraw(self) -> None:
        """Copy the last breakdown's figure into the widget (one message), and refresh the line."""
        figure = breakdown_figure(self.explorer.results, self.explorer.layers)
        if figure is None:
            return
        import json

        whole = json.loads(figure.to_json())  # plain data: plotly's encoder turns arrays into lists
        layout = {**whole["layout"], "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)"}
        if self.chart is None:
            from kernel_explorer.views.live_plot import LivePlot

            # plotly.js comes with the dashboard's live plots (their carrier plot), not again here
            self.chart = LivePlot(whole["data"], layout)
            self.chart.add_class("kx-breakdown")
            self.chart.add_class("kx-plot")
            self.chart_box.children = (self.chart,)
        else:
            self.chart.react(whole["data"], layout)
            self.chart.send_pending()
        self.chart_box.layout.display = "flex"
        self.line.value = html.escape(covered_line(self.explorer.results))

    def _on_record(self, record: Record) -> None:
        if not isinstance(record.values, RunEvent) or record.values.event == "started":
            return
        if self.handle is not None and record.run_id == self.handle.run_id:
            self.button.disabled = False
            if record.values.event == "failed":
                self.on_error(record.values.detail or "the breakdown failed")
                return
        self.redraw()

    def close(self) -> None:
        self._unsubscribe()
        self._unsubscribe_switches()
        self.widget.close()
        if self.chart is not None:
            self.chart.close()
