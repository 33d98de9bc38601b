"""The toolkit's warnings in a notebook: one styled line, not Python's stderr on red; elsewhere
Python's own display. Checked in a real ipykernel (driven as JupyterLab drives it) and in a
terminal-style IPython shell."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from kernel_explorer.errors import KernelExplorerWarning, NoisyMachineWarning
from kernel_explorer.views import warning_line

CELL = """%load_ext kernel_explorer
import warnings
from kernel_explorer.errors import NoisyMachineWarning
warnings.warn("PyTorch against itself moves 31% <here>", NoisyMachineWarning)
warnings.warn("not ours", UserWarning)
"""


@pytest.fixture
def client() -> Iterator[Any]:
    from jupyter_client.manager import start_new_kernel

    manager, found = start_new_kernel(kernel_name="python3")
    yield found
    found.stop_channels()
    manager.shutdown_kernel(now=True)


def _outputs(client: Any, code: str) -> list[tuple[str, dict[str, Any]]]:
    msg_id = client.execute(code)
    found = []
    while True:
        message = client.get_iopub_msg(timeout=120)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            return found
        found.append((message["msg_type"], message["content"]))


def test_in_a_notebook_ours_is_one_styled_line_and_others_stay_python_warnings(client: Any) -> None:
    outputs = _outputs(client, CELL)
    lines = [c["data"] for kind, c in outputs if kind == "display_data"]
    stderr = "".join(c["text"] for kind, c in outputs if kind == "stream" and c["name"] == "stderr")
    assert len(lines) == 1, outputs
    shown = lines[0]["text/html"]
    assert "kx-warning-line" in shown and "var(--jp-warn-color0" in shown
    assert "31% &lt;here&gt;" in shown and "\n" not in shown  # escaped, one line
    assert "/tmp/" not in shown and "warnings.warn" not in shown  # no path, no source line under it
    assert lines[0]["text/plain"] == "NoisyMachineWarning: PyTorch against itself moves 31% <here>"
    assert "NoisyMachineWarning" not in stderr  # not also on red
    assert "UserWarning: not ours" in stderr  # another library's warning keeps Python's display
    # the filters still decide: an ignored warning of ours shows nowhere
    quiet = _outputs(
        client,
        "warnings.filterwarnings('ignore', category=NoisyMachineWarning)\n"
        "warnings.warn('hidden', NoisyMachineWarning)",
    )
    assert not [c for kind, c in quiet if kind in ("display_data", "stream")], quiet
    # %unload_ext gives Python's display back
    after = _outputs(
        client,
        "%unload_ext kernel_explorer\nwarnings.filters.pop(0)  # the 'ignore' above\n"
        "warnings.warn('plain again', NoisyMachineWarning)",
    )
    assert not [c for kind, c in after if kind == "display_data"], after
    assert "plain again" in "".join(c.get("text", "") for kind, c in after if kind == "stream")


def test_outside_a_notebook_warnings_stay_python_warnings() -> None:
    """A terminal IPython (no kernel, no front end) keeps Python's display."""
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    before = warnings.showwarning
    warning_line.install(shell)
    try:
        assert warnings.showwarning is before
    finally:
        warning_line.uninstall()


def test_every_warning_of_the_toolkit_is_one_kind() -> None:
    assert issubclass(NoisyMachineWarning, KernelExplorerWarning)
    assert issubclass(NoisyMachineWarning, UserWarning)  # pytest.warns(UserWarning) still catches it
    bundle = warning_line.line_bundle("a\nb", NoisyMachineWarning)
    assert bundle["text/plain"] == "NoisyMachineWarning: a\nb"
