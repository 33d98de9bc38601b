"""The live plots: what a caller reads after `flush()` is every record received so far."""

from __future__ import annotations

import time

from kernel_explorer.records import LayerLatency, Record
from kernel_explorer.results import ResultLog
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
