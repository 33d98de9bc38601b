"""`%kernels`: load/unload/reload, dispatch to the Explorer, one-line errors without tracebacks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def shell() -> Iterator[Any]:
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "kernel_explorer")
    ip.run_cell("from kernel_explorer.models import tiny_llama\nmodel = tiny_llama()\nnumber = 3")
    yield ip
    ip.run_line_magic("unload_ext", "kernel_explorer")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("frobnicate", "invalid choice: 'frobnicate'"),
        ("explore nothing_here", "'nothing_here' is not defined in this notebook"),
        ("explore number", "'number' is a int, not a torch.nn.Module"),
        ("explore model --mode fast", "invalid choice: 'fast'"),
        ("explore model --bogus", "unrecognized arguments: --bogus"),
        ("compare", "the following arguments are required: layer"),
        ('on "unclosed', "cannot parse"),
    ],
)
def test_bad_input_is_one_line_with_usage(
    shell: Any, capsys: pytest.CaptureFixture, line: str, message: str
) -> None:
    assert shell.run_line_magic("kernels", line) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Usage: %kernels hardware" in err
    assert "Traceback" not in err


def test_switching_needs_an_explored_model_first(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict
) -> None:
    shell._kernel_explorer_magic.explorer = None
    shell.run_line_magic("kernels", "on RMSNorm")
    assert "run %kernels explore MODEL first" in capsys.readouterr().err


def test_explore_then_switch_compare_and_report(
    shell: Any, capsys: pytest.CaptureFixture, hub: dict, tmp_path
) -> None:
    dashboard = shell.run_line_magic("kernels", "explore model")
    explorer = dashboard.explorer
    assert explorer.model is shell.user_ns["model"]
    inventory = shell.run_line_magic("kernels", "on RMSNorm --instances model.norm")
    assert inventory.row("RMSNorm").running_summary.endswith("x1")
    shell.run_line_magic("kernels", "on Nope")
    assert "has no kernel layer 'Nope'" in capsys.readouterr().err
    summary = shell.run_line_magic("kernels", "compare SiLU --pairs 2")
    assert list(summary.layer) == ["SiLU"] and summary.pairs.iloc[0] == 4
    shell.run_line_magic("kernels", f"report {tmp_path / 'r.html'}")
    assert (tmp_path / "r.html").stat().st_size > 1_000_000
    shell.run_line_magic("kernels", "off RMSNorm")
    shell.run_line_magic("kernels", "reset")
    assert not any(now.is_kernel for now in explorer.running())
    from kernel_explorer.hardware import HardwareSnapshot

    assert isinstance(shell.run_line_magic("kernels", "hardware"), HardwareSnapshot)
    dashboard.close()


def test_unload_puts_the_model_back_and_reload_registers_again(shell: Any, hub: dict) -> None:
    dashboard = shell.run_line_magic("kernels", "explore model")
    shell.run_line_magic("kernels", "on SiLU")
    shell.run_line_magic("unload_ext", "kernel_explorer")
    assert "kernels" not in shell.magics_manager.magics["line"]
    assert not any(now.is_kernel for now in dashboard.explorer.running())
    shell.run_line_magic("load_ext", "kernel_explorer")
    shell.run_line_magic("reload_ext", "kernel_explorer")
    assert "kernels" in shell.magics_manager.magics["line"]
    dashboard.close()
