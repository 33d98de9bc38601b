"""Live plots of the run in progress: speedup per pair, per-layer speedup with its 95% interval,
model throughput and divergence, fed by ResultLog records in batches.

Records arrive on the measurement thread; they are buffered and drawn every `interval` seconds in
one `batch_update`, so the browser gets one message per batch instead of one per sample. Inside
`batch_update` a trace's `x` reads what it was before the block, so points are kept here, per
trace, and each trace is assigned once per batch: every pair logged is drawn (a trace longer than
`MAX_DRAWN` shows the median of each run of consecutive pairs, and its legend says so). The plots
follow the latest run: a run's start clears them (its records stay in the log and the report).
Conventions shared with the report: a log speedup axis with a dotted 1x line, units on every axis
and hover, pairs of instances on PyTorch drawn apart (open grey markers) and never in a bar.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from typing import Any

from kernel_explorer.measure.comparison import Comparison
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import (
    INFERENCE,
    LayerDivergence,
    LayerLatency,
    LayerVerdict,
    ModelThroughput,
    Record,
    RunEvent,
)
from kernel_explorer.measure.stats import MIN_PAIRS
from kernel_explorer.views.live_figures import LEGEND_ROW, TOP_MARGIN, Series, live_figures
from kernel_explorer.views.plot_style import (
    UNSURE_COLOUR,
    one_x_line,
    verdict_colour,
)

# the records these plots draw; a run with none of them (a time breakdown) leaves them as they are
_DRAWN = (LayerLatency, LayerVerdict, ModelThroughput, LayerDivergence)


class LivePlots:
    """Four FigureWidgets (speedup per pair, per layer, throughput, divergence) that follow a ResultLog."""

    def __init__(self, log: ResultLog, *, interval: float = 0.3) -> None:
        import pandas  # noqa: F401 - plotly imports it lazily; import it here, not in the flush thread

        self.log = log
        self.interval = interval
        self.latency, self.speedup, self.throughput, self.divergence = live_figures()
        for figure in (self.latency, self.speedup, self.throughput, self.divergence):
            # plotly.js's own responsive mode: each figure refits its box on window resize
            figure._config = {**figure._config, "responsive": True, "displaylogo": False}
            # an empty plot shows no made-up numbers (0-6 s, 0-4 tokens/s): its axes get their
            # tick labels with the first point, when the note goes
            figure.layout.xaxis.showticklabels = figure.layout.yaxis.showticklabels = False
        self._lock = threading.Lock()  # guards the pending records and marks
        self._drawing = threading.Lock()  # one batch drawn at a time, whoever flushes
        self._pending: list[Record] = []
        self._marks: list[float] = []
        self._run_id: str | None = None
        self._starts: dict[str, float] = {}  # run id -> when it started, until its first point
        self._start: float | None = None
        self._samples: dict[str, list[float]] = defaultdict(list)  # this cycle's kernel-on speedups
        self._series: dict[str, Series] = {}  # per-pair trace name -> every point of this run
        self._throughput = Series()
        self._dirty: set[str] = set()  # traces with points not yet assigned to the figure
        self._received = 0  # latency records of this run received (drawn or pending)
        self._receiving: str | None = None
        self._verdicts: dict[str, LayerVerdict] = {}
        self._worst: dict[str, dict[str, float]] = defaultdict(dict)
        self._unsubscribe = log.subscribe(self._on_record)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flush_loop, name="kernel-explorer-plots", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._unsubscribe()

    def _on_record(self, record: Record) -> None:
        with self._lock:
            self._pending.append(record)
            if isinstance(record.values, LayerLatency) and record.layer and record.values.mode == INFERENCE:
                if record.run_id != self._receiving:
                    self._receiving, self._received = record.run_id, 0
                self._received += 1

    def pairs_received(self) -> int:
        """Per-pair records of the latest run received so far: what the status line counts (every
        one is drawn by the next flush)."""
        with self._lock:
            return self._received

    def mark_switch(self, when: float) -> None:
        """A dashed line on the per-pair plot where a switch happened during the run (time.time())."""
        with self._lock:  # drawn by the flush thread, like everything else
            self._marks.append(when)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush()

    def flush(self) -> None:
        """Draw the buffered records now; returns once every record received so far is drawn.

        The flush thread may be drawing a batch it took a moment ago: waiting for it here is what
        makes "flush, then read the figures" see every record (without it, a caller could find
        nothing pending and read the plots before that batch reached them).
        """
        with self._drawing:
            self._flush_batch()

    def _flush_batch(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
            marks, self._marks = self._marks, []
        if not batch and not marks:
            return
        figures = (self.latency, self.speedup, self.throughput, self.divergence)
        with contextlib.ExitStack() as stack:
            for figure in figures:
                stack.enter_context(figure.batch_update())
            for record in batch:
                self._draw(record)
            self._assign_points()
            self._draw_speedup_bars()
        # the "no measurement yet" note goes with the first point (read after the batch: inside
        # it, a figure still returns its old x)
        for figure in figures:
            drawn = any(len(trace.x or ()) for trace in figure.data)
            if drawn and figure.layout.annotations:
                with figure.batch_update():
                    figure.layout.annotations = ()
                    figure.layout.xaxis.showticklabels = figure.layout.yaxis.showticklabels = True
        self._fit_legend(self.latency)
        for when in marks:  # shapes, outside batch_update (plotly adds them with their own message)
            if self._start is not None:
                self.latency.add_vline(x=when - self._start, line_dash="dash", line_color=UNSURE_COLOUR)

    @staticmethod
    def _fit_legend(figure: Any) -> None:
        """Room above the plot for the legend's rows: a legend that grew into the title, or under
        the plot into its axis title, as layers were added, gets rows of its own. Rows are
        estimated from the longest name (plotly gives every entry of a row that width; about
        6.5 px a character and 40 px for the marker, on a plot about 380 px wide: half a 1280 px
        page)."""
        names = [trace.name or "" for trace in figure.data]
        entry = max((len(name) for name in names), default=0) * 6.5 + 40  # plotly's entries align
        rows = max(1, -(-len(names) // max(1, int(380 // entry))))
        top = TOP_MARGIN + LEGEND_ROW * (rows - 1)
        if figure.layout.margin.t != top:  # not the height: set from Python, the figure kept its
            figure.layout.margin.t = top  # old width when the page narrowed (test_dashboard.py)

    def _reset(self, run_id: str, start: float) -> None:
        """A new run: clear every plot (the log keeps the old run's records)."""
        self._run_id, self._start = run_id, start
        self._samples.clear()
        self._verdicts.clear()
        self._worst.clear()
        self._series.clear()
        self._throughput = Series()
        self._dirty.clear()
        self.latency.data = ()
        self.latency.layout.shapes = (one_x_line(),)
        self.throughput.data[0].x, self.throughput.data[0].y = (), ()
        for bars in self.divergence.data:
            bars.x, bars.y = (), ()

    def _draw_speedup_bars(self) -> None:
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
                what = f"{verdict.pairs} pairs, {verdict.verdict} (noise floor {verdict.noise_floor:.0%})"
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
        bars = self.speedup.data[0]
        bars.x = [s[0] for s in shown]
        bars.y = [s[1] for s in shown]
        bars.error_y.array = [s[3] - s[1] for s in shown]
        bars.error_y.arrayminus = [s[1] - s[2] for s in shown]
        unmeasured = {name for name, v in self._verdicts.items() if not v.measurable}
        bars.text = ["not measurable" if s[0] in unmeasured else f"{s[1]:.2f}x" for s in shown]
        bars.customdata = [f"95% interval {s[2]:.2f}x to {s[3]:.2f}x, {s[5]}" for s in shown]
        bars.marker.color = [verdict_colour(s[2], s[3], s[4]) for s in shown]

    def _trace(self, layer: str, kernel_on: bool) -> Any:
        """The per-pair trace of `layer` (kernel on or off), keyed by its `legendgroup`: its name
        changes when it is decimated."""
        name = layer if kernel_on else f"{layer}: kernel off (PyTorch vs PyTorch)"
        for trace in self.latency.data:
            if trace.legendgroup == name:
                return trace
        marker = {"symbol": "circle"} if kernel_on else {"symbol": "circle-open", "color": UNSURE_COLOUR}
        self.latency.add_scatter(
            x=[], y=[], mode="markers", name=name, legendgroup=name, marker=marker, hovertext=[]
        )
        return self.latency.data[-1]

    def _draw(self, record: Record) -> None:
        values = record.values
        if isinstance(values, RunEvent):
            if values.event == "started":
                self._starts[record.run_id] = record.time
            return
        if not isinstance(values, _DRAWN):
            return
        if record.run_id != self._run_id:  # a new run's first point (a breakdown draws none: kept)
            self._reset(record.run_id, self._starts.pop(record.run_id, record.time))
        seconds = record.time - (record.time if self._start is None else self._start)
        if getattr(values, "mode", INFERENCE) != INFERENCE:
            return  # training pairs: training_summary() and the report
        if isinstance(values, LayerLatency) and record.layer:
            name = self._trace(record.layer, values.kernel_on).legendgroup
            series = self._series.setdefault(name, Series())
            series.x.append(seconds)
            series.y.append(values.speedup)
            series.text.append(
                f"{values.speedup:.2f}x: PyTorch {values.pytorch_s * 1e6:.1f} us, "
                f"{'kernel' if values.kernel_on else 'PyTorch again'} {values.kernel_s * 1e6:.1f} us"
            )
            self._dirty.add(name)
            if values.kernel_on and not values.stalled:  # a stalled pair measured the machine
                self._samples[record.layer].append(values.speedup)
        elif isinstance(values, LayerVerdict) and record.layer and values.kernel_on:
            self._verdicts[record.layer] = values
            self._samples.pop(record.layer, None)  # the next cycle of this layer starts afresh
        elif isinstance(values, ModelThroughput):
            self._throughput.x.append(seconds)
            self._throughput.y.append(values.tokens_s)
            self._dirty.add("")  # "": the throughput line
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
            layers = list(self._worst)
            kernel, pytorch = self.divergence.data
            kernel.x = pytorch.x = layers
            kernel.y = [max(self._worst[n].get("kernel_err64", 0.0), 1e-30) for n in layers]
            pytorch.y = [max(self._worst[n].get("pytorch_err64", 0.0), 1e-30) for n in layers]
            kernel.hovertext = [
                f"kernel: max abs error {self._worst[n].get('kernel_err64', 0.0):.2e} vs float64; "
                f"vs PyTorch: max abs {self._worst[n].get('max_abs', 0.0):.2e}, "
                f"max {int(self._worst[n].get('max_ulp', 0))} ULP"
                for n in layers
            ]
            pytorch.hovertext = [
                f"PyTorch: max abs error {self._worst[n].get('pytorch_err64', 0.0):.2e} vs float64"
                for n in layers
            ]

    def _assign_points(self) -> None:
        """Each trace with new points gets all of them, in one assignment (see the module doc)."""
        for name in self._dirty:
            if name == "":
                line = self.throughput.data[0]
                line.x, line.y = list(self._throughput.x), list(self._throughput.y)
                continue
            trace = self._trace_named(name)
            x, y, text, step = self._series[name].drawn()
            trace.x, trace.y, trace.hovertext = list(x), list(y), list(text)
            pairs = len(self._series[name].x)
            trace.name = name if step == 1 else f"{name} (median of each {step} of {pairs:,} pairs)"
        self._dirty.clear()

    def points(self) -> int:
        """Pairs drawn so far in this run, each point counted for the pairs it stands for: after a
        flush, the per-pair records of the run (what the browser test waits for)."""
        with self._drawing:  # not while the flush thread adds traces
            return sum(len(series.x) for name, series in self._series.items() if name not in self._dirty)

    def _trace_named(self, name: str) -> Any:
        return next(trace for trace in self.latency.data if trace.legendgroup == name)


def static_html(log: ResultLog) -> str:
    """The same figures as static HTML (plotly.js from the page's first figure), for non-live viewers."""
    from kernel_explorer.views.report import figures

    parts = [
        fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
        for i, fig in enumerate(figures(log))
    ]
    return "\n".join(parts)
