"""The report's SVG charts: axes whose labelled ticks bracket the data, 3-6 of them, labels apart."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ElementTree

import pytest

from kernel_explorer.views.svg_chart import (
    CHAR_PX,
    LABEL_SHARE,
    MAX_TICKS,
    MIN_TICKS,
    WIDTH,
    Box,
    Chart,
    Point,
    Row,
    _text_px,
    label_lines,
    log_axis,
    render,
)

LOWS = [1e-9, 3.7e-7, 0.002, 0.31, 0.9, 1.0, 1.26, 3.6, 44.0]
SPANS = [1.0, 1.004, 1.04, 1.3, 2.2, 9.0, 47.0, 800.0, 1e5, 1e9]


@pytest.mark.parametrize("low", LOWS)
def test_a_log_axis_labels_3_to_6_ticks_that_bracket_the_data(low: float) -> None:
    for span in SPANS:
        _check_axis(low, low * span)


def _check_axis(low: float, high: float) -> None:
    axis = log_axis(low, high, unit="x")
    values = [v for v, _ in axis.ticks]
    assert MIN_TICKS <= len(values) <= MAX_TICKS + 1, axis.ticks  # +1: a thinned fallback's end
    assert values[0] <= low * (1 + 1e-9) and values[-1] >= high * (1 - 1e-9), axis  # the data inside
    assert axis.low <= values[0] and values[-1] <= axis.high  # every label on the axis
    assert values == sorted(set(values))
    labels = [label for _, label in axis.ticks]
    assert len(set(labels)) == len(labels), labels  # no two ticks read alike


def test_error_ticks_read_as_powers_of_ten() -> None:
    labels = [label for _, label in log_axis(1.1e-6, 4.7e-6, unit="").ticks]
    assert labels == ["10⁻⁶", "2·10⁻⁶", "5·10⁻⁶"]
    assert log_axis(3.6, 3.95).ticks[0][1] == "3.6x"


def _chart(rows: int = 8) -> Chart:
    marks = [
        Row(f"layer{i} · run-{i % 2 + 1}", (Point(0.3 * 2.1**i, 0.25 * 2.1**i, 0.4 * 2.1**i, label="x"),))
        for i in range(rows)
    ]
    marks.append(Row("pairs", (Box(0.8, 1.1, 1.5, 0.05, 900.0, label="12 pairs"),)))
    return Chart("t", "one run whole", "speedup", tuple(marks), name="t")


def _svg(chart: Chart) -> ElementTree.Element:
    return ElementTree.fromstring(render(chart))


def test_every_mark_lies_inside_the_plot_area_and_ticks_keep_apart() -> None:
    root = _svg(_chart())
    ns = "{http://www.w3.org/2000/svg}"
    area = root.find(f"{ns}rect[@class='kx-plot-area']")
    assert area is not None
    left, width = float(area.get("x", "")), float(area.get("width", ""))
    xs = [float(c.get("cx", "")) for c in root.iter(f"{ns}circle")]
    xs += [float(line.get(k, "")) for line in root.iter(f"{ns}line") for k in ("x1", "x2")]
    assert xs and all(left - 0.01 <= x <= left + width + 0.01 for x in xs)
    ticks = [
        (float(t.get("x", "")), t.text or "") for t in root.iter(f"{ns}text") if t.get("class") == "kx-tick"
    ]
    assert MIN_TICKS <= len(ticks) <= MAX_TICKS
    for (x1, a), (x2, b) in itertools.pairwise(ticks):  # estimated label boxes, centred on ticks
        assert x2 - x1 >= (len(a) + len(b)) / 2 * CHAR_PX, (a, b)


def test_the_one_x_line_is_always_on_a_speedup_axis() -> None:
    chart = Chart("t", "s", "a", (Row("r", (Point(3.6, 3.5, 3.95),)),))
    low, high = chart.extent()
    assert low == 1.0 and high == 3.95  # 1x is part of the range: faster or slower reads at once
    assert "kx-one" in render(chart) and math.isclose(log_axis(low, high).ticks[0][0], 1.0)


def test_a_long_row_label_wraps_at_its_parts_inside_the_label_column() -> None:
    """A report's pairs chart named a row "SiLU · inference · peer plain-silu-876bd9a6 · run-12"
    and more: one line that ran past the chart's left edge at 1280 px."""
    long = "rotary_pos_emb · inference · peer plain-rotary-embedding-876bd9a6 · run-12"
    chart = Chart("t", "s", "a", (Row(long, (Point(1.4, 1.2, 1.6),)), Row("RMSNorm · run-1", (Point(2.0),))))
    ns = "{http://www.w3.org/2000/svg}"
    root = _svg(chart)
    area = root.find(f"{ns}rect[@class='kx-plot-area']")
    assert area is not None
    left = float(area.get("x", ""))
    rows = [t for t in root.iter(f"{ns}text") if t.get("class") == "kx-row"]
    wrapped = [span.text or "" for span in rows[0].iter(f"{ns}tspan")]
    assert len(wrapped) > 1 and " · ".join(wrapped) == long  # every part kept, broken between parts
    assert all(
        _text_px(line) <= left - 8 for row in rows for line in (s.text or "" for s in row.iter(f"{ns}tspan"))
    )
    assert left <= WIDTH * LABEL_SHARE + 16  # the plot keeps most of the width
    title = rows[0].find(f"{ns}title")
    assert title is not None and title.text == long
    assert label_lines("x" * 200, 100)[0].startswith("…")  # one part too long: its end kept


def test_a_long_value_label_at_the_axis_end_stays_inside_the_chart() -> None:
    """The pairs chart wrote "5000 pairs, 1704 beyond the whiskers" right of a box that reached
    the axis' end; at 1280 px the page cut it ("... 1704 beyo")."""
    label = "5000 pairs, 1704 beyond"
    wide = Box(0.5, 1.2, 3.0, 0.1, 10.0, label=label)  # whiskers to both ends: no room left of it
    chart = Chart("t", "s", "a", (Row("SiLU · peer plain-silu · run-3", (wide,)),))
    ns = "{http://www.w3.org/2000/svg}"
    root = _svg(chart)
    (value,) = [t for t in root.iter(f"{ns}text") if t.get("class") == "kx-value"]
    assert value.text == label and value.get("text-anchor") is None  # written right of the box
    assert float(value.get("x", "")) + _text_px(label) <= WIDTH
