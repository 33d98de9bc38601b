"""The HTML report: one self-contained file with tables and plots."""

from __future__ import annotations

from pathlib import Path

from test_log import _log

from kernel_explorer.views.report import write_report


def test_html_report_is_self_contained(tmp_path: Path) -> None:
    path = write_report(_log(), tmp_path / "report.html", title="Report <test>")
    text = path.read_text()
    assert "<title>Report &lt;test&gt;</title>" in text
    assert "<th>speedup [95% interval]</th>" in text
    assert "Median speedup per layer and run, with its 95% interval" in text
    assert "<style>" in text and "class='faster'" in text  # a styled table, the verdict coloured
    assert "<th>pairs</th><th>instances</th>" in text  # counted apart: 305 pairs are 5 rounds of 61
    assert 'src="https://cdn.plot.ly' not in text and "Plotly.newPlot" in text  # plotly.js inlined
    assert len(text) > 1_000_000


def test_report_names_model_machine_date_and_switch_state(tmp_path: Path, hub: dict) -> None:
    from kernel_explorer import report
    from kernel_explorer.explorer import Explorer
    from kernel_explorer.loading import tiny_llama

    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.on("RMSNorm")
    explorer.compare("RMSNorm", pairs=6)
    text = Path(report(explorer, tmp_path / "r.html")).read_text()
    assert "LlamaForCausalLM" in text and "M parameters" in text and "torch" in text
    assert "Switch state when the report was written" in text and "RMSNorm" in text
    assert explorer.results.latest_verdicts()["RMSNorm"].summary in text
    # what stopped the pairs and the interval's real coverage are in the layer table
    assert "each interval is its run's" in text  # not the machine's: runs move by up to the floor
    assert "<th>stopped by</th>" in text and "<td>pairs</td>" in text
    assert "<th>speedup [95% interval]</th>" in text
    explorer.reset()


def test_a_report_to_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    import pytest

    from kernel_explorer.errors import KernelExplorerError

    with pytest.raises(KernelExplorerError, match="does not exist; create it first") as info:
        write_report(_log(), tmp_path / "no" / "such" / "r.html", title="r")
    assert "\n" not in str(info.value) and not (tmp_path / "no").exists()


def test_error_bars_and_speedup_bars_say_their_units_spread_and_n_on_hover() -> None:
    from kernel_explorer.views.report import figures

    found = {fig.layout.title.text: fig for fig in figures(_log())}
    errors = found["Largest error against a float64 run (lower is more accurate)"]
    assert "10⁻⁷" in errors.layout.yaxis.ticktext  # 10⁻⁷, not plotly's SI "100n"
    assert "output's units" in errors.layout.yaxis.title.text
    assert all("max abs error %{y:.2e} (output's units)" in bar.hovertemplate for bar in errors.data)
    (bars,) = found["Median speedup per layer and run, with its 95% interval"].data
    (hover,) = bars.customdata
    assert hover.startswith("95% interval ") and " 3 pairs, " in hover  # the spread and n
