"""The live plots tell candidates of a layer apart, keep kernel-off pairs out of every kernel's
statistic, and give each layer one colour for the session (issue 49).

Notebook 03 compared the bundled SiLU (about 1.5x) with the user's own (about 0.3x) in one run; the
median plot drew one point "SiLU 0.31x", the per-pair plot one "SiLU" trace with both clusters."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

from kernel_explorer.measure.comparison import Comparison
from kernel_explorer.measure.kinds.time import summarize
from kernel_explorer.measure.kinds.time.records import LayerLatency, LayerVerdict
from kernel_explorer.measure.kinds.values.records import LayerDivergence
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import Provenance, Record, RunEvent
from kernel_explorer.views.live_plot import LivePlot
from kernel_explorer.views.plot_style import (
    MIN_SHADE_DISTANCE,
    candidate_colour,
    candidate_short,
    layer_colour,
    shade_distance,
)
from kernel_explorer.views.plots import LivePlots, kernel_off_name

BUNDLED = Provenance(
    kernel_id="_activation_cpu_1a2b", isa="avx2", candidate="bundled/activation:Silu (cpu, inference)"
)
PEER = Provenance(
    kernel_id="_plain_silu_cpu_9f8e", isa=None, candidate="peer/plain-silu:PlainSilu (cpu, inference)"
)


def _pairs(
    run: str,
    layer: str,
    speedup: float,
    count: int,
    origin: Provenance | None,
    *,
    on: bool = True,
    t0: float = 1.0,
) -> list[Record]:
    rng = random.Random(f"{layer}{speedup}{count}{on}")
    return [
        Record(
            run,
            LayerLatency(1e-5, 1e-5 / s, s, kernel_on=on),
            layer,
            f"model.layers.{i % 2}.mlp.act_fn",
            time=t0 + i * 0.01,
            provenance=origin,
        )
        for i, s in enumerate(speedup * (1 + rng.uniform(-0.05, 0.05)) for _ in range(count))
    ]


def _verdict(run: str, layer: str, pairs: list[Record], origin: Provenance | None, at: float) -> Record:
    """The verdict a layer comparison closes with: the same arithmetic (`Comparison`)."""
    found = Comparison.of_pairs([p.values for p in pairs], aa_ratios=[1.0, 1.01, 0.99, 1.0])
    values = LayerVerdict(
        instances=2,
        **found.fields(),  # type: ignore[arg-type]
        accuracy="as accurate as PyTorch",
        stopped_by="precision",
        kernel_on=found.kernel_on,
    )
    return Record(run, values, layer, time=at, provenance=origin)


@contextmanager
def _plots(records: list[Record]) -> Iterator[tuple[ResultLog, LivePlots]]:
    log = ResultLog()
    plots = LivePlots(log, interval=3600)
    try:
        for record in records:
            log.append(record)
        plots.flush()
        yield log, plots
    finally:
        plots.close()


def _by_name(plot: LivePlot) -> dict[str, dict]:
    return {trace["name"]: trace for trace in plot.data if trace.get("x")}


def test_two_candidates_of_a_layer_are_two_traces_and_two_points_named_by_short_name_and_source() -> None:
    bundled = _pairs("run-1", "SiLU", 1.5, 40, BUNDLED)
    peer = _pairs("run-1", "SiLU", 0.31, 40, PEER, t0=5.0)
    verdicts = [_verdict("run-1", "SiLU", bundled, BUNDLED, 4.0), _verdict("run-1", "SiLU", peer, PEER, 9.0)]
    with _plots([*bundled, verdicts[0], *peer, verdicts[1]]) as (log, plots):
        assert set(_by_name(plots.latency)) == {"SiLU · bundled activation", "SiLU · peer plain-silu"}
        points = _by_name(plots.speedup)
        assert set(points) == {"SiLU · bundled activation", "SiLU · peer plain-silu"}
        assert (
            points["SiLU · bundled activation"]["y"][0] > 1.3 > 0.4 > points["SiLU · peer plain-silu"]["y"][0]
        )
        assert {trace["x"][0] for trace in points.values()} == {"SiLU"}  # beside each other at their layer
        # the same number the status line prints (the verdict) and the summary's row of that kernel
        rows = summarize(log).to_pandas()
        for verdict in verdicts:
            name = plots.entry_name(verdict)
            assert points[name]["y"] == [verdict.values.speedup]
            row = rows[rows.kernel == verdict.provenance.kernel_id]  # type: ignore[union-attr]
            assert float(row.speedup.iloc[0]) == verdict.values.speedup
            assert points[name]["text"] == [f"{verdict.values.speedup:.2f}x"]


def test_a_candidates_point_stays_its_verdict_while_the_next_cycle_runs() -> None:
    """The plot read attention 1.24x while the status line read 1.28x: the plot drew the next cycle's
    pairs so far over the verdict the status line printed."""
    first = _pairs("run-1", "attention", 1.28, 30, BUNDLED)
    verdict = _verdict("run-1", "attention", first, BUNDLED, 2.0)
    later = _pairs("run-1", "attention", 1.1, 30, BUNDLED, t0=3.0)
    with _plots([*first, verdict, *later]) as (_, plots):
        (point,) = _by_name(plots.speedup).values()
        assert point["y"] == [verdict.values.speedup] and "latest verdict" in point["customdata"][0]
    with _plots(first[:10]) as (_, plots):  # before its verdict: its pairs so far, said so
        (point,) = _by_name(plots.speedup).values()
        assert "so far" in point["customdata"][0]


def test_kernel_off_pairs_and_values_count_in_no_kernels_statistic_and_the_layer_reads_kernel_off() -> None:
    """A layer switched off mid-run: its pairs after the switch are PyTorch against PyTorch; they
    read "not measurable" (clipped) and its error was counted as the kernel's (4.74e-6 both sides)."""
    on = _pairs("run-1", "attention", 2.0, 30, BUNDLED)
    off = _pairs("run-1", "attention", 1.0, 30, BUNDLED, on=False, t0=3.0)
    kernel_values = LayerDivergence("float32", 10, 0.5, True, kernel_err64=2.53e-6, pytorch_err64=4.74e-6)
    off_values = LayerDivergence(
        "float32", 10, 1.0, True, kernel_err64=4.74e-6, pytorch_err64=4.74e-6, kernel_on=False
    )
    records = [
        Record("run-1", kernel_values, "attention", "a.0", time=0.5, provenance=BUNDLED),
        *on,
        Record("run-1", off_values, "attention", "a.0", time=2.9, provenance=BUNDLED),
        *off,
    ]
    with _plots(records) as (_, plots):
        pairs = _by_name(plots.latency)
        assert len(pairs["attention · bundled activation"]["x"]) == 30
        assert len(pairs[kernel_off_name("attention")]["x"]) == 30
        points = _by_name(plots.speedup)
        kernel = points["attention · bundled activation"]
        assert 1.8 < kernel["y"][0] < 2.2  # its median: the kernel-on pairs only
        assert points[kernel_off_name("attention")]["text"] == ["kernel off"]
        texts = [t for trace in plots.speedup.data for t in trace.get("text", [])]
        assert "not measurable" not in texts
        errors = _by_name(plots.divergence)
        assert errors["attention · bundled activation"]["y"] == [2.53e-6]  # not the off period's 4.74e-6
        assert errors[kernel_off_name("attention")]["text"] == ["kernel off"]
        assert errors["PyTorch vs float64"]["y"] == [4.74e-6]
    back_on = _pairs("run-1", "attention", 2.0, 5, BUNDLED, t0=6.0)
    with _plots([*records, *back_on]) as (_, plots):  # switched on again: no longer "kernel off"
        assert kernel_off_name("attention") not in _by_name(plots.speedup)


def test_a_layer_keeps_its_colour_for_the_session_and_each_candidate_a_shade() -> None:
    run = [*_pairs("run-1", "RMSNorm", 2.0, 5, None), *_pairs("run-1", "SiLU", 1.5, 5, BUNDLED)]
    compare = [*_pairs("run-2", "SiLU", 1.5, 5, BUNDLED), *_pairs("run-2", "SiLU", 0.3, 5, PEER)]
    with _plots(run) as (_, first):
        silu_in_run = _by_name(first.latency)["SiLU · bundled activation"]["marker"]["color"]
    with _plots(compare) as (_, second):  # SiLU is the first trace now: it keeps its colour all the same
        traces = _by_name(second.latency)
        bundled = candidate_colour("SiLU", "SiLU · bundled activation")  # the session's, whatever came first
        assert traces["SiLU · bundled activation"]["marker"]["color"] == silu_in_run == bundled
        assert traces["SiLU · peer plain-silu"]["marker"]["color"] != silu_in_run  # a shade of it
        assert layer_colour("SiLU") != layer_colour("RMSNorm")
    assert (
        candidate_colour("SiLU", "SiLU · peer plain-silu")
        == traces["SiLU · peer plain-silu"]["marker"]["color"]
    )
    # each candidate a shade of its layer's colour, kept for the session, two of them far apart
    first, second = candidate_colour("Fresh", "Fresh · a"), candidate_colour("Fresh", "Fresh · b")
    assert first != second == candidate_colour("Fresh", "Fresh · b") and first == candidate_colour(
        "Fresh", "Fresh · a"
    )
    assert shade_distance(first, second) >= MIN_SHADE_DISTANCE


def test_kernel_off_traces_take_their_layers_colour_and_no_trace_has_a_colour_array() -> None:
    """Every "(kernel off)" trace was the same hollow grey; plotly warned "Invalid color specifier"
    386 times in a Run (a marker colour array where it reads one colour)."""
    records = [
        *_pairs("run-1", "RMSNorm", 1.0, 5, None, on=False),
        *_pairs("run-1", "SiLU", 1.0, 5, None, on=False),
        *_pairs("run-1", "SiLU", 1.6, 5, BUNDLED, t0=2.0),
    ]
    with _plots(records) as (_, plots):
        traces = _by_name(plots.latency)
        rms, silu = traces[kernel_off_name("RMSNorm")]["marker"], traces[kernel_off_name("SiLU")]["marker"]
        assert rms["color"] != silu["color"] and rms["symbol"] == "circle-open"
        for plot in plots.figures:
            for trace in plot.data:
                for part in ("marker", "line", "error_y"):
                    colour = trace.get(part, {}).get("color")
                    assert colour is None or isinstance(colour, str), (trace["name"], part, colour)


def test_candidate_short_names_the_source_and_the_repository() -> None:
    assert candidate_short("_x", "bundled/activation:Silu (cpu, inference)") == "bundled activation"
    assert candidate_short("_x", "peer/plain-silu:PlainSilu (cpu, inference)") == "peer plain-silu"
    assert candidate_short("_x", "peer/plain-silu-b13f1b83:PlainSilu (cpu, any mode)") == "peer plain-silu"
    assert candidate_short("_x", "bundled/activation@avx2:Silu (cpu, any mode)") == "bundled activation@avx2"
    assert (
        candidate_short("_x", "kernels-community/activation@v1:Silu (cpu, inference)") == "hub activation@v1"
    )
    assert candidate_short("_plain_silu_cpu_9f8e", None) == "_plain_silu_cpu_9f8e"
    assert candidate_short(None, "batched_mm") == "batched_mm"


def test_a_noisy_stretch_is_marked_on_the_throughput_plot_and_a_compare_keeps_the_runs_throughput() -> None:
    from kernel_explorer.measure.kinds.model.records import ModelThroughput

    pairs = _pairs("run-1", "SiLU", 1.5, 20, BUNDLED)
    noisy = _verdict("run-1", "SiLU", pairs, BUNDLED, 3.0)
    noisy = Record("run-1", _replace(noisy.values, noise_floor=0.4), "SiLU", time=3.0, provenance=BUNDLED)
    records = [
        Record("run-1", RunEvent("started"), time=0.0),
        Record("run-1", ModelThroughput(300.0, 2), time=0.5),
        *pairs,
        noisy,
        Record("run-1", ModelThroughput(30.0, 2), time=3.5),
    ]
    with _plots(records) as (log, plots):
        (band,) = plots.throughput.plot_layout["shapes"]
        assert band["type"] == "rect" and band["x0"] <= 0.5 and band["x1"] >= 3.0
        assert [a["text"] for a in plots.throughput.plot_layout["annotations"]] == ["noisy machine"]
        for record in _pairs("run-2", "SiLU", 1.5, 5, PEER, t0=10.0):  # a compare measures no throughput
            log.append(record)
        plots.flush()
        assert plots.throughput.data[0]["y"] == [300.0, 30.0]
        assert "run-1" in plots.throughput.plot_layout["title"]["text"]
        assert not plots.throughput.plot_layout["annotations"] or all(
            "press Run" not in a["text"] for a in plots.throughput.plot_layout["annotations"]
        )


def _replace(values: LayerVerdict, **changes: object) -> LayerVerdict:
    import dataclasses

    return dataclasses.replace(values, **changes)


def test_a_layer_partly_on_is_no_kernel_off_layer() -> None:
    """One instance on its kernel, the other on PyTorch: the pairs go to two traces, but the layer
    is not "kernel off" (it would flicker with every pair)."""
    on = _pairs("run-1", "RMSNorm", 2.0, 10, BUNDLED)
    off = _pairs("run-1", "RMSNorm", 1.0, 10, None, on=False, t0=1.005)
    on = [r for r in on if r.instance.endswith("0.mlp.act_fn")]  # type: ignore[union-attr]
    off = [r for r in off if r.instance.endswith("1.mlp.act_fn")]  # type: ignore[union-attr]
    mixed = sorted([*on, *off], key=lambda r: r.time)
    with _plots(mixed) as (_, plots):
        assert not plots.layer_off("RMSNorm")
        assert kernel_off_name("RMSNorm") in _by_name(plots.latency)
        assert kernel_off_name("RMSNorm") not in _by_name(plots.speedup)


def test_every_point_lies_between_two_labelled_ticks_inside_the_range() -> None:
    """The per-pair plot drew clusters at 1.5x and 0.3x with no tick near 1.5x; a median at 0.27x
    sat under the lowest label, 0.5x."""
    import math

    bundled = _pairs("run-1", "SiLU", 1.5, 40, BUNDLED)
    peer = _pairs("run-1", "SiLU", 0.27, 40, PEER, t0=5.0)
    values = LayerDivergence("float32", 10, 0.5, True, kernel_err64=1.2e-8, pytorch_err64=4.7e-8)
    error = Record("run-1", values, "SiLU", "m.0", time=0.5, provenance=BUNDLED)
    with _plots([error, *bundled, *peer]) as (_, plots):
        for plot in (plots.latency, plots.speedup, plots.divergence):
            axis = plot.plot_layout["yaxis"]
            ys = [y for trace in plot.data for y in trace.get("y", [])]
            assert ys and axis["autorange"] is False
            assert all(axis["range"][0] <= math.log10(y) <= axis["range"][1] for y in ys), (axis["range"], ys)
            assert min(axis["tickvals"]) <= min(ys) and max(ys) <= max(axis["tickvals"]), (
                axis["tickvals"],
                ys,
            )
            assert 2 <= len(axis["tickvals"]) <= 6


def test_a_dashboard_opened_after_a_run_and_a_compare_shows_the_runs_throughput() -> None:
    from kernel_explorer.measure.kinds.model.records import ModelThroughput

    log = ResultLog(
        [
            Record("run-1", RunEvent("started"), time=0.0),
            Record("run-1", ModelThroughput(300.0, 2), time=0.5),
            *_pairs("run-1", "SiLU", 1.5, 5, BUNDLED),
            Record("run-1", ModelThroughput(280.0, 2), time=9.0),
            *_pairs("run-2", "SiLU", 0.3, 5, PEER, t0=20.0),
        ]
    )
    plots = LivePlots(log, interval=3600)
    try:
        assert plots.throughput.data[0]["y"] == [300.0, 280.0] and plots.throughput.data[0]["x"] == [0.5, 9.0]
        assert "run-1" in plots.throughput.plot_layout["title"]["text"]
        assert set(_by_name(plots.latency)) == {"SiLU · peer plain-silu"}  # the latest run's pairs
    finally:
        plots.close()


def test_what_runs_now_is_shown_with_its_own_measured_speed_never_another_candidates() -> None:
    """The switch table (inventory, report) shows the last verdict of the kernel a layer runs now:
    the user's SiLU switched in after the bundled one was measured reads "not measured" until it
    is (a review read plain-silu beside the bundled one's 1.31x)."""
    from kernel_explorer.views.report_charts import measured_in

    bundled = _pairs("run-1", "SiLU", 1.5, 12, BUNDLED)
    log = ResultLog()
    for record in [*bundled, _verdict("run-1", "SiLU", bundled, BUNDLED, at=1e9)]:
        log.append(record)
    assert log.latest_verdicts()["SiLU"].speedup > 1.3  # the layer's last verdict, whatever ran it
    assert "SiLU" not in log.latest_verdicts({"SiLU": {PEER.kernel_id}})  # the peer runs: not measured
    assert "SiLU" not in measured_in(log, {"SiLU": {PEER.kernel_id}})
    peer = _pairs("run-2", "SiLU", 0.2, 12, PEER, t0=3.0)
    for record in [*peer, _verdict("run-2", "SiLU", peer, PEER, at=2e9)]:
        log.append(record)
    assert log.latest_verdicts({"SiLU": {BUNDLED.kernel_id}})["SiLU"].speedup > 1.3
    assert log.latest_verdicts({"SiLU": {PEER.kernel_id}})["SiLU"].speedup < 0.3
    assert measured_in(log, {"SiLU": {BUNDLED.kernel_id}})["SiLU"].startswith("run-1")


def _switch_notes(plots: LivePlots) -> list[dict]:
    return [a for a in plots.latency.plot_layout.get("annotations", []) if a["name"].startswith("kx-switch")]


def test_a_switch_mark_says_what_the_switch_changed() -> None:
    """The dashed marks of switches made during a Run carried no label: which of three marks was the
    SiLU switched off, and which the peer picked, only the pairs around them could tell."""
    bundled = _pairs("run-1", "SiLU", 1.5, 20, BUNDLED)  # 1.00 .. 1.19 s, two instances
    off = _pairs("run-1", "SiLU", 1.0, 20, BUNDLED, on=False, t0=2.0)
    peer = _pairs("run-1", "SiLU", 0.3, 20, PEER, t0=4.0)
    log = ResultLog()
    plots = LivePlots(log, interval=3600)
    try:
        for record in bundled:
            log.append(record)
        plots.mark_switch(1.5)  # the dashboard's time.time() at the switch, on the records' clock
        plots.flush()
        (note,) = _switch_notes(plots)  # drawn at once; what it changed shows with the next pairs
        assert note["text"] == "switch" and note["x"] == 0.5 == plots.latency.plot_layout.shapes[-1]["x0"]
        for record in off:
            log.append(record)
        plots.mark_switch(3.5)
        for record in peer:
            log.append(record)
        plots.flush()
        first, second = _switch_notes(plots)
        assert first["text"] == "SiLU → kernel off" and second["text"] == "SiLU → peer plain-silu"
        assert first["hovertext"] == "switch at 0.5 s: SiLU: bundled activation → kernel off (2 instances)"
        assert "kernel off → peer plain-silu" in second["hovertext"] and first["x"] < second["x"] == 2.5
        assert len([s for s in plots.latency.plot_layout.shapes if s["line"]["dash"] == "dash"]) == 2
    finally:
        plots.close()


def test_a_switch_undone_before_any_pair_saw_it_goes_once_every_instance_ran_again() -> None:
    """A switch off and back on within a second left a "2 switches" label whose hover promised
    that what it changed would show with the next pairs; no pair ever showed a change, so it said
    that for the rest of the session. Once every instance has run since, the marks go."""
    before = _pairs("run-1", "SiLU", 1.5, 20, BUNDLED)  # 1.00 .. 1.19 s, two instances
    one_instance = _pairs("run-1", "SiLU", 1.5, 1, BUNDLED, t0=3.0)  # a pair of the first instance
    after = _pairs("run-1", "SiLU", 1.5, 20, BUNDLED, t0=3.1)
    log = ResultLog()
    plots = LivePlots(log, interval=3600)
    try:
        for record in before:
            log.append(record)
        plots.mark_switch(1.5)  # off, and 0.06 s later on again: no pair ran in between
        plots.mark_switch(1.56)
        for record in one_instance:
            log.append(record)
        plots.flush()
        (note,) = _switch_notes(plots)
        assert note["text"] == "2 switches", note  # one instance has not run since: it may yet show
        assert len([s for s in plots.latency.plot_layout.shapes if s["line"]["dash"] == "dash"]) == 2
        for record in after:
            log.append(record)
        plots.flush()
        assert _switch_notes(plots) == []
        assert not [s for s in plots.latency.plot_layout.shapes if s["line"]["dash"] == "dash"]
        assert plots.latency.plot_layout.shapes  # the 1x line stays
    finally:
        plots.close()


def test_a_switch_whose_pairs_come_a_cycle_later_keeps_its_own_mark() -> None:
    """A Run goes layer by layer: SiLU switched to the peer at 12 s while RMSNorm was measured, then
    RMSNorm switched off at 18 s; SiLU's pairs showed its change from 20 s. Both changes went to the
    18 s mark, and the 12 s mark, left with none, went once every instance had run again: one line
    whose hover put SiLU's switch at 18 s."""
    log = ResultLog()
    plots = LivePlots(log, interval=3600)
    try:
        for record in [
            *_pairs("run-1", "SiLU", 1.5, 20, BUNDLED, t0=1.0),
            *_pairs("run-1", "RMSNorm", 1.2, 20, BUNDLED, t0=10.0),
        ]:
            log.append(record)
        plots.mark_switch(12.0)
        for record in _pairs("run-1", "RMSNorm", 1.2, 20, BUNDLED, t0=12.1):
            log.append(record)
        plots.mark_switch(18.0)
        for record in [
            *_pairs("run-1", "RMSNorm", 1.0, 20, BUNDLED, on=False, t0=18.1),
            *_pairs("run-1", "SiLU", 0.3, 20, PEER, t0=20.0),
        ]:
            log.append(record)
        plots.flush()
        silu, rmsnorm = _switch_notes(plots)
        assert (silu["x"], silu["text"]) == (11.0, "SiLU → peer plain-silu"), silu
        assert (rmsnorm["x"], rmsnorm["text"]) == (17.0, "RMSNorm → kernel off"), rmsnorm
        assert "SiLU" not in rmsnorm["hovertext"] and "switch at 11.0 s" in silu["hovertext"]
        assert len([s for s in plots.latency.plot_layout.shapes if s["line"]["dash"] == "dash"]) == 2
    finally:
        plots.close()


def test_a_mark_that_went_stays_gone_when_the_axis_grows() -> None:
    """A switch undone at once (its line gone) and a real one 3 s later fell into one label group
    as the axis grew: the label moved to the gone mark's place, where no line was."""
    log = ResultLog()
    plots = LivePlots(log, interval=3600)
    try:
        for record in _pairs("run-1", "SiLU", 1.5, 20, BUNDLED, t0=1.0):
            log.append(record)
        plots.mark_switch(5.0)  # off and on again at once
        plots.mark_switch(5.05)
        for record in _pairs("run-1", "SiLU", 1.5, 20, BUNDLED, t0=5.1):
            log.append(record)
        plots.flush()
        plots.mark_switch(8.0)  # to the peer
        for record in _pairs("run-1", "SiLU", 0.3, 20, PEER, t0=8.1):
            log.append(record)
        plots.flush()
        for record in _pairs("run-1", "SiLU", 0.3, 2, PEER, t0=130.0):  # the axis grows to 129 s
            log.append(record)
        plots.flush()
        dashed = [s["x0"] for s in plots.latency.plot_layout.shapes if s["line"]["dash"] == "dash"]
        assert dashed == [7.0]
        assert [(note["x"], note["text"]) for note in _switch_notes(plots)] == [
            (7.0, "SiLU → peer plain-silu")
        ]
    finally:
        plots.close()


def test_two_close_medians_of_a_layer_keep_their_labels_apart() -> None:
    """ "1.27x" and "1.31x", two candidates of one layer side by side, were drawn over each other."""
    bundled = _pairs("run-1", "SiLU", 1.27, 40, BUNDLED)
    peer = _pairs("run-1", "SiLU", 1.31, 40, PEER, t0=5.0)
    far = _pairs("run-1", "RMSNorm", 1.5, 40, BUNDLED, t0=10.0) + _pairs(
        "run-1", "RMSNorm", 0.3, 40, PEER, t0=12.0
    )
    verdicts = [_verdict("run-1", "SiLU", bundled, BUNDLED, 4.0), _verdict("run-1", "SiLU", peer, PEER, 9.0)]
    with _plots([*bundled, verdicts[0], *peer, verdicts[1], *far]) as (_, plots):
        points = _by_name(plots.speedup)
        near = [points["SiLU · bundled activation"], points["SiLU · peer plain-silu"]]
        assert abs(near[0]["y"][0] - near[1]["y"][0]) < 0.1  # the review's case: labels at one height
        assert {trace["textposition"] for trace in near} == {"top center", "bottom center"}
        apart = [points["RMSNorm · bundled activation"], points["RMSNorm · peer plain-silu"]]
        assert [trace["textposition"] for trace in apart] == ["top center", "top center"]


def test_a_pair_recorded_under_no_candidate_name_changes_no_switch_label() -> None:
    """A Run's mark read "SiLU → a kernel; SiLU → kernel off": one pair that ran a kernel but carried
    no candidate name counted as a switch to and from "a kernel"."""
    bundled = _pairs("run-1", "SiLU", 1.5, 20, BUNDLED)  # 1.00 .. 1.19 s, two instances
    unnamed = _pairs("run-1", "SiLU", 1.5, 2, None, t0=1.6)  # the kernel ran; no name recorded
    off = _pairs("run-1", "SiLU", 1.0, 20, BUNDLED, on=False, t0=2.0)
    log = ResultLog()
    plots = LivePlots(log, interval=3600)
    try:
        for record in bundled:
            log.append(record)
        plots.mark_switch(1.5)
        for record in [*unnamed, *off]:
            log.append(record)
        plots.flush()
        (note,) = _switch_notes(plots)
        assert note["text"] == "SiLU → kernel off", note
        assert "a kernel" not in note["hovertext"] and "bundled activation → kernel off" in note["hovertext"]
    finally:
        plots.close()


def test_close_switch_marks_share_one_short_label_on_a_background_and_a_hover_line_per_change() -> None:
    """A compare's candidate turns, marks 0.05 s apart, drew "switch" over "switch"; a 40-character
    label ran across the points around 1x with nothing behind it; and the hover, one long line, was
    cut at both ends of the plot."""
    records = [
        *_pairs("run-1", "SiLU", 1.5, 20, BUNDLED),  # 1.00 .. 1.19 s
        *_pairs("run-1", "RMSNorm", 1.2, 20, BUNDLED, t0=1.2),  # 1.20 .. 1.39 s
        *_pairs("run-1", "SiLU", 0.3, 20, PEER, t0=1.6),
        *_pairs("run-1", "RMSNorm", 1.0, 20, BUNDLED, on=False, t0=1.8),
    ]
    later = _pairs("run-1", "SiLU", 1.5, 200, BUNDLED, t0=5.0)  # the run goes on to 7 s
    log = ResultLog()
    plots = LivePlots(log, interval=3600)
    try:
        for record in records:
            log.append(record)
        plots.mark_switch(1.5)  # SiLU to the peer, and 0.05 s later RMSNorm off: one compare's turn
        plots.mark_switch(1.55)
        plots.mark_switch(4.5)  # SiLU back to the bundled kernel: far from them, a label of its own
        for record in later:
            log.append(record)
        plots.flush()
        turn, back = _switch_notes(plots)
        assert turn["x"] == 0.5 and back["x"] == 3.5
        assert turn["text"] == "SiLU → peer plain-silu;…" and len(back["text"]) <= 24
        assert turn["hovertext"] == (  # a line per mark: each switch's change in the order shown
            "switch at 0.5 s: SiLU: bundled activation → peer plain-silu (2 instances)"
            "<br>switch at 0.6 s: RMSNorm: bundled activation → kernel off (2 instances)"
        )
        assert turn["bgcolor"] == back["bgcolor"] == "rgba(128,128,128,0.3)"
        assert turn["font"]["color"] == back["font"]["color"]  # the grey of every mark, as before
        dashed = [s["x0"] for s in plots.latency.plot_layout.shapes if s["line"]["dash"] == "dash"]
        assert len(dashed) == 3  # every mark keeps its line; only the labels are shared
    finally:
        plots.close()


def test_a_compare_of_two_candidates_is_one_cycle_and_a_run_counts_its_cycles() -> None:
    """The report's runs table: a compare of the bundled SiLU and a peer gives two verdicts for one
    layer, one per candidate; that is one cycle, not "2 cycles (a Run)"."""
    from kernel_explorer.views.report_charts import runs

    bundled = _pairs("run-1", "SiLU", 1.5, 8, BUNDLED)
    peer = _pairs("run-1", "SiLU", 0.31, 8, PEER, t0=2.0)
    compared = [_verdict("run-1", "SiLU", bundled, BUNDLED, 1.5), _verdict("run-1", "SiLU", peer, PEER, 2.5)]
    cycles = [_verdict("run-2", "SiLU", bundled, BUNDLED, 3.0 + i) for i in range(3)]
    log = ResultLog()
    for record in [*bundled, *peer, *compared, *cycles]:
        log.append(record)
    what = {run: said for run, _, _, said in runs(log)}
    assert what["run-1"].startswith("1 cycle (a compare")
    assert what["run-2"] == "3 cycles (a Run)"


def test_a_run_with_the_kernel_off_reads_kernel_off_in_the_reports_kernel_column() -> None:
    """A Run's cycle after SiLU went off is PyTorch against PyTorch: the speed table's kernel cell
    said nothing there, where the accuracy table says "kernel off"."""
    from kernel_explorer.views.report_charts import candidate_names, named_rows

    bundled = _pairs("run-1", "SiLU", 1.5, 8, BUNDLED)
    off = _pairs("run-2", "SiLU", 1.0, 8, None, on=False, t0=3.0)
    log = ResultLog()
    for record in [*bundled, _verdict("run-1", "SiLU", bundled, BUNDLED, 2.0), *off]:
        log.append(record)
    log.append(_verdict("run-2", "SiLU", off, None, 4.0))
    rows = named_rows(log.summary("time"), candidate_names(log)).rows
    kernels = {row["run_id"]: row.get("kernel") for row in rows}
    assert kernels == {"run-1": "bundled activation", "run-2": "kernel off"}, kernels
