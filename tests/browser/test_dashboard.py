"""The dashboard in a real JupyterLab (and Notebook 7) in a real browser.

What a new user relies on: the table follows switches made anywhere, a switch from the table is
what runs, the live run measures what `compare` measures, every plot draws with a title, nothing
overflows at 1280 px with the file browser open, both themes read, a dashboard shown again after a
run draws the same plots, and a saved notebook reopened without its kernel still shows the results.

    pytest tests/browser -k dashboard    # screenshots land in build/screenshots/
"""

from __future__ import annotations

import re

import pytest
from conftest import Lab, screenshot
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

pytestmark = pytest.mark.slow  # a real JupyterLab and browser: a few minutes; `make test` runs it

CELLS = [
    "%load_ext kernel_explorer",
    "from kernel_explorer.loading import tiny_llama\nmodel = tiny_llama()",
    "%kernels explore model",
    "import kernel_explorer as kx\nexplorer = kx.Explorer.of(model)\nexplorer.on('SiLU');",
    "print('RMSNORM_ON', sum(now.is_kernel for now in explorer.running('RMSNorm')))",
    "handle = explorer.compare('RMSNorm')\n"
    "v = explorer.results.records('layer_verdict', handle.run_id)[-1].values\n"
    "print('COMPARE', v.speedup_low, v.speedup_high, v.noise_floor)",
    "live = [r.values for r in explorer.results.records('layer_verdict') if r.layer == 'RMSNorm'][-1]\n"
    "print('LIVE', live.speedup, live.speedup_low, live.speedup_high)",
    "import torch\nexplorer.extend('Linear', torch.nn.Linear, 'model.layers.*.mlp.*');",
    "display(Out[3])  # the explore cell's dashboard, shown a second time",
]


def _open(lab: Lab, page: Page, name: str) -> None:
    page.goto(lab.notebook(name, CELLS))
    if lab.app == "jupyterlab":
        expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=90_000)
    else:  # Notebook 7 has no status bar: wait for the notebook, accept a kernel dialog if one comes
        expect(page.locator(".jp-Notebook")).to_be_visible(timeout=90_000)
        page.wait_for_timeout(5000)
    for question in ("No", "Trust"):  # JupyterLab's news question; Notebook 7's trust question
        button = page.locator(".jp-Dialog, .jp-Notification-Toast").get_by_role("button", name=question)
        if button.count():
            button.first.click()


def _run_cell(page: Page, index: int) -> None:
    """Select cell `index` by its editor (clicks in outputs move the active cell) and run it."""
    for attempt in range(3):
        try:
            page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-InputArea-editor").click(
                timeout=10_000
            )
            break
        except PlaywrightTimeout:
            if attempt == 2:
                raise
    page.keyboard.press("Shift+Enter")


def _output(page: Page, index: int, marker: str) -> list[float]:
    """The numbers a cell printed after `marker`, once it has printed them."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea-output")
    printed = cell.filter(has_text=re.compile(f"{marker} "))  # case-sensitive: not a warning's "compare"
    expect(printed).to_have_count(1, timeout=120_000)
    text = printed.inner_text()
    return [float(x) for x in text.split(marker, 1)[1].split()]


def _dismiss_news(page: Page) -> None:
    """JupyterLab's "get notified about news?" toast sits over the screenshots: answer it."""
    button = page.locator(".jp-Notification-Toast, .Toastify").get_by_role("button", name="No")
    if button.count():
        button.first.click()


def _plots_drawn(page: Page) -> list[tuple[str, int]]:
    """(title, traces) of each plot of the dashboard."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.kx-dashboard .js-plotly-plot')]
            .filter(p => !p.closest('.kx-breakdown')).map(p => [
            p.querySelector('.gtitle')?.textContent || '',
            p.querySelectorAll('.scatterlayer .point, .barlayer .point').length])"""
    )


def test_dashboard_in_sync_measuring_like_compare_readable_and_saved(lab: Lab, page: Page) -> None:
    _open(lab, page, "dashboard.ipynb")
    for index in range(3):
        _run_cell(page, index)
    table = page.locator(".kx-layer-table")
    expect(table).to_be_visible(timeout=90_000)
    rmsnorm = page.locator('.kx-runs[data-layer="RMSNorm"]')
    expect(rmsnorm).to_have_text("PyTorch x5")

    _run_cell(page, 3)  # explorer.on("SiLU") in Python: the table follows without a click
    expect(page.locator('.kx-runs[data-layer="SiLU"]')).to_have_text(
        re.compile(r"^bundled/activation \w+ x2$"), timeout=30_000
    )

    page.locator('input.kx-layer-switch[data-layer="RMSNorm"]').click()  # the table switches...
    expect(rmsnorm).to_have_text(re.compile(r"^bundled/rmsnorm RMSNorm x5$"), timeout=30_000)
    _run_cell(page, 4)
    assert _output(page, 4, "RMSNORM_ON") == [5.0]  # ... and that is what runs

    _run_cell(page, 5)
    low, high, floor = _output(page, 5, "COMPARE")

    page.locator("button.kx-run").click()
    expect(page.locator(".kx-status")).to_contain_text("Running", timeout=5_000)  # answers at once
    verdict = re.compile(r"RMSNorm · bundled rmsnorm: \d")  # a verdict came, named as its plot point
    expect(page.locator(".kx-status")).to_contain_text(verdict, timeout=120_000)
    page.locator("button.kx-stop").click()
    expect(page.locator(".kx-status")).to_contain_text("cancelled", timeout=60_000)
    _run_cell(page, 6)
    median, *_ = _output(page, 6, "LIVE")
    # the same measurement: the live median lies in compare's interval, widened by the larger of its
    # A/A floor and the 5% precision both stop at (minutes apart, this host drifts more than one
    # run's interval: bench/engine_check.py shows separate runs disagreeing beyond their intervals)
    margin = max(floor, 0.05)
    assert low / (1 + margin) <= median <= high * (1 + margin), (median, low, high, floor)

    page.wait_for_timeout(1000)  # the plots draw in batches every 0.3 s
    _dismiss_news(page)
    page.locator(".kx-dashboard").first.scroll_into_view_if_needed()
    screenshot(page, f"{lab.app}-dashboard-light")
    drawn = _plots_drawn(page)
    assert len(drawn) == 4 and all(title and traces for title, traces in drawn), drawn

    page.locator("button.kx-profile").click()  # where the time goes: one stacked bar per phase
    expect(page.locator(".kx-breakdown-line")).to_contain_text("Kernel layers take", timeout=120_000)
    breakdown = page.locator(".kx-breakdown")
    expect(breakdown.locator(".barlayer .trace").first).to_be_visible(timeout=10_000)
    legend = breakdown.locator(".legendtext").all_text_contents()
    assert "Linear (matmul)" in legend and "RMSNorm (kernel layer)" in legend, legend
    breakdown.scroll_into_view_if_needed()
    screenshot(page, f"{lab.app}-breakdown")

    page.locator('input.kx-layer-switch[data-layer="attention"]').click()  # model-wide, bundled CPU kernel
    expect(page.locator('.kx-runs[data-layer="attention"]')).to_have_text(
        re.compile(r"^bundled/flash_attn"), timeout=30_000
    )
    _run_cell(page, 7)  # extend: a row for Linear layers the model does not mark
    switch = 'input.kx-layer-switch[data-layer="Linear"]'
    linear = page.locator(".kx-layer-table tr", has=page.locator(switch))
    expect(linear).to_contain_text("added by you", timeout=30_000)
    page.locator(switch).click()
    expect(page.locator('.kx-runs[data-layer="Linear"]')).to_have_text(
        re.compile(r"^bundled/quantized_linear Q8_0Linear x6$"), timeout=30_000
    )
    page.locator(".kx-layer-table").first.scroll_into_view_if_needed()
    screenshot(page, f"{lab.app}-attention-and-linear-rows")

    if lab.app == "jupyterlab":
        page.set_viewport_size({"width": 1280, "height": 1100})
        if not page.locator("#filebrowser").is_visible():
            page.locator('[data-id="filebrowser"]').first.click()
        expect(page.locator("#filebrowser")).to_be_visible()
        page.wait_for_timeout(2500)  # the plots refit within about a second
        overflow = page.evaluate(
            """() => { const d = document.querySelector('.kx-dashboard');
                 const right = d.getBoundingClientRect().right;
                 const plots = [...d.querySelectorAll('.kx-plot')];
                 return [d.scrollWidth - d.clientWidth,
                         ...plots.map(p => p.getBoundingClientRect().right - right)]; }"""
        )
        screenshot(page, f"{lab.app}-dashboard-1280-filebrowser")
        wide = page.evaluate(
            """() => { const d = document.querySelector('.kx-dashboard');
                 const right = d.getBoundingClientRect().right;
                 return [...d.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right > right + 1)
                   .slice(0, 5).map(e => e.tagName + '.' + e.className); }"""
        )
        assert max(overflow) <= 1, (overflow, wide)  # nothing sticks out of the dashboard
        misfit = page.evaluate(
            """() => [...document.querySelectorAll('.kx-dashboard .kx-plot')].map(box =>
                 Number(box.querySelector('svg.main-svg').getAttribute('width')) - box.clientWidth)"""
        )
        assert all(abs(m) <= 2 for m in misfit), misfit  # each plot fits its box, none is clipped
        page.keyboard.press("Control+Shift+C")
        page.keyboard.type("JupyterLab Dark")
        page.keyboard.press("Enter")
        expect(page.locator("body[data-jp-theme-light='false']")).to_have_count(1, timeout=30_000)
        page.wait_for_timeout(1500)
        screenshot(page, f"{lab.app}-dashboard-dark")
        page.locator(".kx-breakdown").first.scroll_into_view_if_needed()
        screenshot(page, f"{lab.app}-breakdown-dark")
        legend = page.evaluate(
            "() => getComputedStyle(document.querySelector('.kx-breakdown .legendtext')).fill"
        )
        assert legend != "rgb(68, 68, 68)", legend  # plotly's default grey legend text, unread on dark
        text = page.evaluate(
            "() => getComputedStyle(document.querySelector('.kx-dashboard .kx-plot .main-svg text')).fill"
        )
        assert text != "rgb(42, 63, 95)", text  # plotly's default dark-blue text would vanish on dark

    _run_cell(page, 8)  # redisplayed after the run: the second view draws what Python holds
    expect(page.locator(".kx-dashboard")).to_have_count(2, timeout=30_000)
    page.wait_for_timeout(2000)
    again = _plots_drawn(page)
    assert len(again) == 8 and all(title and traces for title, traces in again), again
    page.locator(".kx-dashboard").nth(1).scroll_into_view_if_needed()
    screenshot(page, f"{lab.app}-dashboard-redisplayed")

    page.keyboard.press("Control+s")
    page.wait_for_timeout(2000)
    page.request.delete(f"{lab.url}/api/kernels/{_kernel_id(page, lab)}?token={lab.token}")
    page.goto(lab.notebook_url("dashboard.ipynb"))
    if lab.app == "jupyterlab":  # a new kernel: the widget manager restores, finds no model
        expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=90_000)
    page.wait_for_timeout(3000)
    snapshot = page.locator(".kx-snapshot").first
    expect(snapshot).to_be_visible(timeout=60_000)
    expect(snapshot).to_contain_text("RMSNorm")
    expect(snapshot).to_contain_text(re.compile(r"RMSNorm.*\d\.\d\dx \[\d"))
    errors = page.get_by_text("Error displaying widget: model not found")
    for index in range(errors.count()):  # the widgets' outputs, when a snapshot stands in for them
        expect(errors.nth(index)).to_be_hidden()
    screenshot(page, f"{lab.app}-dashboard-reopened")


def _kernel_id(page: Page, lab: Lab) -> str:
    kernels = page.request.get(f"{lab.url}/api/kernels?token={lab.token}").json()
    assert len(kernels) == 1, kernels
    return kernels[0]["id"]
