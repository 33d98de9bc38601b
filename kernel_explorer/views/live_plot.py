"""A live plot that sends what is new, not the whole figure: an anywidget that owns a plotly.js plot.

A plotly `FigureWidget` sends a trace's whole `x` and `y` whenever either changes, so a live run
that appends one point per pair resent every point of every trace at each redraw: the kernel's and
the browser's work grew with the run (a Stop click waited minutes behind it). Here Python keeps the
figure as plain dicts and queues plotly.js operations (`extend` with the points added since the last
redraw, `restyle` and `relayout` of a few properties, `react` for a whole figure); `send_pending()`
sends them as one message, and `widgets/live_plot.js` applies them in order. A view that opens later
(a redisplay, a second tab) asks for the figure and gets it whole, once.

The first plot of a page carries plotly.js (its module is plotly's own `plotly.min.js`, which sets
`window.Plotly`); the others wait for it (`live_plot.js`), so a dashboard loads plotly.js once.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from importlib import resources
from typing import Any

import anywidget
import traitlets

#: the plotly.js configuration of every live plot: no toolbar (it covered the titles; drag still
#: zooms and a double click resets), no logo
CONFIG: dict[str, Any] = {"displayModeBar": False, "displaylogo": False, "responsive": False}


class Props(dict):
    """A plotly-style dict read by attribute as well (`trace.x`, `layout.yaxis.ticktext`): what a
    caller of a FigureWidget reads, kept as plain data that serializes as it is."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def props(value: Any) -> Any:
    """`value` with every dict in it a `Props` (lists and tuples become lists)."""
    if isinstance(value, dict):
        return Props({key: props(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return [props(item) for item in value]
    return value


def _set_path(target: dict[str, Any], dotted: str, value: Any) -> None:
    """plotly.js's relayout/restyle key: "yaxis.tickvals" sets target["yaxis"]["tickvals"]."""
    *parents, last = dotted.split(".")
    for key in parents:
        target = target.setdefault(key, Props())
    target[last] = props(value)


@functools.cache
def _asset(name: str) -> str:
    return resources.files("kernel_explorer.widgets").joinpath(name).read_text()


@functools.cache
def _plotly_js() -> str:
    """plotly's own plotly.min.js (it ends with `window.Plotly = Plotly`), as module code."""
    import plotly

    return resources.files(plotly).joinpath("package_data", "plotly.min.js").read_text()


class LivePlot(anywidget.AnyWidget):
    """One figure drawn in the browser from deltas. Waits for plotly.js from a `carrier()` plot."""

    _esm = _asset("live_plot.js")
    #: the figure as it was made (data, layout, config): what a view draws before it asks for the rest
    spec = traitlets.Dict({}).tag(sync=True)

    def __init__(self, data: list[dict[str, Any]], layout: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data: list[Props] = props(list(data))
        self.plot_layout: Props = props(layout)
        self._ops: list[dict[str, Any]] = []
        self._lock = threading.RLock()  # the measurement thread draws, the kernel's thread may answer a view
        self.bytes_sent = 0  # what the deltas and whole figures sent so far weighed, as JSON
        self.spec = self.figure()
        self.on_msg(self._on_message)

    # -- the figure --------------------------------------------------------------------------------

    def figure(self) -> dict[str, Any]:
        """The whole figure as Python holds it (a deep copy: plain data, safe to send or keep)."""
        with self._lock:
            return {
                "data": copy.deepcopy(self.data),
                "layout": copy.deepcopy(self.plot_layout),
                "config": CONFIG,
            }

    def add_trace(self, trace: dict[str, Any]) -> int:
        """Add a trace; returns its index."""
        with self._lock:
            self.data.append(props(trace))
            self._ops.append({"op": "add", "traces": [copy.deepcopy(trace)]})
            return len(self.data) - 1

    def extend(self, index: int, x: list[Any], y: list[Any], budget: int) -> None:
        """Append points to trace `index`; the browser keeps at most `budget` of them."""
        if not x:
            return
        with self._lock:
            trace = self.data[index]
            trace["x"] = [*trace.get("x", []), *x][-budget:]
            trace["y"] = [*trace.get("y", []), *y][-budget:]
            for op in reversed(self._ops):  # consecutive extends of one trace travel as one
                if op["op"] == "extend" and op["traces"] == [index]:
                    op["x"][0].extend(x)
                    op["y"][0].extend(y)
                    return
                if op["op"] != "extend":
                    break
            self._ops.append(
                {"op": "extend", "traces": [index], "x": [list(x)], "y": [list(y)], "max": budget}
            )

    def restyle(self, index: int, **update: Any) -> None:
        """Set properties of trace `index` ("marker.color" style keys; arrays are replaced whole)."""
        with self._lock:
            for key, value in update.items():
                _set_path(self.data[index], key, value)
            # plotly.js restyle reads an array value as one value per trace: wrap each in a list
            wrapped = {key: [value] for key, value in update.items()}
            self._ops.append({"op": "restyle", "traces": [index], "update": wrapped})

    def relayout(self, **update: Any) -> None:
        """Set layout properties ("yaxis.tickvals" style keys; shapes/annotations replaced whole)."""
        with self._lock:
            for key, value in update.items():
                _set_path(self.plot_layout, key, value)
            self._ops.append({"op": "relayout", "update": dict(update)})

    def react(self, data: list[dict[str, Any]], layout: dict[str, Any]) -> None:
        """Replace the whole figure (a new run): sent once, whole."""
        with self._lock:
            self.data, self.plot_layout = props(list(data)), props(layout)
            self._ops = [{"op": "react", **self.figure()}]

    # -- sending -----------------------------------------------------------------------------------

    def send_pending(self) -> int:
        """Send the queued operations as one message; returns its size in bytes (0: nothing queued)."""
        with self._lock:
            ops, self._ops = self._ops, []
        if not ops:
            return 0
        message = {"type": "ops", "ops": ops}
        size = len(json.dumps(message, separators=(",", ":")))
        self.bytes_sent += size
        self.send(message)
        return size

    def _on_message(self, widget: Any, content: dict[str, Any], buffers: Any) -> None:
        if content.get("type") == "view":  # a view drew `spec`: it gets the figure as it is now
            with self._lock:
                whole = {"op": "react", **self.figure()}
                self.bytes_sent += len(json.dumps(whole, separators=(",", ":")))
            self.send({"type": "ops", "ops": [whole]})


@functools.cache
def _carrier_class() -> type[LivePlot]:
    esm = _plotly_js() + "\n;\n" + _asset("live_plot.js")
    return type("CarrierPlot", (LivePlot,), {"_esm": esm, "__module__": __name__})


def carrier(data: list[dict[str, Any]], layout: dict[str, Any]) -> LivePlot:
    """A live plot that also brings plotly.js to the page (one per page: the dashboard's first)."""
    return _carrier_class()(data, layout)
