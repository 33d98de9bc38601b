"""One copy of plotly.js per dashboard (issue 28 items 8, 13): each FigureWidget carried the whole
bundle (about 5 MB) in its widget state, sent to the browser and stored by nbconvert per figure."""

from __future__ import annotations

from kernel_explorer.measure.log import ResultLog
from kernel_explorer.views.plots import LivePlots
from kernel_explorer.views.shared_plotly import figure_classes


def test_one_figure_carries_plotly_js_and_the_others_wait_for_it() -> None:
    import plotly.graph_objects as go

    carrier, light = figure_classes()
    bundle = str(go.FigureWidget._esm)
    assert carrier is not light, "plotly's bundle no longer ends as expected: every figure carries it again"
    name = light()._esm.split("globalThis.", 1)[1].split(";", 1)[0]
    assert f"globalThis.{name}={{FigureModel:" in carrier()._esm and len(carrier()._esm) > len(bundle)
    assert len(light()._esm) < 1000 and "export default shared.default" in light()._esm


def test_the_live_plots_send_plotly_js_once() -> None:
    plots = LivePlots(ResultLog(), interval=60)
    try:
        figures = (plots.latency, plots.speedup, plots.throughput, plots.divergence)
        sizes = [len(figure.get_state()["_esm"]) for figure in figures]
        assert sizes[0] > 4_000_000 and sum(sizes[1:]) < 3_000  # was about 5 MB each
    finally:
        plots.close()
