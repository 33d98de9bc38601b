"""The HTML report: one self-contained file with tables and plots."""

from __future__ import annotations

from pathlib import Path

from test_results import _log

from kernel_explorer.report import write_report


def test_html_report_is_self_contained(tmp_path: Path) -> None:
    path = write_report(_log(), tmp_path / "report.html", title="Report <test>")
    text = path.read_text()
    assert "<title>Report &lt;test&gt;</title>" in text
    assert "speedup_median" in text and "Layer speedup" in text
    assert 'src="https://cdn.plot.ly' not in text and "Plotly.newPlot" in text  # plotly.js inlined
    assert len(text) > 1_000_000
