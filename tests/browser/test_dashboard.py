"""The dashboard in a real JupyterLab in a real browser: load, explore, switch, run, switch mid-run.

pytest tests/browser -k dashboard    # screenshots land in build/screenshots/
"""

from __future__ import annotations

import pytest
from conftest import Lab, screenshot
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

pytestmark = pytest.mark.slow  # a real JupyterLab and browser: ~1 min; `make test` runs it

CELLS = [
    "%load_ext kernel_explorer",
    "from kernel_explorer.models import tiny_llama\nmodel = tiny_llama()",
    "%kernels explore model",
]


def _run_all(page: Page) -> None:
    trust = page.locator(".jp-Dialog").get_by_role("button", name="Trust")  # Notebook 7 asks: we wrote it
    for attempt in range(3):
        if trust.count():
            trust.click()
        try:
            page.locator(".jp-Notebook .jp-Cell").first.click(timeout=10_000)
            break
        except PlaywrightTimeout:
            if attempt == 2:
                raise
    for _ in CELLS:
        page.keyboard.press("Shift+Enter")


def _latency_points(page: Page) -> int:
    plot = page.locator(".kx-dashboard .js-plotly-plot").first
    return plot.locator(".scatterlayer .point").count()


def test_switch_run_and_switch_mid_run(lab: Lab, page: Page) -> None:
    page.goto(lab.notebook("dashboard.ipynb", CELLS))
    if lab.app == "jupyterlab":
        expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=90_000)
    else:  # Notebook 7 has no status bar: wait for the notebook, accept a kernel dialog if one comes
        expect(page.locator(".jp-Notebook")).to_be_visible(timeout=90_000)
        page.wait_for_timeout(5000)
    news = page.get_by_role("button", name="No")  # JupyterLab's news question, over the screenshots
    if news.count():
        news.first.click()
    _run_all(page)
    table = page.locator(".kx-layer-table")
    expect(table).to_be_visible(timeout=90_000)
    runs = page.locator('.kx-runs[data-layer="RMSNorm"]')
    expect(runs).to_have_text("PyTorch x5")

    page.locator('input.kx-layer-switch[data-layer="RMSNorm"]').click()
    expect(runs).to_have_text("bundled/rmsnorm RMSNorm x5", timeout=30_000)  # a name, not the op id

    page.locator("button.kx-run").click()
    page.wait_for_function(
        "() => document.querySelectorAll('.kx-dashboard .js-plotly-plot')[0]"
        "?.querySelectorAll('.scatterlayer .point').length >= 6",
        timeout=60_000,
    )
    page.wait_for_function(
        "() => document.querySelectorAll('.kx-dashboard .js-plotly-plot')[1]"
        "?.querySelectorAll('.barlayer .point').length >= 1",
        timeout=60_000,
    )
    screenshot(page, f"{lab.app}-dashboard-running")

    page.locator('input.kx-layer-switch[data-layer="RMSNorm"]').click()  # off, mid-run
    expect(runs).to_have_text("PyTorch x5", timeout=30_000)
    points = _latency_points(page)
    page.wait_for_function(
        f"() => document.querySelectorAll('.kx-dashboard .js-plotly-plot')[0]"
        f"?.querySelectorAll('.scatterlayer .point').length >= {points + 6}",
        timeout=60_000,
    )
    page.locator("button.kx-stop").click()
    expect(page.locator(".kx-status")).to_contain_text("cancelled", timeout=30_000)
    screenshot(page, f"{lab.app}-dashboard-after-run")
    assert _latency_points(page) >= points + 6
