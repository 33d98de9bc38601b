"""The HTML report: one self-contained file with tables and plots."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_log import _log

from kernel_explorer.explorer import Explorer
from kernel_explorer.views.report import write_report


def test_html_report_is_self_contained(tmp_path: Path) -> None:
    path = write_report(_log(), tmp_path / "report.html", title="Report <test>")
    text = path.read_text()
    assert "<title>Report &lt;test&gt;</title>" in text
    assert "<th class='num'>speedup [95% interval]</th>" in text  # a number: right-aligned, unbroken
    assert "Median speedup per layer, with its 95% interval" in text
    assert "<style>" in text and "class='faster'" in text  # a styled table, the verdict coloured
    # counted apart: 305 pairs are 5 rounds of 61
    assert "<th class='num'>pairs</th><th class='num'>instances</th>" in text
    assert "<svg class='kx-chart'" in text and "<script" not in text  # charts drawn without a script
    assert 'src="https://' not in text and len(text) < 100_000


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
    assert "<th class='num'>speedup [95% interval]</th>" in text
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


@pytest.fixture(scope="module")
def session(hub: dict) -> Iterator[Explorer]:
    """A Run of three cycles, one more after SiLU went off, then a compare (`report_session`)."""
    from report_session import measured_session

    explorer = measured_session()
    yield explorer
    explorer.reset()


def _cells(text: str, tag: str) -> list[str]:
    return re.findall(rf"<{tag}(?: class='([^']*)')?>", text)


def test_a_sessions_report_is_small_and_does_not_grow_with_its_pairs(
    session: Explorer, tmp_path: Path
) -> None:
    from kernel_explorer import report
    from kernel_explorer.records import ResultLog

    first = Path(report(session, tmp_path / "r.html"))
    size = first.stat().st_size
    pairs = len(session.results.columns("layer_latency")["speedup"])
    print(f"report of {len(session.results)} records ({pairs} pairs): {size / 1e3:.1f} KB")
    text = first.read_text()
    assert size < 1_500_000 and "Plotly.newPlot" not in text  # no plotly.js to carry
    assert "data-chart='breakdown'" in text  # where the time goes, drawn as SVG too
    # four times the pairs (each timed pair again, three times): the page stays as large
    grown = ResultLog(session.results.records() + session.results.records("layer_latency") * 3)
    again = write_report(grown, tmp_path / "grown.html", title="kernel_explorer report")
    assert (
        again.stat().st_size
        < write_report(session.results, tmp_path / "once.html", title="kernel_explorer report").stat().st_size
        * 1.05
    )


def test_tables_keep_numbers_and_words_whole(session: Explorer, tmp_path: Path) -> None:
    from kernel_explorer import report

    text = Path(report(session, tmp_path / "r.html")).read_text()
    style = text[text.index("<style>") : text.index("</style>")]
    assert "overflow-wrap: anywhere" not in style and "white-space: nowrap" in style
    assert (
        re.search(r"td\.num \{[^}]*text-align: right", style) or "th.num, td.num { text-align: right" in style
    )
    assert "prefers-color-scheme: dark" in style  # the reader's scheme, both ways
    tables = text.count("<table")
    assert tables >= 5 and text.count("<div class='table-scroll'><table") == tables  # each scrolls alone
    # every count and interval cell of the layer table is a number cell (right-aligned, nowrap)
    speed = text[text.index("<h2>Layer speed") :]
    speed = speed[: speed.index("</table>")]
    head = re.findall(r"<th(?: class='([^']*)')?>([^<]*)</th>", speed)
    numeric = {
        "speedup [95% interval]",
        "pairs",
        "instances",
        "noise floor",
        "across runs",
        "PyTorch per call",
    }
    assert {title for css, title in head if css == "num"} >= numeric
    assert ("prose", "notes") in head or ("", "notes") in head


def test_each_chart_and_interval_says_what_it_covers(session: Explorer, tmp_path: Path) -> None:
    from report_session import RUN_CYCLES

    from kernel_explorer import report
    from kernel_explorer.views.report_charts import charts, runs

    text = Path(report(session, tmp_path / "r.html")).read_text()
    found = {chart.name: chart for chart in charts(session.results)}
    assert set(found) >= {"speed", "pairs", "errors"}
    assert all(chart.scope for chart in found.values())
    assert "one run whole" in found["speed"].scope and "last cycle" in found["speed"].scope
    (run, _, _, cycles), (after, *_), (compared, *_), *_ = runs(
        session.results
    )  # the Run, its sequel, the compare
    assert cycles == f"{RUN_CYCLES} cycles (a Run)"
    runs_with_two_marks = [row.label for row in found["speed"].rows if len(row.marks) == 2]
    assert runs_with_two_marks and all(label.endswith(run) for label in runs_with_two_marks)
    # the switch table names where its number comes from: SiLU's last cycle of the first Run,
    # RMSNorm's whole compare
    assert f"<td>{run}, its last cycle (of {RUN_CYCLES})</td>" in text
    assert f"<td>{compared} (whole run, 1 cycle)</td>" in text and after != compared
    # kernel-off pairs are their own row, never a kernel's
    assert any("kernel off" in row.label for row in found["pairs"].rows)


def test_the_error_chart_leaves_kernel_off_periods_out_of_the_kernels_error(session: Explorer) -> None:
    from kernel_explorer.views.report_charts import error_chart
    from kernel_explorer.views.svg_chart import Point

    chart = error_chart(session.results)
    assert chart is not None
    divergences = session.results.records("layer_divergence")
    for row in chart.rows:
        kernel = [m.value for m in row.marks if isinstance(m, Point) and m.css == "kx-kernel"]
        layer = row.label.split(" · ")[0]  # and the candidate, where its kernel ran
        on = [d.values.kernel_err64 for d in divergences if d.layer == layer and d.values.kernel_on]
        assert kernel == ([max(on)] if on else [])  # no kernel mark for a layer whose kernel never ran
    assert any(not d.values.kernel_on for d in divergences if d.layer == "SiLU")  # there was an off period


def test_a_layer_measured_with_one_candidate_names_it_on_every_kernel_row(
    session: Explorer, tmp_path: Path
) -> None:
    """RMSNorm measured with its bundled kernel alone read "RMSNorm · run-1" in the charts and an
    empty kernel cell in the tables: a kernel's row names its candidate, one or several."""
    from kernel_explorer import report
    from kernel_explorer.views.report_charts import error_chart, pair_chart, speed_chart

    for chart in (speed_chart(session.results), pair_chart(session.results)):
        assert chart is not None
        kernel_rows = [row.label for row in chart.rows if "kernel off" not in row.label]
        assert kernel_rows and all(" · bundled " in label for label in kernel_rows), kernel_rows
    errors = error_chart(session.results)
    assert errors is not None
    ran = [row.label for row in errors.rows if any(m.css == "kx-kernel" for m in row.marks)]
    assert ran and all(" · bundled " in label for label in ran), ran
    text = Path(report(session, tmp_path / "r.html")).read_text()
    kernels = {cells[2] for cells in _table_rows(text, "Layer speed") if "kernel off" not in cells[4]}
    assert kernels == {"bundled activation", "bundled rmsnorm"}, kernels


def test_every_charts_ticks_bracket_its_marks(session: Explorer) -> None:
    from kernel_explorer.views.report_charts import charts
    from kernel_explorer.views.svg_chart import MAX_TICKS, MIN_TICKS, log_axis

    for chart in charts(session.results):
        low, high = chart.extent()
        axis = log_axis(low, high, chart.unit)
        assert MIN_TICKS <= len(axis.ticks) <= MAX_TICKS, chart.name
        assert axis.ticks[0][0] <= low and axis.ticks[-1][0] >= high, chart.name
        assert axis.low <= axis.ticks[0][0] and axis.ticks[-1][0] <= axis.high


def test_prose_cells_keep_hyphenated_words_and_intervals_on_one_line() -> None:
    from kernel_explorer.views.report import keep_words_whole

    page = keep_words_whole("<td class='prose'>silu 1.00x [0.98, 1.02] on AVX-512-BF16</td><td>AVX-512</td>")
    assert "<span class='w'>1.00x [0.98, 1.02]</span>" in page  # a browser would break after "[0.98,"
    assert "<span class='w'>AVX-512-BF16</span>" in page  # ... and after each hyphen
    assert page.endswith("<td>AVX-512</td>")  # a cell that never wraps needs no span


def test_a_long_list_in_a_fact_reads_an_item_a_line(tmp_path: Path) -> None:
    from kernel_explorer.views.report import ReportContext

    paths = "; ".join(f"kernel{i}: avx512 runs {i} of 21 ops" for i in range(8))
    context = ReportContext(hardware=(("Bundled kernel paths", paths),))
    text = write_report(_log(), tmp_path / "r.html", title="r", context=context).read_text()
    assert "kernel0: avx512 runs 0 of 21 ops<br>kernel1: avx512" in text


def test_the_values_summary_keeps_kernel_off_periods_a_row_of_their_own(session: Explorer) -> None:
    summary = session.results.summary("values")
    divergences = session.results.records("layer_divergence")
    off_rows = [row for row in summary.rows if row.get("kernel") == "kernel off"]
    assert sorted((row["run_id"], row["layer"]) for row in off_rows) == sorted(
        {(d.run_id, d.layer) for d in divergences if not d.values.kernel_on}
    )
    for row in summary.rows:
        on = row.get("kernel") != "kernel off"
        errors = [
            d.values.kernel_err64
            for d in divergences
            if (d.run_id, d.layer) == (row["run_id"], row["layer"]) and d.values.kernel_on == on
        ]
        assert errors and row["kernel_err64"].value == max(errors)


def test_a_layer_measured_with_two_candidates_names_its_candidate_on_every_row() -> None:
    """A compare of the user's own SiLU alone (run-2) after one of the bundled (run-1): each row says
    which kernel it was, so 'SiLU 0.2x slower' does not read as every SiLU kernel's speed."""
    from kernel_explorer.measure.records import Provenance, Record
    from kernel_explorer.records import LayerLatency, ResultLog
    from kernel_explorer.views.report_charts import pair_chart

    log = ResultLog()
    for run, label, speedup in (
        ("run-1", "bundled/activation:Silu", 1.5),
        ("run-2", "peer/plain-silu:Silu", 0.2),
    ):
        origin = Provenance(kernel_id=f"k-{run}", candidate=label)
        for i in range(8):
            ratio = speedup * (1 + i / 100)
            log.append(Record(run, LayerLatency(ratio, 1.0, ratio), "SiLU", "m.act", provenance=origin))
    rows = [row.label for row in pair_chart(log).rows]
    assert sorted(rows) == ["SiLU · bundled activation · run-1", "SiLU · peer plain-silu · run-2"]


def test_the_report_names_a_candidate_by_the_dashboards_words() -> None:
    """The report read "bundled/activation:Silu" and "peer/plain-silu-876bd9a6:PlainSilu" where the
    dashboard reads "SiLU · bundled activation" and "SiLU · peer plain-silu": the dashboard's words
    (`plot_style.candidate_short`), a build's digest only where two builds would read alike."""
    from kernel_explorer.measure.records import Provenance, Record
    from kernel_explorer.records import LayerLatency, ResultLog
    from kernel_explorer.views.plot_style import candidate_short, entry_name
    from kernel_explorer.views.report_charts import candidate_names, pair_chart

    log = ResultLog()
    labels = (
        "bundled/activation:Silu (cpu, inference)",
        "peer/plain-silu-876bd9a6:PlainSilu (cpu, inference)",
    )
    for run, label in zip(("run-1", "run-2"), labels, strict=True):
        origin = Provenance(kernel_id=f"k-{run}", candidate=label)
        log.append(Record(run, LayerLatency(1.5, 1.0, 1.5), "SiLU", "m.act", provenance=origin))
    rows = sorted(row.label.rsplit(" · ", 1)[0] for row in pair_chart(log).rows)
    assert rows == sorted(entry_name("SiLU", candidate_short(None, label)) for label in labels)
    assert rows == ["SiLU · bundled activation", "SiLU · peer plain-silu"]
    rebuilt = Provenance(kernel_id="k-3", candidate="peer/plain-silu-11aa22bb:PlainSilu (cpu, inference)")
    log.append(Record("run-3", LayerLatency(1.5, 1.0, 1.5), "SiLU", "m.act", provenance=rebuilt))
    assert set(candidate_names(log).values()) == {
        "bundled activation",
        "peer plain-silu-876bd9a6",
        "peer plain-silu-11aa22bb",
    }


def test_a_row_of_one_pair_reads_1_pair() -> None:
    """A review's pairs chart read "1 pairs" for a row of one pair."""
    from kernel_explorer.measure.records import Provenance, Record
    from kernel_explorer.records import LayerLatency, ResultLog
    from kernel_explorer.views.report_charts import pair_chart

    log = ResultLog()
    origin = Provenance(kernel_id="k", candidate="bundled/activation:Silu (cpu, inference)")
    log.append(Record("run-1", LayerLatency(1.5, 1.0, 1.5), "SiLU", "m.act", provenance=origin))
    for i in range(3):
        log.append(Record("run-1", LayerLatency(1.0, 1.0, 1.0, kernel_on=False), "RMSNorm", f"n{i}"))
    words = {row.label: row.marks[0].label for row in pair_chart(log).rows}
    assert set(words.values()) == {"1 pair", "3 pairs"}, words


@pytest.fixture(scope="module")
def two_candidates(hub: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Explorer]:
    """RMSNorm's bundled kernel and a peer compared in one run, then the peer alone in a second: the
    tiny Llama, real kernels, a Python-only peer built here."""
    import warnings

    from kernel_repos import write_noarch_repo

    from kernel_explorer.loading import tiny_llama

    peer = write_noarch_repo(tmp_path_factory.mktemp("peer") / "py-rmsnorm")
    explorer = Explorer(tiny_llama(), peers=[peer], include_transformers=False)
    with warnings.catch_warnings():  # a busy machine warns that it is noisy: not what is tested
        warnings.simplefilter("ignore")
        explorer.compare("RMSNorm", candidates=["rmsnorm", "py-rmsnorm"], pairs=6)
        explorer.compare("RMSNorm", candidates=["py-rmsnorm"], pairs=6)
    yield explorer
    explorer.reset()


def _labels(explorer: Explorer) -> tuple[str, str]:
    """The two candidates' labels (without "(device, mode)")."""
    found = {r.provenance.candidate for r in explorer.results.records("layer_divergence")}
    bundled = next(c for c in found if c.startswith("bundled/"))
    peer = next(c for c in found if c.startswith("peer/"))
    return bundled.split(" (")[0], peer.split(" (")[0]


def _names(explorer: Explorer) -> tuple[str, str]:
    """The two candidates as the report names them: the dashboard's words."""
    from kernel_explorer.views.plot_style import candidate_short

    bundled, peer = (candidate_short(None, label) for label in _labels(explorer))
    assert (bundled, peer) == ("bundled rmsnorm", "peer py-rmsnorm")
    return bundled, peer


def _runs(explorer: Explorer) -> list[str]:
    """The explorer's runs in order (run ids count up over the process, not per explorer)."""
    return list(dict.fromkeys(r.run_id for r in explorer.results.records("layer_verdict")))


def _table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of each body row of the report's table under `heading`."""
    table = text[text.index(f"<h2>{heading}") :]
    table = table[table.index("<tbody>") : table.index("</tbody>")]
    return [re.findall(r"<td(?: class='[^']*')?>([^<]*)</td>", row) for row in table.split("<tr>")[1:]]


def test_the_tables_name_the_one_candidate_a_run_measured(two_candidates: Explorer, tmp_path: Path) -> None:
    """The second run measured the peer alone: its rows in the speed and accuracy tables left the
    kernel cell blank while the charts named the peer; each cell now holds the charts' label."""
    from kernel_explorer import report

    bundled, peer = _names(two_candidates)
    both, alone = _runs(two_candidates)
    text = Path(report(two_candidates, tmp_path / "r.html")).read_text()
    for heading in ("Layer speed", "Layer values"):
        kernels = {(cells[0], cells[2]) for cells in _table_rows(text, heading)}
        assert kernels == {(both, bundled), (both, peer), (alone, peer)}, (heading, kernels)


def test_the_speed_and_pair_charts_name_a_kernel_alike(two_candidates: Explorer) -> None:
    """The median chart named the first run's two kernels by kernel id (`_rmsnorm_cpu_039c837ecd`)
    where the per-pair chart named them by candidate: one label for a kernel, whichever the run."""
    from kernel_explorer.views.report_charts import pair_chart, speed_chart

    bundled, peer = _names(two_candidates)
    both, alone = _runs(two_candidates)
    expected = {f"RMSNorm · {bundled} · {both}", f"RMSNorm · {peer} · {both}", f"RMSNorm · {peer} · {alone}"}
    speed, pairs = speed_chart(two_candidates.results), pair_chart(two_candidates.results)
    assert speed is not None and pairs is not None
    assert {row.label for row in speed.rows} == expected
    assert {row.label for row in pairs.rows if "kernel off" not in row.label} == expected


def test_a_speed_marks_hover_says_its_verdict_in_words(two_candidates: Explorer) -> None:
    """The whole run's hover read "... VerdictCell(verdict=<Verdict.SLOWER: 'slower'>, stalled=59,
    pairs=32859) ...": the verdict cell's repr, not what it says."""
    from kernel_explorer.views.report_charts import speed_chart

    speed = speed_chart(two_candidates.results)
    assert speed is not None
    hovers = [mark.hover for row in speed.rows for mark in row.marks if "whole run" in (mark.hover or "")]
    assert hovers, [row.label for row in speed.rows]
    for hover in hovers:
        assert "Verdict" not in hover and "stalled=" not in hover, hover
        assert re.search(r"\] (faster|slower|no difference|not measurable)", hover), hover


def test_the_error_chart_draws_each_candidate_of_a_layer_apart(two_candidates: Explorer) -> None:
    """The error chart drew one RMSNorm row, the bundled kernel's and the peer's errors merged into
    the larger: a row per (layer, candidate), named as the other charts name it."""
    from kernel_explorer.views.report_charts import error_chart
    from kernel_explorer.views.svg_chart import Point

    chart = error_chart(two_candidates.results)
    assert chart is not None
    divergences = two_candidates.results.records("layer_divergence")
    worst = {}
    for label, name in zip(_labels(two_candidates), _names(two_candidates), strict=True):
        mine = [d for d in divergences if d.provenance.candidate.startswith(f"{label} (")]
        errors = [d.values.kernel_err64 for d in mine]
        worst[f"RMSNorm · {name}"] = max(errors)
    drawn = {
        row.label: [m.value for m in row.marks if isinstance(m, Point) and m.css == "kx-kernel"]
        for row in chart.rows
    }
    assert drawn == {label: [value] for label, value in worst.items()}
