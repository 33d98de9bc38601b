"""The dashboard: hardware, the layer table, Run/Stop, live plots and a status line, in one view.

While a run goes, the kernel stays free for widget messages (the run is on a worker thread), so
a switch clicked mid-run takes effect at the next sample and the plots show it. Where widgets are
not live (nbconvert, a static viewer) it shows as an HTML table with static plots.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from kernel_explorer.records import LayerVerdict, RunEvent, noise_warning
from kernel_explorer.views.breakdown_panel import BreakdownPanel
from kernel_explorer.views.layer_table import LayerTable
from kernel_explorer.views.link_watch import LinkWatch
from kernel_explorer.views.plots import LivePlots, static_html

if TYPE_CHECKING:
    from kernel_explorer.explorer import Explorer, RunHandle
    from kernel_explorer.records import Record


# Two plots side by side while there is room, one under the other when there is not (no overflow
# with JupyterLab's file browser open); each plot takes half the row and shrinks with it.
_ROW = {"display": "flex", "flex_flow": "row wrap", "width": "100%"}

# Plotly draws its text and grid with fixed colours; these follow JupyterLab's theme instead (the
# plots' backgrounds are transparent), so the dashboard reads in the light and the dark theme. A
# hover label's text keeps plotly's colour, chosen against the label's own box (the theme's light
# font on Dark made a white hover box unreadable).
_THEME_CSS = """
.kx-dashboard .kx-plot { flex: 1 1 420px; min-width: 320px; max-width: 100%; overflow: hidden; }
.kx-dashboard .kx-plot .main-svg :not(.hovertext):not(.axistext) > text {
  fill: var(--jp-ui-font-color1, #1f2328) !important; }
.kx-dashboard .kx-plot .gridlayer path, .kx-dashboard .kx-plot .zerolinelayer path {
  stroke: var(--jp-border-color2, #d0d7de) !important; }
.kx-dashboard .kx-plot .errorbars path { stroke: var(--jp-ui-font-color1, #1f2328) !important; }
.kx-dashboard .kx-plot .xaxislayer-above path, .kx-dashboard .kx-plot .yaxislayer-above path {
  stroke: var(--jp-ui-font-color2, #57606a) !important; }
.kx-dashboard .kx-status { color: var(--jp-ui-font-color1, inherit); }
"""


# the theme's own error and warning colours (fallbacks for a page without JupyterLab's variables)
_ERROR_STYLE = "color: var(--jp-error-color1, #cf222e)"
_WARN_STYLE = "color: var(--jp-warn-color1, #9a6700)"

# The snapshot hides while a live dashboard shares its output area; in a reopened notebook it is
# the widget's "model not found" line that hides.
_SNAPSHOT_CSS = """
.jp-OutputArea:has(.kx-dashboard) .kx-snapshot { display: none; }
.jp-OutputArea:has(.kx-snapshot) .jupyter-widgets:not(:has(*)) { display: none; }
"""


_LIVE_ONLY = "kernel_explorer dashboard: live while the kernel runs; the snapshot under it is what was saved"

#: the records CSV is offered as a link while it stays under this size (a data URI travels with the
#: saved notebook and is resent after every run); above it, the line says how to write the file
RECORDS_LINK_BYTES = 200_000


class Dashboard:
    """Everything about one explorer, live. `display(dashboard)` or leave it last in a cell."""

    def __init__(self, explorer: Explorer) -> None:
        self.explorer = explorer
        self.handle: RunHandle | None = None
        self.status = widgets.HTML(value="Ready.", layout={"min_height": "1.5em"})
        self.status.add_class("kx-status")
        self.output = widgets.Output(layout={"max_height": "160px", "overflow": "auto"})  # download bars
        self.table = LayerTable(explorer, on_error=self.show_error, output=self.output)
        self.run_button = widgets.Button(description="Run", button_style="success", icon="play")
        self.stop_button = widgets.Button(
            description="Stop", button_style="danger", icon="stop", disabled=True
        )
        self.run_button.add_class("kx-run")
        self.stop_button.add_class("kx-stop")
        # a real measure of progress: layers concluded in this cycle of the run, out of all of them
        self.progress = widgets.IntProgress(
            value=0, min=0, max=len(explorer.layers) or 1, description="layers", layout={"width": "320px"}
        )
        self.progress.add_class("kx-progress")
        self.run_button.on_click(lambda _: self._guarded(self.run))
        self.stop_button.on_click(lambda _: self._guarded(self.stop))
        # the status line hears of a record first (a run's end: "cancelled" at once), the plots
        # and the breakdown panel after it
        self._unsubscribe = explorer.results.subscribe(self._on_record)
        self._unsubscribe_switches = explorer.subscribe_switches(self._on_switch)
        self.plots = LivePlots(explorer.results)
        self.breakdown = BreakdownPanel(explorer, on_error=self.show_error, guard=self._guarded)
        self._cycle = 0
        self._cycle_layers: set[str] = set()  # layers concluded in this cycle (or the shown run)
        self._starting = False
        self.shown_run: str | None = None  # the run the status line, progress and downloads describe
        self._elsewhere: set[str] = set()  # runs started elsewhere and not ended (a cell's compare)
        hardware = widgets.HTML(value=explorer.hardware._repr_html_())
        for figure in (self.plots.latency, self.plots.speedup, self.plots.divergence, self.plots.throughput):
            figure.add_class("kx-plot")
        self.downloads = widgets.HTML(value="")  # CSV of the records and the summary, after each run
        self.downloads.add_class("kx-downloads")
        # empty while the kernel is there; when it restarts or dies, it turns this dashboard's
        # controls off and says so in one line (at the top: the first thing read)
        self.link = LinkWatch()
        self.widget = widgets.VBox(
            [
                self.link,
                widgets.HTML(value=f"<style>{_THEME_CSS}</style>"),
                widgets.Accordion(children=[hardware], titles=("Hardware and accepted build variants",)),
                self.table,
                self.output,
                widgets.HBox([self.run_button, self.stop_button, self.progress]),
                self.status,
                self.downloads,
                widgets.Box([self.plots.latency, self.plots.speedup], layout=_ROW),
                widgets.Box([self.plots.divergence, self.plots.throughput], layout=_ROW),
                self.breakdown.widget,
            ]
        )
        self.widget.add_class("kx-dashboard")

    # -- actions -------------------------------------------------------------------------------

    def run(self) -> None:
        """Start a live run on the worker thread: every layer, as switched now, until Stop."""
        if self.handle is not None and not self.handle.done:
            return
        self.progress.value, self._cycle, self._cycle_layers = 0, 1, set()
        self.progress.max = max(len(self.explorer.layers), 1)
        self.progress.description = "cycle 1"
        self._starting = True  # the run's first records may arrive before run_live returns its handle
        try:
            self.handle = self.explorer.run_live()
        finally:
            self._starting = False
        self.shown_run = self.handle.run_id
        self.run_button.disabled, self.stop_button.disabled = True, False
        self.status.value = (
            f"Running {self.handle.run_id}: each layer until its 95% interval is within +-5% (or 10 s), "
            "then the next; a switch takes effect at the next pair."
        )

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()

    def show_error(self, message: str) -> None:
        self.status.value = f"<span style='{_ERROR_STYLE}'>Error: {html.escape(message)}</span>"

    def _guarded(self, action: Any) -> None:
        try:
            action()
        except Exception as error:  # a callback error would otherwise vanish into the kernel log
            self.show_error(f"{type(error).__name__}: {error}")

    def _on_switch(self) -> None:
        """A switch: the snapshot follows; while a run streams into the plots (the dashboard's, or
        one started elsewhere: a cell's compare, whose candidates take turns by switching), a mark
        on the per-pair plot instead, and the snapshot waits for the run's end (`_ended` redraws
        it): rebuilt at every click, it was a third of the time a click took to be answered on a
        loaded machine."""
        if (self.handle is not None and not self.handle.done) or self._elsewhere:
            import time

            self.plots.mark_switch(time.time())
            return
        self.refresh_snapshot()

    def _on_record(self, record: Record) -> None:
        self._follow_elsewhere(record)
        if self.handle is not None and record.run_id == self.handle.run_id:
            self._on_own_record(record)
        elif not self._starting and (self.handle is None or self.handle.done):
            self._on_other_record(record)

    def _on_own_record(self, record: Record) -> None:
        if isinstance(record.values, RunEvent) and record.values.event != "started":
            self.run_button.disabled, self.stop_button.disabled = False, True
            self._ended(record.run_id, record.values)
            return
        if isinstance(record.values, LayerVerdict) and record.layer is not None:
            # a cycle is every layer once: a layer seen again starts the next (extend adds layers)
            if record.layer in self._cycle_layers:
                self._cycle += 1
                self._cycle_layers = set()
                self.progress.description = f"cycle {self._cycle}"
            self._cycle_layers.add(record.layer)
            self.progress.max = max(len(self.explorer.layers), len(self._cycle_layers), 1)
            self.progress.value = len(self._cycle_layers)
            self.status.value = self._verdict_line(self._named(record), record.values)

    def _on_other_record(self, record: Record) -> None:
        """A run started elsewhere (a cell's `compare`, `%kernels compare`): the plots switch to it,
        so the status line, the progress and the downloads describe it too, not the old run."""
        values = record.values
        if isinstance(values, LayerVerdict) and record.layer is not None:
            if record.run_id != self.shown_run:
                self.shown_run, self._cycle_layers = record.run_id, set()
                self.progress.description = "layers"
            self._cycle_layers.add(record.layer)
            self.progress.max = self.progress.value = len(self._cycle_layers)
            self.status.value = self._verdict_line(self._named(record), record.values)
        elif isinstance(values, RunEvent) and values.event != "started" and record.run_id == self.shown_run:
            self._ended(record.run_id, values)

    def _follow_elsewhere(self, record: Record) -> None:
        """Keep `_elsewhere`, the runs started outside the dashboard and still going, whichever run
        the plots show: a run's end clears it also while the dashboard's own Run goes (whose
        records the status line follows). When the last one ends and no Run of the dashboard goes,
        the snapshot the switches during it waited for is redrawn, unless `_ended` does."""
        if not isinstance(record.values, RunEvent):
            return
        own = self._starting or (self.handle is not None and record.run_id == self.handle.run_id)
        if record.values.event == "started":
            if not own:
                self._elsewhere.add(record.run_id)
        elif record.run_id in self._elsewhere:
            self._elsewhere.discard(record.run_id)
            idle = self.handle is None or self.handle.done
            if not self._elsewhere and idle and record.run_id != self.shown_run:
                self.refresh_snapshot()

    def _ended(self, run_id: str, end: RunEvent) -> None:
        if end.event == "failed":
            self.show_error(end.detail or "the run failed")
        else:
            # counted in the log's columns (not the plots': drawn later), no record made per pair
            pairs = len(self.explorer.results.columns("layer_latency", run_id)["seq"])
            self.status.value = f"Run {run_id} {end.event}; {pairs} pairs timed."
        self.table.refresh()
        self.refresh_snapshot()
        self.refresh_downloads()

    def _named(self, record: Record) -> str:
        """A verdict's layer and candidate as the plots name its point ("SiLU · peer plain-silu"), so
        the status line and the median plot read as one number of one candidate."""
        plots = getattr(self, "plots", None)  # a record may come while the dashboard is being made
        return str(record.layer) if plots is None else plots.entry_name(record)

    @staticmethod
    def _verdict_line(layer: str, v: LayerVerdict) -> str:
        line = html.escape(
            f"{layer}: {v.summary} ({v.pairs} pairs over {v.instances} instances, "
            f"noise floor {v.noise_floor:.0%}); {v.accuracy}"
        )
        warning = noise_warning(v.noise_floor)
        if warning:
            line += f"<br><span style='{_WARN_STYLE}'>{html.escape(warning)}</span>"
        return line

    def close(self) -> None:
        self.stop()
        self._unsubscribe()
        self._unsubscribe_switches()
        self.table.close()
        self.plots.close()
        self.breakdown.close()
        self.link.close()
        self.widget.close()

    # -- display -------------------------------------------------------------------------------

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The live widget, and for viewers without widgets one short line pointing at the snapshot.

        Not the dashboard as static HTML: JupyterLab never shows that fallback but saves it (plotly.js
        inlined: 5 MB per notebook), and nbconvert showed it frozen at explore time above the
        snapshot that is kept up to date. `static_html()` still gives it on request.
        """
        bundle = self.widget._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = _LIVE_ONLY
        bundle["text/html"] = f"<div class='kx-live-only'>{html.escape(_LIVE_ONLY)}</div>"
        return bundle

    def _ipython_display_(self) -> None:
        """In a notebook: the live widget, and under it a snapshot output kept up to date.

        A saved notebook reopened without its kernel cannot show the widget (JupyterLab reads
        "Error displaying widget: model not found" and does not fall back to other formats), so a
        second, plain HTML output carries the switch state and the results. While the widget is
        live a style rule hides the snapshot; in a reopened notebook it hides the widget's error
        line instead, and the snapshot shows.
        """
        from IPython.display import HTML, display

        display(self._repr_mimebundle_(), raw=True)
        self._snapshot = display(HTML(self.snapshot_html()), display_id=True)

    def refresh_snapshot(self) -> None:
        """Redraw the snapshot output (after a run ends, a switch, ...); a no-op before display."""
        handle = getattr(self, "_snapshot", None)
        if handle is not None:
            from IPython.display import HTML

            handle.update(HTML(self.snapshot_html()))

    def refresh_downloads(self) -> None:
        """Links that download every record and the per-run summary as CSV (data URIs: no server)."""
        import base64

        results = self.explorer.results
        if not len(results):
            self.downloads.value = ""
            return

        def link(text: str, name: str) -> str:
            data = base64.b64encode(text.encode()).decode()
            return f"<a download='{name}' href='data:text/csv;base64,{data}'>{name}</a>"

        summary = link(results.layer_summary().to_csv(index=False), "kernel_explorer_summary.csv")
        parts = [f"Download: {summary} (per run and layer)"]
        run = self.shown_run
        if run is not None:  # the records of the run shown only, not every record ever logged
            frame = results.to_pandas()
            frame = frame[frame["run_id"] == run] if "run_id" in frame else frame
            text = frame.to_csv(index=False)
            name = f"kernel_explorer_{run}.csv"
            if len(text) <= RECORDS_LINK_BYTES:
                parts.append(f"{link(text, name)} ({len(frame)} records of run {run})")
            else:
                parts.append(
                    f"run {run}: {len(frame)} records, too many for a link; "
                    "explorer.results.to_pandas().to_csv(path) writes them all"
                )
        self.downloads.value = " · ".join(parts)

    def snapshot_html(self) -> str:
        """The switch state and the last verdicts as one plain table: what a reopened notebook shows."""
        cell = "style='text-align:left;padding:2px 10px 2px 0'"
        rows = "".join(
            f"<tr><td {cell}><b>{html.escape(row.group.name)}</b></td>"
            f"<td {cell}>{sum(now.is_kernel for now in row.running)}/{len(row.group)}</td>"
            f"<td {cell}>{html.escape(row.running_summary)}</td>"
            f"<td {cell}>{html.escape(row.measured_summary)}</td>"
            f"<td {cell}>{html.escape(row.measured.accuracy if row.measured else '')}</td></tr>"
            for row in self.explorer.inventory().rows
        )
        head = "".join(
            f"<th {cell}>{name}</th>"
            for name in ("layer", "on a kernel", "runs now", "measured speedup [95% interval]", "accuracy")
        )
        return (
            f"<style>{_SNAPSHOT_CSS}</style><div class='kx-snapshot'>"
            "<p><b>kernel_explorer snapshot</b>: the switches and the last measurements when the notebook "
            "was saved (the live dashboard needs a running kernel: run the cell again)</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>"
        )

    def static_html(self) -> str:
        """The dashboard without widgets: hardware, the inventory table, static plots of the results."""
        parts = [self.explorer.inventory()._repr_html_()]
        if len(self.explorer.results):
            parts.append(static_html(self.explorer.results))
        return "\n".join(parts)
