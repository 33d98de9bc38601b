"""A stranger's kernel that crashes or hangs, seen in a real JupyterLab: the notebook lives on.

Its trial runs in the explorer's worker process (`switching/isolation.py`): the dashboard opened on
a model with such peers lists them with their reason, the notebook's kernel never restarts, and the
model switches to what can run.

    pytest tests/browser -k strangers    # a screenshot lands in build/screenshots/
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Lab, screenshot
from kernel_repos import write_repo
from playwright.sync_api import Page, expect
from test_dashboard import _run_cell
from test_hostile_isolation import CRASH, HANG, rmsnorm

pytestmark = pytest.mark.slow  # a real JupyterLab and browser


def test_a_crashing_and_a_hanging_peer_leave_the_notebook_alive(lab: Lab, page: Page, tmp_path: Path) -> None:
    if lab.app != "jupyterlab":
        pytest.skip("the kernel is the same in Notebook 7: one app is enough")
    crash = write_repo(tmp_path / "crash", "kx-crash-peer", layers=rmsnorm(CRASH))
    hang = write_repo(tmp_path / "hang", "kx-hang-peer", layers=rmsnorm(HANG))
    cells = [
        "%load_ext kernel_explorer",
        "import os, torch\nimport kernel_explorer as kx\nfrom kernel_explorer.loading import tiny_llama\n"
        "model = tiny_llama()\n"
        f"explorer = kx.Explorer(model, peers=[{str(crash)!r}, {str(hang)!r}], trial_timeout=5)\n"
        "explorer.capture({'input_ids': torch.arange(8)[None]})\nprint('PID', os.getpid())",
        "%kernels explore model",
        "peers = [(c, a) for c, a in explorer.inventory().row('RMSNorm').candidates if c.source == 'peer']\n"
        "print('WORDS', ' | '.join(f'{a.state.value}: {a.reason}' for _, a in peers))",
        "on = explorer.on('RMSNorm')\n"
        "print('ALIVE', os.getpid(), sum(now.is_kernel for now in on), on[0].repository)",
    ]
    page.goto(lab.notebook("strangers.ipynb", cells))
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=90_000)
    news = page.locator(".jp-Notification-Toast, .Toastify").get_by_role("button", name="No")
    if news.count():
        news.first.click()
    for index in range(3):
        _run_cell(page, index)
    expect(page.locator(".kx-layer-table")).to_be_visible(timeout=120_000)
    _run_cell(page, 3)
    words = page.locator(".jp-Notebook .jp-Cell").nth(3).locator(".jp-OutputArea-output")
    expect(words.filter(has_text="WORDS")).to_have_count(1, timeout=120_000)
    text = words.filter(has_text="WORDS").inner_text()
    assert "crashed its trial (SIGSEGV)" in text and "did not answer in 5 s" in text, text
    _run_cell(page, 4)
    alive = page.locator(".jp-Notebook .jp-Cell").nth(4).locator(".jp-OutputArea-output")
    expect(alive.filter(has_text="ALIVE")).to_have_count(1, timeout=60_000)
    pid = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea-output").inner_text()
    _, same_pid, switched, repository = alive.filter(has_text="ALIVE").inner_text().split()
    assert pid.split()[-1] == same_pid  # the same kernel process throughout: it never died
    assert switched == "5" and "rmsnorm" in repository and "peer" not in repository  # the bundled one
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=30_000)
    screenshot(page, "strangers-dashboard")
