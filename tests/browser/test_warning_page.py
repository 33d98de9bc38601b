"""The toolkit's warning in a real JupyterLab: one line in the theme's warning colour, not stderr on
red with a temp path and `get_ipython().run_line_magic(...)` under it (issue 49, item 4). Screenshots
of both themes land in build/screenshots/.

    pytest tests/browser/test_warning_page.py -k jupyterlab
"""

from __future__ import annotations

import pytest
from conftest import Lab, screenshot
from playwright.sync_api import Page, expect
from test_dashboard import _dismiss_news, _run_cell
from test_glance import _CONTRAST

pytestmark = pytest.mark.slow  # a real JupyterLab and browser

CELLS = [
    "%load_ext kernel_explorer",
    "import warnings\nfrom kernel_explorer import NoisyMachineWarning\n"
    "warnings.warn('This machine is noisy: PyTorch against itself moves 31%; only differences larger "
    "than that are called faster or slower (close other work, or measure longer).', NoisyMachineWarning)\n"
    "warnings.warn('another library says this', UserWarning)",
]


def test_a_noisy_machine_warning_is_one_styled_line(lab: Lab, page: Page) -> None:
    if lab.app != "jupyterlab":
        pytest.skip("Notebook 7 renders outputs alike: JupyterLab is enough")
    page.goto(lab.notebook("warning.ipynb", CELLS))
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=90_000)
    _dismiss_news(page)
    _run_cell(page, 0)
    _run_cell(page, 1)
    output = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea")
    line = output.locator(".kx-warning-line")
    expect(line).to_have_count(1, timeout=60_000)
    expect(line).to_contain_text("This machine is noisy")
    assert line.bounding_box()["height"] < 60  # one line at this width (two at most when it wraps)
    stderr = output.locator("[data-mime-type='application/vnd.jupyter.stderr']")
    expect(stderr).to_have_count(1)  # the other library's warning only, on red as Python shows it
    assert "another library" in stderr.inner_text() and "Noisy" not in stderr.inner_text()
    assert "run_line_magic" not in output.inner_text() and "/tmp/" not in line.inner_text()
    assert page.evaluate(_CONTRAST, ".kx-warning-line") >= 3.0
    screenshot(page, "warning-line-light")

    page.keyboard.press("Control+Shift+C")
    page.keyboard.type("JupyterLab Dark")
    page.keyboard.press("Enter")
    expect(page.locator("body[data-jp-theme-light='false']")).to_have_count(1, timeout=30_000)
    page.wait_for_timeout(1000)
    assert page.evaluate(_CONTRAST, ".kx-warning-line") >= 3.0
    screenshot(page, "warning-line-dark")
