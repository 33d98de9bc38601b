"""Notebook 03's two SiLU kernels in the dashboard, in a real JupyterLab (issue 49, items 1 and 4).

The bundled SiLU and the user's own plain C++ SiLU (notebook 03's, written and built here) are
compared in one run with the dashboard shown: every plot must show them apart, each with its name
and source ("SiLU · bundled activation", "SiLU · peer plain-silu"). Before that a Run with RMSNorm
switched off: its point reads "kernel off" (never "not measurable"), and its pairs have their own
trace in the layer's colour. Read from the rendered page (legends, point labels, the SVG's boxes),
in the light and the dark theme; plotly must log no "Invalid color specifier".

    pytest tests/browser/test_candidates.py -k jupyterlab    # screenshots in build/screenshots/
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from conftest import Lab, screenshot
from playwright.sync_api import Page, expect
from test_dashboard import _dismiss_news, _output, _run_cell

pytestmark = pytest.mark.slow  # a real JupyterLab, a kernel built and a Run: minutes

# notebook 03's repository: a serial C++ SiLU (float32), its binding, its layer class
_WRITE_PEER = r'''
import tempfile
from pathlib import Path

repo = Path(tempfile.mkdtemp()) / "plain-silu"
for folder in ("plain_silu_cpu", "torch-ext/plain_silu"):
    (repo / folder).mkdir(parents=True)
(repo / "build.toml").write_text("""
[general]
name = "plain-silu"
version = 1
license = "Apache-2.0"
backends = ["cpu"]

[torch]
src = ["torch-ext/torch_binding.cpp", "torch-ext/torch_binding.h"]

[kernel.plain_silu_cpu]
backend = "cpu"
depends = ["torch"]
src = ["plain_silu_cpu/plain_silu.cpp"]
""")
(repo / "plain_silu_cpu" / "plain_silu.cpp").write_text("""
#include <cmath>
#include <cstdint>
void plain_silu(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] / (1.0f + std::exp(-src[i]));
}
""")
(repo / "torch-ext" / "torch_binding.h").write_text("""
#pragma once
#include <cstdint>
void plain_silu(const float* src, float* dst, int64_t n);
""")
(repo / "torch-ext" / "torch_binding.cpp").write_text("""
#include <ATen/ATen.h>
#include <torch/library.h>
#include "registration.h"
#include "torch_binding.h"
at::Tensor silu(const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat, "float32 CPU only");
  at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  plain_silu(in.data_ptr<float>(), out.data_ptr<float>(), in.numel());
  return out;
}
TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("silu(Tensor x) -> Tensor");
#if defined(CPU_KERNEL)
  ops.impl("silu", c10::DeviceType::CPU, &silu);
#endif
}
REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
""")
package = repo / "torch-ext" / "plain_silu"
(package / "__init__.py").write_text("from . import layers\nfrom ._ops import ops\n")
(package / "layers.py").write_text("""
import torch
import torch.nn.functional as F
from torch import nn
from ._ops import ops

class PlainSilu(nn.Module):
    has_backward = False

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if input.device.type == "cpu" and input.dtype == torch.float32:
            return ops.silu(input)
        return F.silu(input)
""")
import kernel_explorer as kx
from kernel_explorer.machine import build_path

build_path(repo, progress=False)
explorer = kx.Explorer.of(model)
explorer.add_peer(repo, layers={"SiLU": "PlainSilu"})
explorer.on("SiLU", candidate="peer")
print("PEER", sum(now.is_kernel for now in explorer.running("SiLU")))
'''

CELLS = [
    "%load_ext kernel_explorer",
    "from kernel_explorer.loading import tiny_llama\nmodel = tiny_llama()",
    "%kernels explore model",
    _WRITE_PEER,
    "handle = explorer.compare('SiLU', candidates=['bundled', 'peer'], precision=0.1, budget_s=3)\n"
    "verdicts = explorer.results.records('layer_verdict', handle.run_id)\n"
    "print('VERDICT', *[round(r.values.speedup, 2) for r in verdicts])",
]

# per live plot of the first dashboard: its title, legend entries, point labels and points per trace
_PLOTS = """() => [...document.querySelector('.kx-dashboard').querySelectorAll('.kx-plot')].map(p => ({
    title: p.querySelector('.gtitle')?.textContent || '',
    legend: [...p.querySelectorAll('.legendtext')].map(t => t.textContent),
    labels: [...p.querySelectorAll('.scatterlayer .textpoint text')].map(t => t.textContent),
    notes: [...p.querySelectorAll('.annotation-text')].map(t => t.textContent),
    points: [...p.querySelectorAll('.scatterlayer .trace')].map(t => t.querySelectorAll('.point').length),
}))"""

# whether the per-pair plot's x-axis title overlaps one of its tick labels (the SVG's boxes)
_TITLE_OVER_TICKS = """() => { const p = document.querySelector('.kx-dashboard .kx-plot');
  const title = p.querySelector('.xtitle'); if (!title) return false; const t = title.getBoundingClientRect();
  return [...p.querySelectorAll('.xtick text')].some(x => { const b = x.getBoundingClientRect();
    return b.width && !(b.bottom <= t.top || t.bottom <= b.top
                        || b.right <= t.left || t.right <= b.left); }); }"""


def _plots(page: Page) -> dict[str, dict]:
    found = page.evaluate(_PLOTS)
    keys = ("pairs", "median", "error", "throughput")  # the dashboard's order: two rows of two
    return dict(zip(keys, found, strict=True))


def _wait_for(
    page: Page, condition: Callable[[dict[str, dict]], bool], what: str, seconds: float = 300
) -> None:
    """Until the rendered plots meet `condition`; else a screenshot and what they showed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition(_plots(page)):
            return
        page.wait_for_timeout(2000)
    screenshot(page, "candidates-timeout")
    pytest.fail(f"waited {seconds:.0f} s for {what}; the plots showed {_plots(page)}")


def test_two_candidates_of_a_layer_apart_in_every_plot_and_an_off_layer_reads_kernel_off(
    lab: Lab, page: Page
) -> None:
    if lab.app != "jupyterlab":
        pytest.skip("one app is enough for the plots; the dashboard tests cover Notebook 7")
    warnings: list[str] = []
    page.on("console", lambda message: warnings.append(message.text))
    page.goto(lab.notebook("candidates.ipynb", CELLS))
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=90_000)
    _dismiss_news(page)
    for index in range(3):
        _run_cell(page, index)
    expect(page.locator(".kx-layer-table")).to_be_visible(timeout=90_000)
    _wait_for(page, lambda plots: all(plot["notes"] for plot in plots.values()), "the four empty plots", 60)
    notes = [n for plot in _plots(page).values() for n in plot["notes"]]
    assert len(set(notes)) == 4 and not any("press Run" in n for n in notes), notes  # each says what, when
    screenshot(page, "candidates-empty-light")
    _run_cell(page, 3)  # notebook 03's kernel, built, offered as a peer and switched on
    assert _output(page, 3, "PEER")[0] > 0

    # a Run with RMSNorm off: its pairs are PyTorch against PyTorch, the layer reads "kernel off"
    page.locator("button.kx-run").click()
    expect(page.locator(".kx-status")).to_contain_text("Running", timeout=10_000)
    _wait_for(
        page,
        lambda plots: (
            "RMSNorm · kernel off" in plots["median"]["legend"]
            and any(name.startswith("SiLU · peer ") for name in plots["median"]["legend"])
            and sum(plots["throughput"]["points"]) > 0
        ),
        "the Run's RMSNorm 'kernel off' point, the peer SiLU's point and a throughput point",
    )
    page.locator("button.kx-stop").click()
    expect(page.locator(".kx-status")).to_contain_text("cancelled", timeout=60_000)
    page.wait_for_timeout(2000)  # the last redraw
    plots = _plots(page)
    assert "kernel off" in plots["median"]["labels"], plots["median"]
    assert not any("not meas" in label for plot in plots.values() for label in plot["labels"])
    assert "RMSNorm · kernel off" in plots["pairs"]["legend"], plots["pairs"]
    assert not page.evaluate(_TITLE_OVER_TICKS)
    page.locator(".kx-dashboard .kx-plot").first.scroll_into_view_if_needed()
    screenshot(page, "candidates-run-kernel-off-light")
    throughput_points = plots["throughput"]["points"]

    # notebook 03's compare: the bundled SiLU and the user's, one run, apart in every plot
    _run_cell(page, 4)
    speedups = _output(page, 4, "VERDICT")
    assert len(speedups) == 2
    page.wait_for_timeout(2500)
    plots = _plots(page)
    for kind in ("pairs", "median", "error"):
        silu = [name for name in plots[kind]["legend"] if name.startswith("SiLU · ")]
        assert {"SiLU · bundled activation", "SiLU · peer plain-silu"} <= set(silu), (
            kind,
            plots[kind],
        )
    median = plots["median"]
    assert sum(1 for count in median["points"] if count) == 2, median  # two points, one per candidate
    assert {f"{s:.2f}x" for s in speedups} <= set(median["labels"]), (speedups, median)
    assert sum(1 for count in plots["pairs"]["points"] if count) >= 2
    # the Run's throughput stays (a compare measures none), never "no measurement yet: press Run"
    assert plots["throughput"]["points"] == throughput_points and not any(
        "press Run" in n for n in plots["throughput"]["notes"]
    )
    assert not page.evaluate(_TITLE_OVER_TICKS)
    page.locator(".kx-dashboard .kx-plot").first.scroll_into_view_if_needed()
    screenshot(page, "candidates-compare-light")

    page.keyboard.press("Control+Shift+C")
    page.keyboard.type("JupyterLab Dark")
    page.keyboard.press("Enter")
    expect(page.locator("body[data-jp-theme-light='false']")).to_have_count(1, timeout=30_000)
    page.wait_for_timeout(1500)
    page.locator(".kx-dashboard .kx-plot").first.scroll_into_view_if_needed()
    screenshot(page, "candidates-compare-dark")
    invalid = [w for w in warnings if "Invalid color" in w]
    assert not invalid, invalid[:3]
