"""The live plots: what a caller reads after `flush()` is every record received so far."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import LayerLatency, Record, RunEvent
from kernel_explorer.views.plots import LivePlots


def test_flush_waits_for_the_batch_the_flush_thread_is_drawing() -> None:
    """The flush thread takes pending records and draws them outside the record lock: a flush()
    that found nothing pending returned while that batch was still being drawn, and a dashboard
    test read a plot without its last trace (CI, once in three runs). Drawing is slowed here so
    the flush thread is surely mid-batch when the caller flushes."""
    log = ResultLog()
    plots = LivePlots(log, interval=0.01)
    draw = plots._draw

    def slow_draw(record: Record) -> None:
        time.sleep(0.2)
        draw(record)

    plots._draw = slow_draw  # type: ignore[method-assign]
    try:
        log.append(Record("run-1", LayerLatency(2e-6, 1e-6, 2.0, kernel_on=False), "RMSNorm", "model.norm"))
        time.sleep(0.05)  # the flush thread has taken the record and is drawing it
        plots.flush()
        names = {trace.name for trace in plots.latency.data}
        assert "RMSNorm: kernel off (PyTorch vs PyTorch)" in names
    finally:
        plots.close()


def _pairs(run_id: str, layers: dict[str, int]) -> list[Record]:
    return [
        Record(
            run_id, LayerLatency(2e-6, 1e-6, 2.0 + i / 1e4, kernel_on=True), layer, f"{layer}.0", time=1.0 + i
        )
        for layer, count in layers.items()
        for i in range(count)
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
    """Inside plotly's batch_update a trace's x reads its value from before the block, so appending
    once per record kept only the last append of each redraw (135 points drawn of 27,687 logged)."""
    started = Record("run-1", RunEvent("started"), time=0.0)
    with _drawn([started, *_pairs("run-1", {"RMSNorm": 400, "SiLU": 250})]) as (log, plots):
        drawn = {trace.legendgroup: len(trace.x) for trace in plots.latency.data}
        assert drawn == {"RMSNorm": 400, "SiLU": 250}
        assert plots.points() == 650 == len(log.records("layer_latency")) == plots.pairs_received()
        for record in _pairs("run-1", {"RMSNorm": 100}):
            log.append(record)
        plots.flush()
        assert plots.points() == 750 == plots.pairs_received()
        assert len(plots.latency.data[0].x) == 500 and list(plots.latency.data[0].x[:2]) == [1.0, 2.0]


def test_a_trace_longer_than_the_cap_shows_medians_and_says_so() -> None:
    from kernel_explorer.views.live_figures import MAX_DRAWN

    pairs = 2 * MAX_DRAWN + 5
    with _drawn(_pairs("run-1", {"RMSNorm": pairs})) as (_, plots):
        (trace,) = plots.latency.data
        assert len(trace.x) <= MAX_DRAWN
        assert trace.name == f"RMSNorm (median of each 3 of {pairs:,} pairs)"
        assert plots.points() == pairs == plots.pairs_received()


def test_a_new_run_counts_from_zero() -> None:
    with _drawn(_pairs("run-1", {"RMSNorm": 5}) + _pairs("run-2", {"SiLU": 3})) as (_, plots):
        assert plots.pairs_received() == 3 and plots.points() == 3
        assert [trace.legendgroup for trace in plots.latency.data] == ["SiLU"]
