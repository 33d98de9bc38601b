"""The views: everything a person reads or clicks, and nothing else.

Notebook widgets (dashboard, layer table, live plots, breakdown panel), the plots' shared style,
the HTML report, the `%kernels` magic and the `kernel-explorer` command. They talk to an `Explorer`
and render `results`, and import only the face (`kernel_explorer.explorer`, `.records`,
`.machine`, `.loading`, `.errors`); only the package's own door (`%load_ext`, `python -m`) imports
this package.

May import: errors, explorer, loading, machine, records

`Dashboard` is resolved on first use, so the command line and the magic do not pay for ipywidgets
and plotly until a widget is shown.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Dashboard"]


def __getattr__(name: str) -> Any:
    if name == "Dashboard":
        from kernel_explorer.views.dashboard import Dashboard

        return Dashboard
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
