"""The report's charts of a log: what each one draws, and what its numbers cover.

Every chart says its scope under its title: a row of the speed chart is one run whole (all its
cycles' pairs pooled, as the layer table's row), its hollow mark the run's last cycle alone (what
the switch table and the dashboard's status line show); the per-pair chart draws each run's pairs
as a box from their quartiles (no sample is written into the page: a Run holds 100,000s of pairs);
the error chart takes the worst instance over every run with the kernel on, kernel-off periods
apart, a row per candidate. A kernel's every row names its candidate in the charts, and fills its
kernel cell in the tables, whether the log measured one candidate of the layer or several, by the
dashboard's words for it ("bundled activation", "peer plain-silu": `candidate_names`,
`named_rows`): one name for a kernel, whether its run compared several or one, and the dashboard's.
Drawn by `views/svg_chart.py`.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from kernel_explorer.explorer import without_scope
from kernel_explorer.records import (
    Column,
    IntervalCell,
    Verdict,
    format_interval,
    format_number,
    latest_verdict_records,
)
from kernel_explorer.views.plot_style import candidate_short
from kernel_explorer.views.svg_chart import Box, Chart, Point, Row, Share, SharesChart

if TYPE_CHECKING:
    from kernel_explorer.records import ResultLog, Summary

#: whiskers reach the furthest pair within this many interquartile ranges (in log space)
WHISKER_IQR = 1.5


def verdict_css(verdict: object) -> str:
    """The mark's colour class: the same answer as the table's verdict cell."""
    found = getattr(verdict, "verdict", verdict)  # a VerdictCell carries its Verdict
    if found == Verdict.FASTER:
        return "kx-faster"
    if found == Verdict.SLOWER:
        return "kx-slower"
    return "kx-unsure"


def cycles_per_run(log: ResultLog) -> dict[str, int]:
    """How many cycles each run measured: its most verdicts for one layer and candidate (a compare
    gives one per layer and candidate, a Run one per layer, candidate and cycle; a compare of two
    peers is still one cycle)."""
    counts: dict[tuple[str, object, object, object], int] = {}
    for record in log.records("layer_verdict"):
        candidate = record.provenance.candidate if record.provenance is not None else None
        key = (record.run_id, record.layer, record.values.mode, candidate)
        counts[key] = counts.get(key, 0) + 1
    found: dict[str, int] = {}
    for (run, *_), count in counts.items():
        found[run] = max(found.get(run, 0), count)
    return found


def runs(log: ResultLog) -> list[tuple[str, str, str, str]]:
    """(run, started, seconds, what it measured) per run of the log, in order: the rows' key."""
    started: dict[str, float] = {}
    ended: dict[str, float] = {}
    for record in log.records("run"):
        if record.values.event == "started":
            started.setdefault(record.run_id, record.time)
        else:
            ended[record.run_id] = record.time
    cycles = cycles_per_run(log)
    rows = []
    for run in dict.fromkeys([*started, *cycles]):
        begin = started.get(run)
        when = datetime.datetime.fromtimestamp(begin).strftime("%H:%M:%S") if begin else "-"
        took = f"{ended[run] - begin:.0f} s" if begin and run in ended else "-"
        count = cycles.get(run, 0)
        what = (
            f"{count} cycles (a Run)"
            if count > 1
            else (
                "1 cycle (a compare, or a Run stopped in its first)"
                if count
                else "no layer timed (a breakdown, a model measure)"
            )
        )
        rows.append((run, when, took, what))
    return rows


def measured_in(log: ResultLog, running: Mapping[str, Collection[str]] | None = None) -> dict[str, str]:
    """Per layer, where its last measured speedup (`latest_verdicts`, the switch table's, with the
    same `running`) comes from: "run-1, its last cycle (of 3)" for a Run, "run-2 (whole run, 1
    cycle)" for a compare."""
    cycles = cycles_per_run(log)
    found = {}
    for layer, record in latest_verdict_records(log, running).items():
        count = cycles.get(record.run_id, 1)
        found[layer] = (
            f"{record.run_id}, its last cycle (of {count})"
            if count > 1
            else f"{record.run_id} (whole run, 1 cycle)"
        )
    return found


def _last_cycles(log: ResultLog) -> dict[tuple[str, object, object], Any]:
    """The last verdict of each (run, layer, mode) that measured more than one cycle."""
    found: dict[tuple[str, object, object], list[Any]] = {}
    for record in log.records("layer_verdict"):
        found.setdefault((record.run_id, record.layer, record.values.mode), []).append(record.values)
    return {key: verdicts[-1] for key, verdicts in found.items() if len(verdicts) > 1}


def short_label(candidate: object) -> str:
    """A candidate's label without the "(device, mode)" a record's label carries
    (`bundled/activation:Silu`); "" for none: the key the report groups a candidate's rows by, never
    the name it shows (`candidate_names`)."""
    return without_scope(str(candidate or ""))


#: per (layer, short label): the name the report shows for that candidate
Names = Mapping[tuple[str, str], str]


def candidate_names(log: ResultLog) -> dict[tuple[str, str], str]:
    """Per (layer, candidate's short label) measured in `log`: the name every table and chart of the
    report gives it, the dashboard's words (`plot_style.candidate_short`: "bundled activation", "peer
    plain-silu", a built folder's digest left out). Where two candidates of one layer would share a
    name (two builds of a peer), each keeps its folder's name with the digest ("peer
    plain-silu-876bd9a6"); where even those agree, its label."""
    from collections import Counter

    by_layer: dict[str, set[str]] = {}
    for (_, layer), labels in candidates_by_run(log).items():
        by_layer.setdefault(layer, set()).update(labels)
    found: dict[tuple[str, str], str] = {}
    for layer, labels in by_layer.items():
        words = {label: candidate_short(None, label) for label in sorted(labels)}
        for fallback in (_with_digest, str):
            counts = Counter(words.values())
            for label, word in list(words.items()):
                if counts[word] > 1:
                    words[label] = fallback(label)
        found.update({(layer, label): word for label, word in words.items()})
    return found


def _with_digest(label: str) -> str:
    """A candidate's source and repository as its label writes them, a built folder's digest kept:
    "peer plain-silu-876bd9a6"."""
    source, _, repo = label.split(":", 1)[0].partition("/")
    return f"{source} {repo}" if repo else source


def shown_name(names: Names, layer: object, candidate: object, kernel_id: object = None) -> str:
    """The name the report shows for `candidate` of `layer` (`candidate_names`), else the dashboard's
    words for it or, for a kernel with no candidate recorded, its kernel id; "" when neither."""
    short = short_label(candidate)
    return names.get((str(layer), short)) or candidate_short(str(kernel_id or "") or None, short or None)


def candidates_by_run(log: ResultLog) -> dict[tuple[str, str], set[str]]:
    """Per (run, layer): the candidates it ran with the kernel on, timed or only checked for its
    values (their labels, short)."""
    columns = log.columns("layer_latency")
    found: dict[tuple[str, str], set[str]] = {}
    for run, layer, on, candidate in zip(
        columns["run_id"], columns["layer"], columns["kernel_on"], columns["candidate"], strict=True
    ):
        if on and candidate:
            found.setdefault((str(run), str(layer)), set()).add(short_label(candidate))
    for kind in ("layer_divergence", "gradient_divergence"):
        for record in log.records(kind):
            candidate = record.provenance.candidate if record.provenance is not None else None
            if record.layer and getattr(record.values, "kernel_on", True) and candidate:
                found.setdefault((record.run_id, str(record.layer)), set()).add(short_label(candidate))
    return found


#: the kernel cell of a values row measured with the layer's kernel off, or with an unnamed kernel
_NOT_A_CANDIDATE = ("kernel off", "kernel on")
#: the kernel column a table gains when the report names a candidate it did not (`named_rows`)
KERNEL_COLUMN = Column("kernel", "kernel", what=True, line=" ({})")


def named_rows(summary: Summary, names: Names | None = None) -> Summary:
    """`summary` with its kernel cells the candidates' names (`candidate_names`), the charts': a
    row split by candidate (named by kernel id in the summary), and every other row measured with a
    kernel, whose cell the summary leaves empty (a layer measured with one candidate in the whole
    log is named as one measured with several). A row keeps the summary's name where its data names
    no candidate, or where two rows of one run, layer and mode would read the same (one candidate on
    two code paths).
    Summaries whose data names no candidate (`extra`'s `candidate`) come back as they are."""
    from dataclasses import replace

    labels = [short_label(data.get("candidate")) for data in summary.extra]
    if not any(labels):
        return summary
    rows = [dict(row) for row in summary.rows]
    for row, label, data in zip(rows, labels, summary.extra, strict=False):
        kernel = row.get("kernel")
        if label and kernel not in _NOT_A_CANDIDATE:
            row["kernel"] = shown_name(names or {}, row.get("layer"), label)
        elif not kernel and data.get("kernel_on") is False:  # as the values tables say it
            row["kernel"] = _NOT_A_CANDIDATE[0]
    seen: dict[tuple[object, ...], list[int]] = {}
    for index, row in enumerate(rows):
        seen.setdefault((row.get("run_id"), row.get("layer"), row.get("mode"), row.get("kernel")), []).append(
            index
        )
    for indices in seen.values():
        if len(indices) > 1:
            for index in indices:
                rows[index]["kernel"] = summary.rows[index].get("kernel")
    columns = summary.columns
    if any(row.get("kernel") for row in rows) and all(c.key != "kernel" for c in columns):
        at = next((i + 1 for i, c in enumerate(columns) if c.key == "layer"), 0)
        columns = (*columns[:at], KERNEL_COLUMN, *columns[at:])
    return replace(summary, columns=columns, rows=tuple(rows))


def _row_label(row: Mapping[str, object]) -> str:
    """A row of a summary as a chart names it: layer, mode, candidate, run."""
    parts = [str(row.get("layer")), str(row.get("run_id"))]
    if row.get("kernel"):
        parts.insert(1, str(row["kernel"]))
    if row.get("mode"):
        parts.insert(1, str(row["mode"]))
    return " · ".join(parts)


def _verdict_words(verdict: Any) -> str:
    """A summary's verdict cell as a reader's words ("faster", "not measurable here: 12 of 40
    pairs stalled"): its `text()`, never the cell's repr."""
    return verdict.text() if hasattr(verdict, "text") else str(verdict or "")


def speed_chart(log: ResultLog) -> Chart | None:
    """Each run's median speedup per layer with its 95% interval; a Run's last cycle beside it."""
    summary = log.summary("time")
    last = _last_cycles(log)
    shown = named_rows(summary, candidate_names(log))
    rows = []
    for row, named in zip(summary.rows, shown.rows, strict=True):
        cell = row.get("speedup")
        verdict = row.get("verdict")
        if not isinstance(cell, IntervalCell) or getattr(verdict, "verdict", None) == Verdict.KERNEL_OFF:
            continue
        name = _row_label(named)
        css = verdict_css(verdict)
        marks: list[Point] = [
            Point(
                cell.median,
                cell.low,
                cell.high,
                css,
                label=format_number(cell.median, "x"),
                hover=(
                    f"{name}, whole run: {cell.text()} {_verdict_words(verdict)}, "
                    f"{pairs_text(row.get('pairs'))}"
                ),
            )
        ]
        ended = last.get((str(row["run_id"]), row["layer"], row.get("mode") or "inference"))
        if ended is not None and not row.get("kernel"):
            marks.append(
                Point(
                    ended.speedup,
                    ended.speedup_low,
                    ended.speedup_high,
                    verdict_css(ended.verdict),
                    hollow=True,
                    label=format_number(ended.speedup, "x"),
                    hover=f"{name}, last cycle: "
                    f"{format_interval(ended.speedup, ended.speedup_low, ended.speedup_high)} "
                    f"{ended.verdict}, {pairs_text(ended.pairs)}",
                )
            )
        rows.append(Row(name, tuple(marks)))
    if not rows:
        return None
    several = any(len(r.marks) > 1 for r in rows)
    return Chart(
        "Median speedup per layer, with its 95% interval",
        "Each row is one run whole: every pair of all its cycles, the layer table's row."
        + (" Hollow: that run's last cycle alone (what the switch table shows)." if several else ""),
        "speedup: PyTorch's time / the kernel's (log scale)",
        tuple(rows),
        legend=(
            ("kx-faster", "● faster"),
            ("kx-slower", "● slower"),
            ("kx-unsure", "● no difference / unsure"),
            *((("kx-unsure", "○ last cycle"),) if several else ()),
        ),
        name="speed",
    )


def _box(values: Any) -> tuple[float, float, float, float, float, int]:
    """q1, median, q3 and the whiskers of positive `values` in log space, and how many lie beyond."""
    import numpy as np

    logs = np.log10(values)
    q1, q2, q3 = np.percentile(logs, [25, 50, 75])
    reach = WHISKER_IQR * (q3 - q1)
    inside = logs[(logs >= q1 - reach) & (logs <= q3 + reach)]
    low, high = (inside.min(), inside.max()) if inside.size else (q1, q3)
    beyond = int(logs.size - inside.size)
    return (10**q1, 10**q2, 10**q3, 10**low, 10**high, beyond)


def pairs_text(count: object) -> str:
    """A count of pairs as a reader says it: "1 pair", "305 pairs"."""
    return f"{count} pair" if str(count) == "1" else f"{count} pairs"


def _ratio(value: float) -> str:
    """0.0289x, 3.61x, 2280x: three digits, never an exponent."""
    return f"{value:.3g}x" if value < 1000 else f"{value:.0f}x"


def pair_chart(log: ResultLog) -> Chart | None:
    """Each run's per-pair speedups of each layer as a box (kernel-off pairs their own row)."""
    import numpy as np

    columns = log.columns("layer_latency")
    if not len(columns["speedup"]):
        return None
    speedup = np.asarray(columns["speedup"], dtype=float)
    keep = np.isfinite(speedup) & (speedup > 0)
    candidates = np.asarray([c or "" for c in columns["candidate"]], dtype=object)
    keys: dict[tuple[Any, ...], list[int]] = {}
    for index in np.flatnonzero(keep):
        key = (
            columns["run_id"][index],
            columns["layer"][index],
            columns["mode"][index],
            bool(columns["kernel_on"][index]),
            candidates[index] if columns["kernel_on"][index] else "",
            columns["kernel_id"][index] or "" if columns["kernel_on"][index] else "",
        )
        keys.setdefault(key, []).append(int(index))
    names = candidate_names(log)
    rows = []
    beyond_total = 0
    for (run, layer, mode, on, candidate, kernel_id), at in keys.items():
        q1, q2, q3, low, high, beyond = _box(speedup[at])
        beyond_total += beyond
        label = [str(layer)]
        if mode != "inference":
            label.append(str(mode))
        shown = shown_name(names, layer, candidate, kernel_id) if on else ""
        if shown:  # every kernel's row, whether the log measured one candidate of its layer or several
            label.append(shown)
        if not on:
            label.append("kernel off")
        label.append(str(run))
        name = " · ".join(label)
        words = pairs_text(len(at)) + (f", {beyond} beyond" if beyond else "")  # the whiskers: the note
        rows.append(
            Row(
                name,
                (
                    Box(
                        q1,
                        q2,
                        q3,
                        low,
                        high,
                        "kx-kernel" if on else "kx-pytorch",
                        label=words,
                        hover=f"{name}: median {q2:.2f}x, quartiles {q1:.2f}x-{q3:.2f}x, whiskers "
                        f"{low:.2f}x-{high:.2f}x; {words}",
                    ),
                ),
            )
        )
    extremes = speedup[keep]
    return Chart(
        "Speedup per interleaved pair",
        "Each row is one run whole (all its cycles). Box: the middle half of the pairs, its line the "
        "median; whiskers: the furthest pair within 1.5 interquartile ranges (log scale).",
        "speedup of one pair: PyTorch's time / the kernel's (log scale)",
        tuple(rows),
        legend=(("kx-kernel", "■ kernel on"), ("kx-pytorch", "■ kernel off: PyTorch against PyTorch")),
        name="pairs",
        extras=(
            (
                f"{beyond_total} of {int(keep.sum())} pairs lie beyond the whiskers and are not drawn "
                f"(from {_ratio(extremes.min())} to {_ratio(extremes.max())}): a machine that stalled "
                "one side.",
            )
            if beyond_total
            else ()
        ),
    )


def error_chart(log: ResultLog) -> Chart | None:
    """Per layer and candidate, the largest error against float64 of the kernel and of PyTorch, over
    every run: a row per candidate, named as the other charts name it (a layer measured with several
    has a row for each); the kernel-off periods count for PyTorch's mark on each of its rows."""
    names = candidate_names(log)
    # (layer, candidate): [kernel's, PyTorch's, instances timed with the kernel on]
    worst: dict[tuple[str, str], list[float]] = {}
    off: dict[str, float] = {}  # per layer: PyTorch's largest error while its kernel was off
    zero: list[str] = []
    for record in log.records("layer_divergence"):
        layer, values = str(record.layer), record.values
        if not values.kernel_on:
            off[layer] = max(off.get(layer, 0.0), values.pytorch_err64 or 0.0)
            continue
        origin = record.provenance
        candidate, kernel_id = (origin.candidate, origin.kernel_id) if origin is not None else (None, None)
        found = worst.setdefault((layer, shown_name(names, layer, candidate, kernel_id)), [0.0, 0.0, 0])
        found[2] += 1
        found[0] = max(found[0], values.kernel_err64 or 0.0)
        found[1] = max(found[1], values.pytorch_err64 or 0.0)
    for layer in sorted(off.keys() - {layer for layer, _ in worst}):  # measured with its kernel off only
        worst[(layer, "")] = [0.0, 0.0, 0]
    rows = []
    for (layer, candidate), (kernel, pytorch, seen) in worst.items():
        pytorch = max(pytorch, off.get(layer, 0.0))
        name = f"{layer} · {candidate}" if candidate else layer
        marks = []
        for value, css, who, shape in (
            (kernel, "kx-kernel", "kernel", "circle"),
            (pytorch, "kx-pytorch", "PyTorch", "diamond"),
        ):
            if value > 0:
                marks.append(
                    Point(
                        value,
                        css=css,
                        hollow=who == "PyTorch",
                        shape=shape,
                        hover=f"{name}: {who}'s largest error against float64 {value:.3g} (output's units)",
                    )
                )
            elif who == "PyTorch" or seen:
                zero.append(f"{name}: {who} equal to float64 (error 0: not drawn on a log axis)")
            else:
                zero.append(f"{name}: its kernel never ran while measured (no kernel error)")
        if marks:
            rows.append(Row(name, tuple(marks)))
    if not rows:
        return None
    return Chart(
        "Largest error against a float64 run (lower is more accurate)",
        "Each row: the worst instance over every run and cycle, per candidate where a layer had "
        "several; the kernel's only while its kernel ran (kernel-off periods count for PyTorch alone).",
        "max abs error against float64 (the output's units, log scale)",
        tuple(rows),
        unit="",
        legend=(("kx-kernel", "● kernel"), ("kx-pytorch", "◇ PyTorch")),
        name="errors",
        extras=tuple(zero),
    )


def model_chart(log: ResultLog) -> Chart | None:
    """The model's speedup (as switched against all-PyTorch) per run and measure."""
    frame: Any = log.model_summary()
    if frame.empty:
        return None
    rows = []
    for row in frame.itertuples():
        if math.isnan(row.speedup):  # not measurable: the table says why
            continue
        label = f"{row.measure} {row.tokens} tokens · {row.run_id}"
        rows.append(
            Row(
                label,
                (
                    Point(
                        row.speedup,
                        row.speedup_low,
                        row.speedup_high,
                        verdict_css(row.verdict),
                        label=format_number(row.speedup, "x"),
                        hover=f"{label}: {format_interval(row.speedup, row.speedup_low, row.speedup_high)} "
                        f"{row.verdict}, {pairs_text(row.pairs)}",
                    ),
                ),
            )
        )
    if not rows:
        return None
    return Chart(
        "Model speedup (as switched against all-PyTorch), with its 95% interval",
        "Each row is one run whole.",
        "model speedup (log scale)",
        tuple(rows),
        legend=(("kx-faster", "● faster"), ("kx-slower", "● slower"), ("kx-unsure", "● no difference")),
        name="model",
    )


def machine_charts(log: ResultLog) -> list[Chart]:
    """Per layer, each machine's latest run: its median speedup with its 95% interval (a log of
    several machines: `ResultLog.load`, a sweep); builds or model revisions apart in the row."""
    from kernel_explorer.views.machines import machines_in

    if len(machines_in(log)) < 2:
        return []
    table: Any = log.machine_table()  # pandas: its stubs cannot follow a frame's columns
    if table.empty:
        return []
    found = []
    for layer, rows in table.dropna(subset=["speedup"]).groupby("layer", sort=False):
        revisions = len(rows[["kernel_build", "model"]].drop_duplicates())
        marks = []
        for row in rows.itertuples():
            label = str(row.machine) + (f" · {row.model} / {row.kernel_build}" if revisions > 1 else "")
            label += f" · {row.kernel}" if row.kernel else ""
            interval = format_interval(row.speedup, row.speedup_low, row.speedup_high)
            marks.append(
                Row(
                    label,
                    (
                        Point(
                            float(row.speedup),
                            float(row.speedup_low),
                            float(row.speedup_high),
                            verdict_css(row.verdict),
                            label=format_number(row.speedup, "x"),
                            hover=f"{label}: {interval} {row.verdict}, {row.run_id}",
                        ),
                    ),
                )
            )
        found.append(
            Chart(
                f"{layer}: speedup per machine, with its 95% interval",
                "Each row is one machine's latest run of the layer, whole (runs are never pooled).",
                "speedup: PyTorch's time / the kernel's (log scale)",
                tuple(marks),
                legend=(
                    ("kx-faster", "● faster"),
                    ("kx-slower", "● slower"),
                    ("kx-unsure", "● no difference"),
                ),
                name=f"machines-{layer}",
            )
        )
    return found


def breakdown_chart(log: ResultLog) -> SharesChart | None:
    """Where the model's time goes, per phase (the last breakdown): a bar of 100% split into the
    kernel layers (in colour) and what no kernel covers (greys), the dashboard's chart as SVG."""
    from kernel_explorer.views.breakdown_chart import (
        KERNEL_COLOURS,
        PHASE_LABELS,
        TITLE,
        UNCOVERED_COLOURS,
        legend_name,
    )

    phases = [phase for phase in ("prefill", "decode") if log.latest_shares(phase)]
    if not phases:
        return None
    tokens = {r.values.phase: r.values.tokens for r in log.records("time_share")}
    categories = list(dict.fromkeys(name for phase in phases for name in log.latest_shares(phase)))
    kernels = [name for name in categories if name not in UNCOVERED_COLOURS]
    ordered = kernels + [name for name in UNCOVERED_COLOURS if name in categories]
    colours = {
        name: UNCOVERED_COLOURS.get(name) or KERNEL_COLOURS[index % len(KERNEL_COLOURS)]
        for index, name in enumerate(ordered)
    }
    rows = []
    for phase in phases:
        frame: Any = log.breakdown_summary(phase).set_index("category")  # pandas, by its columns
        frame = frame[~frame.index.duplicated(keep="last")]  # a log merged from copies repeats them
        count = tokens.get(phase, 1)
        label = f"{PHASE_LABELS.get(phase, phase)} ({count} token{'s' if count != 1 else ''})"
        shares = []
        for name in ordered:
            if name not in frame.index:
                continue
            row = frame.loc[name]
            share = float(row["share"])
            hover = (
                f"{name}: {format_number(share, 'share')} of the {label} "
                f"({format_number(float(row['ms']) / 1e3, 's')}); if it cost nothing, the model "
                f"{format_number(float(row['model_speedup_if_free']), 'x')}"
            )
            shares.append(Share(share * 100, colours[name], legend_name(name, kernels), hover))
        rows.append((label, tuple(shares)))
    return SharesChart(
        TITLE,
        "The last time breakdown of each phase, all on PyTorch.",
        "share of the forward (%)",
        tuple(rows),
        name="breakdown",
    )


def charts(log: ResultLog) -> list[Chart]:
    """The report's charts of `log`, those with something to draw."""
    found = [make(log) for make in (speed_chart, pair_chart, error_chart, model_chart)]
    return [chart for chart in found if chart is not None] + machine_charts(log)
