"""The live plots: what a redraw sends is what is new, the browser keeps a fixed budget per trace,
redraws run between pairs on the measuring thread, and the axes read at a glance."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest

from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import LayerLatency, Record, RunEvent
from kernel_explorer.views.live_figures import MAX_DRAWN, Series
from kernel_explorer.views.plot_style import MAX_TICKS, log_ticks
from kernel_explorer.views.plots import LivePlots, kernel_off_name


def _pairs(run_id: str, layers: dict[str, int], first: int = 0) -> list[Record]:
    return [
        Record(
            run_id, LayerLatency(2e-6, 1e-6, 2.0 + i / 1e4, kernel_on=True), layer, f"{layer}.0", time=1.0 + i
        )
        for layer, count in layers.items()
        for i in range(first, first + count)
    ]


@contextlib.contextmanager
def _drawn(records: list[Record]) -> Iterator[tuple[ResultLog, LivePlots]]:
    """Plots that drew `records` in one redraw (only explicit flushes draw)."""
    log = ResultLog()
    plots = LivePlots(log, interval=3600)
    try:
        for record in records:
            log.append(record)
        plots.flush()
        yield log, plots
    finally:
        plots.close()


def test_every_pair_of_one_redraw_is_drawn() -> None:
    started = Record("run-1", RunEvent("started"), time=0.0)
    with _drawn([started, *_pairs("run-1", {"RMSNorm": 400, "SiLU": 250})]) as (log, plots):
        drawn = {trace.legendgroup: len(trace.x) for trace in plots.latency.data}
        assert drawn == {"RMSNorm": 400, "SiLU": 250}
        assert plots.points() == 650 == len(log.records("layer_latency")) == plots.pairs_received()
        for record in _pairs("run-1", {"RMSNorm": 100}, first=400):
            log.append(record)
        plots.flush()
        assert plots.points() == 750 == plots.pairs_received()
        assert len(plots.latency.data[0].x) == 500 and list(plots.latency.data[0].x[:2]) == [1.0, 2.0]


def _sent_by_next_redraw(log: ResultLog, plots: LivePlots, records: list[Record]) -> list[dict]:
    """The operations the next redraw sends, and append `records` before it."""
    sent: list[dict] = []
    plots.latency.send = lambda message, buffers=None: sent.extend(message["ops"])  # type: ignore[method-assign]
    for record in records:
        log.append(record)
    plots.flush()
    return sent


def test_a_redraw_sends_the_new_points_only_however_long_the_run() -> None:
    """A FigureWidget resent every point of every trace at each 0.3 s redraw: after minutes the
    kernel and the browser did work that grew with the run, and a Stop click waited behind it."""
    with _drawn(_pairs("run-1", {"RMSNorm": 50_000})) as (log, plots):
        before = plots.bytes_sent()
        step = plots._series["RMSNorm"].step  # pairs per point by now
        ops = _sent_by_next_redraw(log, plots, _pairs("run-1", {"RMSNorm": 3 * step}, first=50_000))
        assert [op["op"] for op in ops] == ["extend"], ops
        assert len(ops[0]["x"][0]) <= 4 and ops[0]["max"] == MAX_DRAWN  # the browser's own cap
        assert plots.bytes_sent() - before < 1500  # a few points, not the trace


def test_each_trace_keeps_a_fixed_budget_of_exact_medians() -> None:
    series = Series(budget=4)
    for i, y in enumerate([5, 1, 3, 2, 9, 7, 4, 8, 6, 0]):
        series.add(float(i), float(y))
    x, y, whole = series.new_points()
    # 10 pairs over a budget of 4: each point the median of 4 consecutive pairs (the rest waits)
    assert whole and series.step == 4 and y == [2.5, 7.5] and x == [2.0, 6.0]
    with _drawn(_pairs("run-1", {"RMSNorm": 20 * MAX_DRAWN})) as (_, plots):
        (trace,) = plots.latency.data
        assert len(trace.x) <= MAX_DRAWN and trace.marker.symbol == "circle"  # merged, still markers
        assert f"(median of {plots._series['RMSNorm'].step} pairs)" in trace.hovertemplate  # what a point is
        assert (
            plots.latency.plot_layout.xaxis.title.text == "seconds into the run"
        )  # short: beside the legend


def test_redraws_run_on_the_appending_thread_with_no_thread_of_their_own() -> None:
    """A plot thread serialized figures while pairs were timed, and competed with the measurement
    and with the kernel's widget messages for the interpreter."""
    log = ResultLog()
    before = {t.name for t in threading.enumerate()}
    plots = LivePlots(log, interval=0.0)
    threads: list[str] = []
    plots.latency.send = lambda message, buffers=None: threads.append(threading.current_thread().name)  # type: ignore[method-assign]

    def measure() -> None:
        for record in _pairs("run-1", {"RMSNorm": 5}):
            log.append(record)

    worker = threading.Thread(target=measure, name="measuring")
    worker.start()
    worker.join()
    assert {t.name for t in threading.enumerate()} <= before
    assert threads and set(threads) == {"measuring"}
    plots.close()


def test_a_new_run_counts_from_zero() -> None:
    with _drawn(_pairs("run-1", {"RMSNorm": 5}) + _pairs("run-2", {"SiLU": 3})) as (_, plots):
        assert plots.pairs_received() == 3 and plots.points() == 3
        assert [trace.legendgroup for trace in plots.latency.data] == ["SiLU"]


def test_plots_made_after_a_measurement_open_with_it() -> None:
    log = ResultLog(_pairs("run-1", {"RMSNorm": 7}))
    plots = LivePlots(log, interval=3600)
    assert [len(trace.x) for trace in plots.latency.data] == [7] and plots.pairs_received() == 7
    assert plots.latency.plot_layout.yaxis.visible and not plots.latency.plot_layout.annotations
    plots.close()


def test_an_empty_plot_has_no_axes_and_title_legend_and_toolbar_keep_apart() -> None:
    with _drawn([]) as (_, plots):
        for plot in plots.figures:
            layout = plot.plot_layout
            assert layout.xaxis.visible is False and layout.yaxis.visible is False and layout.annotations
            assert layout.title.xanchor == "left" and layout.title.yref == "container"
            # at the right of the plot: 9 entries under it took 5 rows and covered the x title
            legend = layout.legend
            assert legend.orientation == "v" and legend.xanchor == "left" and legend.x == 1
            assert plot.figure()["config"]["displayModeBar"] is False


def test_the_throughput_axis_labels_at_most_six_ticks_too() -> None:
    """A linear axis: plotly's own choice was 7 labels (0, 5, ... 30 tokens/s) in 200 px."""
    with _drawn([]) as (_, plots):
        assert plots.throughput.plot_layout.yaxis.nticks == MAX_TICKS


def test_a_layer_switched_off_has_a_short_legend_entry() -> None:
    off = Record("run-1", LayerLatency(1e-6, 1e-6, 1.0, kernel_on=False), "RMSNorm", "m.0", time=1.0)
    with _drawn([off]) as (_, plots):
        assert [trace.name for trace in plots.latency.data] == [kernel_off_name("RMSNorm")]
        assert kernel_off_name("RMSNorm") == "RMSNorm · kernel off"


@pytest.mark.parametrize(("low", "high"), [(0.002, 2000), (0.4, 3.0), (0.9, 1.2), (1e-3, 1e6), (0.05, 1.0)])
def test_a_log_axis_labels_at_most_six_ticks(low: float, high: float) -> None:
    """16 labels (0.002x ... 2000x) overlapped in a plot about 110 px high."""
    ticks = log_ticks(low, high)
    assert 1 <= len(ticks["tickvals"]) <= MAX_TICKS and len(ticks["ticktext"]) == len(ticks["tickvals"])
    assert all(text.endswith("x") for text in ticks["ticktext"])
    errors = log_ticks(1e-30, 1e-4, unit="", decades_only=True)
    assert (len(errors["tickvals"]) <= MAX_TICKS and "10⁻⁶" in errors["ticktext"]) or len(errors["ticktext"])


def test_an_error_axis_spanning_less_than_a_decade_labels_its_steps() -> None:
    """The soak's error plot spanned 1.2e-6 to 9e-6 and read one label, 10⁻⁶, at its very bottom."""
    ticks = log_ticks(1.2e-6, 9e-6, unit="", decades_only=True)
    inside = [t for v, t in zip(ticks["tickvals"], ticks["ticktext"], strict=True) if 1.2e-6 <= v <= 9e-6]
    assert inside == ["2·10⁻⁶", "5·10⁻⁶"] and len(ticks["tickvals"]) <= MAX_TICKS
    wide = log_ticks(1e-8, 1e-4, unit="", decades_only=True)  # decades alone where they are enough
    assert wide["ticktext"] == ["10⁻⁸", "10⁻⁷", "10⁻⁶", "10⁻⁵", "10⁻⁴"]


def test_the_live_plots_send_plotly_js_once() -> None:
    """One copy of plotly.js per dashboard: the first plot carries the bundle (about 4.6 MB), the
    others only their own module, which waits for it (a FigureWidget carried it in every figure)."""
    plots = LivePlots(ResultLog(), interval=60)
    try:
        figures = (plots.latency, plots.speedup, plots.throughput, plots.divergence)
        sizes = [len(figure.get_state()["_esm"]) for figure in figures]
        assert sizes[0] > 4_000_000, "the first plot brings plotly.js"
        assert max(sizes[1:]) < 50_000, f"a later plot carries plotly.js again: {sizes}"
    finally:
        plots.close()


def _pair(speedup: float, at: float, *, stalled: bool = False, layer: str = "RMSNorm") -> Record:
    """One real pair: PyTorch's 2 µs against the kernel's time that gives `speedup`."""
    return Record(
        "run-1",
        LayerLatency(2e-6, 2e-6 / speedup, speedup, kernel_on=True, stalled=stalled),
        layer,
        f"{layer}.0",
        time=at,
    )


def test_the_per_pair_axis_spans_the_bulk_and_marks_stalled_pairs_at_its_edge() -> None:
    """A long Run's per-pair axis read 0.01x-100x+: four pairs timed while the machine stalled set
    it, and the 200 others (1.2-1.3x) were one flat line in the middle."""
    bulk = [_pair(1.2 + (i % 7) / 70, 1.0 + i) for i in range(200)]
    stalls = [_pair(0.01, 50.5, stalled=True), _pair(0.012, 90.5, stalled=True), _pair(120.0, 130.5)]
    stalls.append(_pair(95.0, 170.5, stalled=True))
    with _drawn(sorted([*bulk, *stalls], key=lambda r: r.time)) as (_, plots):
        low, high = (10**v for v in plots.latency.plot_layout.yaxis.range)
        assert 0.4 < low <= 1.0 and 1.3 < high < 3.0, (low, high)  # the bulk and the 1x line
        labelled = plots.latency.plot_layout.yaxis.tickvals
        assert 2 <= len(labelled) <= MAX_TICKS and all(low <= v <= high for v in labelled)
        beyond = [trace for trace in plots.latency.data if trace.name.endswith("(beyond the axis)")]
        (edge,) = beyond  # one trace: the layer's colour, out of the legend
        assert edge.showlegend is False and edge.marker.color == plots.latency.data[0].marker.color
        assert sorted(edge.x) == [50.5 - 1.0, 90.5 - 1.0, 130.5 - 1.0, 170.5 - 1.0]  # seconds into the run
        at = dict(zip(edge.x, zip(edge.y, edge.marker.symbol, edge.hovertext, strict=True), strict=True))
        top, bottom = 10 ** padded_edge(plots, "top"), 10 ** padded_edge(plots, "bottom")
        assert at[49.5][:2] == (bottom, "triangle-down") and "0.01x" in at[49.5][2]
        assert at[129.5][:2] == (top, "triangle-up") and "120x" in at[129.5][2]
        # nothing is hidden: each pair the axis leaves out has its triangle at the edge
        pairs = plots.latency.data[0]
        assert len(pairs.y) == 204 and sum(not low <= y <= high for y in pairs.y) == len(edge.x)


def test_a_redraw_resends_the_edge_triangles_only_when_they_change() -> None:
    """Each redraw with new points asked the triangles again and resent all of them: a long Run's
    bytes grew with its stalls (the five-minute soak's last minute against its first)."""
    bulk = [_pair(1.2 + (i % 7) / 70, 1.0 + i) for i in range(200)]
    with _drawn([*bulk, _pair(0.01, 200.5, stalled=True)]) as (log, plots):
        ops = _sent_by_next_redraw(log, plots, [_pair(1.25, 201.0 + i) for i in range(3)])
        (edge,) = [i for i, t in enumerate(plots.latency.data) if t.name.endswith("(beyond the axis)")]
        assert not [op for op in ops if op["op"] == "restyle" and op["traces"] == [edge]], ops
        ops = _sent_by_next_redraw(log, plots, [_pair(120.0, 205.0)])  # a new stall: sent
        assert [op for op in ops if op["op"] == "restyle" and op["traces"] == [edge]], ops
        assert len(plots.latency.data[edge].x) == 2


def padded_edge(plots: LivePlots, which: str) -> float:
    """The axis' edge value (log10) without the room left for a marker drawn whole there."""
    low, high = plots.latency.plot_layout.yaxis.range
    return low + 0.04 if which == "bottom" else high - 0.04


def test_a_slow_candidates_few_pairs_and_its_median_stay_in_view() -> None:
    """The bulk is not everything: a candidate whose pairs all lie at 0.05x (a slow kernel) is no
    stall; its median point keeps its pairs on the axis."""
    from kernel_explorer.measure.records import Provenance

    slow = Provenance(kernel_id="_slow_cpu_1a2b", isa=None, candidate="peer/slow-silu:Slow (cpu, inference)")
    fast = [_pair(1.5 + (i % 5) / 100, 1.0 + i / 10, layer="SiLU") for i in range(300)]
    crawling = [
        Record("run-1", LayerLatency(2e-6, 4e-5, 0.05), "SiLU", "SiLU.0", time=40.0 + i / 10, provenance=slow)
        for i in range(6)
    ]
    with _drawn([*fast, *crawling]) as (_, plots):
        low, _ = (10**v for v in plots.latency.plot_layout.yaxis.range)
        assert low <= 0.05
        assert not [trace for trace in plots.latency.data if trace.name.endswith("(beyond the axis)")]


def test_a_compares_two_far_candidates_keep_the_axis_to_their_own_bulks() -> None:
    """A compare of candidates at 0.88x and 0.27x read 0.01x-20x: quartiles of the pooled pairs lay
    one in each cluster, and the stalled pairs (0.015x, 6-20x) were drawn as ordinary points."""
    from kernel_explorer.measure.records import Provenance

    def candidate(name: str) -> Provenance:
        return Provenance(
            kernel_id=f"_{name}_cpu_1a2b", isa=None, candidate=f"peer/{name}:Silu (cpu, inference)"
        )

    near, slow = candidate("near-silu"), candidate("slow-silu")
    records = [
        Record(
            "run-1", LayerLatency(2e-6, 2e-6 / s, s), "SiLU", "SiLU.0", time=1.0 + i / 100, provenance=near
        )
        for i, s in enumerate(0.88 * (1 + (i % 9 - 4) / 40) for i in range(150))
    ]
    stalls = [(0.015, 1.2), (6.0, 1.3), (11.0, 1.4), (20.0, 1.5)]
    records += [
        Record(
            "run-1", LayerLatency(2e-6, 2e-6 / s, s, stalled=True), "SiLU", "SiLU.0", time=t, provenance=near
        )
        for s, t in stalls
    ]
    records += [
        Record(
            "run-1", LayerLatency(2e-6, 2e-6 / s, s), "SiLU", "SiLU.0", time=3.0 + i / 100, provenance=slow
        )
        for i, s in enumerate(0.27 * (1 + (i % 7 - 3) / 30) for i in range(150))
    ]
    with _drawn(sorted(records, key=lambda r: r.time)) as (_, plots):
        low, high = (10**v for v in plots.latency.plot_layout.yaxis.range)
        assert 0.1 <= low < 0.25 and 1.0 <= high <= 2.0, (low, high)
        (edge,) = [trace for trace in plots.latency.data if trace.name.endswith("(beyond the axis)")]
        assert sorted(round(x, 3) for x in edge.x) == [round(t - 1.0, 3) for _, t in stalls]


def test_an_edge_triangle_is_drawn_whole_and_its_hover_reads_in_two_short_lines() -> None:
    """On a wide axis the plot's edge cut the triangles in half, and their hover, one long line,
    was cut at both ends of the plot."""
    bulk = [_pair(0.5 * 4 ** ((i % 11) / 10), 1.0 + i) for i in range(120)]
    stalls = [_pair(0.0232, 60.2, stalled=True), _pair(900.0, 80.7, stalled=True)]
    with _drawn(sorted([*bulk, *stalls], key=lambda r: r.time)) as (_, plots):
        (edge,) = [trace for trace in plots.latency.data if trace.name.endswith("(beyond the axis)")]
        assert edge.cliponaxis is False
        assert list(edge.hovertext) == [
            "0.0232x at 59.2 s<br>below the axis, drawn at its edge",
            "900x at 79.7 s<br>above the axis, drawn at its edge",
        ]
        assert edge.hovertemplate == "%{hovertext}<extra>RMSNorm</extra>"  # the trace's name beside it
