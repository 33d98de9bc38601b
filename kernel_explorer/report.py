"""A `ResultLog` as one self-contained HTML file: summary tables and plots, plotly.js inlined.

It renders results (it sits beside the UI, above the core), so nothing in the core imports plotly.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer.measure.stats import noise_warning

if TYPE_CHECKING:
    from kernel_explorer.results import ResultLog


def figures(log: ResultLog) -> list[Any]:
    """The report's plotly figures: speedup per layer, divergence per layer, model speed."""
    import plotly.graph_objects as go

    found = []
    latency = log.to_pandas("layer_latency")
    if not latency.empty:
        fig = go.Figure()
        for layer, group in latency.groupby("layer", sort=False):
            fig.add_trace(go.Box(y=group["speedup"], name=str(layer), boxmean=True))
        fig.add_hline(y=1.0, line_dash="dot")
        fig.update_layout(
            title="Layer speedup per interleaved pair (PyTorch time / kernel time)",
            yaxis_title="speedup (x, log scale)",
            yaxis_type="log",
        )
        found.append(fig)
    summary = log.layer_summary()
    if "kernel_err64" in summary.columns:
        worst = summary.set_index("layer")
        fig = go.Figure(
            [
                go.Bar(x=worst.index, y=worst["kernel_err64"], name="kernel vs float64"),
                go.Bar(x=worst.index, y=worst["pytorch_err64"], name="PyTorch vs float64"),
            ]
        )
        fig.update_layout(
            title="Max abs error against a float64 run of the original forward", yaxis_type="log"
        )
        found.append(fig)
    for kind, column, title in (
        ("model_prefill", "speedup", "Prefill speedup by tokens"),
        ("model_decode", "kernel_tok_s", "Decode tokens/s with the kernels"),
    ):
        frame = log.to_pandas(kind)
        if not frame.empty:
            fig = go.Figure(
                go.Scatter(x=frame["time"] - frame["time"].min(), y=frame[column], mode="markers+lines")
            )
            fig.update_layout(title=title, xaxis_title="seconds into the run")
            found.append(fig)
    return found


def write_report(log: ResultLog, path: Path, *, title: str) -> Path:
    """Write the report; works offline (plotly.js is embedded once)."""
    parts = [f"<h1>{html.escape(title)}</h1>", f"<p>{len(log)} records.</p>"]
    summary = log.layer_summary()
    if not summary.empty:
        parts += [
            "<h2>Layers</h2>",
            "<p>speedup_low / speedup_high: the 95% interval of the median speedup; noise_floor: how far "
            "PyTorch against itself moved (A/A); a verdict needs the interval to clear it.</p>",
        ]
        if "noise_floor" in summary.columns:
            warning = noise_warning(float(summary["noise_floor"].max()))
            if warning:
                parts.append(f"<p><b>{html.escape(warning)}</b></p>")
        parts.append(summary.to_html(index=False, float_format=lambda v: f"{v:.4g}"))
    models = log.model_summary()
    if not models.empty:
        parts += ["<h2>Model</h2>", models.to_html(index=False, float_format=lambda v: f"{v:.4g}")]
    for kind in ("model_prefill", "model_decode", "model_agreement"):
        frame = log.to_pandas(kind)
        if not frame.empty:
            shown = frame.drop(columns=["kind", "run_id", "layer", "instance", "time"])
            parts += [f"<h2>{kind.replace('_', ' ')}</h2>", shown.to_html(index=False)]
    for index, fig in enumerate(figures(log)):
        parts.append(fig.to_html(full_html=False, include_plotlyjs="inline" if index == 0 else False))
    body = "\n".join(parts)
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body>{body}</body></html>"
    )
    return path
