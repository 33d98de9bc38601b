"""Live plots of the run in progress: speedup per pair, each candidate's median speedup with its 95%
interval, model throughput and divergence, fed by ResultLog records.

Candidates of a layer are apart in every plot: a record's candidate is what its provenance names
(kernel id, code path, candidate label: the identity the time kind's summary splits a layer's rows
by, `kinds/time.per_kernel`), and each gets its own trace and point, named "SiLU · bundled
activation" (`plot_style.candidate_short`). Pairs where the instance ran PyTorch (its kernel off)
count in no kernel's statistic: they have their own trace ("SiLU · kernel off"), and a layer whose
latest pairs ran PyTorch reads "kernel off" on the median and error plots. A candidate's median is
its latest verdict once it has one, the number the status line prints; before it, its pairs so far.

What a redraw costs is bounded by what is new, however long the run: records are buffered, and a
redraw sends the points completed since the last one (`live_plot.LivePlot` extends the traces in
the browser), the per-candidate markers and a few layout properties. Each per-pair trace keeps a
fixed budget of points (`live_figures.Series`: past it, each point becomes the median of 2, 4, 8...
consecutive pairs), in Python's copy and in the browser alike. The per-pair plot's axis spans the
bulk of each candidate's points (`live_figures.traces_span`), every candidate's median and interval
and 1x: a pair timed while the machine stalled (0.01x, 100x) no longer sets it, and is drawn as a
triangle at the edge it lies beyond, its value in its hover. A switch made during a run is a dashed
line there, labelled with what it changed as the pairs' provenance shows it ("SiLU → kernel off").

Redraws run on the thread that appends the records, right after a record is appended, at most
every `interval` seconds and once more when a run ends: for a measurement that is between two
timed pairs, so nothing this view does (reading records, serializing, sending) runs while a pair is
timed, and no thread of the view competes with the measurement for the interpreter. The plots
follow the latest run: a run's start clears them (its records stay in the log and the report),
except the throughput plot, which keeps the last Run's until a run measures throughput again (a
compare measures none); a new dashboard opens with the latest run the log holds. Conventions shared
with the report: a log speedup axis with a dotted 1x line, units on every axis and hover, one colour
per layer from its name, the same in every notebook, its first candidate in the session drawn in
it and a later one in a shade of it (`plot_style.layer_colour`, `plot_style.candidate_colour`).
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from typing import Any

from kernel_explorer.records import (
    INFERENCE,
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
    noise_warning,
)
from kernel_explorer.views.live_figures import (
    BOTTOM_MARGIN,
    HEIGHT,
    MAX_DRAWN,
    TOP_MARGIN,
    Series,
    error_axis,
    live_figures,
    log_range,
    padded,
    speedup_axis,
    traces_span,
)
from kernel_explorer.views.live_plot import LivePlot
from kernel_explorer.views.plot_style import (
    KERNEL_OFF,
    SEPARATOR,
    UNSURE_COLOUR,
    WARN_COLOUR,
    candidate_colour,
    candidate_short,
    entry_name,
    layer_colour,
    one_x_line,
    verdict_colour,
)

# the records these plots draw; a run with none of them (a time breakdown) leaves them as they are
_DRAWN = (LayerLatency, LayerVerdict, ModelThroughput, LayerDivergence)

#: a candidate as the summaries tell candidates apart: (layer, kernel id, code path, candidate label);
#: ("SiLU", "", "", "") where a record names no kernel
Identity = tuple[str, str, str, str]

#: a comparison whose verdict left out this share of its pairs as stalled measured the machine
_NOISY_STALLED = 0.1
#: the kernel-off pairs per layer whose median the "kernel off" point is drawn at
_OFF_WINDOW = 2000
#: characters of a switch mark's label along its line; the whole of what changed is in its hover.
#: 40 (the plot's height) ran through the dense band of points around 1x
_SWITCH_LABEL = 24
#: switch marks closer than this share of the x axis' span share one label, whose hover lists all
#: they changed: about 14 px (a label's width at font size 9) of a plot area about 350 px wide. A
#: compare's candidate turns, marks 0.05 s apart, drew "switch" over "switch"
_SWITCH_APART = 0.04
#: behind a switch label: a translucent mid grey, so the points and the 1x line it crosses show
#: through, and the dashboard's text (the theme's font colour: dark on JupyterLab Light, light on
#: Dark) reads on it in both themes (a white box left Dark's light text unreadable)
_SWITCH_LABEL_BACKGROUND = "rgba(128,128,128,0.3)"
#: pixels two median labels of a layer must be apart in height not to overlap (font size 10)
_LABEL_PX = 14


def _is_switch_line(shape: dict[str, Any]) -> bool:
    """Whether a shape of the per-pair plot is a switch mark's dashed line."""
    return shape.get("type") == "line" and shape.get("line", {}).get("dash") == "dash"


def identity(layer: str, kernel_id: str | None, isa: str | None, candidate: str | None) -> Identity:
    """The candidate a record of `layer` measured, from its provenance (see `Identity`)."""
    if not kernel_id:
        return (layer, "", "", "")
    return (layer, kernel_id, isa or "", candidate or "")


def record_identity(record: Record) -> Identity:
    """`identity` of a record, from its provenance."""
    found = record.provenance
    if found is None:
        return identity(str(record.layer), None, None, None)
    return identity(str(record.layer), found.kernel_id, found.isa, found.candidate)


def kernel_off_name(layer: str) -> str:
    """The legend entry of a layer's pairs on PyTorch (PyTorch against PyTorch): "SiLU · kernel off"."""
    return entry_name(layer, KERNEL_OFF)


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
#: stalled, mode, kernel id, code path, candidate label, instance)
_Pair = tuple[
    str, float, "str | None", float, bool, bool, str, "str | None", "str | None", "str | None", "str | None"
]
_PAIR_COLUMNS = (
    "run_id",
    "time",
    "layer",
    "speedup",
    "kernel_on",
    "stalled",
    "mode",
    "kernel_id",
    "isa",
    "candidate",
    "instance",
)


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
    """Four live plots (speedup per pair, per candidate, throughput, divergence) that follow a ResultLog."""

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
        self._switches: list[float] = []  # this run's switch marks drawn (time.time())
        self._run_ended = False  # the shown run's end was drawn
        # per (layer, instance): (when its latest pair ran, what ran: a candidate's short name or
        # "kernel off"); and each change between two pairs of one instance: (previous pair's time,
        # this pair's, layer, what ran before, what runs now): what a switch mark's label says
        self._ran: dict[tuple[str, str], tuple[float, str]] = {}
        self._changes: list[tuple[float, float, str, str, str]] = []
        self._switch_notes: list[dict[str, Any]] = []  # the marks' labels last sent
        self._last_drawn = 0.0
        self._run_id: str | None = None
        self._starts: dict[str, float] = {}  # run id -> when it started, until its first point
        self._start: float | None = None
        # per candidate: this run's kernel-on speedups (not stalled) until its first verdict
        self._samples: dict[Identity, list[float]] = defaultdict(list)
        # per layer: its latest PyTorch-vs-PyTorch pairs (a window: an hour's Run with a layer off
        # makes millions, and the point only needs their median)
        self._off: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=_OFF_WINDOW))
        # per layer and instance: whether its latest pair or value ran a kernel (a layer is "kernel off"
        # when none of its instances did; one on and four off is a layer partly on, not off)
        self._instances_on: dict[str, dict[str, bool]] = defaultdict(dict)
        self._names: dict[Identity, str] = {}  # the legend entry of each candidate drawn
        self._series: dict[str, Series] = {}  # per-pair trace name -> every pair of this run
        self._index: dict[str, int] = {}  # per-pair trace name -> its index in the latency figure
        self._steps: dict[str, int] = {}  # the step each trace's hover and the axis title say
        self._verdicts: dict[Identity, LayerVerdict] = {}
        self._marker_index: dict[str, int] = {}  # entry name -> its trace in the median plot
        # per-pair trace name -> the trace of its points beyond the axis (triangles at its edge)
        self._beyond_index: dict[str, int] = {}
        self._beyond_drawn: tuple[float, float] | None = None  # the range those were drawn for
        self._error_index: dict[str, int] = {}  # entry name -> its trace in the error plot
        self._worst: dict[Identity, dict[str, float]] = defaultdict(dict)  # kernel-on values only
        self._off_worst: dict[str, float] = {}  # per layer: the largest error while its kernel was off
        self._pytorch_worst: dict[str, float] = {}  # per layer: PyTorch's largest error against float64
        self._bars_changed = self._errors_changed = False
        self._ranges: dict[int, tuple[float, float]] = {}  # plot -> (low, high) of what it shows
        self._ticks: dict[int, Any] = {}  # plot -> the y ticks last sent
        self._shown: set[int] = set()  # plots whose axes show (they have a point)
        self._throughput_run: str | None = None  # the run whose throughput the plot shows
        self._throughput_start: float | None = None
        self._noisy: list[list[float]] = []  # stretches of the throughput plot the machine was noisy in
        self._last_seconds = 0.0  # when the last verdict or throughput point of the run came
        self._received = 0  # latency records of this run received (drawn or pending)
        self._receiving: str | None = None
        self.seconds_drawing = 0.0  # CPU seconds the redraws took (what the view costs the kernel)
        self._unsubscribe = log.subscribe(self._on_record)
        run = latest_drawn_run(log)  # the model's earlier measurements, from the first draw
        if run is None:
            self.flush()
            return
        with self._drawing:
            self._replay_throughput(run)
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

    def _replay_throughput(self, run: str) -> None:
        """A dashboard opened after a Run and a compare: the Run's throughput, as a dashboard that
        watched both would show it (the compare, the latest run, measured none)."""
        columns = self.log.columns(ModelThroughput.kind)
        if not len(columns["run_id"]) or str(columns["run_id"][-1]) == run:
            return
        measured = str(columns["run_id"][-1])
        for record in [
            *self.log.records(RunEvent.kind, measured),
            *self.log.records(ModelThroughput.kind, measured),
        ]:
            self._draw(record)

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
        drawn with the next redraw, labelled with what the switch changed once the pairs show it
        (`_label_switches`)."""
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
            self._draw_speedup_markers()
        if self._errors_changed:
            self._draw_errors()
        if marks and self._start is not None:
            lines = [self._switch_line(when - self._start) for when in marks]
            self.latency.relayout(shapes=[*self.latency.plot_layout.get("shapes", []), *lines])
            self._switches += marks
        self._label_switches()
        self._fit()
        for plot in self.figures:
            plot.send_pending()

    # -- names and colours -------------------------------------------------------------------------

    def entry_name(self, record: Record) -> str:
        """The name a record's candidate has in the plots ("SiLU · bundled activation"): what the
        status line names a verdict by, so it reads as the point it matches. A verdict of pairs that
        all ran PyTorch is its layer's alone (its text says "kernel off")."""
        if isinstance(record.values, LayerVerdict) and not record.values.kernel_on:
            return str(record.layer)
        with self._drawing:
            return self._name(record_identity(record), keep=False)

    def _name(self, found: Identity, *, keep: bool = True) -> str:
        """The legend entry of a candidate: its layer, short name and source; with its code path or
        kernel id where two candidates of a layer would read the same. `keep`: remember it (a
        candidate drawn), else only say it."""
        if found in self._names:
            return self._names[found]
        layer, kernel_id, isa, label = found
        name = entry_name(layer, candidate_short(kernel_id, label))
        taken = set(self._names.values())
        if name in taken and isa:
            name = f"{name}@{isa}"
        if name in taken:
            name = f"{name} ({kernel_id})"
        if keep:
            self._names[found] = name
        return name

    def layer_off(self, layer: str) -> bool:
        """Whether every instance of `layer` ran PyTorch in its latest pair or value of this run."""
        states = self._instances_on.get(layer)
        return bool(states) and not any(states.values())

    @staticmethod
    def _colour(layer: str, name: str, kernel_on: bool) -> str:
        return candidate_colour(layer, name) if kernel_on else layer_colour(layer)

    # -- per record ------------------------------------------------------------------------------

    def _reset(self, run_id: str, start: float) -> None:
        """A new run: clear every plot but the throughput (the log keeps the old run's records)."""
        self._run_id, self._start = run_id, start
        self._last_seconds = 0.0
        for state in (
            self._samples,
            self._off,
            self._instances_on,
            self._names,
            self._verdicts,
            self._worst,
            self._off_worst,
            self._pytorch_worst,
            self._series,
            self._index,
            self._steps,
            self._marker_index,
            self._error_index,
            self._beyond_index,
        ):
            state.clear()
        self._beyond_drawn = None
        self._switches, self._changes, self._switch_notes = [], [], []
        self._run_ended = False
        self._ran.clear()
        for plot in (self.latency, self.speedup, self.divergence):
            for state in (self._ranges, self._ticks):
                state.pop(id(plot), None)
            self._shown.discard(id(plot))
            empty = self._empty[id(plot)]
            plot.react(empty["data"], empty["layout"])
        if self._throughput_run is not None and self._throughput_run != run_id:
            title = f"Model throughput of {self._throughput_run} (a compare measures none)"
            self.throughput.relayout(**{"title.text": title})

    def _reset_throughput(self, run_id: str) -> None:
        """The first throughput point of a run: the plot is this run's from now on."""
        self._throughput_run, self._throughput_start = run_id, self._start
        self._noisy.clear()
        for state in (self._ranges, self._ticks):
            state.pop(id(self.throughput), None)
        self._shown.discard(id(self.throughput))
        empty = self._empty[id(self.throughput)]
        self.throughput.react(empty["data"], empty["layout"])

    def _draw(self, record: Record) -> None:
        values = record.values
        if isinstance(values, RunEvent):
            if values.event == "started":
                self._starts[record.run_id] = record.time
            elif record.run_id == self._run_id:
                self._run_ended = True
            return
        if isinstance(values, LayerLatency):
            found = record.provenance
            self._draw_pair(
                record.run_id,
                record.time,
                record.layer,
                values.speedup,
                values.kernel_on,
                values.stalled,
                values.mode,
                kernel_id=found.kernel_id if found else None,
                isa=found.isa if found else None,
                candidate=found.candidate if found else None,
                instance=record.instance,
            )
            return
        if not isinstance(values, _DRAWN):
            return
        self._start_drawing(record.run_id, record.time)
        seconds = record.time - (record.time if self._start is None else self._start)
        if getattr(values, "mode", INFERENCE) != INFERENCE:
            return  # training pairs: the time kind's summary and the report
        if isinstance(values, LayerVerdict) and record.layer:
            self._note_noise(values, seconds)
            if values.kernel_on:
                found = record_identity(record)
                self._verdicts[found] = values
                self._samples.pop(found, None)  # its verdict is what it shows from now on
                self._bars_changed = True
        elif isinstance(values, ModelThroughput):
            if record.run_id != self._throughput_run:
                self._reset_throughput(record.run_id)
            self._last_seconds = seconds
            self.throughput.extend(0, [round(seconds, 3)], [round(values.tokens_s, 2)], MAX_DRAWN)
            self._widen(self.throughput, values.tokens_s, values.tokens_s)
        elif isinstance(values, LayerDivergence) and record.layer:
            self._draw_divergence(record, values)

    def _draw_divergence(self, record: Record, values: LayerDivergence) -> None:
        """A value record: the kernel's error counts for its candidate only while the kernel ran;
        PyTorch's error is the layer's, whatever ran."""
        layer = str(record.layer)
        self._instances_on[layer][str(record.instance)] = values.kernel_on
        if values.pytorch_err64 is not None:
            self._pytorch_worst[layer] = max(self._pytorch_worst.get(layer, 0.0), float(values.pytorch_err64))
        if values.kernel_on:
            worst = self._worst[record_identity(record)]
            measured = {
                "kernel_err64": values.kernel_err64,
                "pytorch_err64": values.pytorch_err64,
                "max_ulp": values.max_ulp,
                "max_abs": values.max_abs,
            }
            for key, value in measured.items():
                if value is not None:
                    worst[key] = max(worst.get(key, 0.0), float(value))
        elif values.kernel_err64 is not None:
            self._off_worst[layer] = max(self._off_worst.get(layer, 0.0), float(values.kernel_err64))
        self._errors_changed = self._bars_changed = True

    def _note_noise(self, verdict: LayerVerdict, seconds: float) -> None:
        """A comparison that found the machine noisy (a high A/A floor, or many pairs stalled) marks
        its stretch of the run on the throughput plot: a drop there is the machine's, not a kernel's."""
        stalled = verdict.stalled >= _NOISY_STALLED * max(verdict.pairs, 1) and verdict.stalled > 0
        if noise_warning(verdict.noise_floor) or stalled:
            if self._noisy and self._noisy[-1][1] >= self._last_seconds - 1e-6:
                self._noisy[-1][1] = seconds
            else:
                self._noisy.append([self._last_seconds, seconds])
            if self._throughput_run == self._run_id:
                self.throughput.relayout(shapes=[self._noise_band(*band) for band in self._noisy])
                self.throughput.relayout(annotations=[self._noise_label(self._noisy[0][0])])
        self._last_seconds = seconds

    @staticmethod
    def _noise_band(first: float, last: float) -> dict[str, Any]:
        return {
            "type": "rect",
            "xref": "x",
            "x0": first,
            "x1": last,
            "yref": "paper",
            "y0": 0,
            "y1": 1,
            "fillcolor": WARN_COLOUR,
            "opacity": 0.15,
            "line": {"width": 0},
            "layer": "below",
        }

    @staticmethod
    def _noise_label(at: float) -> dict[str, Any]:
        return {
            "text": "noisy machine",
            "name": "kx-noisy",
            "xref": "x",
            "x": at,
            "xanchor": "left",
            "yref": "paper",
            "y": 1.0,
            "yanchor": "bottom",
            "showarrow": False,
            "font": {"size": 10, "color": WARN_COLOUR},
        }

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
        kernel_id: str | None = None,
        isa: str | None = None,
        candidate: str | None = None,
        instance: str | None = None,
    ) -> None:
        """One latency pair: a point of its candidate's trace (or of its layer's kernel-off trace),
        and a sample of that candidate's marker."""
        self._start_drawing(run_id, when)
        if mode != INFERENCE or not layer:
            return  # training pairs: the time kind's summary and the report
        seconds = when - (when if self._start is None else self._start)
        found = identity(layer, kernel_id, isa, candidate)
        name = self._name(found) if kernel_on else kernel_off_name(layer)
        if name not in self._series:
            self._series[name] = Series()
            trace = self._pair_trace(name, layer, self._colour(layer, name, kernel_on), kernel_on)
            self._index[name] = self.latency.add_trace(trace)
        self._series[name].add(seconds, speedup)
        if candidate or not kernel_on:  # what ran, for the switch marks: "bundled activation", "kernel off"
            # a kernel's pair recorded under no candidate name says nothing of what ran: no change
            # from or to it ("SiLU → a kernel" read as a switch)
            prefix = f"{layer}{SEPARATOR}"
            self._note_ran(layer, str(instance), when, name.removeprefix(prefix))
        states = self._instances_on[layer]
        if states.get(str(instance)) != kernel_on:
            states[str(instance)] = kernel_on
            self._bars_changed = self._errors_changed = True
        if stalled:  # a stalled pair measured the machine
            return
        if kernel_on:
            if found not in self._verdicts:
                self._samples[found].append(speedup)
                self._bars_changed = True
        else:
            self._off[layer].append(speedup)
            self._bars_changed = True

    @staticmethod
    def _pair_trace(name: str, layer: str, colour: str, kernel_on: bool) -> dict[str, Any]:
        marker: dict[str, Any] = {"symbol": "circle", "size": 5, "color": colour}
        if not kernel_on:  # the layer's own colour, hollow: PyTorch against PyTorch
            marker = {"symbol": "circle-open", "size": 6, "color": colour, "opacity": 0.8}
        side = "kernel" if kernel_on else "PyTorch again (kernel off)"
        return {
            "type": "scatter",
            "x": [],
            "y": [],
            "mode": "markers",
            "name": name,
            "legendgroup": layer,
            "marker": marker,
            "hovertemplate": f"%{{y:.2f}}x at %{{x:.1f}} s: PyTorch / {side}<extra>{name}</extra>",
        }

    def _note_ran(self, layer: str, instance: str, when: float, ran: str) -> None:
        """What one instance's pair ran (a candidate's short name, "kernel off"); a change from its
        previous pair is kept for the switch marks' labels."""
        key = (layer, instance)
        before = self._ran.get(key)
        if before is not None and before[1] != ran:
            self._changes.append((before[0], when, layer, before[1], ran))
        self._ran[key] = (when, ran)

    def _label_switches(self) -> None:
        """Each switch mark's label and hover: what changed across it, read from the pairs' own
        provenance (the dashboard hears of a switch but not what it was; the pairs record what ran).
        A change between two pairs of an instance belongs to a mark between them (`_credit`); a
        mark whose change no pair has shown yet reads "switch" and says why. Marks closer than
        `_SWITCH_APART` of the x span share one label, at the first of them (`_switch_groups`).
        A mark no change was credited to, once every instance has had a pair since or the run has
        ended (every change across it is in then), goes for good (line and label): a switch undone
        within a second, one of a layer the run does not measure, a compare's switching a candidate
        on before its first pair and back after its last, the steps between two candidates' turns
        whose change a sibling mark shows. It explains no change in the pairs, and a "switch" label
        there would wait for ever."""
        if self._start is None or not self._switches:
            return
        start = self._start
        seen = self._credit()
        quiet = {
            i
            for i, mark in enumerate(self._switches)
            if not seen[i] and (self._run_ended or self._all_ran_since(mark))
        }
        if quiet:  # every change across them is in (no pair to come saw them): for good
            gone = {self._switches[i] - start for i in quiet}
            self._switches = [mark for i, mark in enumerate(self._switches) if i not in quiet]
            seen = [changed for i, changed in enumerate(seen) if i not in quiet]
            shapes = self.latency.plot_layout.get("shapes", [])
            kept_shapes = [shape for shape in shapes if not _is_switch_line(shape) or shape["x0"] not in gone]
            self.latency.relayout(shapes=kept_shapes)
        notes = [
            self._switch_note(group[0], [(self._switches[i] - start, seen[i]) for i in group])
            for group in (self._switch_groups() if self._switches else [])
        ]
        if notes != self._switch_notes:
            self._switch_notes = notes
            kept = [
                a
                for a in self.latency.plot_layout.get("annotations", [])
                if not str(a.get("name", "")).startswith("kx-switch")
            ]
            self.latency.relayout(annotations=[*kept, *notes])

    def _marks_across(self, change: tuple[float, float, str, str, str]) -> list[int]:
        """The marks (indices) a change between two pairs of an instance may be credited to: those
        after the earlier pair and not after the later one, else (the mark's time came a moment
        after the first pair that ran the switch: it is taken after the switch lets go of the
        lock) the first mark after the earlier pair; none: no switch the dashboard heard of (a
        kernel that raised, put back)."""
        previous, when = change[0], change[1]
        after = [i for i, mark in enumerate(self._switches) if mark > previous]
        return [i for i in after if self._switches[i] <= when] or after[:1]

    def _credit(self) -> list[dict[tuple[str, str, str], int]]:
        """What each mark changed ((layer, before, after): instances). A change goes to the mark
        its like (another instance's same change) went to, else to the first mark across it that
        no other change took, else to the latest. Changes are taken tightest first, then in the
        order the pairs showed them: a switch of RMSNorm while RMSNorm runs claims its own mark
        before SiLU's change, whose pairs come a cycle later and lie across both marks, takes the
        other (it went to the later, RMSNorm's, and SiLU's own mark read as if nothing changed);
        two switches whose changes lie across the same two marks take them in the order shown."""
        seen: list[dict[tuple[str, str, str], int]] = [{} for _ in self._switches]
        across = [(self._marks_across(change), change) for change in self._changes]
        for marks, (_, _, layer, before, after) in sorted(
            (item for item in across if item[0]), key=lambda item: (len(item[0]), item[1][1])
        ):
            key = (layer, before, after)
            alike = [i for i in marks if key in seen[i]]
            free = [i for i in marks if not seen[i]]
            chosen = alike[-1] if alike else free[0] if free else marks[-1]
            seen[chosen][key] = seen[chosen].get(key, 0) + 1
        return seen

    def _all_ran_since(self, when: float) -> bool:
        """Whether every instance the run measures has had a pair since `when`."""
        return bool(self._ran) and all(ran_at > when for ran_at, _ in self._ran.values())

    def _switch_groups(self) -> list[list[int]]:
        """The switch marks (their indices) in groups that share one label: each mark closer than
        `_SWITCH_APART` of the x axis' span (0 to the latest point or mark) to its group's first.
        The plot's width is the browser's; a share of the span is the same few pixels at any width
        near the dashboard's."""
        assert self._start is not None
        latest = max((series.x[-1] for series in self._series.values() if len(series)), default=0.0)
        span = max(latest, *(mark - self._start for mark in self._switches))
        groups: list[list[int]] = []
        for index in sorted(range(len(self._switches)), key=self._switches.__getitem__):
            if groups and self._switches[index] - self._switches[groups[-1][0]] < _SWITCH_APART * span:
                groups[-1].append(index)
            else:
                groups.append([index])
        return groups

    @staticmethod
    def _switch_note(
        index: int, marks: list[tuple[float, dict[tuple[str, str, str], int]]]
    ) -> dict[str, Any]:
        """The label of switch marks close together (each mark's time in seconds and what it
        changed), along the first one's dashed line at the top of the plot: "SiLU → kernel off", cut
        at `_SWITCH_LABEL` characters; its hover says, a line per change, what ran before and after
        at each mark, on how many instances."""
        changes = [(seconds, key, count) for seconds, changed in marks for key, count in changed.items()]
        if changes:
            text = "; ".join(dict.fromkeys(f"{layer} → {after}" for _, (layer, _, after), _ in changes))
            if len(text) > _SWITCH_LABEL:
                text = text[: _SWITCH_LABEL - 1] + "…"
            lines = []
            for seconds, changed in marks:
                what = "<br>".join(
                    f"{layer}: {before} → {after} ({count} instance{'s' if count != 1 else ''})"
                    for (layer, before, after), count in changed.items()
                )
                lines += [f"switch at {seconds:.1f} s: {what}"] if what else []
            hover = "<br>".join(lines)
        else:
            text = "switch" if len(marks) == 1 else f"{len(marks)} switches"
            at = ", ".join(f"{seconds:.1f}" for seconds, _ in marks)
            hover = f"{text} at {at} s:<br>what it changed shows when the switched layer's pairs come"
        return {
            "name": f"kx-switch-{index}",
            "text": text,
            "hovertext": hover,
            "xref": "x",
            "x": marks[0][0],
            "xanchor": "left",
            "yref": "paper",
            "y": 1.0,
            "yanchor": "top",
            "textangle": -90,
            "showarrow": False,
            "bgcolor": _SWITCH_LABEL_BACKGROUND,
            "font": {"size": 9, "color": UNSURE_COLOUR},
        }

    @staticmethod
    def _switch_line(seconds: float) -> dict[str, Any]:
        """A switch mark's dashed line (`_is_switch_line` tells it from the plot's other shapes)."""
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
        a trace whose budget filled is sent whole once, at its new step (half the budget). The y axis
        then spans the bulk of each trace's points drawn (`live_figures.traces_span`), not their
        extremes."""
        moved = False
        for name, series in self._series.items():
            x, y, whole = series.new_points()
            if not x:
                continue
            index = self._index[name]
            if whole:
                self.latency.restyle(index, x=x, y=y)
            else:
                self.latency.extend(index, x, y, MAX_DRAWN)
            moved = True
            if series.step != self._steps.get(name, 1):
                self._steps[name] = series.step
                hover = re.sub(
                    r"%\{y:\.2f\}x( \(median of \d+ pairs\))? at",
                    f"%{{y:.2f}}x (median of {series.step} pairs) at",
                    self.latency.data[index]["hovertemplate"],
                )
                # said per point, not in the x title: beside the legend that was cut at both ends
                self.latency.restyle(index, hovertemplate=hover)
        if moved:
            span = traces_span([self.latency.data[index]["y"] for index in self._index.values()])
            if span is not None:
                self._ranges[id(self.latency)] = span
            self._beyond_drawn = None  # the points changed: which lie beyond the axis is asked again

    def _widen(self, plot: LivePlot, low: float, high: float) -> None:
        found = self._ranges.get(id(plot))
        self._ranges[id(plot)] = (low, high) if found is None else (min(found[0], low), max(found[1], high))

    def _fit(self) -> None:
        """After the points: axes (and the 1x line) once a plot has one, at most six labelled log
        ticks for what it shows, and room beside each plot for its legend."""
        for plot in self.figures:
            if id(plot) not in self._ranges:
                continue
            if id(plot) not in self._shown:
                self._shown.add(id(plot))
                update: dict[str, Any] = {"xaxis.visible": True, "yaxis.visible": True}
                update["annotations"] = [
                    a for a in plot.plot_layout.get("annotations", []) if a.get("name") != "kx-empty"
                ]
                if plot is self.latency or plot is self.speedup:  # drawn with the axis, never over the note
                    update["shapes"] = [one_x_line(), *plot.plot_layout.get("shapes", [])]
                plot.relayout(**update)
            low, high = self._ranges[id(plot)]
            if plot is self.latency and id(self.speedup) in self._ranges:
                # every candidate's median and interval (stalled pairs left out) stays in view: a
                # slow candidate's few pairs are no outliers of the others' bulk
                medians = self._ranges[id(self.speedup)]
                low, high = min(low, medians[0]), max(high, medians[1])
            if plot is self.latency or plot is self.speedup:  # 1x stays in view: the dotted line
                low, high = padded(min(low, 1.0), max(high, 1.0))
                ticks = speedup_axis(low, high)
            elif plot is self.divergence:
                low, high = padded(low, high)
                ticks = error_axis(low, high)
            else:
                continue
            chosen = (tuple(ticks["tickvals"]), tuple(ticks["ticktext"]), low, high)
            if self._ticks.get(id(plot)) != chosen:
                self._ticks[id(plot)] = chosen
                plot.relayout(
                    **{
                        "yaxis.tickvals": ticks["tickvals"],
                        "yaxis.ticktext": ticks["ticktext"],
                        "yaxis.range": log_range(low, high),
                        "yaxis.autorange": False,
                    }
                )
            if plot is self.latency:
                self._draw_beyond(low, high)
        for plot in (self.latency, self.speedup, self.divergence):
            names = [trace["name"] for trace in plot.data if trace.get("showlegend", True) and trace.get("x")]
            right = legend_margin(names)
            if plot.plot_layout["margin"].get("r") != right:
                plot.relayout(**{"margin.r": right})

    def _draw_beyond(self, low: float, high: float) -> None:
        """Each per-pair point beyond the axis' range [low, high] (a pair timed while the machine
        stalled, most often) as a triangle at the edge it lies beyond, in its candidate's colour, its
        value and time in its hover (the trace's name beside them): the axis spans the bulk of the
        pairs, and nothing is hidden silently. Unclipped by the axis, so a triangle is whole. One
        trace per candidate with such points (a trace takes one colour), out of the legend; redrawn
        only when the points or the range moved."""
        if self._beyond_drawn == (low, high):
            return
        self._beyond_drawn = (low, high)
        for name, index in self._index.items():
            trace = self.latency.data[index]
            xs, ys, symbols, hover = [], [], [], []
            for x, y in zip(trace.get("x", []), trace.get("y", []), strict=True):
                if low / 1.0001 <= y <= high * 1.0001:
                    continue
                above = y > high
                xs.append(x)
                ys.append(high if above else low)
                symbols.append("triangle-up" if above else "triangle-down")
                # two short lines: one long line was cut at both ends of a plot beside the legend
                hover.append(
                    f"{y:.3g}x at {x:.1f} s<br>{'above' if above else 'below'} the axis, drawn at its edge"
                )
            if not xs and name not in self._beyond_index:
                continue
            if name not in self._beyond_index:
                marker = {"size": 8, "color": trace["marker"]["color"], "opacity": 0.9}
                self._beyond_index[name] = self.latency.add_trace(
                    {
                        "type": "scatter",
                        "x": [],
                        "y": [],
                        "mode": "markers",
                        "name": f"{name} (beyond the axis)",
                        "legendgroup": trace.get("legendgroup"),
                        "showlegend": False,
                        # drawn whole at the edge however wide the axis (its room is 0.04 decades)
                        "cliponaxis": False,
                        "marker": marker,
                        "hovertext": [],
                        "hovertemplate": f"%{{hovertext}}<extra>{name}</extra>",
                    }
                )
            beyond = self._beyond_index[name]
            # sent only when what it shows changed: a redraw with new points (every 0.3 s) asks again,
            # and resending every triangle each time made a long Run's bytes grow with its stalls
            drawn = self.latency.data[beyond]
            if list(drawn.get("x") or []) != xs or list(drawn.get("y") or []) != ys:
                self.latency.restyle(beyond, x=xs, y=ys, hovertext=hover, **{"marker.symbol": symbols})

    def _marker_trace(
        self, plot: LivePlot, table: dict[str, int], name: str, layer: str, **trace: Any
    ) -> int:
        """The index of the trace of entry `name` in `plot` (the median or error plot), made the
        first time: one trace per candidate, grouped beside its layer's others."""
        if name not in table:
            rank = sum(1 for trace in plot.data if trace.get("legendgroup") == layer)  # its place beside them
            table[name] = plot.add_trace(
                {
                    "type": "scatter",
                    "x": [],
                    "y": [],
                    "mode": "markers+text",
                    "name": name,
                    "legendgroup": layer,
                    "offsetgroup": str(rank),
                    "text": [],
                    "textposition": "top center",
                    "cliponaxis": False,
                    "customdata": [],
                    "textfont": {"size": 10},
                    **trace,
                }
            )
        return table[name]

    def _draw_speedup_markers(self) -> None:
        """One point per candidate: its latest verdict (the status line's number), or before its
        first verdict its pairs so far; and "kernel off" for a layer whose latest pairs ran PyTorch."""
        self._bars_changed = False
        lows: list[float] = []
        highs: list[float] = []
        labelled: list[tuple[str, int, float]] = []  # (layer, trace, y) of each point with a label
        for found in dict.fromkeys([*self._verdicts, *self._samples]):
            shown = self._candidate_point(found)
            if shown is None:
                continue
            y, low, high, colour, text, what = shown
            layer, name = found[0], self._name(found)
            index = self._marker_trace(
                self.speedup,
                self._marker_index,
                name,
                layer,
                marker={
                    "size": 10,
                    "color": candidate_colour(layer, name),
                    "line": {"width": 2, "color": colour},
                },
                error_y={"type": "data", "symmetric": False, "array": [], "arrayminus": [], "color": colour},
                hovertemplate=f"{name}: %{{y:.2f}}x<br>%{{customdata}}<extra></extra>",
            )
            self.speedup.restyle(
                index,
                x=[layer],
                y=[y],
                text=[text],
                customdata=[what],
                **{"error_y.array": [high - y], "error_y.arrayminus": [y - low]},
            )
            lows.append(low)
            highs.append(high)
            labelled.append((layer, index, y))
        for layer, samples in self._off.items():
            name = kernel_off_name(layer)
            off = self.layer_off(layer) and bool(samples)
            if not off and name not in self._marker_index:
                continue
            index = self._marker_trace(
                self.speedup,
                self._marker_index,
                name,
                layer,
                marker={"size": 10, "symbol": "circle-open", "color": layer_colour(layer)},
                hovertemplate=f"{name}: %{{customdata}}<extra></extra>",
            )
            if not off:
                self.speedup.restyle(index, x=[], y=[], text=[], customdata=[])
                continue
            median = statistics.median(samples)
            what = (
                f"PyTorch against PyTorch (median of its latest {len(samples)} pairs): the kernel is off, so "
                "these pairs are no kernel's speedup"
            )
            self.speedup.restyle(index, x=[layer], y=[median], text=[KERNEL_OFF], customdata=[what])
            lows.append(median)
            highs.append(median)
            labelled.append((layer, index, median))
        if lows:
            self._ranges[id(self.speedup)] = (min(lows), max(highs))
            self._place_labels(labelled, *padded(min(*lows, 1.0), max(*highs, 1.0)))

    def _place_labels(self, labelled: list[tuple[str, int, float]], low: float, high: float) -> None:
        """Each median label above its point, but where two points of a layer side by side sit so
        near in height that their labels would overlap ("1.27x" over "1.31x"), the right one's label
        goes under its point. Heights in pixels from the axis' span [low, high] and the plot's height."""
        import math

        per_decade = (HEIGHT - TOP_MARGIN - BOTTOM_MARGIN) / (math.log10(high / low) + 0.08)
        by_layer: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for layer, index, y in labelled:
            by_layer[layer].append((index, y))
        for points in by_layer.values():
            points.sort(key=lambda point: int(self.speedup.data[point[0]].get("offsetgroup", 0)))
            previous: tuple[float, str] | None = None  # the left neighbour's height and place
            for index, y in points:
                place = "top center"
                if previous is not None and previous[1] == place:
                    apart = abs(math.log10(max(y, 1e-30) / max(previous[0], 1e-30))) * per_decade
                    place = "bottom center" if apart < _LABEL_PX else place
                previous = (y, place)
                if self.speedup.data[index].get("textposition") != place:
                    self.speedup.restyle(index, textposition=place)

    def _candidate_point(self, found: Identity) -> tuple[float, float, float, str, str, str] | None:
        """(median, low, high, verdict colour, label, hover) of one candidate's marker."""
        verdict = self._verdicts.get(found)
        if verdict is not None and not verdict.measurable:  # no speed to draw: a grey 1x and why
            return 1.0, 1.0, 1.0, UNSURE_COLOUR, "not measurable", verdict.verdict_text
        if verdict is not None:
            floor = format_number(verdict.noise_floor, "share")
            interval = format_interval(verdict.speedup, verdict.speedup_low, verdict.speedup_high)
            what = (
                f"95% interval {interval}, {verdict.pairs} pairs, {verdict.verdict} (noise floor {floor}): "
                "this candidate's latest verdict"
            )
            colour = verdict_colour(verdict.speedup_low, verdict.speedup_high, verdict.noise_floor)
            return (
                verdict.speedup,
                verdict.speedup_low,
                verdict.speedup_high,
                colour,
                format_number(verdict.speedup, "x"),
                what,
            )
        samples = self._samples.get(found)
        if not samples:
            return None
        interval = Comparison(tuple(samples)).interval
        what = (
            f"95% interval {format_interval(interval.median, interval.low, interval.high)}, "
            f"{interval.n} pairs so far (no verdict yet)"
        )
        return (
            interval.median,
            interval.low,
            interval.high,
            UNSURE_COLOUR,
            format_number(interval.median, "x"),
            what,
        )

    def _draw_errors(self) -> None:
        """Per candidate its kernel's largest error against float64 (values measured while it ran);
        per layer PyTorch's; "kernel off" where the layer's latest values ran PyTorch."""
        self._errors_changed = False
        shown: list[float] = []
        layers = list(self._pytorch_worst)
        pytorch_y = [max(self._pytorch_worst[n], 1e-30) for n in layers]
        self.divergence.restyle(
            0,
            x=layers,
            y=pytorch_y,
            hovertext=[f"PyTorch: max abs error {self._pytorch_worst[n]:.2e} vs float64" for n in layers],
        )
        shown += pytorch_y
        for found, worst in self._worst.items():
            layer, name = found[0], self._name(found)
            index = self._marker_trace(
                self.divergence,
                self._error_index,
                name,
                layer,
                mode="markers",
                marker={"size": 10, "symbol": "circle", "color": candidate_colour(layer, name)},
                hovertext=[],
                hovertemplate=f"{name}: %{{hovertext}}<extra></extra>",
            )
            y = max(worst.get("kernel_err64", 0.0), 1e-30)
            self.divergence.restyle(
                index,
                x=[layer],
                y=[y],
                hovertext=[
                    f"kernel: max abs error {worst.get('kernel_err64', 0.0):.2e} vs float64; "
                    f"vs PyTorch: max abs {worst.get('max_abs', 0.0):.2e}, "
                    f"max {int(worst.get('max_ulp', 0))} ULP (values measured while this kernel ran)"
                ],
            )
            shown.append(y)
        for layer, worst in self._off_worst.items():
            name = kernel_off_name(layer)
            index = self._marker_trace(
                self.divergence,
                self._error_index,
                name,
                layer,
                marker={"size": 10, "symbol": "circle-open", "color": layer_colour(layer)},
                hovertext=[],
                hovertemplate=f"{name}: %{{hovertext}}<extra></extra>",
            )
            if not self.layer_off(layer):
                self.divergence.restyle(index, x=[], y=[], text=[], hovertext=[])
                continue
            y = max(worst, 1e-30)
            what = f"the kernel is off: PyTorch's own error, {worst:.2e} vs float64 (no kernel's error)"
            self.divergence.restyle(index, x=[layer], y=[y], text=[KERNEL_OFF], hovertext=[what])
            shown.append(y)
        if shown:  # an axis once there is a point (a pair's state alone draws none)
            shown = [v for v in shown if v > 1e-30] or [1e-30]
            self._ranges[id(self.divergence)] = (min(shown), max(shown))

    def points(self) -> int:
        """Pairs drawn so far in this run, each point counted for the pairs it stands for: after a
        flush, the run's per-pair records but those of a median still being filled."""
        with self._drawing:
            return sum(series.drawn * series.step for series in self._series.values())


def legend_margin(names: list[str]) -> int:
    """The right margin a vertical legend of `names` needs (font size 10: about 5.6 px a character,
    and 40 px for the symbol), at least the plot's own 30 px and at most 220 px."""
    if not names:
        return 30
    return int(min(220, max(30, 44 + 5.6 * max(len(name) for name in names))))


def static_html(log: ResultLog) -> str:
    """The same figures as static HTML (plotly.js from the page's first figure), for non-live viewers."""
    from kernel_explorer.views.report import figures

    parts = [
        fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
        for i, fig in enumerate(figures(log))
    ]
    return "\n".join(parts)
