"""The dashboard: hardware, the layer table, Run/Stop, live plots and a status line, in one view.

While a run goes, the kernel stays free for widget messages (the run is on a worker thread), so
a switch clicked mid-run takes effect at the next sample and the plots show it. Where widgets are
not live (nbconvert, a static viewer) it shows as an HTML table with static plots.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from kernel_explorer.measure.stats import noise_warning
from kernel_explorer.records import LayerVerdict, RunEvent
from kernel_explorer.ui.layer_table import LayerTable
from kernel_explorer.ui.plots import LivePlots, static_html

if TYPE_CHECKING:
    from kernel_explorer.explorer import Explorer
    from kernel_explorer.measure.runner import RunHandle
    from kernel_explorer.records import Record


class Dashboard:
    """Everything about one explorer, live. `display(dashboard)` or leave it last in a cell."""

    def __init__(self, explorer: Explorer) -> None:
        self.explorer = explorer
        self.handle: RunHandle | None = None
        self.status = widgets.HTML(value="Ready.", layout={"min_height": "1.5em"})
        self.status.add_class("kx-status")
        self.output = widgets.Output(layout={"max_height": "160px", "overflow": "auto"})  # download bars
        self.table = LayerTable(explorer, on_error=self.show_error, output=self.output)
        self.plots = LivePlots(explorer.results)
        self.run_button = widgets.Button(description="Run", button_style="success", icon="play")
        self.stop_button = widgets.Button(
            description="Stop", button_style="danger", icon="stop", disabled=True
        )
        self.run_button.add_class("kx-run")
        self.stop_button.add_class("kx-stop")
        self.progress = widgets.IntProgress(
            value=0, min=0, max=1, description="samples", layout={"width": "320px"}
        )
        self.run_button.on_click(lambda _: self._guarded(self.run))
        self.stop_button.on_click(lambda _: self._guarded(self.stop))
        self._unsubscribe = explorer.results.subscribe(self._on_record)
        hardware = widgets.HTML(value=explorer.hardware._repr_html_())
        self.widget = widgets.VBox(
            [
                widgets.Accordion(children=[hardware], titles=("Hardware and accepted build variants",)),
                self.table,
                self.output,
                widgets.HBox([self.run_button, self.stop_button, self.progress]),
                self.status,
                widgets.HBox([self.plots.latency, self.plots.speedup]),
                widgets.HBox([self.plots.divergence, self.plots.throughput]),
            ]
        )
        self.widget.add_class("kx-dashboard")

    # -- actions -------------------------------------------------------------------------------

    def run(self) -> None:
        """Start a live run on the worker thread: every layer, as switched now, until Stop."""
        if self.handle is not None and not self.handle.done:
            return
        self.progress.value, self.progress.max = 0, 1
        self.handle = self.explorer.run_live()
        self.run_button.disabled, self.stop_button.disabled = True, False
        self.status.value = f"Running ({self.handle.run_id}): switches take effect at the next sample."

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()

    def show_error(self, message: str) -> None:
        self.status.value = f"<span style='color:#cf222e'>Error: {html.escape(message)}</span>"

    def _guarded(self, action: Any) -> None:
        try:
            action()
        except Exception as error:  # a callback error would otherwise vanish into the kernel log
            self.show_error(f"{type(error).__name__}: {error}")

    def _on_record(self, record: Record) -> None:
        if isinstance(record.values, LayerVerdict):
            warning = noise_warning(record.values.noise_floor)
            if warning:
                self.status.value = f"<span style='color:#9a6700'>{html.escape(warning)}</span>"
        if self.handle is None or record.run_id != self.handle.run_id:
            return
        if isinstance(record.values, RunEvent) and record.values.event != "started":
            self.run_button.disabled, self.stop_button.disabled = False, True
            event, detail = record.values.event, record.values.detail
            if event == "failed":
                self.show_error(detail or "the run failed")
            else:
                self.status.value = f"Run {record.run_id} {event}; {self.plots.points()} latency points."
            self.table.refresh()
            return
        self.progress.max = max(self.progress.max, self.progress.value + 1)
        self.progress.value += 1

    def close(self) -> None:
        self.stop()
        self._unsubscribe()
        self.plots.close()
        self.widget.close()

    # -- display -------------------------------------------------------------------------------

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The live widget, plus HTML that static viewers show instead."""
        bundle = self.widget._repr_mimebundle_(**kwargs) or {}
        bundle["text/html"] = self.static_html()
        return bundle

    def static_html(self) -> str:
        """The dashboard without widgets: hardware, the inventory table, static plots of the results."""
        parts = [self.explorer.inventory()._repr_html_()]
        if len(self.explorer.results):
            parts.append(static_html(self.explorer.results))
        return "\n".join(parts)
