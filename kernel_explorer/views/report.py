"""A `ResultLog` as one self-contained HTML file: what was measured, on what, and how sure it is.

The report names the model, the machine (the hardware snapshot, versions), the date and the switch
state, then a section per kind of measurement that has records (`measure/kinds/`), each its
summary's table (`Summary.html()`: the same cells the CLI and `%kernels` print), the machines side
by side, and the charts, with the dashboard's conventions: log speedup axes with a 1x line, 95%
intervals, units on every axis, and under each title what its numbers cover (a run whole or its
last cycle).

It reads at any width and stays small: tables size to their content, numbers right-aligned and
never wrapped, prose wrapped between words only, a table wider than the page scrolls on its own;
the layer charts are inline SVG (`views/report_charts.py`, `views/svg_chart.py`: a few KB, no
script; plotly.js alone is 4.8 MB), each axis' range from its data with 3-6 labelled ticks.
plotly.js is inlined once, and only for the figures a kind or a merged log brings (`Kind.figure`,
the breakdown, machines side by side). Light and dark follow the reader's colour scheme. It
renders results (it sits beside the UI, above the core), so nothing in the core imports plotly.
"""

from __future__ import annotations

import datetime
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.records import Verdict, format_interval, format_number
from kernel_explorer.views.breakdown_chart import breakdown_figure
from kernel_explorer.views.plot_style import CATEGORY_AXIS, ERROR_AXIS, ERROR_HOVER, SPEEDUP_AXIS

if TYPE_CHECKING:
    from kernel_explorer.explorer import Explorer
    from kernel_explorer.records import ResultLog

_CSS = """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1f2328; --muted: #59636e; --rule: #d0d7de;
  --grid: #eaeef2; --stripe: #f6f8fa; --head: #8c959f; --faster: #1a7f37; --slower: #cf222e;
  --unsure: #6e7781; --warning: #9a6700; --kernel: #0969da; --pytorch: #8250df; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #0d1117; --fg: #e6edf3; --muted: #9198a1; --rule: #3d444d; --grid: #21262d;
    --stripe: #151b23; --head: #656c76; --faster: #3fb950; --slower: #f85149; --unsure: #9198a1;
    --warning: #d29922; --kernel: #4493f8; --pytorch: #ab7df8; }
}
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 1100px;
  background: var(--bg); color: var(--fg); }
h1 { font-size: 24px; } h2 { font-size: 19px; margin-top: 1.6em; }
.table-scroll { overflow-x: auto; max-width: 100%; margin: 0.5em 0 1.5em; }
table { border-collapse: collapse; font-size: 13px; }
th, td { text-align: left; padding: 3px 12px 3px 0; border-bottom: 1px solid var(--rule);
  vertical-align: top; white-space: nowrap; }
th { border-bottom: 2px solid var(--head); }
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums; }
th.prose, td.prose { white-space: normal; min-width: 28em; max-width: 44em; overflow-wrap: normal;
  word-break: normal; hyphens: manual; }
tbody tr:nth-child(even) { background: var(--stripe); }
.faster, .smaller { color: var(--faster); font-weight: 600; }
.slower, .larger { color: var(--slower); font-weight: 600; }
.unsure { color: var(--unsure); } .warning { color: var(--warning); font-weight: 600; }
p { max-width: 60em; line-height: 1.4; }
.w { white-space: nowrap; }
.plotly-graph-div { margin: 0.5em 0 1.5em; }
@media (prefers-color-scheme: dark) {  /* plotly's figures keep their light paper: its text is dark */
  .plotly-graph-div { background: #ffffff; border-radius: 6px; }
}
"""


@dataclass(frozen=True)
class ReportContext:
    """What the results were measured on: shown above them."""

    model: str = ""
    hardware: tuple[tuple[str, str], ...] = ()  # (label, value) rows of the hardware snapshot
    # (layer, runs now, last measured, which run and cycle that was) per kernel layer
    switches: tuple[tuple[str, str, str, str], ...] = ()
    date: str = field(default_factory=lambda: datetime.datetime.now().strftime("%Y-%m-%d %H:%M"))


def _speedup_bars(frame: Any, label: str, title: str) -> Any:
    """Median speedups with their 95% intervals as error bars, on a log axis with a 1x line."""
    import plotly.graph_objects as go

    from kernel_explorer.views.plot_style import verdict_colour
    from kernel_explorer.views.report_charts import pairs_text

    fig = go.Figure(
        go.Scatter(  # markers: on a log axis a bar's length means nothing
            x=frame[label].astype(str),
            y=frame["speedup"],
            mode="markers+text",
            marker={"size": 9},
            error_y={
                "type": "data",
                "symmetric": False,
                "array": frame["speedup_high"] - frame["speedup"],
                "arrayminus": frame["speedup"] - frame["speedup_low"],
            },
            marker_color=[
                verdict_colour(lo, hi, floor)
                for lo, hi, floor in zip(
                    frame["speedup_low"], frame["speedup_high"], frame["noise_floor"], strict=True
                )
            ],
            text=[format_number(v, "x") for v in frame["speedup"]],
            textposition="middle right",
            customdata=[  # the spread and n on hover, as on the dashboard's bars
                f"95% interval {format_interval(m, lo, hi)}, {pairs_text(n)}, {verdict}"
                for m, lo, hi, n, verdict in zip(
                    frame["speedup"],
                    frame["speedup_low"],
                    frame["speedup_high"],
                    frame["pairs"],
                    frame["verdict"],
                    strict=True,
                )
            ],
            hovertemplate="%{x}: %{y:.2f}x<br>%{customdata}<extra></extra>",
        )
    )
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_layout(title=title, xaxis=CATEGORY_AXIS, yaxis=SPEEDUP_AXIS)
    return fig


def figures(log: ResultLog) -> list[Any]:
    """Plotly figures of the log (speedups with intervals, per-pair spread, divergence, model): the
    dashboard's static snapshot (`plots.static_html`). The report draws `report_charts` instead."""
    import plotly.graph_objects as go

    found = []
    summary: Any = log.layer_summary()  # pandas: its stubs cannot follow a frame's columns
    if "speedup" in summary.columns:
        on = summary[summary["verdict"] != Verdict.KERNEL_OFF].dropna(subset=["speedup"])
        if not on.empty:
            frame = on.assign(speedup=on["speedup"], label=on["layer"] + " (" + on["run_id"] + ")").fillna(
                {"noise_floor": 0.0}
            )
            found.append(
                _speedup_bars(frame, "label", "Median speedup per layer and run, with its 95% interval")
            )
    latency: Any = log.to_pandas("layer_latency")
    if not latency.empty:
        latency = latency[latency["mode"] == "inference"]  # training pairs: training_summary()
    if not latency.empty:
        fig = go.Figure()
        for (layer, on), group in latency.groupby(["layer", "kernel_on"], sort=False):
            name = str(layer) if on else f"{layer}: kernel off (PyTorch vs PyTorch)"
            fig.add_trace(go.Box(y=group["speedup"], name=name, boxmean=True))
        fig.add_hline(y=1.0, line_dash="dot")
        fig.update_layout(
            title="Speedup per interleaved pair (PyTorch time / kernel time)", yaxis=SPEEDUP_AXIS
        )
        found.append(fig)
    if "kernel_err64" in summary.columns:
        worst = summary.groupby("layer", sort=False)[["kernel_err64", "pytorch_err64"]].max()
        fig = go.Figure(
            [
                go.Scatter(  # markers: a bar on a log axis starts at the axis' bottom
                    x=worst.index,
                    y=worst[column],
                    mode="markers",
                    name=name,
                    marker={"size": 10, "symbol": symbol},
                    hovertemplate=ERROR_HOVER,
                )
                for column, name, symbol in (
                    ("kernel_err64", "kernel vs float64", "circle"),
                    ("pytorch_err64", "PyTorch vs float64", "diamond-open"),
                )
            ]
        )
        fig.update_layout(
            title="Largest error against a float64 run (lower is more accurate)",
            xaxis=CATEGORY_AXIS,
            yaxis=ERROR_AXIS,
        )
        found.append(fig)
    models = log.model_summary()
    if not models.empty:
        frame = models.assign(label=models["measure"] + " " + models["tokens"].astype(str) + " tokens")
        found.append(
            _speedup_bars(frame, "label", "Model speedup (as switched vs all-PyTorch), 95% interval")
        )
    breakdown = breakdown_figure(log)
    if breakdown is not None:
        found.append(breakdown)
    return found


#: a word a browser would break inside: after a hyphen or a slash ("AVX-512-BF16", a path)
_BREAKABLE_WORD = re.compile(r"[^\s<>]*[-/][^\s<>]+")
#: an interval in running text, "1.00x [0.98, 1.02]": one unit, never split over two lines
_INTERVAL = re.compile(r"[\d.]+(?:x| [KMG]?B|%)? \[[\d., ]+\]")
_PROSE_CELL = re.compile(r"(<t[dh] class='prose'>)(.*?)(</t[dh]>)", re.DOTALL)


def keep_words_whole(page: str) -> str:
    """Prose cells wrap between words only: each word with a hyphen or a slash in a nowrap span
    (a browser breaks a line after them: "AVX-512-" / "BF16", and no CSS property forbids it), and
    each interval ("1.00x [0.98, 1.02]") too."""

    def cell(match: re.Match[str]) -> str:
        text = _BREAKABLE_WORD.sub(lambda word: f"<span class='w'>{word.group(0)}</span>", match.group(2))
        text = _INTERVAL.sub(lambda found: f"<span class='w'>{found.group(0)}</span>", text)
        return match.group(1) + text + match.group(3)

    return _PROSE_CELL.sub(cell, page)


def scrolling(table: str) -> str:
    """A table in its own horizontal scroller: wider than the page, it scrolls; the page does not."""
    return f"<div class='table-scroll'>{table}</div>"


def _table(rows: list[tuple[str, ...]], head: tuple[str, ...], css: tuple[str, ...] = ()) -> str:
    """A small table of text; `css`: a class per column (`num`, `prose`, or "")."""
    classes = [f" class='{c}'" if c else "" for c in css] or [""] * len(head)
    header = "".join(f"<th{k}>{html.escape(h)}</th>" for h, k in zip(head, classes, strict=True))
    body = "".join(
        "<tr>" + "".join(f"<td{k}>{_lines(c)}</td>" for c, k in zip(row, classes, strict=True)) + "</tr>"
        for row in rows
    )
    return scrolling(f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>")


#: a cell longer than this that lists items ("a; b; c") shows an item per line
_LIST_CHARS = 160


def _lines(text: str) -> str:
    """A cell's text, escaped; a long list of "; "-separated items one item per line."""
    if len(text) > _LIST_CHARS and "; " in text:
        return "<br>".join(html.escape(item) for item in text.split("; "))
    return html.escape(text)


def _facts(rows: list[tuple[str, str]]) -> str:
    """Label and value rows (the model, the machine): values wrap between words when long."""
    long = any(len(value) > 60 for _, value in rows)
    return _table(rows, ("", ""), ("", "prose" if long else ""))


def report_path(path: str | Path) -> Path:
    """`path` as a file a report can go to, or one line saying why not: checked before any work."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise KernelExplorerError(f"{path} is a folder: give a file name, e.g. {target / 'report.html'}")
    if not target.parent.is_dir():
        raise KernelExplorerError(
            f"cannot write {path}: folder {target.parent} does not exist; create it first"
        )
    return target


def kind_sections(log: ResultLog) -> list[str]:
    """A section per kind of measurement with records in `log`, in the registry's order: its title,
    what its columns mean, and its summary's table with the notes under it. A kernel is named by
    its candidate's name, the dashboard's words, as the charts name it (`report_charts.named_rows`)."""
    from kernel_explorer.records import kinds
    from kernel_explorer.views.report_charts import candidate_names, named_rows

    names = candidate_names(log)
    parts = []
    for found in kinds().values():
        summary = named_rows(log.summary(found.name), names)
        if not len(summary):
            continue
        parts.append(f"<h2>{html.escape(found.title, quote=False)}</h2>")
        if summary.about:
            parts.append(f"<p>{html.escape(summary.about, quote=False)}</p>")
        parts.append(scrolling(summary.html()))
    return parts


def kind_figures(log: ResultLog) -> list[Any]:
    """The figure of each kind that draws one (`Kind.figure`) and has records in `log`."""
    from kernel_explorer.records import kinds

    found = []
    for kind in kinds().values():
        summary = log.summary(kind.name) if kind.figure is not None else None
        if kind.figure is not None and summary is not None and len(summary):
            found.append(kind.figure(summary))
    return found


def write_report(log: ResultLog, path: Path, *, title: str, context: ReportContext | None = None) -> Path:
    """Write the report; works offline (SVG charts; plotly.js embedded once, only for the figures
    that need it). Bad paths: one line, no file."""
    from kernel_explorer.views.machines import machine_section
    from kernel_explorer.views.report_charts import breakdown_chart, charts, runs
    from kernel_explorer.views.svg_chart import CSS as CHART_CSS
    from kernel_explorer.views.svg_chart import figure_html, shares_html

    path = report_path(path)
    context = context or ReportContext()
    parts = [f"<h1>{html.escape(title)}</h1>"]
    facts = [("date", context.date), ("records", str(len(log)))]
    if context.model:
        facts.insert(0, ("model", context.model))
    parts.append(_facts(facts))
    if context.hardware:
        parts += ["<h2>Machine</h2>", _facts(list(context.hardware))]
    if context.switches:
        parts += [
            "<h2>Switch state when the report was written</h2>",
            _table(
                list(context.switches),
                ("layer", "runs now", "last measured speedup [95% interval]", "measured in"),
                ("", "", "", ""),
            ),
        ]
    found_runs = runs(log)
    if found_runs:
        parts += [
            "<h2>Runs</h2>",
            "<p>A compare measures each layer once; a Run (the dashboard's) measures them cycle after "
            "cycle. The tables and charts below take each run whole, every cycle's pairs pooled; the "
            "switch state above gives each layer's last cycle.</p>",
            _table(found_runs, ("run", "started", "took", "cycles"), ("", "num", "num", "")),
        ]
    parts += kind_sections(log)
    machine_parts, _ = machine_section(log)  # logs of several machines: their charts are `charts`' SVG
    parts += [scrolling(part) if part.startswith("<table") else part for part in machine_parts]
    drawn = charts(log)
    if drawn:
        parts.append("<h2>Charts</h2>")
        parts += [figure_html(chart) for chart in drawn]
    shares = breakdown_chart(log)
    if shares is not None:
        parts += [*([] if drawn else ["<h2>Charts</h2>"]), shares_html(shares)]
    plotted = kind_figures(log)  # a kind's own figure (memory): plotly, plotly.js once
    for index, fig in enumerate(plotted):
        parts.append(fig.to_html(full_html=False, include_plotlyjs="inline" if index == 0 else False))
    body = keep_words_whole("\n".join(parts))
    try:
        path.write_text(
            "<!doctype html><html><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title>"
            f"<style>{_CSS}{CHART_CSS}</style></head><body>{body}</body></html>"
        )
    except OSError as error:
        raise KernelExplorerError(
            f"cannot write {path}: {error.strerror or error}; choose a path you can write"
        ) from None
    return path


def explorer_report(explorer: Explorer, path: str | Path) -> str:
    """Write every result of `explorer` so far, with the model, machine, date and switch state, to
    one self-contained HTML file; returns its path. A path that cannot be written: one line."""
    from kernel_explorer.records import kernels_running
    from kernel_explorer.views.report_charts import measured_in

    model = explorer.model
    parameters = sum(p.numel() for p in model.parameters()) / 1e6
    where = measured_in(explorer.results, kernels_running(explorer.running()))
    context = ReportContext(
        model=f"{type(model).__name__} ({parameters:.1f}M parameters, {explorer.device})",
        hardware=tuple(explorer.hardware.rows()),
        switches=tuple(
            (row.group.name, row.running_summary, row.measured_summary, where.get(row.group.name, "-"))
            for row in explorer.inventory().rows
        ),
    )
    return str(write_report(explorer.results, Path(path), title="kernel_explorer report", context=context))
