"""The time breakdown as one chart a reader takes in at a glance: a stacked bar per phase.

Each phase (prefill, one decode step) is one horizontal bar of 100% split into its categories:
the kernel layer names in colour (attention too: it is a row with kernel candidates), what no
kernel covers (Linear, embedding, the rest) in greys, so the coloured length answers "how much of
this model can the kernels I have reach at all?". Hover gives each category's milliseconds and
Amdahl's figures (the model speedup if it cost nothing, and the one predicted from its measured
kernel speedup).
The same figure serves the dashboard (copied into a FigureWidget) and the HTML report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernel_explorer.records import EMBEDDING, LINEAR, REST, format_number

if TYPE_CHECKING:
    from kernel_explorer.records import ResultLog

#: what no kernel layer covers, in greys from dark to light (the order they stack in)
UNCOVERED_COLOURS: dict[str, str] = {
    LINEAR: "#57606a",
    EMBEDDING: "#8c959f",
    REST: "#d0d7de",
}
KERNEL_COLOURS = ("#0969da", "#1a7f37", "#bf8700", "#8250df", "#bf3989", "#1b7c83", "#953800")

TITLE = "Where the model's time goes (all PyTorch; kernel layers in colour)"
PHASE_LABELS = {"prefill": "prefill", "decode": "decode step"}


def _phase_label(phase: str, tokens: int) -> str:
    return f"{PHASE_LABELS.get(phase, phase)} ({tokens} token{'s' if tokens != 1 else ''})"


def covered_line(log: ResultLog, phase: str = "prefill") -> str:
    """One sentence: how much of `phase` the kernel layers cover, and the model speedup predicted
    (the breakdown kind's note, shown under the chart). Empty before a breakdown."""
    from kernel_explorer.records import covered_line as line

    return line(log, phase)


def legend_name(name: str, kernels: list[str], layers: list[str] | None = None) -> str:
    """A category as the legend shows it. After `extend("Linear", ...)` both a kernel layer named
    Linear and the matmuls no kernel covers exist: "Linear (kernel layer)" beside "Linear (matmul)"
    read as one thing counted twice, so the uncovered one says it is the rest. A kernel layer
    profiled before a `retract` says the breakdown is older than the table."""
    if name in UNCOVERED_COLOURS:
        stem = name.split(" (")[0]
        return f"{name}, not extended" if any(k.split(" (")[0] == stem for k in kernels) else name
    if layers is not None and name not in layers:
        return f"{name} (not a kernel layer now: profile again)"
    return f"{name} (kernel layer)"


def breakdown_figure(log: ResultLog, layers: list[str] | None = None) -> Any | None:
    """The stacked-bar figure of the last time breakdown, or None before `Explorer.breakdown()`.

    `layers`: the explorer's kernel layers now, so a category profiled before a `retract` says so.
    """
    import plotly.graph_objects as go

    phases = [phase for phase in ("prefill", "decode") if log.latest_shares(phase)]
    if not phases:
        return None
    tokens = {r.values.phase: r.values.tokens for r in log.records("time_share")}
    labels = [_phase_label(phase, tokens.get(phase, 1)) for phase in phases]
    frames = {phase: log.breakdown_summary(phase).set_index("category") for phase in phases}
    categories = list(dict.fromkeys(name for phase in phases for name in log.latest_shares(phase)))
    kernels = [name for name in categories if name not in UNCOVERED_COLOURS]
    ordered = kernels + [name for name in UNCOVERED_COLOURS if name in categories]
    figure = go.Figure()
    for index, name in enumerate(ordered):
        colour = UNCOVERED_COLOURS.get(name) or KERNEL_COLOURS[index % len(KERNEL_COLOURS)]
        shares, hovers = [], []
        for phase in phases:
            row = frames[phase].loc[name] if name in frames[phase].index else None
            share = float(row["share"]) if row is not None else 0.0
            shares.append(share * 100)
            hovers.append(_hover(name, row))
        figure.add_trace(
            go.Bar(
                y=labels,
                x=shares,
                name=legend_name(name, kernels, layers),
                orientation="h",
                marker={"color": colour},
                text=[f"{s:.0f}%" if s >= 4 else "" for s in shares],
                textposition="inside",
                customdata=hovers,
                hovertemplate="%{customdata}<extra></extra>",
            )
        )
    figure.update_layout(
        title={"text": TITLE, "font": {"size": 13}},
        barmode="stack",
        xaxis={"title": {"text": "share of the forward (%)", "standoff": 4}, "range": [0, 100]},
        yaxis={"autorange": "reversed"},
        height=max(190 + 40 * len(phases), 60 + 20 * len(ordered)),
        autosize=True,
        margin={"t": 40, "b": 10, "l": 130, "r": 10},
        # beside the bars, not under them: below, the legend's rows met the axis title on a narrow page
        legend={
            "orientation": "v",
            "x": 1.02,
            "xanchor": "left",
            "y": 1,
            "yanchor": "top",
            "traceorder": "normal",
        },
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
    )
    return figure


def _hover(name: str, row: Any) -> str:
    if row is None:
        return f"{name}: not seen in this phase"
    text = (
        f"<b>{name}</b>: {format_number(row['share'], 'share')} ({format_number(row['ms'] / 1e3, 's')})"
        f"<br>if it cost nothing: model {format_number(row['model_speedup_if_free'], 'x')}"
    )
    speedup = row.get("kernel_speedup")
    predicted = row.get("model_speedup_predicted")
    if speedup is not None and speedup == speedup and predicted == predicted:  # NaN-safe
        text += f"<br>measured kernel {format_number(speedup, 'x')}: model {format_number(predicted, 'x')}"
    elif name not in UNCOVERED_COLOURS:
        text += "<br>kernel not measured yet (compare it)"
    return text
