"""The live dashboard through a whole session (issue 35): a 5-minute Run on the default model in a
real JupyterLab and Chromium, one core kept busy by another process, a layer switched off and on
during it. `bench/dashboard_soak.py --minutes N` runs the same and prints what it measured.

    pytest tests/browser/test_soak.py -s    # the figures print; screenshots in build/screenshots/
"""

from __future__ import annotations

import os

import pytest
from conftest import screenshot
from lab_server import Lab
from playwright.sync_api import Page
from soak import busy_core, soak

pytestmark = pytest.mark.slow

MINUTES = float(os.environ.get("KX_SOAK_MINUTES", "5"))
#: bounds measured on the 2-core machine (bench/dashboard_soak.py --minutes 4, twice, one core busy):
#: Chromium's resident memory (all its processes, shared pages counted in each) saws between 1160
#: and 1450 MB (its collector gives back ~250 MB every couple of minutes), the page's JavaScript heap
#: between 70 and 120 MB, the kernel's 1000-1160 MB (the default model is ~540 MB in float32; the
#: log keeps every record); the bounds leave a quarter more for another host's Chromium
CHROMIUM_MB, JS_HEAP_MB, KERNEL_MB = 1800, 250, 1500
#: a redraw sends what is new: the browser's bytes/s in the last minute of the Run stays within
#: this factor of the first minute's (it grew with the run before: every point resent each 0.3 s)
FLAT = 3.0


@pytest.mark.parametrize("lab", ["jupyterlab"], indirect=True)
def test_a_five_minute_run_stays_bounded_stops_and_agrees_with_compare(lab: Lab, page: Page) -> None:
    page.set_viewport_size({"width": 1280, "height": 1000})
    with busy_core():
        result = soak(lab, page, MINUTES, screenshot=screenshot)
    result.busy_load = f"one core kept busy by a second process; load average {os.getloadavg()[0]:.1f}"
    print(result.report())
    assert 0 <= result.stop_ms <= 2000, result.stop_ms  # Stop stops within 2 s
    assert result.switch_ms and all(0 <= ms <= 1000 for ms in result.switch_ms), result.switch_ms
    assert max(s.chromium_mb for s in result.samples) < CHROMIUM_MB, result.report()
    assert max(s.js_heap_mb for s in result.samples) < JS_HEAP_MB, result.report()
    assert max(s.kernel_mb for s in result.samples) < KERNEL_MB, result.report()
    rates = [rate for seconds, rate in result.bytes_per_s() if seconds > 60]
    first, last = rates[:6], rates[-6:]
    assert sum(last) / len(last) <= FLAT * max(sum(first) / len(first), 1.0), result.report()
    for theme, plots in result.layout.items():  # what a person reads at 1280 px, in both themes
        assert len(plots) == 4, plots
        for plot in plots:
            assert plot["title"] and 1 <= len(plot["yticks"]) <= 6, (theme, plot)
            assert not plot["legend_over_title"] and not plot["toolbar_over_title"], (theme, plot)
            assert not plot["xtitle_over_ticks"] and not plot["legend_over_xtitle"], (theme, plot)
            assert plot["legend_markers"] >= plot["legend_entries"], (theme, plot)  # merged: still markers
    dark = result.layout["dark"]
    plotly_defaults = {"rgb(68, 68, 68)", "rgb(42, 63, 95)", "rgb(0, 0, 0)"}  # unread on a dark page
    assert not any(set(p["text_fills"]) & plotly_defaults for p in dark), dark
    assert not any(set(p["errorbar_strokes"]) & plotly_defaults for p in dark), dark
    on_kernel = sum(bucket[2] for bucket in result.buckets)
    stalled = sum(bucket[3] for bucket in result.buckets)
    assert on_kernel and stalled <= 0.05 * on_kernel, "\n".join(result.pair_timeline())  # was 13%
    assert result.verdicts, "the Run measured no layer on its kernel"
    for verdicts in result.verdicts:
        agree, why = verdicts.agree()
        assert agree, why + "\n" + result.report()
