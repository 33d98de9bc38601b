"""Python side of the notebook views: panels, the layer table widget, live plots, the dashboard.

Everything here talks to an `Explorer` and renders `results`; nothing below the explorer imports it.
"""

from kernel_explorer.ui.dashboard import Dashboard

__all__ = ["Dashboard"]
