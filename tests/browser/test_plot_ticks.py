"""The live median and error plots' layer names, drawn by plotly.js in Chromium at the width the
dashboard gives a plot: every tick label whole inside the figure.

A browser review saw "rotary_pos_emb" cut at the bottom of both plots: with six layers in half a
dashboard plotly turns the category labels, and a turned long name needs more than the fixed
bottom margin. Real parts: plotly's own plotly.min.js, the dashboard's layouts (`live_figures`).

    pytest tests/browser/test_plot_ticks.py
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Browser

from kernel_explorer.views.live_figures import live_figures
from kernel_explorer.views.live_plot import _plotly_js

pytestmark = pytest.mark.slow  # a real browser

LAYERS = ["RMSNorm", "SiLU", "rotary_pos_emb", "attention", "Linear", "LMHead"]

_TICKS = """() => { const svg = document.querySelector('#plot .main-svg').getBoundingClientRect();
  return [...document.querySelectorAll('#plot .xtick text')].map(t => { const r = t.getBoundingClientRect();
    return [t.textContent, r.left - svg.left, svg.right - r.right, svg.bottom - r.bottom]; }); }"""


@pytest.mark.parametrize("which", ["speedup", "divergence"])
@pytest.mark.parametrize("width", [360, 520])
def test_every_layer_name_is_whole_under_its_plot(browser: Browser, which: str, width: int) -> None:
    _, speedup, _, divergence = live_figures()
    plot = {"speedup": speedup, "divergence": divergence}[which]
    layout = json.loads(json.dumps(plot.plot_layout))
    layout.update(annotations=[], width=width)
    layout["xaxis"]["visible"] = layout["yaxis"]["visible"] = True
    values = [1.3, 0.8, 1.1, 2.0, 1.6, 0.9] if which == "speedup" else [1e-6, 1e-7, 3e-6, 1e-5, 2e-6, 1e-7]
    data = [{"type": "scatter", "mode": "markers", "x": LAYERS, "y": values, "name": "kernels"}]
    page = browser.new_page(viewport={"width": width + 40, "height": 600})
    try:
        page.set_content("<div id='plot'></div>")
        page.add_script_tag(content=_plotly_js())
        page.evaluate("([data, layout]) => Plotly.newPlot('plot', data, layout)", [data, layout])
        ticks = page.evaluate(_TICKS)
        assert [t[0] for t in ticks] == LAYERS
        cut = [t for t in ticks if min(t[1:]) < -0.5]
        assert cut == [], cut  # (label, room left, room right, room below): none negative
    finally:
        page.close()
