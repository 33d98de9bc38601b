"""Issue 49 in a real JupyterLab: after `%kernels on RMSNorm --candidate <the peer's name>` the row's
picker shows the peer (it kept showing the bundled kernel while "runs now" said the peer), its text
is whole (it read "bundled/rmsnorm:RMSNorn"), the table's columns keep their widths across the
switch, and `%kernels side RMSNorm` is an HTML table with the running kernel marked. Screenshot in
build/screenshots/.

    pytest tests/browser/test_side_by_side_page.py -k jupyterlab
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Lab, screenshot
from playwright.sync_api import Page, expect
from test_dashboard import _dismiss_news, _run_cell

pytestmark = pytest.mark.slow  # a real JupyterLab and browser: minutes; `make test` runs it

TESTS = Path(__file__).resolve().parents[1]

CELLS = [
    "%load_ext kernel_explorer",
    f"import sys, tempfile\nfrom pathlib import Path\nsys.path.insert(0, {str(TESTS)!r})\n"
    "from kernel_repos import write_noarch_repo\nfrom kernel_explorer.loading import tiny_llama\n"
    "model = tiny_llama()",
    "%kernels explore model",
    "import kernel_explorer as kx\nexplorer = kx.Explorer.of(model)\n"
    "explorer.add_peer(write_noarch_repo(Path(tempfile.mkdtemp()) / 'py-rmsnorm'));",
    "%kernels on RMSNorm --candidate py-rmsnorm",
    "%kernels side RMSNorm",
    "%kernels off RMSNorm",
]

# the selected option's text width (the select's own font) against the room the select gives it
_PICKER_ROOM = """() => [...document.querySelectorAll('select.kx-candidate-pick')].map(s => {
  const style = getComputedStyle(s);
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = `${style.fontSize} ${style.fontFamily}`;
  const text = s.options[s.selectedIndex].textContent;
  return [text, ctx.measureText(text).width, s.clientWidth - 24];  // 24 px: padding and the arrow
})"""

_WIDTHS = """() => [...document.querySelectorAll('.kx-layer-table .kx-table thead th')]
  .map(th => Math.round(th.getBoundingClientRect().width))"""


def test_the_picker_shows_what_runs_and_the_kernels_read_side_by_side(lab: Lab, page: Page) -> None:
    if lab.app != "jupyterlab":
        pytest.skip("one app is enough here: test_dashboard covers Notebook 7")
    page.goto(lab.notebook("side.ipynb", CELLS))
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=90_000)
    _dismiss_news(page)
    for index in range(4):
        _run_cell(page, index)
    pick = page.locator('select.kx-candidate-pick[data-layer="RMSNorm"]')
    expect(pick).to_be_visible(timeout=90_000)
    # added after the dashboard was drawn: the picker offers it at once (a new candidate redraws)
    expect(pick.locator("option", has_text="py-rmsnorm")).to_have_count(1, timeout=60_000)

    _run_cell(page, 4)
    runs = page.locator('.kx-runs[data-layer="RMSNorm"]')
    expect(runs).to_contain_text("py-rmsnorm", timeout=60_000)
    assert "py-rmsnorm" in pick.evaluate("s => s.options[s.selectedIndex].textContent")  # not bundled
    for text, width, room in page.evaluate(_PICKER_ROOM):
        assert width <= room, (text, width, room)  # "bundled/rmsnorm:RMSNorn": cut no more
    page.wait_for_timeout(500)
    switched_on = page.evaluate(_WIDTHS)

    _run_cell(page, 5)
    table = page.locator(".kx-summary table")
    expect(table).to_contain_text("▶ all", timeout=60_000)
    marked = table.locator("tr", has_text="▶").inner_text()
    assert "py-rmsnorm" in marked and "peer" in marked, marked
    assert table.locator("td").first.evaluate("td => getComputedStyle(td).whiteSpace") == "nowrap"
    page.locator(".kx-layer-table").first.scroll_into_view_if_needed()
    screenshot(page, "side-by-side-picker-light")

    _run_cell(page, 6)  # "runs now" reads PyTorch again: the columns keep their widths
    expect(runs).to_contain_text("PyTorch", timeout=60_000)
    page.wait_for_timeout(500)
    switched_off = page.evaluate(_WIDTHS)
    assert all(abs(a - b) <= 1 for a, b in zip(switched_on, switched_off, strict=True)), (
        switched_on,
        switched_off,
    )
