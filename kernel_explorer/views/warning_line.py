"""The toolkit's warnings in a notebook: one line in the theme's warning colour.

Python's own display of a warning in a notebook is stderr on red: a temp path, the category, and
under it the cell's source line, `get_ipython().run_line_magic(...)` for a `%kernels` line. A
`NoisyMachineWarning` read like a traceback. In a kernel with a front end the toolkit's warnings
(`errors.KernelExplorerWarning` and its kinds) show as one styled line instead, with the category
on hover; every other warning, and all of them outside a notebook (a script, the command line, a
terminal IPython), keep Python's display. The filters still decide what shows: this changes how a
warning looks, not whether it does.
"""

from __future__ import annotations

import html
import threading
import warnings
from typing import Any

from kernel_explorer.errors import KernelExplorerWarning

# the theme's warning colours, with fallbacks for a page without JupyterLab's variables
_STYLE = (
    "color: var(--jp-warn-color0, #b34700); border-left: 3px solid var(--jp-warn-color1, #f57c00); "
    "padding: 2px 10px; margin: 2px 0; font-size: var(--jp-content-font-size1, 13px)"
)


def line_bundle(message: Warning | str, category: type[Warning]) -> dict[str, str]:
    """The display bundle of one warning: a styled HTML line, and plain text for other front ends."""
    text = str(message)
    name = category.__name__
    shown = (
        f"<div class='kx-warning-line' style='{_STYLE}' title='{html.escape(name)} "
        f"(warnings.filterwarnings can silence it)'>⚠ {html.escape(text)}</div>"
    )
    return {"text/plain": f"{name}: {text}", "text/html": shown}


def _in_a_notebook(shell: Any) -> bool:
    """A kernel talks to a front end (JupyterLab, Notebook, VS Code); a terminal IPython has none."""
    return getattr(shell, "kernel", None) is not None


def install(shell: Any) -> None:
    """Show the toolkit's warnings as lines in this kernel (idempotent; `uninstall` gives the old
    display back). A warning raised on another thread (a Run's) keeps Python's display: a display
    from there lands in whichever cell runs then."""
    if not _in_a_notebook(shell) or getattr(warnings.showwarning, "kx_previous", None) is not None:
        return
    previous = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        ours = isinstance(category, type) and issubclass(category, KernelExplorerWarning)
        if ours and file is None and threading.current_thread() is threading.main_thread():
            from IPython.display import display

            display(line_bundle(message, category), raw=True)
            return
        previous(message, category, filename, lineno, file, line)

    show.kx_previous = previous  # the display it replaced, for uninstall (and not to wrap twice)
    warnings.showwarning = show


def uninstall() -> None:
    """Python's display of warnings again (`%unload_ext kernel_explorer`)."""
    previous = getattr(warnings.showwarning, "kx_previous", None)
    if previous is not None:
        warnings.showwarning = previous
