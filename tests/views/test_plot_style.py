"""Plot conventions: log axes a reader cannot misread, empty plots that look empty, theme CSS."""

from __future__ import annotations

import math
import re
from importlib import resources

import pytest

from kernel_explorer.views.plot_style import CATEGORY_AXIS, ERROR_AXIS, SPEEDUP_AXIS, empty_note


@pytest.mark.parametrize("axis", [SPEEDUP_AXIS, ERROR_AXIS])
def test_every_labelled_log_tick_reads_its_own_value(axis: dict) -> None:
    """Item 11: plotly's own minor labels were bare digits ("5" for 0.5); each label here is the
    whole value, and the minor ticks carry no label at all."""
    for value, text in zip(axis["tickvals"], axis["ticktext"], strict=True):
        written = text.rstrip("x")
        if set(written) & set("⁻⁰¹²³⁴⁵⁶⁷⁸⁹"):  # 10⁻⁶
            exponent = int(written[2:].translate(str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")))
            assert math.isclose(value, 10.0**exponent, rel_tol=1e-9), text
        else:
            assert math.isclose(value, float(written), rel_tol=1e-9), text
    minor = axis["minor"]
    assert "ticktext" not in minor and not set(minor["tickvals"]) & set(axis["tickvals"])
    assert axis["type"] == "log"


def test_speedup_axis_labels_half_and_twice_in_full() -> None:
    labels = dict(zip(SPEEDUP_AXIS["tickvals"], SPEEDUP_AXIS["ticktext"], strict=True))
    assert labels[0.5] == "0.5x" and labels[1.0] == "1x" and labels[2.0] == "2x" and labels[0.2] == "0.2x"
    assert "autorangeoptions" not in SPEEDUP_AXIS  # it pinned the live plots' range in the browser
    error_labels = dict(zip(ERROR_AXIS["tickvals"], ERROR_AXIS["ticktext"], strict=True))
    assert error_labels[1e-6] == "10⁻⁶" and set(error_labels) == {10.0**e for e in range(-31, 4)}


def test_empty_live_plots_say_so_and_the_note_goes_with_the_first_point() -> None:
    from kernel_explorer.measure.log import ResultLog
    from kernel_explorer.measure.records import LayerLatency, Record
    from kernel_explorer.views.plots import LivePlots

    log = ResultLog()
    plots = LivePlots(log, interval=60)
    try:
        notes = [a["text"] for plot in plots.figures for a in plot.plot_layout["annotations"]]
        assert len(notes) == 4 == len(set(notes))  # each says what it shows and when it fills
        assert not any(empty_note()["text"] in note or "press Run" in note for note in notes)
        assert not any(plot.plot_layout.get("shapes") for plot in plots.figures)  # no 1x line over a note
        assert plots.speedup.plot_layout["xaxis"]["type"] == CATEGORY_AXIS["type"] == "category"
        assert plots.divergence.plot_layout["xaxis"]["type"] == "category"
        assert plots.throughput.plot_layout["yaxis"]["rangemode"] == "tozero"
        assert plots.divergence.figure()["data"][0]["type"] == "scatter"  # markers, not bars from 0
        assert plots.divergence.figure()["data"][0]["mode"] == "markers"
        log.append(Record("run-1", LayerLatency(2e-6, 1e-6, 2.0, kernel_on=True), "RMSNorm", "model.norm"))
        plots.flush()
        assert not plots.latency.plot_layout.get("annotations")  # the note goes with the first point
        assert plots.latency.plot_layout["xaxis"].get("visible", True)
        assert [shape["y0"] for shape in plots.latency.plot_layout["shapes"]] == [1]  # the 1x line, now
        assert plots.divergence.plot_layout["annotations"]  # still nothing to show there
    finally:
        plots.close()


def test_widget_css_takes_theme_colours_only_from_jupyterlab_variables() -> None:
    """Item 9: `.kx-instance td {color:#444}` read 1.9:1 on the dark theme's #111."""
    widgets = resources.files("kernel_explorer.widgets")
    for name in (entry.name for entry in widgets.iterdir() if entry.name.endswith(".css")):
        css = re.sub(r"/\*.*?\*/", "", widgets.joinpath(name).read_text(), flags=re.S)
        for selector, body in re.findall(r"([^{}]+)\{([^}]*)\}", css):
            for prop, value in re.findall(r"([\w-]+)\s*:\s*([^;]+)", body):
                colour = re.sub(r"var\(--jp-[\w-]+,[^)]*\)", "", value)  # a fallback inside var() is fine
                fixed = re.search(r"#[0-9a-fA-F]{3,8}\b|rgba?\(|\b(black|white|gray|grey)\b", colour)
                if fixed and prop in ("color", "background", "background-color", "border", "border-bottom"):
                    assert ".kx-badge" in selector, f"{name}: {selector.strip()} {prop}: {value}"


def _colours_in_a_fresh_process(code: str) -> str:
    """What `code` prints in a new interpreter (another notebook's kernel), with its own hash seed."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONHASHSEED": str(len(code))}
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return found.stdout.strip()


def test_a_layers_colour_is_the_same_in_every_notebook_whatever_came_first() -> None:
    """Colours went to layers in the order they were first drawn: SiLU was blue in one notebook and
    orange in the next. A layer's first candidate takes the layer's colour, a later one the shade
    its name hashes to (away from those taken): the same in every notebook whichever came first."""
    ask = (
        "from kernel_explorer.views.plot_style import candidate_colour as s, layer_colour as c\n"
        "for name in {names}: c(name)\n"
        "first = s('SiLU', {first!r})\n"
        "print(c('SiLU'), c('RMSNorm'), c('attention'), first, s('SiLU', 'SiLU · peer plain-silu'))"
    )
    one = _colours_in_a_fresh_process(
        ask.format(names=["SiLU", "RMSNorm", "attention"], first="SiLU · bundled activation")
    ).split()
    other = _colours_in_a_fresh_process(
        ask.format(names=["attention", "RMSNorm", "SiLU"], first="SiLU · user my-silu")
    ).split()
    assert one[:3] == other[:3] and len(set(one[:3])) == 3
    assert one[3] == one[0] == other[3]  # the first candidate drawn: the layer's own colour
    assert one[4] == other[4] != one[0]  # the second: its own shade, the same in both


def test_two_layers_whose_names_hash_alike_take_two_colours() -> None:
    from kernel_explorer.views.plot_style import LAYER_PALETTE, _slot

    first, second = (
        "SiLU",
        next(n for n in ("GeLU", "LayerNorm", "Llama4TextMoe") if _slot(n, 8) == _slot("SiLU", 8)),
    )
    ask = (
        f"from kernel_explorer.views.plot_style import layer_colour as c\nprint(c({first!r}), c({second!r}))"
    )
    colours = _colours_in_a_fresh_process(ask).split()
    assert colours[0] == LAYER_PALETTE[_slot(first, len(LAYER_PALETTE))] != colours[1]


def test_two_candidates_of_any_layer_take_shades_a_reader_tells_apart() -> None:
    from kernel_explorer.views.plot_style import (
        LAYER_PALETTE,
        MIN_SHADE_DISTANCE,
        candidate_colour,
        layer_colour,
        shade_distance,
    )

    colours = set()
    for number in range(40):  # layers of every palette colour, two candidates each
        layer = f"Layer{number}-shades"
        colours.add(layer_colour(layer))
        first = candidate_colour(layer, f"{layer} · bundled activation")
        second = candidate_colour(layer, f"{layer} · peer plain-silu")
        assert shade_distance(first, second) >= MIN_SHADE_DISTANCE, (layer, first, second)
    assert colours == set(LAYER_PALETTE)


def test_no_candidates_shade_nearly_vanishes_on_a_light_or_a_dark_page() -> None:
    """70% towards white (#dfd1eb on white, 1.5:1) and 65% towards black (#342442 on JupyterLab's
    dark theme) nearly vanished, the palette's yellow 70% towards white read 1.2:1, and then its
    40% towards white 1.5:1 and the brown's 45% towards black 1.6:1: every shade stands at least
    2:1 (the palette's own floor, its yellow on white) off a white page and off the dark theme's
    (#111111), a layer's own colour as it is."""
    from kernel_explorer.views.plot_style import LAYER_PALETTE, candidate_colour, contrast, layer_colour

    shades: dict[str, set[str]] = {}
    for number in range(40):  # layers of every palette colour, three candidates each
        layer = f"Layer{number}-pages"
        shades.setdefault(layer_colour(layer), set()).update(
            candidate_colour(layer, f"{layer} · peer k{k}") for k in range(3)
        )
    assert set(shades) == set(LAYER_PALETTE)
    for base, drawn in shades.items():
        for page in ("#ffffff", "#111111"):
            for shade in drawn - {base}:
                assert contrast(shade, page) >= 2.0, (base, shade, page)


def test_a_layers_five_candidates_take_five_colours() -> None:
    """The palette's cyan has two shades that read on both pages: its fourth and fifth candidates
    repeated its second and third exactly. Past the readable shades come fainter ones, never a
    repeat while one is left."""
    from kernel_explorer.views.plot_style import LAYER_PALETTE, candidate_colour, layer_colour

    seen: set[str] = set()
    for number in range(40):  # layers of every palette colour
        layer = f"Layer{number}-five"
        seen.add(layer_colour(layer))
        drawn = [candidate_colour(layer, f"{layer} · peer k{k}") for k in range(5)]
        assert len(set(drawn)) == 5, (layer, drawn)
    assert seen == set(LAYER_PALETTE)


def test_a_layers_only_candidate_is_drawn_in_the_layers_own_colour() -> None:
    """The common case, one candidate per layer, drew it in a hashed shade (35% or 70% away): the
    layer's colour, stable across notebooks, was on no point."""
    from kernel_explorer.measure.kinds.time.records import LayerLatency
    from kernel_explorer.measure.log import ResultLog
    from kernel_explorer.measure.records import Provenance, Record
    from kernel_explorer.views.plot_style import layer_colour
    from kernel_explorer.views.plots import LivePlots

    origin = Provenance(
        kernel_id="_activation_cpu_1a2b", isa=None, candidate="bundled/activation:GeluTanh (cpu, inference)"
    )
    log = ResultLog()
    plots = LivePlots(log, interval=3600)
    try:
        for i in range(20):
            speedup = 1.4 + (i % 5) / 50
            values = LayerLatency(1e-5, 1e-5 / speedup, speedup, kernel_on=True)
            log.append(Record("run-1", values, "GELUTanh", "m.0", time=1.0 + i / 10, provenance=origin))
        plots.flush()
        (trace,) = [trace for trace in plots.latency.data if trace["x"]]
        assert trace["name"] == "GELUTanh · bundled activation"
        assert trace["marker"]["color"] == layer_colour("GELUTanh")
        (point,) = [trace for trace in plots.speedup.data if trace["x"]]
        assert point["marker"]["color"] == layer_colour("GELUTanh")
    finally:
        plots.close()
