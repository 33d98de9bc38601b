"""Live plots of the run in progress: speedup per pair, per-layer speedup with its 95% interval,
model throughput and divergence, fed by ResultLog records.

What a redraw costs is bounded by what is new, however long the run: records are buffered, and a
redraw sends the points completed since the last one (`live_plot.LivePlot` extends the traces in
the browser), the per-layer markers (one per layer) and a few layout properties. Each per-pair
trace keeps a fixed budget of points (`live_figures.Series`: past it, each point becomes the median
of 2, 4, 8... consecutive pairs), in Python's copy and in the browser alike.

Redraws run on the thread that appends the records, right after a record is appended, at most
every `interval` seconds and once more when a run ends: for a measurement that is between two
timed pairs, so nothing this view does (reading records, serializing, sending) runs while a pair is
timed, and no thread of the view competes with the measurement for the interpreter. The plots
follow the latest run: a run's start clears them (its records stay in the log and the report); a
new dashboard opens with the latest run the log holds. Conventions shared with the report: a log
speedup axis with a dotted 1x line, units on every axis and hover, pairs of instances on PyTorch
drawn apart (open grey markers) and never in a bar.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from kernel_explorer.records import (
    INFERENCE,
    MIN_PAIRS,
    Comparison,
    LayerDivergence,
    LayerLatency,
    LayerVerdict,
    ModelThroughput,
    Record,
    ResultLog,
    RunEvent,
    format_interval,
    format_number,
)
from kernel_explorer.views.live_figures import (
    BOTTOM_MARGIN,
    HEIGHT,
    LEGEND_ROW,
    MAX_DRAWN,
    Series,
    error_axis,
    live_figures,
    speedup_axis,
)
from kernel_explorer.views.live_plot import LivePlot
from kernel_explorer.views.plot_style import UNSURE_COLOUR, verdict_colour

# the records these plots draw; a run with none of them (a time breakdown) leaves them as they are
_DRAWN = (LayerLatency, LayerVerdict, ModelThroughput, LayerDivergence)

#: the width a legend is laid out for: half a 1280 px page (two plots side by side)
_LEGEND_WIDTH = 560


def kernel_off_name(layer: str) -> str:
    """The legend entry of a layer's pairs on PyTorch (PyTorch against PyTorch): short, so that the
    legend of five layers keeps to a row or two."""
    return f"{layer} (kernel off)"


def latest_drawn_run(log: ResultLog) -> str | None:
    """The latest run the plots would draw: that of the last record of a drawn kind (read from the
    log's columns: no record is made)."""
    last: tuple[int, str] | None = None
    for drawn in _DRAWN:
        columns = log.columns(drawn.kind)
        if len(columns["seq"]) and (last is None or columns["seq"][-1] > last[0]):
            last = int(columns["seq"][-1]), str(columns["run_id"][-1])
    return None if last is None else last[1]


#: one latency pair as `LivePlots._draw_pair` takes it: (run id, time, layer, speedup, kernel on,
#: stalled, mode)
_Pair = tuple[str, float, "str | None", float, bool, bool, str]
_PAIR_COLUMNS = ("run_id", "time", "layer", "speedup", "kernel_on", "stalled", "mode")


def _replayed(log: ResultLog, run: str) -> tuple[int, int, Iterator[Record | _Pair]]:
    """The records of `run` in the order appended: (how many, how many inference pairs with a layer
    among them, the records). Its latency pairs come as tuples read from the log's columns a stretch
    at a time, so a long Run's pairs are never all made into objects; the rest as records."""
    import numpy as np
    import pandas as pd

    pairs = log.columns(LayerLatency.kind, run)
    others: list[tuple[int, Record]] = []
    for kind in log.kinds():
        if kind != LayerLatency.kind:
            seqs = log.columns(kind, run)["seq"].tolist()
            others += zip(seqs, log.records(kind, run)[: len(seqs)], strict=True)
    others.sort(key=lambda entry: entry[0])
    cuts = np.searchsorted(pairs["seq"], [seq for seq, _ in others]).tolist()
    columns = [pairs[name] for name in _PAIR_COLUMNS]
    counted = int(np.count_nonzero(pd.notna(pairs["layer"]) & (pairs["mode"] == INFERENCE)))

    def stretch(start: int, stop: int) -> Iterator[_Pair]:
        return zip(*(column[start:stop].tolist() for column in columns), strict=True)

    def entries() -> Iterator[Record | _Pair]:
        done = 0
        for (_, record), cut in zip(others, cuts, strict=True):
            yield from stretch(done, cut)
            yield record
            done = cut
        yield from stretch(done, len(pairs["seq"]))

    return len(pairs["seq"]) + len(others), counted, entries()


def _key(entry: Record | _Pair) -> tuple[object, ...]:
    """What tells a record apart from every other (its time is its own, to the microsecond)."""
    if isinstance(entry, Record):
        return (entry.kind, entry.run_id, entry.layer, entry.time)
    return (LayerLatency.kind, entry[0], entry[2], entry[1])


class LivePlots:
    """Four live plots (speedup per pair, per layer, throughput, divergence) that follow a ResultLog."""

    def __init__(self, log: ResultLog, *, interval: float = 1.0) -> None:
        self.log = log
        self.interval = interval
        self.latency, self.speedup, self.throughput, self.divergence = live_figures()
        self.figures: tuple[LivePlot, ...] = (self.latency, self.speedup, self.throughput, self.divergence)
        self._empty = {id(plot): plot.figure() for plot in self.figures}  # what a new run starts from
        self._lock = threading.Lock()  # guards the pending records and marks
        self._drawing = threading.RLock()  # one redraw at a time, whoever draws
        self._pending: list[Record] = []
        self._marks: list[float] = []
        self._last_drawn = 0.0
        self._run_id: str | None = None
        self._starts: dict[str, float] = {}  # run id -> when it started, until its first point
        self._start: float | None = None
        self._samples: dict[str, list[float]] = defaultdict(list)  # this cycle's kernel-on speedups
        self._series: dict[str, Series] = {}  # per-pair trace name -> every pair of this run
        self._index: dict[str, int] = {}  # per-pair trace name -> its index in the latency figure
        self._steps: dict[str, int] = {}  # the step each trace's hover and the axis title say
        self._verdicts: dict[str, LayerVerdict] = {}
        self._worst: dict[str, dict[str, float]] = defaultdict(dict)
        self._bars_changed = self._errors_changed = False
        self._ranges: dict[int, tuple[float, float]] = {}  # plot -> (low, high) of what it shows
        self._ticks: dict[int, Any] = {}  # plot -> the y ticks last sent
        self._shown: set[int] = set()  # plots whose axes show (they have a point)
        self._received = 0  # latency records of this run received (drawn or pending)
        self._receiving: str | None = None
        self.seconds_drawing = 0.0  # CPU seconds the redraws took (what the view costs the kernel)
        self._unsubscribe = log.subscribe(self._on_record)
        run = latest_drawn_run(log)  # the model's earlier measurements, from the first draw
        if run is None:
            self.flush()
            return
        with self._drawing:
            total, counted, earlier = _replayed(log, run)
            with self._lock:
                # records appended since subscribing are waiting already: at most the last of `earlier`
                waiting = {_key(r) for r in self._pending}
                if counted and self._receiving != run:
                    self._receiving, self._received = run, 0
            for index, entry in enumerate(earlier):
                if index >= total - len(waiting) and _key(entry) in waiting:
                    if not isinstance(entry, Record) and entry[2] and entry[6] == INFERENCE:
                        counted -= 1  # counted when it arrived
                    continue
                if isinstance(entry, Record):
                    self._draw(entry)
                else:
                    self._draw_pair(*entry)
            with self._lock:
                self._received += counted
            self._flush(drawn=total > 0)

    def close(self) -> None:
        self._unsubscribe()

    def _count(self, record: Record) -> None:
        if isinstance(record.values, LayerLatency):
            self._count_pair(record.run_id, record.layer, record.values.mode)

    def _count_pair(self, run_id: str, layer: str | None, mode: str) -> None:
        if layer and mode == INFERENCE:
            if run_id != self._receiving:
                self._receiving, self._received = run_id, 0
            self._received += 1

    def _on_record(self, record: Record) -> None:
        with self._lock:
            self._pending.append(record)
            self._count(record)
        ended = isinstance(record.values, RunEvent) and record.values.event != "started"
        if ended or time.monotonic() - self._last_drawn >= self.interval:
            self.flush()  # here, between two pairs of the measurement that appended the record

    def pairs_received(self) -> int:
        """Per-pair records of the latest run received so far: what the status line counts."""
        with self._lock:
            return self._received

    def mark_switch(self, when: float) -> None:
        """A dashed line on the per-pair plot where a switch happened during the run (time.time());
        drawn with the next redraw."""
        with self._lock:
            self._marks.append(when)

    def bytes_sent(self) -> int:
        """What the four plots have sent to the browser so far (JSON bytes of their messages)."""
        return sum(plot.bytes_sent for plot in self.figures)

    def flush(self) -> None:
        """Draw the buffered records now; returns once every record received so far is sent."""
        self._flush()

    def _flush(self, *, drawn: bool = False) -> None:
        """`flush`; `drawn`: records were drawn already (the log's earlier ones), send them too."""
        with self._drawing:
            self._last_drawn = time.monotonic()
            with self._lock:
                batch, self._pending = self._pending, []
                marks, self._marks = self._marks, []
            if not batch and not marks and not drawn:
                return
            began = time.thread_time()
            try:
                self._redraw(batch, marks)
            finally:
                self.seconds_drawing += time.thread_time() - began

    def _redraw(self, batch: list[Record], marks: list[float]) -> None:
        for record in batch:
            self._draw(record)
        self._send_points()
        if self._bars_changed:
            self._draw_speedup_bars()
        if self._errors_changed:
            self._draw_errors()
        if marks and self._start is not None:
            lines = [self._switch_line(when - self._start) for when in marks]
            self.latency.relayout(shapes=[*self.latency.plot_layout.get("shapes", []), *lines])
        self._fit()
        for plot in self.figures:
            plot.send_pending()

    # -- per record ------------------------------------------------------------------------------

    def _reset(self, run_id: str, start: float) -> None:
        """A new run: clear every plot (the log keeps the old run's records)."""
        self._run_id, self._start = run_id, start
        for state in (self._samples, self._verdicts, self._worst, self._series, self._index, self._steps):
            state.clear()
        self._ranges.clear()
        self._ticks.clear()
        self._shown.clear()
        for plot in self.figures:
            empty = self._empty[id(plot)]
            plot.react(empty["data"], empty["layout"])

    def _draw(self, record: Record) -> None:
        values = record.values
        if isinstance(values, RunEvent):
            if values.event == "started":
                self._starts[record.run_id] = record.time
            return
        if isinstance(values, LayerLatency):
            self._draw_pair(
                record.run_id,
                record.time,
                record.layer,
                values.speedup,
                values.kernel_on,
                values.stalled,
                values.mode,
            )
            return
        if not isinstance(values, _DRAWN):
            return
        self._start_drawing(record.run_id, record.time)
        seconds = record.time - (record.time if self._start is None else self._start)
        if getattr(values, "mode", INFERENCE) != INFERENCE:
            return  # training pairs: the time kind's summary and the report
        if isinstance(values, LayerVerdict) and record.layer and values.kernel_on:
            self._verdicts[record.layer] = values
            self._samples.pop(record.layer, None)  # the next cycle of this layer starts afresh
            self._bars_changed = True
        elif isinstance(values, ModelThroughput):
            self.throughput.extend(0, [round(seconds, 3)], [round(values.tokens_s, 2)], MAX_DRAWN)
            self._widen(self.throughput, values.tokens_s, values.tokens_s)
        elif isinstance(values, LayerDivergence) and record.layer:
            worst = self._worst[record.layer]
            measured = {
                "kernel_err64": values.kernel_err64,
                "pytorch_err64": values.pytorch_err64,
                "max_ulp": values.max_ulp,
                "max_abs": values.max_abs,
            }
            for key, value in measured.items():
                if value is not None:
                    worst[key] = max(worst.get(key, 0.0), float(value))
            self._errors_changed = True

    def _start_drawing(self, run_id: str, when: float) -> None:
        if run_id != self._run_id:  # a new run's first point (a breakdown draws none: kept)
            self._reset(run_id, self._starts.pop(run_id, when))

    def _draw_pair(
        self,
        run_id: str,
        when: float,
        layer: str | None,
        speedup: float,
        kernel_on: bool,
        stalled: bool,
        mode: str,
    ) -> None:
        """One latency pair: a point of its layer's trace, and a sample of its layer's marker."""
        self._start_drawing(run_id, when)
        if mode != INFERENCE or not layer:
            return  # training pairs: the time kind's summary and the report
        seconds = when - (when if self._start is None else self._start)
        name = layer if kernel_on else kernel_off_name(layer)
        if name not in self._series:
            self._series[name] = Series()
            self._index[name] = self.latency.add_trace(self._pair_trace(name, kernel_on))
        self._series[name].add(seconds, speedup)
        if kernel_on and not stalled:  # a stalled pair measured the machine
            self._samples[layer].append(speedup)
            self._bars_changed = True

    @staticmethod
    def _pair_trace(name: str, kernel_on: bool) -> dict[str, Any]:
        marker = {"symbol": "circle", "size": 5}
        if not kernel_on:
            marker = {"symbol": "circle-open", "size": 5, "color": UNSURE_COLOUR}
        side = "kernel" if kernel_on else "PyTorch again (kernel off)"
        return {
            "type": "scatter",
            "x": [],
            "y": [],
            "mode": "markers",
            "name": name,
            "legendgroup": name,
            "marker": marker,
            "hovertemplate": f"%{{y:.2f}}x at %{{x:.1f}} s: PyTorch / {side}<extra>{name}</extra>",
        }

    @staticmethod
    def _switch_line(seconds: float) -> dict[str, Any]:
        return {
            "type": "line",
            "xref": "x",
            "x0": seconds,
            "x1": seconds,
            "yref": "paper",
            "y0": 0,
            "y1": 1,
            "line": {"dash": "dash", "color": UNSURE_COLOUR},
        }

    # -- per redraw ------------------------------------------------------------------------------

    def _send_points(self) -> None:
        """The points each per-pair trace completed since the last redraw, appended in the browser;
        a trace whose budget filled is sent whole once, at its new step (half the budget)."""
        for name, series in self._series.items():
            x, y, whole = series.new_points()
            if not x:
                continue
            index = self._index[name]
            if whole:
                self.latency.restyle(index, x=x, y=y)
            else:
                self.latency.extend(index, x, y, MAX_DRAWN)
            self._widen(self.latency, min(y), max(y))
            if series.step != self._steps.get(name, 1):
                self._steps[name] = series.step
                hover = self._pair_trace(name, "(kernel off)" not in name)["hovertemplate"]
                self.latency.restyle(
                    index,
                    hovertemplate=hover.replace("%{y:.2f}x", f"%{{y:.2f}}x (median of {series.step} pairs)"),
                )
                step = max(self._steps.values())
                self.latency.relayout(
                    **{"xaxis.title.text": f"seconds into the run (a point: median of up to {step} pairs)"}
                )

    def _widen(self, plot: LivePlot, low: float, high: float) -> None:
        found = self._ranges.get(id(plot))
        self._ranges[id(plot)] = (low, high) if found is None else (min(found[0], low), max(found[1], high))

    def _fit(self) -> None:
        """After the points: axes once a plot has one, at most six labelled log ticks for what it
        shows, and room under the per-pair plot for its legend's rows."""
        for plot in self.figures:
            if id(plot) not in self._ranges:
                continue
            if id(plot) not in self._shown:
                self._shown.add(id(plot))
                plot.relayout(**{"annotations": [], "xaxis.visible": True, "yaxis.visible": True})
            low, high = self._ranges[id(plot)]
            if plot is self.latency or plot is self.speedup:
                ticks = speedup_axis(low, high)
            elif plot is self.divergence:
                ticks = error_axis(low, high)
            else:
                continue
            chosen = (tuple(ticks["tickvals"]), tuple(ticks["ticktext"]))
            if self._ticks.get(id(plot)) != chosen:
                self._ticks[id(plot)] = chosen
                plot.relayout(**{"yaxis.tickvals": ticks["tickvals"], "yaxis.ticktext": ticks["ticktext"]})
        names = list(self._series)
        if names:
            entry = max(len(name) for name in names) * 6.5 + 40  # plotly gives every entry one width
            rows = max(1, -(-len(names) // max(1, int(_LEGEND_WIDTH // entry))))
            bottom = BOTTOM_MARGIN + LEGEND_ROW * rows
            if self.latency.plot_layout["margin"].get("b") != bottom:
                self.latency.relayout(**{"margin.b": bottom, "height": HEIGHT + LEGEND_ROW * (rows - 1)})

    def _draw_speedup_bars(self) -> None:
        self._bars_changed = False
        layers = list(dict.fromkeys([*self._verdicts, *self._samples]))
        shown = []
        for name in layers:
            samples, verdict = self._samples.get(name, []), self._verdicts.get(name)
            if len(samples) >= MIN_PAIRS or (samples and verdict is None):
                found = Comparison(tuple(samples)).interval
                shown.append((name, found.median, found.low, found.high, 0.0, f"{found.n} pairs so far"))
            elif verdict is not None and not verdict.measurable:  # no speed to draw: a grey 1x and why
                shown.append((name, 1.0, 1.0, 1.0, 0.0, verdict.verdict_text))
            elif verdict is not None:
                floor = format_number(verdict.noise_floor, "share")
                what = f"{verdict.pairs} pairs, {verdict.verdict} (noise floor {floor})"
                shown.append(
                    (
                        name,
                        verdict.speedup,
                        verdict.speedup_low,
                        verdict.speedup_high,
                        verdict.noise_floor,
                        what,
                    )
                )
        if not shown:
            return
        unmeasured = {name for name, v in self._verdicts.items() if not v.measurable}
        self.speedup.restyle(
            0,
            x=[s[0] for s in shown],
            y=[s[1] for s in shown],
            **{
                "error_y.array": [s[3] - s[1] for s in shown],
                "error_y.arrayminus": [s[1] - s[2] for s in shown],
                "marker.color": [verdict_colour(s[2], s[3], s[4]) for s in shown],
            },
            text=["not measurable" if s[0] in unmeasured else format_number(s[1], "x") for s in shown],
            customdata=[f"95% interval {format_interval(s[1], s[2], s[3])}, {s[5]}" for s in shown],
        )
        self._ranges[id(self.speedup)] = (min(s[2] for s in shown), max(s[3] for s in shown))

    def _draw_errors(self) -> None:
        self._errors_changed = False
        layers = list(self._worst)
        worst = self._worst
        kernel_y = [max(worst[n].get("kernel_err64", 0.0), 1e-30) for n in layers]
        pytorch_y = [max(worst[n].get("pytorch_err64", 0.0), 1e-30) for n in layers]
        self.divergence.restyle(
            0,
            x=layers,
            y=kernel_y,
            hovertext=[
                f"kernel: max abs error {worst[n].get('kernel_err64', 0.0):.2e} vs float64; "
                f"vs PyTorch: max abs {worst[n].get('max_abs', 0.0):.2e}, "
                f"max {int(worst[n].get('max_ulp', 0))} ULP"
                for n in layers
            ],
        )
        self.divergence.restyle(
            1,
            x=layers,
            y=pytorch_y,
            hovertext=[
                f"PyTorch: max abs error {worst[n].get('pytorch_err64', 0.0):.2e} vs float64" for n in layers
            ],
        )
        shown = [v for v in (*kernel_y, *pytorch_y) if v > 1e-30] or [1e-30]
        self._ranges[id(self.divergence)] = (min(shown), max(shown))

    def points(self) -> int:
        """Pairs drawn so far in this run, each point counted for the pairs it stands for: after a
        flush, the run's per-pair records but those of a median still being filled."""
        with self._drawing:
            return sum(series.drawn * series.step for series in self._series.values())


def static_html(log: ResultLog) -> str:
    """The same figures as static HTML (plotly.js from the page's first figure), for non-live viewers."""
    from kernel_explorer.views.report import figures

    parts = [
        fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
        for i, fig in enumerate(figures(log))
    ]
    return "\n".join(parts)
