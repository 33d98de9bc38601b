"""The HTML report as a reader sees it: opened in Chromium at 900 and 1280 px, light and dark.

A real session's report (`report_session`: a Run of three cycles, a cycle after a switch, a
compare, a breakdown, on the tiny Llama with the bundled kernels), read from the rendered page:
no table cell breaks inside a word or a number (each word's glyphs on one line), number cells stay
on one line, the page itself never scrolls sideways (a wide table scrolls in its own box), each
chart's tick labels keep apart (their boxes do not overlap) with 3-6 of them, every row label lies
whole inside its chart (a long one wraps), and every mark lies inside its chart's plot area.
Screenshots land in build/screenshots/report-<width>-<scheme>.png.

    pytest tests/browser/test_report_page.py
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from conftest import screenshot
from playwright.sync_api import Browser

pytestmark = pytest.mark.slow  # a measured session and a real browser

#: per table cell: the words whose glyphs sit on more than one line, and whether a number cell wrapped
_BROKEN_CELLS = """() => {
  const lines = (range) => new Set([...range.getClientRects()].filter(r => r.width > 0)
                                   .map(r => Math.round(r.top))).size;
  const found = [];
  for (const cell of document.querySelectorAll('td, th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        if (lines(range) > 1) found.push(match[0]);
      }
    }
    if (cell.classList.contains('num') && cell.textContent.trim()) {
      const range = document.createRange();
      range.selectNodeContents(cell);
      if (lines(range) > 1) found.push(`number cell ${cell.textContent}`);
    }
  }
  return found;
}"""

#: per chart: its tick labels' boxes, its plot area and its marks' boxes, as the page draws them
_CHARTS = """() => [...document.querySelectorAll('svg.kx-chart')].map(svg => {
  const box = (e) => { const r = e.getBoundingClientRect();
                       return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  return {
    name: svg.dataset.chart,
    ticks: [...svg.querySelectorAll('text.kx-tick')].map(t => ({text: t.textContent, ...box(t)})),
    area: box(svg.querySelector('rect.kx-plot-area')),
    frame: box(svg),
    rows: [...svg.querySelectorAll('text.kx-row')].map(t => ({text: t.textContent, ...box(t)})),
    marks: [...svg.querySelectorAll('.kx-mark .kx-dot, .kx-mark .kx-box, .kx-mark .kx-whisker,'
                                    + ' .kx-mark .kx-interval, .kx-mark .kx-box-share')].map(box),
  };
})"""


@pytest.fixture(scope="module")
def report_file(hub: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from report_session import measured_session

    from kernel_explorer import report

    explorer = measured_session()
    try:
        yield Path(report(explorer, tmp_path_factory.mktemp("report") / "report.html"))
    finally:
        explorer.reset()


@pytest.mark.parametrize("width", [900, 1280])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_report_reads_at_its_width(
    browser: Browser, report_file: Path, width: int, scheme: Literal["light", "dark"]
) -> None:
    context = browser.new_context(viewport={"width": width, "height": 1000}, color_scheme=scheme)
    page = context.new_page()
    try:
        page.goto(report_file.as_uri())
        screenshot(page, f"report-{width}-{scheme}")
        assert page.evaluate(_BROKEN_CELLS) == []
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # tables scroll alone
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert (background == "rgb(255, 255, 255)") == (scheme == "light")  # the reader's scheme
        charts = page.evaluate(_CHARTS)
        assert {chart["name"] for chart in charts} >= {"speed", "pairs", "errors", "breakdown"}
        for chart in charts:
            ticks = chart["ticks"]
            assert 3 <= len(ticks) <= 6, (chart["name"], [t["text"] for t in ticks])
            for before, after in itertools.pairwise(ticks):
                assert before["right"] <= after["left"], (chart["name"], before["text"], after["text"])
            area, frame = chart["area"], chart["frame"]
            assert chart["rows"], chart["name"]
            for row in chart["rows"]:  # every row label whole inside its chart, left of the plot
                assert frame["left"] - 0.5 <= row["left"] and row["right"] <= area["left"], (
                    chart["name"],
                    row["text"],
                )
            assert chart["marks"]
            for mark in chart["marks"]:
                assert area["left"] - 0.5 <= mark["left"] and mark["right"] <= area["right"] + 0.5, chart[
                    "name"
                ]
                assert area["top"] - 0.5 <= mark["top"] and mark["bottom"] <= area["bottom"] + 0.5, chart[
                    "name"
                ]
    finally:
        context.close()
