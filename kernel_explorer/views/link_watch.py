"""The dashboard's link to its kernel: an anywidget that turns the old dashboard off when it is gone.

A dashboard lives in one kernel. Restarted during a Run, the old one kept a red, enabled Stop (a
click went nowhere), "cycle 5", its verdict line and plots, and a switch clicked then read
"switching…" forever. Its front end (`widgets/link_watch.js`) hears the kernel restart, die or drop
the page, and a restart it could not hear (another tab, the REST API) at the first click, through a
ping this widget answers; then every control of its dashboard is off and one line says what
happened and what to do.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import anywidget
import traitlets

#: what the line tells a user to do for a live dashboard again (a restarted kernel has lost the
#: notebook's variables, so the cells before the dashboard's run again too)
AGAIN = (
    "Run the notebook's cells again (%load_ext kernel_explorer, your model, %kernels explore) for a live one."
)


@functools.cache
def _asset(name: str) -> str:
    return resources.files("kernel_explorer.widgets").joinpath(name).read_text()


class LinkWatch(anywidget.AnyWidget):
    """Empty while the kernel is there; after, the line. Answers the page's pings with a pong."""

    _esm = _asset("link_watch.js")
    _css = _asset("link_watch.css")
    #: the line's last sentence: what to do
    again = traitlets.Unicode(AGAIN).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pings = 0  # pings answered: one per click on the dashboard's controls
        self.on_msg(self._on_message)

    def _on_message(self, widget: Any, content: dict[str, Any], buffers: Any) -> None:
        """A ping comes back at once, from the kernel's own thread (a Run's thread is not needed):
        the page reads a kernel that took the ping without this pong as one that lost the widget."""
        if content.get("type") == "ping":
            self.pings += 1
            self.send({"type": "pong", "n": content.get("n")})
