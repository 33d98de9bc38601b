"""Machines side by side: one layer's speedup with its 95% interval per machine (a notebook plot and
the report's section), from a log merged from several machines (`ResultLog.load`, a sweep).

Each machine shows its latest run of the layer; rows of different model revisions or kernel builds
are separate bars with the revision in their name, and the notes say so, so two numbers that
measured different things never stand as one comparison.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernel_explorer.views.plot_style import SPEEDUP_AXIS, one_x_line, verdict_colour

if TYPE_CHECKING:
    from kernel_explorer.records import ResultLog


def machine_figure(log: ResultLog, layer: str, *, kernel: str | None = None) -> Any:
    """A plotly figure: `layer`'s speedup per machine, interval as error bars, on the log axis.

    `kernel`: one kernel's rows where a run compared several (its `kernel` column). A layer no
    machine measured raises one line naming the layers that were.
    """
    import plotly.graph_objects as go

    from kernel_explorer.errors import KernelExplorerError
    from kernel_explorer.records import revision_notes

    table: Any = log.machine_table()  # pandas: its stubs cannot follow a frame's columns
    if table.empty or layer not in set(table["layer"]):
        measured = ", ".join(sorted(set(table["layer"]))) if not table.empty else "none"
        raise KernelExplorerError(f"no machine measured {layer!r}; measured layers: {measured}")
    rows = table[table["layer"] == layer]
    if kernel is not None:
        rows = rows[rows["kernel"] == kernel]
    rows = rows.dropna(subset=["speedup"])
    revisions = rows[["kernel_build", "model"]].drop_duplicates()
    names = []
    for row in rows.itertuples():
        name = str(row.machine)
        if len(revisions) > 1:  # different models or kernel builds: said on each bar
            name += f"<br>{row.model} / {row.kernel_build}"
        names.append(name)
    median = rows["speedup"].astype(float)
    fig = go.Figure(
        go.Bar(
            x=names,
            y=median,
            error_y={
                "type": "data",
                "symmetric": False,
                "array": rows["speedup_high"].astype(float) - median,
                "arrayminus": median - rows["speedup_low"].astype(float),
            },
            marker_color=[
                verdict_colour(r.speedup_low, r.speedup_high, r.noise_floor or 0.0) for r in rows.itertuples()
            ],
            customdata=list(zip(map(str, rows["verdict"]), rows["run_id"], strict=True)),
            hovertemplate="%{x}<br>%{y:.2f}x: %{customdata[0]}<br>run %{customdata[1]}<extra></extra>",
        )
    )
    notes = [n for n in revision_notes(log.records()) if n.startswith(f"{layer}:") or "model revisions" in n]
    title = f"{layer}: speedup per machine, with its 95% interval (each machine's latest run)"
    fig.update_layout(
        title={"text": title + "".join(f"<br><sub>{n}</sub>" for n in notes)},
        yaxis=SPEEDUP_AXIS,
        xaxis={"type": "category", "title": {"text": "machine"}},
        shapes=[one_x_line()],
        showlegend=False,
    )
    return fig


def machines_in(log: ResultLog) -> list[str]:
    """The machines (labels) the log's runs were measured on, in order of first appearance."""
    from kernel_explorer.records import run_machines

    return list(dict.fromkeys(entry["machine"] for entry in run_machines(log.records()).values()))


def machine_section(log: ResultLog) -> tuple[list[str], list[Any]]:
    """The report's "Machines" section (HTML parts) and its figures, for a log of several machines;
    nothing for one machine's log (a `kernels benchmark` file has its kind's own section)."""
    import html

    from kernel_explorer.records import revision_notes

    if len(machines_in(log)) < 2:
        return [], []
    parts = [
        "<h2>Machines</h2>",
        "<p>Each machine's latest run of each layer, a column per machine: the median speedup, its 95% "
        "interval and the verdict of that run (runs are never pooled). Rows of different model revisions "
        "or kernel builds stay apart.</p>",
        *(f"<p class='warning'>{html.escape(note)}</p>" for note in revision_notes(log.records())),
    ]
    table = log.machine_table(wide=True)
    if not table.empty:
        parts.append(table.to_html(index=False, na_rep=""))
    machine_rows = log.machine_table()
    layers = [] if machine_rows.empty else list(dict.fromkeys(machine_rows["layer"]))
    return parts, [machine_figure(log, layer) for layer in layers]
